//! Guest KV writes to keys of other shards. They are durable in this shard's log with the
//! run's completion (`state.forwards`); once that completion is durable they are sent to
//! their owners, which apply each origin LSN at most once; when every owner acknowledged,
//! `KvForwarded` retires them. After a crash the unretired ones are sent again.

use crate::core::io::PeerRequest;
use crate::core::{Core, Waiting};
use crate::fold::record::{GuestKvWrite, Record};
use std::collections::BTreeMap;

/// Completions whose writes are sent per round.
const FORWARD_BATCH_MAX: usize = 256;

#[derive(Default)]
pub struct Forwarder {
    /// Highest origin LSN sent in this life of the shard.
    sent_up_to: u64,
    /// Origin LSN → owners that have not acknowledged yet.
    waiting: BTreeMap<u64, u32>,
    /// A delivery failed: everything unretired is sent again once nothing is in flight.
    failed: bool,
}

/// Sends the writes of completions not sent yet, each once its completion is durable.
pub fn start_forwards(core: &mut Core, fw: &mut Forwarder) {
    if fw.failed && fw.waiting.is_empty() {
        fw.failed = false;
        fw.sent_up_to = 0;
    }
    if fw.failed
        || core
            .state()
            .forwards
            .back()
            .is_none_or(|f| f.lsn <= fw.sent_up_to)
    {
        return;
    }
    let batch: Vec<_> = core
        .state()
        .forwards
        .iter()
        .filter(|f| f.lsn > fw.sent_up_to)
        .take(FORWARD_BATCH_MAX)
        .cloned()
        .collect();
    for f in batch {
        let mut by_shard: BTreeMap<u32, Vec<GuestKvWrite>> = BTreeMap::new();
        for w in f.writes {
            by_shard
                .entry(core.partitioning().shard_of(&f.namespace, &w.key))
                .or_default()
                .push(w);
        }
        fw.waiting.insert(f.lsn, by_shard.len() as u32);
        for (owner, writes) in by_shard {
            let req = PeerRequest::RemoteWrites {
                origin_lsn: f.lsn,
                namespace: f.namespace.clone(),
                writes,
            };
            core.call(owner, f.lsn, req, Waiting::Forward { origin_lsn: f.lsn });
        }
        fw.sent_up_to = f.lsn;
    }
}

/// An owner answered the delivery of the writes of `origin_lsn`.
pub fn on_forwarded(core: &mut Core, fw: &mut Forwarder, origin_lsn: u64, ok: bool) {
    if !ok {
        fw.failed = true;
    }
    if let Some(left) = fw.waiting.get_mut(&origin_lsn) {
        *left = left.saturating_sub(1);
    }
    // Retire the acknowledged prefix (in LSN order: KvForwarded retires up to an LSN).
    let mut up_to = 0;
    while let Some(entry) = fw.waiting.first_entry() {
        if *entry.get() > 0 {
            break;
        }
        up_to = *entry.key();
        entry.remove();
    }
    if up_to > 0 && !fw.failed {
        core.commit(Record::KvForwarded { up_to_lsn: up_to });
    }
}

/// On the owner: applies another shard's guest writes (once per origin LSN); returns the
/// LSN the acknowledgement waits for.
pub fn on_remote_writes(
    core: &mut Core,
    from: u32,
    origin_lsn: u64,
    namespace: String,
    writes: Vec<GuestKvWrite>,
) -> u64 {
    let seen = core.state().remote_applied.get(&from).copied().unwrap_or(0);
    if origin_lsn <= seen {
        // Applied before (a resend after a crash of the origin): acknowledge once that is
        // durable.
        return core.last_lsn();
    }
    let at_ms = core.now_ms();
    core.commit(Record::KvRemoteWrites {
        origin_shard: from,
        origin_lsn,
        namespace,
        writes,
        at_ms,
    })
}
