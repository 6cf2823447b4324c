//! `flo workflow events`: the run event feed (`fold::events`), read by position. Each shard
//! answers the events after its position in the cursor; the merge orders the shards' events
//! by time and gives a cursor of every shard's position. A part waits until its events'
//! records are durable: a reader never sees what a crash could take back.

use crate::core::Core;
use crate::core::io::Done;
use flo_protocol::{
    EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX, ErrorValue, Reply, WorkflowEvent, check_namespace,
};

const CURSOR_PREFIX: &str = "ev";

/// This shard's part of an events page: its cursor is `SHARD:POSITION`.
pub fn events_part(
    core: &Core,
    namespace: &str,
    workflow: Option<&str>,
    cursor: Option<&str>,
    limit: Option<u32>,
) -> Done {
    let ask = || -> Result<(Vec<u64>, usize), ErrorValue> {
        check_namespace(namespace)?;
        let positions = decode_cursor(cursor, core.partitioning().shards)?;
        Ok((positions, page_limit(limit)?))
    };
    let (positions, limit) = match ask() {
        Ok(ask) => ask,
        Err(e) => return Done::now(Err(e)),
    };
    let me = core.shard();
    let read = core
        .state()
        .events
        .read(namespace, workflow, positions[me as usize], limit);
    let wait_lsn = read.events.last().map_or(0, |e| e.pos >> 3);
    let events = read
        .events
        .iter()
        .map(|e| WorkflowEvent {
            event: e.kind.as_str().to_string(),
            run_id: e.run_id.to_string(),
            workflow: e.workflow.to_string(),
            step: e.step.as_deref().map(str::to_string),
            at_ms: e.at_ms,
            shard: me,
            position: e.pos,
        })
        .collect();
    Done {
        result: Ok(Reply::WorkflowEvents {
            events,
            cursor: format!("{me}:{}", read.next),
            gap: read.gap,
        }),
        wait_lsn,
    }
}

fn page_limit(limit: Option<u32>) -> Result<usize, ErrorValue> {
    match limit.unwrap_or(EVENTS_LIMIT_DEFAULT) {
        0 => Err(ErrorValue::bad_request("limit must be at least 1")),
        n if n > EVENTS_LIMIT_MAX => Err(ErrorValue::bad_request(format!(
            "limit must be at most {EVENTS_LIMIT_MAX}"
        ))),
        n => Ok(n as usize),
    }
}

/// The shards' parts as one page: at most `limit` events, oldest first (by time, then
/// shard and position); each shard's position goes past what was taken from it, or past
/// all it looked at when every event it gave was taken.
pub fn merge_events(
    parts: Vec<Reply>,
    cursor: Option<&str>,
    limit: Option<u32>,
    shards: u32,
) -> Result<Reply, ErrorValue> {
    let mut positions = decode_cursor(cursor, shards)?;
    let limit = page_limit(limit)?;
    let mut all = Vec::new();
    let mut looked = vec![None; shards as usize];
    let mut gap = false;
    for part in parts {
        let Reply::WorkflowEvents {
            events,
            cursor,
            gap: part_gap,
        } = part
        else {
            continue;
        };
        gap |= part_gap;
        let (shard, next) = cursor
            .split_once(':')
            .and_then(|(s, p)| Some((s.parse::<usize>().ok()?, p.parse::<u64>().ok()?)))
            .ok_or_else(|| ErrorValue::internal("a shard's events part had no position"))?;
        if let Some(slot) = looked.get_mut(shard) {
            *slot = Some((next, events.len()));
        }
        all.extend(events);
    }
    all.sort_by_key(|e| (e.at_ms, e.shard, e.position));
    all.truncate(limit);
    let mut taken = vec![0usize; shards as usize];
    for e in &all {
        if let Some(n) = taken.get_mut(e.shard as usize) {
            *n += 1;
        }
        if let Some(p) = positions.get_mut(e.shard as usize) {
            *p = e.position;
        }
    }
    for (shard, seen) in looked.into_iter().enumerate() {
        if let Some((next, given)) = seen
            && taken[shard] == given
        {
            positions[shard] = positions[shard].max(next);
        }
    }
    Ok(Reply::WorkflowEvents {
        events: all,
        cursor: encode_cursor(&positions),
        gap,
    })
}

fn encode_cursor(positions: &[u64]) -> String {
    let mut out = String::from(CURSOR_PREFIX);
    for p in positions {
        out.push('.');
        out.push_str(&p.to_string());
    }
    out
}

/// Each shard's position (none: before the oldest event kept).
fn decode_cursor(cursor: Option<&str>, shards: u32) -> Result<Vec<u64>, ErrorValue> {
    let Some(text) = cursor else {
        return Ok(vec![0; shards as usize]);
    };
    let bad = || {
        ErrorValue::bad_request(format!(
            "invalid events cursor {text:?}: pass the cursor a previous page gave, as it was"
        ))
    };
    let mut parts = text.split('.');
    if parts.next() != Some(CURSOR_PREFIX) {
        return Err(bad());
    }
    let positions = parts
        .map(|p| p.parse::<u64>().map_err(|_| bad()))
        .collect::<Result<Vec<u64>, _>>()?;
    if positions.len() != shards as usize {
        return Err(ErrorValue::bad_request(format!(
            "the events cursor {text:?} holds {} positions; this server has {shards} shards",
            positions.len()
        )));
    }
    Ok(positions)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(shard: u32, position: u64, at_ms: u64) -> WorkflowEvent {
        WorkflowEvent {
            event: "step_started".into(),
            run_id: format!("r{shard}-{position}"),
            workflow: "w".into(),
            step: None,
            at_ms,
            shard,
            position,
        }
    }

    fn part(shard: u32, events: Vec<WorkflowEvent>, next: u64) -> Reply {
        Reply::WorkflowEvents {
            events,
            cursor: format!("{shard}:{next}"),
            gap: false,
        }
    }

    #[test]
    fn a_page_takes_the_oldest_and_each_shard_goes_on_from_what_it_gave() {
        let parts = vec![
            part(0, vec![event(0, 8, 1), event(0, 16, 5)], 24),
            part(1, vec![event(1, 8, 2)], 40),
        ];
        let Ok(Reply::WorkflowEvents { events, cursor, .. }) =
            merge_events(parts, None, Some(2), 2)
        else {
            panic!("a page");
        };
        let at: Vec<u64> = events.iter().map(|e| e.at_ms).collect();
        assert_eq!(at, vec![1, 2]);
        // Shard 0 gave one more than was taken: it goes on after the one taken; shard 1
        // gave all it had and looked up to 40.
        assert_eq!(cursor, "ev.8.40");
        assert!(decode_cursor(Some("ev.1"), 2).is_err());
        assert!(decode_cursor(Some("xx.1.2"), 2).is_err());
    }
}
