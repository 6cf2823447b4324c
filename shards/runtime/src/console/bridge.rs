//! How the console's API reaches the shards, in process: the HTTP thread sends an `Op` over
//! a channel to one shard (in turn); a task on that shard's executor pushes it into the
//! shard's inbox as a client request of the console's own connection id (`CONSOLE_CONN`),
//! and the shard loop hands the reply to that id (`Effect::Reply`) back over a oneshot.
//! From the inbox on, the operation goes the way a binary-protocol request goes: routing,
//! other shards, the durability gate. Authorization is the HTTP side's (`api.rs`), by the
//! same policy as the listener's gate, before anything is sent.
//!
//! Bounded: at most `CALLS_INFLIGHT_MAX` calls in flight from the HTTP thread (one more is
//! answered `overloaded`), at most `CALLS_PENDING_MAX` waiting for their reply on a shard,
//! none admitted while the shard's inbox holds `SHARD_BACKLOG_MAX` inputs.

use crate::inbox::Inbox;
use crate::listener::SHARD_BACKLOG_MAX;
use crate::metrics::{ShardMetrics, result_index};
use ahash::AHashMap as HashMap;
use flo_engine::auth::op_name;
use flo_engine::{ClientRef, ConnId, Input, ReplyResult};
use flo_protocol::{ErrorCode, ErrorValue, Op, Reply};
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use futures_channel::oneshot;
use futures_lite::StreamExt;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The connection id a shard's console calls carry: no socket has it (the listeners number
/// theirs from 0), and no `ConnClosed` is ever sent for it.
pub(crate) const CONSOLE_CONN: ConnId = ConnId::MAX;
/// Calls the HTTP thread has in flight at once, over all shards.
pub(crate) const CALLS_INFLIGHT_MAX: usize = 64;
/// Calls one shard holds waiting for their reply (those whose caller gave up are dropped
/// first when it is reached).
const CALLS_PENDING_MAX: usize = 256;
/// How long the HTTP side waits for a reply (below the HTTP port's own request timeout, so
/// that the answer is the console's JSON error, not a bare 408).
const CALL_TIMEOUT: Duration = Duration::from_secs(8);

/// One operation for a shard and where its reply goes.
pub(crate) struct Call {
    op: Op,
    reply: oneshot::Sender<ReplyResult>,
}

/// The HTTP thread's handle on the shards.
#[derive(Clone)]
pub(crate) struct Bridge {
    inner: Arc<BridgeInner>,
}

struct BridgeInner {
    shards: Vec<UnboundedSender<Call>>,
    next: AtomicUsize,
    inflight: tokio::sync::Semaphore,
}

/// A bridge to `shards` shards, and the receiving end each shard serves (`serve_calls`).
pub(crate) fn bridge(shards: u32) -> (Bridge, Vec<UnboundedReceiver<Call>>) {
    let (senders, receivers) = (0..shards).map(|_| unbounded()).unzip();
    let inner = BridgeInner {
        shards: senders,
        next: AtomicUsize::new(0),
        inflight: tokio::sync::Semaphore::new(CALLS_INFLIGHT_MAX),
    };
    let bridge = Bridge {
        inner: Arc::new(inner),
    };
    (bridge, receivers)
}

impl Bridge {
    /// Sends `op` to a shard and waits for its reply.
    pub async fn call(&self, op: Op) -> Result<Reply, ErrorValue> {
        let Ok(_permit) = self.inner.inflight.try_acquire() else {
            return Err(ErrorValue::new(
                ErrorCode::Overloaded,
                format!("the console has {CALLS_INFLIGHT_MAX} calls in flight: try again"),
            ));
        };
        let shards = &self.inner.shards;
        let shard = self.inner.next.fetch_add(1, Ordering::Relaxed) % shards.len();
        let (reply, answer) = oneshot::channel();
        if shards[shard].unbounded_send(Call { op, reply }).is_err() {
            return Err(ErrorValue::unavailable("the server is stopping"));
        }
        match tokio::time::timeout(CALL_TIMEOUT, answer).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(ErrorValue::unavailable(
                "the shard stopped before it answered",
            )),
            Err(_) => Err(ErrorValue::unavailable(format!(
                "no answer within {} s",
                CALL_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// A shard's console calls waiting for their replies.
#[derive(Default)]
pub(crate) struct ConsoleCalls {
    pending: RefCell<HashMap<u64, Pending>>,
    next_id: Cell<u64>,
}

struct Pending {
    reply: oneshot::Sender<ReplyResult>,
    op: &'static str,
    since: Instant,
}

impl ConsoleCalls {
    /// The shard loop's side: the reply to call `request` goes back to the HTTP thread,
    /// counted in the shard's metrics like a connection's.
    pub fn answer(&self, request: u64, result: ReplyResult, metrics: &ShardMetrics) {
        let Some(pending) = self.pending.borrow_mut().remove(&request) else {
            return;
        };
        let code = result.as_ref().err().map(|e| e.code);
        let elapsed_ns = pending.since.elapsed().as_nanos() as u64;
        metrics.request(pending.op, result_index(code), elapsed_ns);
        // A caller that gave up (its time, its connection) no longer listens.
        let _ = pending.reply.send(result);
    }

    /// Takes `call` into the shard, or answers it at once when the shard is behind or too
    /// many calls wait.
    fn admit(&self, call: Call, inbox: &Inbox) {
        if inbox.len() >= SHARD_BACKLOG_MAX {
            let busy = ErrorValue::new(ErrorCode::Overloaded, "the shard is behind: try again");
            let _ = call.reply.send(Err(busy));
            return;
        }
        let mut pending = self.pending.borrow_mut();
        if pending.len() >= CALLS_PENDING_MAX {
            pending.retain(|_, p| !p.reply.is_canceled());
        }
        if pending.len() >= CALLS_PENDING_MAX {
            let busy = ErrorValue::new(
                ErrorCode::Overloaded,
                format!("{CALLS_PENDING_MAX} console calls wait on this shard: try again"),
            );
            let _ = call.reply.send(Err(busy));
            return;
        }
        let id = self.next_id.get();
        self.next_id.set(id.wrapping_add(1));
        let op = op_name(&call.op);
        pending.insert(
            id,
            Pending {
                reply: call.reply,
                op,
                since: Instant::now(),
            },
        );
        drop(pending);
        let from = ClientRef {
            conn: CONSOLE_CONN,
            request: id,
        };
        inbox.push(Input::Client { from, op: call.op });
    }
}

/// A shard's task: takes the console's calls into the shard until the HTTP side is gone.
pub(crate) async fn serve_calls(
    calls: Rc<ConsoleCalls>,
    mut receiver: UnboundedReceiver<Call>,
    inbox: Rc<Inbox>,
) {
    while let Some(call) = receiver.next().await {
        calls.admit(call, &inbox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_call() -> (Call, oneshot::Receiver<ReplyResult>) {
        let (reply, answer) = oneshot::channel();
        (
            Call {
                op: Op::Status,
                reply,
            },
            answer,
        )
    }

    #[test]
    fn a_call_enters_the_inbox_as_the_consoles_request_and_its_reply_goes_back() {
        let calls = ConsoleCalls::default();
        let inbox = Inbox::default();
        let (call, mut answer) = status_call();
        calls.admit(call, &inbox);
        let mut taken = std::collections::VecDeque::new();
        inbox.take_all(&mut taken);
        let Some(Input::Client { from, op }) = taken.pop_front() else {
            panic!("a client input");
        };
        assert_eq!((from.conn, op), (CONSOLE_CONN, Op::Status));
        let metrics = ShardMetrics::new(0, true);
        calls.answer(from.request, Ok(Reply::Done), &metrics);
        assert_eq!(answer.try_recv().unwrap(), Some(Ok(Reply::Done)));
        assert!(calls.pending.borrow().is_empty());
        let counted: Vec<_> = metrics.ops().map(|(name, s)| (name, s.results())).collect();
        assert_eq!(counted.len(), 1);
        assert_eq!((counted[0].0, counted[0].1[0]), ("status", 1));
    }

    #[test]
    fn calls_beyond_the_pending_bound_are_answered_overloaded() {
        let calls = ConsoleCalls::default();
        let inbox = Inbox::default();
        let mut answers = Vec::new();
        for _ in 0..CALLS_PENDING_MAX {
            let (call, answer) = status_call();
            calls.admit(call, &inbox);
            answers.push(answer);
        }
        let (call, mut refused) = status_call();
        calls.admit(call, &inbox);
        let Ok(Some(Err(e))) = refused.try_recv() else {
            panic!("refused at once");
        };
        assert_eq!(e.code, ErrorCode::Overloaded);
        // Callers that gave up make room.
        answers.truncate(10);
        let (call, mut taken) = status_call();
        calls.admit(call, &inbox);
        assert_eq!(taken.try_recv().unwrap(), None, "waiting for its reply");
    }
}
