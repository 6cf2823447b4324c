//! Operations that run on every shard: each shard answers its part, the shard that took the
//! request merges them — the one place that says how each fan-out merges.

use crate::core::io::{Done, PeerRequest, ReplyResult, ReplyTo};
use crate::core::{Core, Waiting};
use crate::pages::{self, LIST_REPLY_BYTES_MAX, Part, Pos, Weighed};
use crate::schedules;
use crate::streams;
use crate::tables::HashMap;
use flo_protocol::{
    ErrorValue, KV_LIST_LIMIT_DEFAULT, KvEntry, Op, RUN_LIST_LIMIT_DEFAULT, Reply, RunInfo,
    StatusInfo, WorkflowRunInfo,
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
    let others: Vec<u32> = (0..core.partitioning().shards)
        .filter(|&s| s != core.shard())
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

/// A run of a list: its creation time and id, for ordering across shards.
trait Listed: Weighed {
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

/// One shard's runs of a list page, and how many the merge took.
struct ShardRuns<T> {
    part: Part,
    /// Not yet taken, the next last.
    rest: Vec<T>,
    taken: usize,
}

impl<T: Listed> ShardRuns<T> {
    /// The shard's next run: its creation time and id (the merge takes the newest).
    fn head_key(&self) -> Option<(u64, usize, &str)> {
        let (created, id) = self.rest.last()?.created_and_id();
        Some(pages::newer_key(created, id))
    }
}

/// The shards' parts of a run list as one page of at most `limit`: a prefix of each
/// shard's runs (`pages`: in-flight ones before finished ones), the newest heads first,
/// shown newest first; and the cursor saying how far each shard's list was taken (none
/// once every shard's list is done).
fn merge_runs<T: Listed>(
    shards: u32,
    cursor: Option<&str>,
    parts: Vec<Reply>,
    limit: Option<u32>,
    page: impl Fn(Reply) -> Option<(Vec<T>, Option<String>)>,
) -> Result<(Vec<T>, Option<String>), ErrorValue> {
    let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT) as usize;
    let mut positions = pages::decode_cursor(cursor, shards)?;
    let mut lists = Vec::new();
    for (mut runs, part) in parts.into_iter().filter_map(page) {
        let part = part
            .as_deref()
            .and_then(Part::decode)
            .filter(|p| p.after_each.len() == runs.len() && p.shard < shards)
            .ok_or_else(|| ErrorValue::internal("a shard's part of a list has no positions"))?;
        runs.reverse();
        lists.push(ShardRuns {
            part,
            rest: runs,
            taken: 0,
        });
    }
    let mut out = Vec::new();
    let mut bytes = 0usize;
    while out.len() < limit {
        let next = (0..lists.len())
            .filter_map(|i| lists[i].head_key().map(|k| (k, i)))
            .max()
            .map(|(_, i)| i);
        let Some(i) = next else { break };
        let list = &mut lists[i];
        // The page stops at its byte budget, with at least one run.
        let weight = list.rest.last().map_or(0, Weighed::weight);
        if !out.is_empty() && bytes.saturating_add(weight) > LIST_REPLY_BYTES_MAX {
            break;
        }
        bytes = bytes.saturating_add(weight);
        out.extend(list.rest.pop());
        list.taken += 1;
    }
    for list in lists {
        let Part {
            shard,
            mut after_each,
            end,
        } = list.part;
        let at = &mut positions[shard as usize];
        if list.rest.is_empty() {
            *at = end;
        } else if list.taken > 0 {
            after_each.truncate(list.taken);
            *at = after_each.pop().unwrap_or(Pos::Start);
        }
    }
    out.sort_by(|a, b| {
        let (ka, kb) = (a.created_and_id(), b.created_and_id());
        pages::newer_key(kb.0, kb.1).cmp(&pages::newer_key(ka.0, ka.1))
    });
    let next =
        (!positions.iter().all(|p| *p == Pos::Done)).then(|| pages::encode_cursor(&positions));
    Ok((out, next))
}

/// The shards' parts of a KV list as one page of at most `limit`, in key order. A part's
/// `next_cursor` is the last key its shard vouches for (more may follow): the page stops
/// at the lowest of those, so no key is skipped.
fn merge_keys(parts: Vec<Reply>, limit: Option<u32>) -> Reply {
    let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT) as usize;
    let mut entries: Vec<KvEntry> = Vec::new();
    let mut cover: Option<String> = None;
    for part in parts {
        if let Reply::KvList {
            entries: e,
            next_cursor,
            ..
        } = part
        {
            entries.extend(e);
            if let Some(c) = next_cursor
                && cover.as_ref().is_none_or(|low| c < *low)
            {
                cover = Some(c);
            }
        }
    }
    if let Some(c) = &cover {
        entries.retain(|e| e.key <= *c);
    }
    entries.sort_by(|a, b| a.key.cmp(&b.key));
    let fit = pages::fitting(
        entries.iter().map(Weighed::weight),
        LIST_REPLY_BYTES_MAX,
        true,
    );
    let keep = limit.min(fit);
    let next_cursor = if entries.len() > keep {
        entries.truncate(keep);
        entries.last().map(|e| e.key.clone())
    } else {
        cover
    };
    Reply::KvList {
        entries,
        truncated: next_cursor.is_some(),
        next_cursor,
    }
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
                durability: core.durability().as_str().to_string(),
                partitions: core.partitioning().partitions,
                shards,
                module_cache,
                counts_hidden: false,
            }))
        }
        Op::KvList { limit, .. } => Ok(merge_keys(parts, *limit)),
        Op::StreamRead(spec) => streams::merge_reads(spec, parts),
        Op::StreamList { .. } => Ok(Reply::Streams(streams::merge_infos(parts))),
        Op::ScheduleList { .. } => Ok(Reply::Schedules(schedules::merge_lists(parts))),
        Op::PlanStatus { .. } => {
            let mut rows = Vec::new();
            for part in parts {
                if let Reply::PlanStatus(r) = part {
                    rows.extend(r);
                }
            }
            rows.sort_by(|a, b| {
                (&a.plan, &a.executor, a.shard).cmp(&(&b.plan, &b.executor, b.shard))
            });
            Ok(Reply::PlanStatus(rows))
        }
        Op::PlanInvalidate { .. } => Ok(Reply::Invalidated {
            entries: parts
                .iter()
                .map(|p| match p {
                    Reply::Invalidated { entries } => *entries,
                    _ => 0,
                })
                .sum(),
        }),
        Op::WorkflowQuery {
            ascending, limit, ..
        } => crate::workflows::merge_parts(parts, *ascending, *limit, core.partitioning().shards),
        Op::WebhookDeliveries { limit, .. } => crate::webhooks::merge_lists(parts, *limit),
        Op::WorkflowEvents { cursor, limit, .. } => crate::workflows::merge_events(
            parts,
            cursor.as_deref(),
            *limit,
            core.partitioning().shards,
        ),
        Op::StreamGet { name, .. } => streams::merge_infos(parts)
            .into_iter()
            .next()
            .map(Reply::Stream)
            .ok_or_else(|| ErrorValue::not_found(format!("stream {name:?} does not exist"))),
        Op::StreamTrim { .. } => Ok(streams::merge_trims(parts)),
        Op::StreamGroupPending { count, .. } => streams::merge_pending(*count, parts),
        Op::StreamGroupInfo { group, .. } => {
            let infos = streams::merge_group_infos(parts);
            match group {
                Some(name) if infos.is_empty() => {
                    Err(ErrorValue::not_found(format!("no consumer group {name:?}")))
                }
                _ => Ok(Reply::Groups(infos)),
            }
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
        Op::WorkflowListRuns { limit, cursor, .. } => {
            let shards = core.partitioning().shards;
            let (runs, next_cursor) =
                merge_runs(shards, cursor.as_deref(), parts, *limit, |p| match p {
                    Reply::WorkflowRuns {
                        runs, next_cursor, ..
                    } => Some((runs, next_cursor)),
                    _ => None,
                })?;
            Ok(Reply::WorkflowRuns {
                runs,
                truncated: next_cursor.is_some(),
                next_cursor,
            })
        }
        Op::RunList { limit, cursor, .. } => {
            let shards = core.partitioning().shards;
            let (runs, next_cursor) =
                merge_runs(shards, cursor.as_deref(), parts, *limit, |p| match p {
                    Reply::Runs {
                        runs, next_cursor, ..
                    } => Some((runs, next_cursor)),
                    _ => None,
                })?;
            Ok(Reply::Runs {
                runs,
                truncated: next_cursor.is_some(),
                next_cursor,
            })
        }
        Op::TestAdvanceClock { .. } => Ok(Reply::Done),
        _ => Err(ErrorValue::internal("operation cannot fan out")),
    }
}
