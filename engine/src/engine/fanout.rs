//! Operations that run on every shard: each shard answers its part, the shard that took the
//! request merges them — the one place that says how each fan-out merges.

use crate::core::cx::{Core, Waiting};
use crate::core::io::{Done, PeerRequest, ReplyResult, ReplyTo};
use crate::tables::HashMap;
use flo_protocol::{
    ErrorValue, KV_LIST_LIMIT_DEFAULT, Op, RUN_LIST_LIMIT_DEFAULT, Reply, RunInfo, StatusInfo,
    WorkflowRunInfo,
};

pub const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

struct FanOut {
    to: ReplyTo,
    op: Op,
    parts: Vec<Reply>,
    remaining: u32,
    error: Option<ErrorValue>,
    /// The local part's LSN (remote parts came after their own were durable).
    lsn: u64,
}

#[derive(Default)]
pub struct FanOuts {
    open: HashMap<u64, FanOut>,
    next_id: u64,
}

/// Starts `op` everywhere: `req` is what the others are asked; this shard's part comes
/// with `on_local_part` (now, or once it has read what it needs).
pub fn open(core: &mut Core, fo: &mut FanOuts, to: ReplyTo, op: Op, req: PeerRequest) -> u64 {
    fo.next_id += 1;
    let id = fo.next_id;
    let others: Vec<u32> = (0..core.partitioning.shards)
        .filter(|&s| s != core.shard)
        .collect();
    let fan = FanOut {
        to,
        op,
        parts: Vec::with_capacity(others.len() + 1),
        remaining: others.len() as u32 + 1,
        error: None,
        lsn: 0,
    };
    for s in others {
        core.call(s, 0, req.clone(), Waiting::FanOut(id));
    }
    fo.open.insert(id, fan);
    id
}

/// This shard's part arrived.
pub fn on_local_part(core: &mut Core, fo: &mut FanOuts, id: u64, local: Done) {
    if let Some(fan) = fo.open.get_mut(&id) {
        fan.lsn = fan.lsn.max(local.wait_lsn);
    }
    on_part(core, fo, id, local.result);
}

/// Another shard's part arrived.
pub fn on_part(core: &mut Core, fo: &mut FanOuts, id: u64, result: ReplyResult) {
    let Some(fan) = fo.open.get_mut(&id) else {
        return;
    };
    fan.remaining = fan.remaining.saturating_sub(1);
    match result {
        Ok(part) => fan.parts.push(part),
        Err(e) => {
            fan.error.get_or_insert(e);
        }
    }
    finish_if_done(core, fo, id);
}

fn finish_if_done(core: &mut Core, fo: &mut FanOuts, id: u64) {
    if fo.open.get(&id).is_none_or(|f| f.remaining > 0) {
        return;
    }
    let Some(fan) = fo.open.remove(&id) else {
        return;
    };
    let result = match fan.error {
        Some(e) => Err(e),
        None => merge(core, &fan.op, fan.parts),
    };
    core.reply_op(fan.to, fan.lsn, result);
}

/// Newest first; ties in the same millisecond by id, `a-10` after `a-9`.
fn newest_first<T>(items: &mut [T], key: impl Fn(&T) -> (u64, &str)) {
    items.sort_by(|a, b| {
        let (ta, ia) = key(a);
        let (tb, ib) = key(b);
        (tb, ib.len(), ib).cmp(&(ta, ia.len(), ia))
    });
}

fn truncate<T>(items: &mut Vec<T>, limit: usize, truncated: &mut bool) {
    if items.len() > limit {
        items.truncate(limit);
        *truncated = true;
    }
}

/// A run of a list: its creation time and id, for ordering across shards.
trait Listed {
    fn created_and_id(&self) -> (u64, &str);
}

impl Listed for RunInfo {
    fn created_and_id(&self) -> (u64, &str) {
        (self.created_at_ms, &self.run_id)
    }
}

impl Listed for WorkflowRunInfo {
    fn created_and_id(&self) -> (u64, &str) {
        (self.created_at_ms, &self.run_id)
    }
}

/// The shards' pages of runs as one page, newest first, at most `limit`.
fn merge_runs<T: Listed>(
    parts: Vec<Reply>,
    limit: Option<u32>,
    page: impl Fn(Reply) -> Option<(Vec<T>, bool)>,
) -> (Vec<T>, bool) {
    let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT) as usize;
    let (mut runs, mut truncated) = (Vec::new(), false);
    for (r, t) in parts.into_iter().filter_map(page) {
        runs.extend(r);
        truncated |= t;
    }
    newest_first(&mut runs, T::created_and_id);
    truncate(&mut runs, limit, &mut truncated);
    (runs, truncated)
}

fn merge(core: &Core, op: &Op, parts: Vec<Reply>) -> ReplyResult {
    match op {
        Op::Status => {
            let mut shards: Vec<_> = parts
                .into_iter()
                .filter_map(|p| match p {
                    Reply::ShardStatus(info) => Some(info),
                    _ => None,
                })
                .collect();
            shards.sort_by_key(|s| s.shard);
            // One cache for all shards: the newest view of it.
            let module_cache = shards
                .iter()
                .filter_map(|s| s.module_cache)
                .max_by_key(|m| m.generation);
            Ok(Reply::Status(StatusInfo {
                server_version: SERVER_VERSION.to_string(),
                durability: core.durability.as_str().to_string(),
                partitions: core.partitioning.partitions,
                shards,
                module_cache,
            }))
        }
        Op::KvList { limit, .. } => {
            let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT) as usize;
            let (mut entries, mut truncated) = (Vec::new(), false);
            for part in parts {
                if let Reply::KvList {
                    entries: e,
                    truncated: t,
                } = part
                {
                    entries.extend(e);
                    truncated |= t;
                }
            }
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            truncate(&mut entries, limit, &mut truncated);
            Ok(Reply::KvList { entries, truncated })
        }
        Op::WorkerList { .. } => {
            let mut workers: Vec<_> = parts
                .into_iter()
                .flat_map(|p| match p {
                    Reply::Workers(list) => list,
                    _ => Vec::new(),
                })
                .collect();
            workers.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
            Ok(Reply::Workers(workers))
        }
        Op::WorkflowListRuns { limit, .. } => {
            let (runs, truncated) = merge_runs(parts, *limit, |p| match p {
                Reply::WorkflowRuns { runs, truncated } => Some((runs, truncated)),
                _ => None,
            });
            Ok(Reply::WorkflowRuns { runs, truncated })
        }
        Op::RunList { limit, .. } => {
            let (runs, truncated) = merge_runs(parts, *limit, |p| match p {
                Reply::Runs { runs, truncated } => Some((runs, truncated)),
                _ => None,
            });
            Ok(Reply::Runs { runs, truncated })
        }
        Op::TestAdvanceClock { .. } => Ok(Reply::Done),
        _ => Err(ErrorValue::internal("operation cannot fan out")),
    }
}
