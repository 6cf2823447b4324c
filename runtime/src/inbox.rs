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

#[derive(Default)]
pub struct Inbox {
    queue: RefCell<VecDeque<Input>>,
    signal: Signal,
}

impl Inbox {
    pub fn push(&self, input: Input) {
        self.queue.borrow_mut().push_back(input);
        self.signal.notify();
    }

    /// Everything queued now (the loop handles it as one batch).
    pub fn take_all(&self, into: &mut VecDeque<Input>) {
        std::mem::swap(&mut *self.queue.borrow_mut(), into);
    }

    pub fn is_empty(&self) -> bool {
        self.queue.borrow().is_empty()
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
