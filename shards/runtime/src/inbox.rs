//! The shard's input queue and the wake-up flag the runtime's tasks share. Listener, mesh,
//! log writer, WebAssembly pool and timer push inputs; only the shard loop takes them.

use flo_engine::Input;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::task::{Poll, Waker};

/// A one-waiter wake-up flag.
#[derive(Default)]
pub struct Signal {
    set: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl Signal {
    pub fn notify(&self) {
        self.set.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }

    pub async fn wait(&self) {
        poll_fn(|cx| {
            if self.set.replace(false) {
                return Poll::Ready(());
            }
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Two lanes: other shards' messages jump the queue of client requests (a peer's request
/// or answer is part of work already admitted; it must not wait behind new work).
#[derive(Default)]
pub struct Inbox {
    queue: RefCell<VecDeque<Input>>,
    urgent: RefCell<VecDeque<Input>>,
    signal: Signal,
}

impl Inbox {
    pub fn push(&self, input: Input) {
        self.queue.borrow_mut().push_back(input);
        self.signal.notify();
    }

    /// Queues an input the loop takes before any waiting in the ordinary lane.
    pub fn push_urgent(&self, input: Input) {
        self.urgent.borrow_mut().push_back(input);
        self.signal.notify();
    }

    /// The oldest urgent input, if any.
    pub fn pop_urgent(&self) -> Option<Input> {
        self.urgent.borrow_mut().pop_front()
    }

    /// Everything queued now (the loop handles it as one batch).
    pub fn take_all(&self, into: &mut VecDeque<Input>) {
        std::mem::swap(&mut *self.queue.borrow_mut(), into);
    }

    /// Inputs waiting in the ordinary lane (client requests, results of the shard's own
    /// I/O).
    pub fn len(&self) -> usize {
        self.queue.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty() && self.urgent.borrow().is_empty()
    }

    pub async fn wait(&self) {
        if !self.is_empty() {
            return;
        }
        self.signal.wait().await;
    }

    /// Wakes the loop without an input (to look at its own state again).
    pub fn poke(&self) {
        self.signal.notify();
    }
}
