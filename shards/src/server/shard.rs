//! The per-core shard as an event loop's state: its core (state + log buffer), the replies
//! waiting for durability, and the links to the other shards.

use super::config::Durability;
use super::conn::Conn;
use super::outbox::{DurableOneshot, DurableWaiter, Outbox, Signal};
use crate::engine::{Done, ShardCore};
use crate::hash::Partitioning;
use flo_protocol::{ErrorValue, Op, Reply};
use futures_channel::oneshot;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

pub(crate) type ReplyResult = Result<Reply, ErrorValue>;

/// Traffic to one other shard: requests to send it, and replies owed to it.
pub(crate) struct PeerLink {
    pub requests: RefCell<Vec<(u64, Op)>>,
    pub replies: Rc<Outbox<(u64, ReplyResult)>>,
    pub signal: Rc<Signal>,
}

impl PeerLink {
    fn new() -> Self {
        let signal = Rc::new(Signal::default());
        PeerLink {
            requests: RefCell::new(Vec::new()),
            replies: Rc::new(Outbox::new(signal.clone())),
            signal,
        }
    }
}

/// Who gets the reply to a request forwarded to another shard.
pub(crate) enum Waiter {
    Conn { conn: Rc<Conn>, id: u64 },
    Oneshot(oneshot::Sender<ReplyResult>),
}

pub(crate) struct Shard {
    pub id: u32,
    pub partitioning: Partitioning,
    pub durability: Durability,
    pub core: RefCell<ShardCore>,
    /// Wakes the log flusher.
    pub flush: Signal,
    waiting: RefCell<Vec<Rc<dyn DurableWaiter>>>,
    /// Indexed by shard id; `None` for this shard.
    pub peers: Vec<Option<PeerLink>>,
    waiters: RefCell<HashMap<u64, Waiter>>,
    next_tag: Cell<u64>,
}

/// A call to one shard, started: finish it with `CallHandle::finish`.
pub(crate) enum CallHandle {
    Local(Done),
    Remote(oneshot::Receiver<ReplyResult>),
}

impl Shard {
    pub fn new(id: u32, partitioning: Partitioning, durability: Durability, core: ShardCore) -> Self {
        let peers = (0..partitioning.shards).map(|s| (s != id).then(PeerLink::new)).collect();
        Shard {
            id,
            partitioning,
            durability,
            core: RefCell::new(core),
            flush: Signal::default(),
            waiting: RefCell::new(Vec::new()),
            peers,
            waiters: RefCell::new(HashMap::new()),
            next_tag: Cell::new(1),
        }
    }

    /// The shard owning a keyed operation; `None` for operations that are not keyed.
    pub fn route(&self, op: &Op) -> Option<u32> {
        match op {
            Op::KvGet { namespace, key }
            | Op::KvPut { namespace, key, .. }
            | Op::KvDelete { namespace, key, .. } => Some(self.partitioning.shard_of(namespace, key)),
            Op::Hello { .. } | Op::Status | Op::ShardMap | Op::KvList { .. } => None,
        }
    }

    /// Executes an operation owned by this shard.
    pub fn execute(&self, op: Op) -> Done {
        let mut core = self.core.borrow_mut();
        let done = core.execute(op);
        if core.log.pending_bytes() > 0 {
            self.flush.notify();
        }
        done
    }

    pub fn durable_lsn(&self) -> u64 {
        self.core.borrow().durable_lsn
    }

    fn must_wait(&self, lsn: u64) -> bool {
        self.durability == Durability::Sync && lsn > self.durable_lsn()
    }

    /// Hands `item` to `outbox` once `lsn` is durable (at once with async durability).
    pub fn deliver<T: 'static>(&self, outbox: &Rc<Outbox<T>>, lsn: u64, item: T) {
        if !self.must_wait(lsn) {
            outbox.push_ready(item);
            return;
        }
        outbox.push_pending(lsn, item);
        if !outbox.queued.replace(true) {
            self.waiting.borrow_mut().push(outbox.clone());
        }
    }

    pub async fn wait_durable(&self, lsn: u64) {
        if !self.must_wait(lsn) {
            return;
        }
        let (waiter, rx) = DurableOneshot::new(lsn);
        self.waiting.borrow_mut().push(waiter);
        let _ = rx.await;
    }

    /// Called by the flusher once everything up to `lsn` is on disk.
    pub fn set_durable(&self, lsn: u64) {
        self.core.borrow_mut().durable_lsn = lsn;
        let mut list = std::mem::take(&mut *self.waiting.borrow_mut());
        list.retain(|w| w.release(lsn));
        self.waiting.borrow_mut().append(&mut list);
    }

    /// Sends `op` to shard `target`; the reply goes to `waiter`.
    pub fn forward(&self, target: u32, op: Op, waiter: Waiter) {
        let tag = self.next_tag.get();
        self.next_tag.set(tag + 1);
        self.waiters.borrow_mut().insert(tag, waiter);
        let link = self.peers[target as usize].as_ref().expect("forward to another shard");
        link.requests.borrow_mut().push((tag, op));
        link.signal.notify();
    }

    /// A reply from another shard arrived.
    pub fn complete(&self, tag: u64, result: ReplyResult) {
        let Some(waiter) = self.waiters.borrow_mut().remove(&tag) else { return };
        match waiter {
            Waiter::Conn { conn, id } => conn.send_now(id, result),
            Waiter::Oneshot(tx) => {
                let _ = tx.send(result);
            }
        }
    }

    /// Starts `op` on shard `target` (this one included) without waiting.
    pub fn begin_call(&self, target: u32, op: Op) -> CallHandle {
        if target == self.id {
            return CallHandle::Local(self.execute(op));
        }
        let (tx, rx) = oneshot::channel();
        self.forward(target, op, Waiter::Oneshot(tx));
        CallHandle::Remote(rx)
    }
}

impl CallHandle {
    pub async fn finish(self, shard: &Shard) -> ReplyResult {
        match self {
            CallHandle::Local(done) => {
                shard.wait_durable(done.wait_lsn).await;
                done.result
            }
            CallHandle::Remote(rx) => rx
                .await
                .unwrap_or_else(|_| Err(ErrorValue::unavailable("shard stopped before replying"))),
        }
    }
}
