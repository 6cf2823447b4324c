//! Cursors of paged lists. A list of runs (of an action or a workflow) is every shard's
//! list merged: each shard lists its runs in its own order — in-flight runs newest created
//! first, then finished (archived) runs newest archived first — and a cursor says, per
//! shard, how far the pages before took that order ([`Pos`]). Each page does bounded work
//! per shard (at most the page's limit of runs, and `archive::LIST_SCAN_MAX` index entries
//! looked at), so a page may be short; the list is over once a reply has no cursor.
//!
//! Runs that change while a client pages are never skipped: one that finishes after its
//! in-flight turn can come again among the finished runs (with its final status); runs
//! created after the first page are not listed.
//!
//! A KV list needs no shard positions: keys are ordered, the cursor is the last key given.
//!
//! A shard's part of a run list says where each of its runs sits ([`Part`]); the merge
//! (`engine/fanout.rs`) takes a prefix of each shard's runs, newest first, and builds the
//! next cursor from the positions of the last ones it took.

use flo_protocol::{
    ErrorValue, HISTORY_LIMIT_DEFAULT, HISTORY_LIMIT_MAX, HistoryEvent, KvEntry, Reply, RunInfo,
    WorkflowRunInfo,
};

/// A cursor longer than this is refused before it is parsed.
pub const CURSOR_BYTES_MAX: usize = 64 << 10;

/// Bytes of items a list reply carries, about: a page (and each shard's part of it) stops
/// before passing it, with at least one item, and its cursor goes on from there. What a
/// list builds is bounded by bytes, not only by its count (a page of 10,000 runs with
/// 1 MiB inputs each must not be built to be refused).
pub const LIST_REPLY_BYTES_MAX: usize = 2 << 20;

/// What one item adds to a list reply, about (its variable-size fields and a fixed
/// allowance for the rest).
pub trait Weighed {
    fn weight(&self) -> usize;
}

const ITEM_OVERHEAD_BYTES: usize = 128;

fn opt_len<T: AsRef<[u8]>>(v: &Option<T>) -> usize {
    v.as_ref().map_or(0, |v| v.as_ref().len())
}

impl Weighed for RunInfo {
    fn weight(&self) -> usize {
        ITEM_OVERHEAD_BYTES
            + self.run_id.len()
            + self.namespace.len()
            + self.action.len()
            + self.input.len()
            + opt_len(&self.output)
            + opt_len(&self.outcome)
            + opt_len(&self.error)
            + opt_len(&self.labels)
            + opt_len(&self.idempotency_key)
    }
}

impl Weighed for WorkflowRunInfo {
    fn weight(&self) -> usize {
        let steps: usize = self
            .steps
            .iter()
            .map(|s| 32 + s.name.len() + opt_len(&s.outcome) + opt_len(&s.output))
            .sum();
        ITEM_OVERHEAD_BYTES
            + self.run_id.len()
            + self.namespace.len()
            + self.workflow.len()
            + self.version.len()
            + self.input.len()
            + opt_len(&self.output)
            + steps
            + opt_len(&self.current_step)
            + opt_len(&self.waiting_for)
            + opt_len(&self.terminal)
            + opt_len(&self.error)
            + opt_len(&self.idempotency_key)
            + opt_len(&self.parent_run_id)
    }
}

impl Weighed for KvEntry {
    fn weight(&self) -> usize {
        32 + self.key.len() + self.value.len()
    }
}

/// How many of `weights` (in list order) a reply of `budget` bytes takes: at least one
/// when `at_least_one`, and none past the budget otherwise.
pub fn fitting(
    weights: impl IntoIterator<Item = usize>,
    budget: usize,
    at_least_one: bool,
) -> usize {
    let mut total = 0usize;
    let mut n = 0;
    for w in weights {
        total = total.saturating_add(w);
        if total > budget && (n > 0 || !at_least_one) {
            break;
        }
        n += 1;
    }
    n
}

/// How far a shard's list was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pos {
    /// Nothing taken yet.
    Start,
    /// In-flight runs up to this one (newest first) were taken.
    Live { created_ms: u64, id: String },
    /// In-flight runs were all taken, and finished runs archived at or after this LSN.
    Archive { below_lsn: u64 },
    /// Everything was taken.
    Done,
}

impl Pos {
    /// Whether an in-flight run created at `created_ms` with `id` comes after this position.
    pub fn live_after(&self, created_ms: u64, id: &str) -> bool {
        match self {
            Pos::Start => true,
            Pos::Live {
                created_ms: c,
                id: last,
            } => newer_key(*c, last) > newer_key(created_ms, id),
            Pos::Archive { .. } | Pos::Done => false,
        }
    }

    /// Where the archive part of the list resumes (the LSN it stays below), if it does.
    pub fn archive_below(&self) -> Option<u64> {
        match self {
            Pos::Start | Pos::Live { .. } => Some(u64::MAX),
            Pos::Archive { below_lsn } => Some(*below_lsn),
            Pos::Done => None,
        }
    }

    fn encode(&self, out: &mut String) {
        match self {
            Pos::Start => out.push('S'),
            Pos::Done => out.push('D'),
            Pos::Archive { below_lsn } => out.push_str(&format!("A{below_lsn}")),
            Pos::Live { created_ms, id } => {
                out.push_str(&format!("L{created_ms}:"));
                for b in id.bytes() {
                    out.push_str(&format!("{b:02x}"));
                }
            }
        }
    }

    fn decode(text: &str) -> Option<Pos> {
        let (tag, rest) = text.split_at_checked(1)?;
        match tag {
            "S" if rest.is_empty() => Some(Pos::Start),
            "D" if rest.is_empty() => Some(Pos::Done),
            "A" => Some(Pos::Archive {
                below_lsn: rest.parse().ok()?,
            }),
            "L" => {
                let (created, hex) = rest.split_once(':')?;
                if hex.len() % 2 != 0 {
                    return None;
                }
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                    .collect::<Option<Vec<u8>>>()?;
                Some(Pos::Live {
                    created_ms: created.parse().ok()?,
                    id: String::from_utf8(bytes).ok()?,
                })
            }
            _ => None,
        }
    }
}

/// The order of in-flight runs, newest first as the key descends; ties in the same
/// millisecond by id, `a-10` after `a-9`.
pub fn newer_key(created_ms: u64, id: &str) -> (u64, usize, &str) {
    (created_ms, id.len(), id)
}

/// The first `limit` of `items` newest first (`key`: creation time and id), and whether
/// more remain; sorts only what it returns.
pub fn newest<T>(
    mut items: Vec<T>,
    limit: usize,
    key: impl Fn(&T) -> (u64, &str),
) -> (Vec<T>, bool) {
    let order = |a: &T, b: &T| {
        let (ka, kb) = (key(a), key(b));
        newer_key(kb.0, kb.1).cmp(&newer_key(ka.0, ka.1))
    };
    let more = items.len() > limit;
    if more {
        items.select_nth_unstable_by(limit, order);
        items.truncate(limit);
    }
    items.sort_by(order);
    (items, more)
}

const CURSOR_PREFIX: &str = "r1";

/// A cursor for a server of `shards` shards: one position each.
pub fn encode_cursor(positions: &[Pos]) -> String {
    let mut out = String::from(CURSOR_PREFIX);
    for p in positions {
        out.push('.');
        p.encode(&mut out);
    }
    out
}

/// The positions a client's cursor holds (none: the first page).
pub fn decode_cursor(cursor: Option<&str>, shards: u32) -> Result<Vec<Pos>, ErrorValue> {
    let Some(text) = cursor else {
        return Ok(vec![Pos::Start; shards as usize]);
    };
    let bad = |why: &str| {
        ErrorValue::bad_request(format!(
            "invalid cursor: {why}; pass the next_cursor of the previous page as it was given"
        ))
    };
    if text.len() > CURSOR_BYTES_MAX {
        return Err(bad("too long"));
    }
    let mut parts = text.split('.');
    if parts.next() != Some(CURSOR_PREFIX) {
        return Err(bad("not a cursor of a run list"));
    }
    let positions = parts
        .map(Pos::decode)
        .collect::<Option<Vec<Pos>>>()
        .ok_or_else(|| bad("damaged"))?;
    if positions.len() != shards as usize {
        return Err(bad(&format!(
            "it is for a server of {} shards, this one has {shards}",
            positions.len()
        )));
    }
    Ok(positions)
}

/// A shard's part of a run list, carried in its reply's `next_cursor` to the merge:
/// which shard it is, the position after each of its runs, and how far its list is
/// known (its position once all its runs are taken).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub shard: u32,
    pub after_each: Vec<Pos>,
    pub end: Pos,
}

const PART_PREFIX: &str = "p1";

impl Part {
    pub fn encode(&self) -> String {
        let mut out = format!("{PART_PREFIX}.{}.", self.shard);
        self.end.encode(&mut out);
        for p in &self.after_each {
            out.push('.');
            p.encode(&mut out);
        }
        out
    }

    pub fn decode(text: &str) -> Option<Part> {
        let mut parts = text.split('.');
        if parts.next()? != PART_PREFIX {
            return None;
        }
        let shard = parts.next()?.parse().ok()?;
        let end = Pos::decode(parts.next()?)?;
        let after_each = parts.map(Pos::decode).collect::<Option<Vec<Pos>>>()?;
        Some(Part {
            shard,
            after_each,
            end,
        })
    }
}

/// A run's history as the reply shows it (live or archived): events numbered from 1; with
/// `limit` or `after`, one page of it and the cursor of the next.
pub fn history_page(
    history: &[HistoryEvent],
    limit: Option<u32>,
    after: Option<u64>,
) -> Result<Reply, ErrorValue> {
    let numbered = |(i, e): (usize, &HistoryEvent)| HistoryEvent {
        seq: i as u64 + 1,
        ..e.clone()
    };
    if limit.is_none() && after.is_none() {
        let events = history.iter().enumerate().map(numbered).collect();
        return Ok(Reply::WorkflowHistory(events));
    }
    let limit = limit.unwrap_or(HISTORY_LIMIT_DEFAULT);
    if limit == 0 || limit > HISTORY_LIMIT_MAX {
        return Err(ErrorValue::bad_request(format!(
            "limit must be 1 to {HISTORY_LIMIT_MAX}, got {limit}"
        )));
    }
    let skip = usize::try_from(after.unwrap_or(0)).unwrap_or(usize::MAX);
    let events: Vec<HistoryEvent> = history
        .iter()
        .enumerate()
        .skip(skip)
        .take(limit as usize)
        .map(numbered)
        .collect();
    let last = events.last().map_or(skip as u64, |e| e.seq);
    let next_after = (last < history.len() as u64).then_some(last);
    Ok(Reply::WorkflowHistoryPage { events, next_after })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_kinds() -> Vec<Pos> {
        vec![
            Pos::Start,
            Pos::Live {
                created_ms: 1_732_400_000_000,
                id: "order-17.x:y é".into(),
            },
            Pos::Archive { below_lsn: 98_765 },
            Pos::Done,
        ]
    }

    #[test]
    fn cursors_round_trip() {
        let positions = all_kinds();
        let text = encode_cursor(&positions);
        assert_eq!(decode_cursor(Some(&text), 4).unwrap(), positions);
        assert_eq!(
            decode_cursor(None, 2).unwrap(),
            vec![Pos::Start, Pos::Start]
        );
    }

    #[test]
    fn bad_cursors_are_refused_with_a_reason() {
        let text = encode_cursor(&all_kinds());
        let e = decode_cursor(Some(&text), 2).unwrap_err();
        assert!(e.message.contains("server of 4 shards"), "{}", e.message);
        for bad in [
            "",
            "r1",
            "x1.S",
            "r1.Q",
            "r1.L12:zz",
            "r1.L12:6",
            "r1.Aabc",
            "r1.L:61",
        ] {
            assert!(decode_cursor(Some(bad), 1).is_err(), "{bad:?} accepted");
        }
        let long = "r1.".to_string() + &"S.".repeat(CURSOR_BYTES_MAX);
        assert!(decode_cursor(Some(&long), 1).is_err());
    }

    #[test]
    fn parts_round_trip() {
        let part = Part {
            shard: 3,
            after_each: all_kinds(),
            end: Pos::Archive { below_lsn: 7 },
        };
        assert_eq!(Part::decode(&part.encode()), Some(part));
        let empty = Part {
            shard: 0,
            after_each: Vec::new(),
            end: Pos::Done,
        };
        assert_eq!(Part::decode(&empty.encode()), Some(empty));
        assert_eq!(Part::decode("r1.S"), None);
    }

    #[test]
    fn newest_takes_the_first_of_the_order() {
        let items = vec![(5, "a-9"), (7, "a-1"), (5, "a-10"), (1, "z"), (7, "a-2")];
        let (page, more) = newest(items.clone(), 3, |&(t, id)| (t, id));
        assert_eq!(page, vec![(7, "a-2"), (7, "a-1"), (5, "a-10")]);
        assert!(more);
        let (all, more) = newest(items, 5, |&(t, id)| (t, id));
        assert_eq!(all.len(), 5);
        assert_eq!(all[4], (1, "z"));
        assert!(!more);
    }

    #[test]
    fn live_positions_order_newest_first() {
        let at = Pos::Live {
            created_ms: 10,
            id: "a-9".into(),
        };
        assert!(at.live_after(10, "a-8"));
        assert!(at.live_after(9, "a-99"));
        assert!(!at.live_after(10, "a-10"));
        assert!(!at.live_after(10, "a-9"));
        assert!(!at.live_after(11, "a-1"));
        assert!(Pos::Start.live_after(u64::MAX, "z"));
        assert!(!Pos::Archive { below_lsn: 5 }.live_after(0, ""));
        assert_eq!(at.archive_below(), Some(u64::MAX));
        assert_eq!(Pos::Done.archive_below(), None);
    }
}
