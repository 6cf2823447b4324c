//! Replies waiting for durability. An outbox holds replies whose records are not yet on
//! disk (`pending`, in LSN order) and replies that may go now (`ready`); the log flusher
//! releases pending replies as the durable LSN advances.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
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

/// Something that waits for the durable LSN to reach a point.
pub trait DurableWaiter {
    /// Called when `durable` is on disk; returns true while it still waits for more.
    fn release(&self, durable: u64) -> bool;
}

pub struct Outbox<T> {
    pending: RefCell<VecDeque<(u64, T)>>,
    ready: RefCell<Vec<T>>,
    pub signal: Rc<Signal>,
    /// Registered in the shard's list of waiters.
    pub queued: Cell<bool>,
}

impl<T> Outbox<T> {
    pub fn new(signal: Rc<Signal>) -> Self {
        Outbox {
            pending: RefCell::new(VecDeque::new()),
            ready: RefCell::new(Vec::new()),
            signal,
            queued: Cell::new(false),
        }
    }

    pub fn push_ready(&self, item: T) {
        self.ready.borrow_mut().push(item);
        self.signal.notify();
    }

    /// Queues `item` until `lsn` is durable. LSNs of one outbox are kept monotonic, so a
    /// reply may wait a little longer than it must, never less.
    pub fn push_pending(&self, lsn: u64, item: T) {
        let mut pending = self.pending.borrow_mut();
        let lsn = pending.back().map_or(lsn, |(last, _)| lsn.max(*last));
        pending.push_back((lsn, item));
    }

    pub fn take_ready(&self) -> Vec<T> {
        std::mem::take(&mut *self.ready.borrow_mut())
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.borrow().is_empty()
    }
}

impl<T> DurableWaiter for Outbox<T> {
    fn release(&self, durable: u64) -> bool {
        let mut pending = self.pending.borrow_mut();
        let mut moved = false;
        while pending.front().is_some_and(|(lsn, _)| *lsn <= durable) {
            let (_, item) = pending.pop_front().unwrap();
            self.ready.borrow_mut().push(item);
            moved = true;
        }
        if moved {
            self.signal.notify();
        }
        let still = !pending.is_empty();
        self.queued.set(still);
        still
    }
}

/// Completes when the durable LSN reaches `lsn`.
pub struct DurableOneshot {
    lsn: u64,
    tx: RefCell<Option<futures_channel::oneshot::Sender<()>>>,
}

impl DurableOneshot {
    pub fn new(lsn: u64) -> (Rc<Self>, futures_channel::oneshot::Receiver<()>) {
        let (tx, rx) = futures_channel::oneshot::channel();
        (
            Rc::new(DurableOneshot {
                lsn,
                tx: RefCell::new(Some(tx)),
            }),
            rx,
        )
    }
}

impl DurableWaiter for DurableOneshot {
    fn release(&self, durable: u64) -> bool {
        if self.lsn > durable {
            return true;
        }
        if let Some(tx) = self.tx.borrow_mut().take() {
            let _ = tx.send(());
        }
        false
    }
}
