//! The run index: for every archived run on this shard, the LSN of its archive record and
//! a tag (status, dead-lettered, a hash of its action or workflow name) that answers
//! conflicts and filters lists without a read. 16 bytes in a hash table plus 8 in the
//! archive order, whatever the run's size.

use crate::tables::HashMap;
use std::collections::VecDeque;

/// Action runs and workflow runs have separate id spaces (an action named `wfrun` has
/// runs `wfrun-1`...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    Action = 1,
    Workflow = 2,
}

/// The index key of a run: xxh3-64 of kind ‖ namespace ‖ 0xff ‖ id. A read checks the
/// namespace and id in the record it finds (two runs may share a key, once in 2^64).
pub fn run_key(kind: RunKind, namespace: &str, run_id: &str) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&[kind as u8]);
    h.update(namespace.as_bytes());
    h.update(&[0xff]);
    h.update(run_id.as_bytes());
    h.digest()
}

/// 11 bits of the hash of (namespace, action or workflow name): a list of one action's
/// runs reads only the archived runs whose tag matches (and checks the name it reads).
pub fn name_tag(namespace: &str, name: &str) -> u16 {
    (crate::hash::stable_hash(namespace, name) & NAME_TAG_MASK) as u16
}

const NAME_TAG_MASK: u64 = 0x7ff;
const LSN_BITS: u32 = 48;
const LSN_MAX: u64 = (1 << LSN_BITS) - 1;

/// What the index keeps of an archived run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// LSN of the archive record.
    pub lsn: u64,
    /// `RunStatus` or `WorkflowRunStatus` as its index in `plan::status_code`.
    pub status: u8,
    pub dead_lettered: bool,
    pub name_tag: u16,
}

impl Entry {
    fn pack(self) -> u64 {
        debug_assert!(self.lsn <= LSN_MAX);
        (self.lsn & LSN_MAX) << 16
            | (self.status as u64 & 0xf) << 12
            | (self.dead_lettered as u64) << 11
            | (self.name_tag as u64 & NAME_TAG_MASK)
    }

    fn unpack(v: u64) -> Entry {
        Entry {
            lsn: v >> 16,
            status: ((v >> 12) & 0xf) as u8,
            dead_lettered: (v >> 11) & 1 == 1,
            name_tag: (v & NAME_TAG_MASK) as u16,
        }
    }
}

/// At most one time mark per this many ms of archive time.
const TIME_MARK_MS: u64 = 1000;

#[derive(Default)]
pub struct RunIndex {
    entries: HashMap<u64, u64>,
    /// Keys in archive order (oldest first). A key whose entry is gone or was archived
    /// again later is skipped by readers.
    order: VecDeque<u64>,
    /// (LSN, finish time) of an archived run, one per second of finish times at most and
    /// in LSN order: retention forgets runs before the LSN of the last mark older than
    /// its window.
    times: VecDeque<(u64, u64)>,
}

impl RunIndex {
    /// Indexes the run archived at `entry.lsn`, which finished at `at_ms`.
    pub fn insert(&mut self, key: u64, entry: Entry, at_ms: u64) {
        self.entries.insert(key, entry.pack());
        self.order.push_back(key);
        if self
            .times
            .back()
            .is_none_or(|&(_, t)| at_ms >= t + TIME_MARK_MS)
        {
            self.times.push_back((entry.lsn, at_ms));
        }
    }

    /// The LSN before which every archived run finished at or before `cutoff_ms` (so may
    /// be forgotten), if any run is that old.
    pub fn forget_before(&self, cutoff_ms: u64) -> Option<u64> {
        // The first mark after the cutoff: runs archived before it finished before it
        // (finish times follow LSNs up to clock steps).
        // A mark's runs finished within TIME_MARK_MS after it: a run is forgotten up to
        // that much after its window ended, never before.
        let i = self
            .times
            .partition_point(|&(_, t)| t.saturating_add(TIME_MARK_MS) <= cutoff_ms);
        let before = match self.times.get(i) {
            Some(&(lsn, _)) if i > 0 => lsn,
            // Every mark is older: everything indexed may go.
            None if i > 0 => self.newest_lsn()? + 1,
            _ => return None,
        };
        (self.oldest_lsn()? < before).then_some(before)
    }

    /// Forgets the runs archived before `lsn` (a `RunsForgotten` record).
    pub fn forget(&mut self, lsn: u64) {
        while let Some(&key) = self.order.front() {
            match self.get(key) {
                Some(e) if e.lsn >= lsn => break,
                Some(_) => {
                    self.entries.remove(&key);
                }
                // Forgotten before (a key indexed twice).
                None => {}
            }
            self.order.pop_front();
        }
        while self.times.front().is_some_and(|&(l, _)| l < lsn) {
            self.times.pop_front();
        }
        if self.order.len() < self.order.capacity() / 4 {
            self.order.shrink_to(self.order.len() * 2);
        }
        if self.entries.len() < self.entries.capacity() / 4 {
            self.entries.shrink_to(self.entries.len() * 2);
        }
    }

    /// LSN of the oldest archived run still indexed.
    pub fn oldest_lsn(&self) -> Option<u64> {
        self.order.iter().find_map(|&k| self.get(k)).map(|e| e.lsn)
    }

    fn newest_lsn(&self) -> Option<u64> {
        self.order
            .iter()
            .rev()
            .find_map(|&k| self.get(k))
            .map(|e| e.lsn)
    }

    pub fn get(&self, key: u64) -> Option<Entry> {
        self.entries.get(&key).map(|&v| Entry::unpack(v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the index holds (tables at their capacity).
    pub fn memory_bytes(&self) -> u64 {
        // hashbrown: one bucket of (u64, u64) and one control byte per slot.
        let buckets = (self.entries.capacity() as u64 * 8)
            .div_ceil(7)
            .next_power_of_two();
        buckets * 17 + self.order.capacity() as u64 * 8 + self.times.capacity() as u64 * 16
    }

    /// Entries from the newest archived. A key archived twice (a run id used again after
    /// its first run was forgotten) is listed twice with its latest entry: readers skip
    /// keys they saw.
    pub fn newest(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.order.iter().rev().filter_map(move |&key| {
            let entry = self.get(key)?;
            Some((key, entry))
        })
    }

    /// Every entry, for digests.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        self.entries.iter().map(|(&k, &v)| (k, Entry::unpack(v)))
    }
}

/// The index as a snapshot carries it: raw little-endian words appended after the rest of
/// the image (millions of entries: no MessagePack value per entry, no intermediate copy).
/// Layout: entries count, (key, packed) pairs; order count, keys; marks count, (LSN, ms).
impl RunIndex {
    pub fn write_raw(&self, out: &mut Vec<u8>) {
        out.reserve(24 + self.entries.len() * 16 + self.order.len() * 8 + self.times.len() * 16);
        out.extend_from_slice(&(self.entries.len() as u64).to_le_bytes());
        for (k, v) in &self.entries {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.order.len() as u64).to_le_bytes());
        for k in &self.order {
            out.extend_from_slice(&k.to_le_bytes());
        }
        out.extend_from_slice(&(self.times.len() as u64).to_le_bytes());
        for (lsn, at) in &self.times {
            out.extend_from_slice(&lsn.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
        }
    }

    /// The index `write_raw` wrote; the bytes must be exactly that.
    pub fn read_raw(bytes: &[u8]) -> Result<RunIndex, String> {
        let mut at = 0usize;
        let mut word = |what: &str| -> Result<u64, String> {
            let w = bytes
                .get(at..at + 8)
                .ok_or_else(|| format!("run index cut short in its {what}"))?;
            at += 8;
            Ok(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        };
        let bound = bytes.len() as u64 / 8;
        let n = word("entries")?;
        if n > bound {
            return Err("run index entry count out of range".into());
        }
        let mut entries = HashMap::default();
        entries.reserve(n as usize);
        for _ in 0..n {
            let k = word("entries")?;
            entries.insert(k, word("entries")?);
        }
        let n = word("order")?;
        if n > bound {
            return Err("run index order count out of range".into());
        }
        let order = (0..n)
            .map(|_| word("order"))
            .collect::<Result<VecDeque<u64>, String>>()?;
        let n = word("time marks")?;
        if n > bound {
            return Err("run index time mark count out of range".into());
        }
        let times = (0..n)
            .map(|_| Ok((word("time marks")?, word("time marks")?)))
            .collect::<Result<VecDeque<(u64, u64)>, String>>()?;
        if at != bytes.len() {
            return Err("run index followed by stray bytes".into());
        }
        Ok(RunIndex {
            entries,
            order,
            times,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_raw_image_round_trips_and_refuses_cut_or_stray_bytes() {
        let mut index = RunIndex::default();
        for i in 1..=1000u64 {
            let e = Entry {
                lsn: i * 3,
                status: (i % 7) as u8,
                dead_lettered: i % 2 == 0,
                name_tag: (i % 2048) as u16,
            };
            index.insert(i * 0x9e37_79b9, e, i * 400);
        }
        let mut raw = Vec::new();
        index.write_raw(&mut raw);
        let back = RunIndex::read_raw(&raw).unwrap();
        let sorted = |x: &RunIndex| {
            let mut v: Vec<(u64, Entry)> = x.iter().collect();
            v.sort_by_key(|p| p.0);
            v
        };
        assert_eq!(sorted(&back), sorted(&index));
        assert_eq!(back.order, index.order);
        assert_eq!(back.times, index.times);
        assert!(RunIndex::read_raw(&raw[..raw.len() - 8]).is_err());
        let mut stray = raw.clone();
        stray.extend_from_slice(&[0; 8]);
        assert!(RunIndex::read_raw(&stray).is_err());
        assert!(RunIndex::read_raw(&[0xff; 8]).is_err());
    }

    #[test]
    fn retention_forgets_runs_finished_before_the_cutoff_and_keeps_the_rest() {
        let mut index = RunIndex::default();
        let e = |lsn| Entry {
            lsn,
            status: 2,
            dead_lettered: false,
            name_tag: 1,
        };
        // Runs archived at LSNs 10, 20, ... finishing one per 500 ms.
        for i in 1..=20u64 {
            index.insert(100 + i, e(i * 10), i * 500);
        }
        assert_eq!(index.forget_before(0), None, "nothing is that old");
        // Marks every second: (10, 500), (30, 1500), (50, 2500)...
        // Runs of the marks at 500 and 1500 ms (LSNs 10 to 40, finished by 2000 ms) go;
        // the run finished at 2500 ms stays.
        let before = index.forget_before(2600).unwrap();
        assert_eq!(before, 50);
        index.forget(before);
        assert_eq!(index.len(), 16);
        assert_eq!(index.oldest_lsn(), Some(50));
        assert!(index.get(101).is_none() && index.get(104).is_none());
        assert!(index.get(105).is_some());
        // A cutoff past every run forgets them all.
        let before = index.forget_before(1_000_000).unwrap();
        index.forget(before);
        assert!(index.is_empty());
        assert_eq!(index.forget_before(2_000_000), None);
    }

    #[test]
    fn entries_pack_losslessly() {
        for e in [
            Entry {
                lsn: 1,
                status: 0,
                dead_lettered: false,
                name_tag: 0,
            },
            Entry {
                lsn: LSN_MAX,
                status: 15,
                dead_lettered: true,
                name_tag: 0x7ff,
            },
            Entry {
                lsn: 123_456_789,
                status: 5,
                dead_lettered: true,
                name_tag: 42,
            },
        ] {
            assert_eq!(Entry::unpack(e.pack()), e);
        }
    }

    #[test]
    fn run_kinds_do_not_share_keys() {
        assert_ne!(
            run_key(RunKind::Action, "ns", "wfrun-1"),
            run_key(RunKind::Workflow, "ns", "wfrun-1")
        );
        assert_ne!(
            run_key(RunKind::Action, "a", "bc"),
            run_key(RunKind::Action, "ab", "c")
        );
    }

    #[test]
    fn a_key_archived_again_resolves_to_its_latest_entry() {
        let mut index = RunIndex::default();
        let e = |lsn| Entry {
            lsn,
            status: 2,
            dead_lettered: false,
            name_tag: 1,
        };
        index.insert(7, e(1), 10);
        index.insert(8, e(2), 20);
        index.insert(7, e(3), 30);
        let seen: Vec<(u64, u64)> = index.newest().map(|(k, e)| (k, e.lsn)).collect();
        // Key 7 is twice in the order (readers skip keys they saw); both give its latest.
        assert_eq!(seen, vec![(7, 3), (8, 2), (7, 3)]);
        assert_eq!(index.len(), 2);
    }
}
