//! The run index: for every archived run on this shard, the LSN of its archive record and
//! a tag (status, dead-lettered, a hash of its action or workflow name) that answers
//! conflicts and filters lists without a read. About 24 bytes per run (16 in the archive
//! log, 4 and a control byte per slot of a hash table), whatever the run's size. The table
//! grows and shrinks a few entries at a time (`Moving`): for a while after it doubles, the
//! full table it replaced is still held (5 bytes per slot more, as a growth in one go
//! holds at once).

use crate::image::{Image, Part};
use crate::tables::TableHasher;
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Arc;

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

/// Entries per chunk of the archive log (1 MiB of words): a full chunk is sealed, never
/// changes again and is shared with the snapshot images being written.
const CHUNK: usize = 1 << 16;

/// The archive log: every entry in archive (LSN) order as (key, packed) words, in sealed
/// chunks and a filling tail. An entry is addressed by its position, counted from the
/// first entry ever indexed.
#[derive(Default)]
struct Log {
    sealed: VecDeque<Arc<[u64]>>,
    tail: Vec<u64>,
    /// Position of the first entry of `sealed[0]` (or of `tail` when nothing is sealed).
    first: u64,
    /// Entries before this position are forgotten.
    start: u64,
}

impl Log {
    fn next(&self) -> u64 {
        self.first + (self.sealed.len() * CHUNK + self.tail.len() / 2) as u64
    }

    /// (key, packed) at `pos` (start <= pos < next).
    fn at(&self, pos: u64) -> (u64, u64) {
        let i = (pos - self.first) as usize;
        let (words, j) = match self.sealed.get(i / CHUNK) {
            Some(chunk) => (&chunk[..], i % CHUNK),
            None => (&self.tail[..], i - self.sealed.len() * CHUNK),
        };
        (words[2 * j], words[2 * j + 1])
    }

    /// The position a table slot names: positions are kept as their low 32 bits, and
    /// fewer than 2^32 entries are ever retained (64 GiB of log entries).
    fn resolve(&self, slot: u32) -> u64 {
        self.start + slot.wrapping_sub(self.start as u32) as u64
    }

    fn key(&self, slot: u32) -> u64 {
        self.at(self.resolve(slot)).0
    }

    fn push(&mut self, key: u64, packed: u64) -> u64 {
        let pos = self.next();
        if self.tail.capacity() == 0 {
            self.tail.reserve_exact(2 * CHUNK);
        }
        self.tail.extend_from_slice(&[key, packed]);
        if self.tail.len() == 2 * CHUNK {
            let full = std::mem::replace(&mut self.tail, Vec::with_capacity(2 * CHUNK));
            self.sealed.push_back(full.into());
        }
        pos
    }

    /// Drops what is wholly before `start`.
    fn trim(&mut self) {
        while !self.sealed.is_empty() && self.first + CHUNK as u64 <= self.start {
            self.sealed.pop_front();
            self.first += CHUNK as u64;
        }
        if self.start == self.next() {
            // Everything forgotten: the tail starts again at `start`.
            self.sealed.clear();
            self.tail.clear();
            self.first = self.start;
        }
    }
}

/// Log positions looked at per insert while a grown table takes the entries of the full one
/// it replaced: the new table has room for as many inserts as the old one held entries, so
/// unless most of the log is stale the move ends well before the new table is full.
const MOVE_PER_INSERT: u64 = 4;

/// Log positions looked at per `forget` while a table is being replaced.
const MOVE_PER_FORGET: u64 = 16 << 10;

/// Smallest table a growth starts.
const TABLE_MIN: usize = 1024;

/// The table being emptied into its successor (a growth, or a shrink once retention forgot
/// most runs). Growing or shrinking a hash table in one go rehashes
/// every entry — here a read of the archive log at random for each (the table holds
/// positions, not keys) — and stalled the shard 96, 244 and 421 ms as the index passed 1.8,
/// 3.7 and 7.3 million runs (open loop, 25,000 workflow runs/s).
struct Moving {
    old: HashTable<u32>,
    /// The next log position whose entry moves, if the old table still points at it.
    next: u64,
    /// The log's end when the move began: every entry of `old` is before it.
    end: u64,
}

/// A run index image (`RunIndex::read_image`) that is not what `write_image` wrote.
#[derive(Debug, thiserror::Error)]
pub enum RunIndexError {
    #[error("cut short in its {what}")]
    CutShort { what: &'static str },
    #[error("its {what} is out of range")]
    OutOfRange { what: &'static str },
    #[error("followed by stray bytes")]
    StrayBytes,
}

/// Archived runs: the archive log (16 bytes per run, in order) and a hash table of 32-bit
/// positions into it (4 bytes + a control byte per slot) from a run's key to its latest
/// entry. An entry whose key was archived again later is stale: the table points past it
/// and readers skip it.
#[derive(Default)]
pub struct RunIndex {
    log: Log,
    table: HashTable<u32>,
    /// While the table grows or shrinks: the table it replaced, emptied into it a few
    /// entries at a time (`Moving`).
    moving: Option<Moving>,
    /// Seeded: keys are hashes of client-chosen ids.
    hasher: TableHasher,
    /// Entries in the log whose key has a later entry. Usually none: an image then says
    /// its keys are unique and loads without looking any up.
    stale: u64,
    /// (LSN, finish time, floor) of an archived run, one per second of finish times at
    /// most and in LSN order: retention forgets runs before the LSN of the last mark older
    /// than its window. The floor is the earliest record the mark's runs need, theirs or
    /// one their documents point at (`insert`).
    times: VecDeque<(u64, u64, u64)>,
}

impl RunIndex {
    /// Indexes the run archived at `entry.lsn`, which finished at `at_ms`; its document
    /// points at records from `floor` on (`Refs`), if it does: the log must keep them as
    /// long as the run is retained, so the time mark it falls under says the earlier of
    /// the two (a mark's LSN is where forgetting stops and where the log must start).
    pub fn insert(&mut self, key: u64, entry: Entry, at_ms: u64, floor: Option<u64>) {
        let pos = self.log.push(key, entry.pack());
        self.point(key, pos);
        let floor = floor.map_or(entry.lsn, |f| f.min(entry.lsn));
        match self.times.back_mut() {
            Some((_, t, low)) if at_ms < *t + TIME_MARK_MS => *low = (*low).min(floor),
            _ => self.times.push_back((entry.lsn, at_ms, floor)),
        }
    }

    /// Points `key` at the entry at `pos`.
    fn point(&mut self, key: u64, pos: u64) {
        let hash = self.hasher.hash_one(key);
        if self.moving.is_none() && self.table.len() >= self.table.capacity() {
            self.start_moving();
        }
        if let Some(moving) = &mut self.moving {
            let log = &self.log;
            if let Ok(slot) = moving.old.find_entry(hash, |&s| log.key(s) == key) {
                // Its earlier entry: the key goes to the new table, pointing at `pos`.
                slot.remove();
                self.stale += 1;
            }
        }
        let Self {
            log, table, hasher, ..
        } = self;
        match table.entry(
            hash,
            |&s| log.key(s) == key,
            |&s| hasher.hash_one(log.key(s)),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut slot) => {
                *slot.get_mut() = pos as u32;
                self.stale += 1;
            }
            hashbrown::hash_table::Entry::Vacant(slot) => {
                slot.insert(pos as u32);
            }
        }
        self.move_some(MOVE_PER_INSERT);
    }

    /// The table is full, or mostly empty after a forget: a table twice its entries
    /// replaces it, and takes them a few at a time (`Moving`).
    fn start_moving(&mut self) {
        let old = std::mem::take(&mut self.table);
        self.table = HashTable::with_capacity((old.len() * 2).max(TABLE_MIN));
        if old.is_empty() {
            return;
        }
        self.moving = Some(Moving {
            old,
            next: self.log.start,
            end: self.log.next(),
        });
    }

    /// Moves the entries at the next `positions` log positions still in the old table to
    /// the new one; ends the move once the old table is empty.
    fn move_some(&mut self, positions: u64) {
        let Self {
            log,
            table,
            hasher,
            moving,
            ..
        } = self;
        let Some(m) = moving else {
            return;
        };
        m.next = m.next.max(log.start);
        let stop = m.end.min(m.next + positions);
        while m.next < stop && !m.old.is_empty() {
            let pos = m.next;
            m.next += 1;
            let hash = hasher.hash_one(log.at(pos).0);
            if let Ok(slot) = m.old.find_entry(hash, |&s| log.resolve(s) == pos) {
                let (s, _) = slot.remove();
                table.insert_unique(hash, s, |&s| hasher.hash_one(log.key(s)));
            }
        }
        let left_behind = m.next >= m.end && !m.old.is_empty();
        debug_assert!(!left_behind, "{} entries left behind a move", m.old.len());
        if left_behind {
            // Not expected (every entry of the old table is before `end`): move the rest.
            for s in m.old.drain() {
                table.insert_unique(hasher.hash_one(log.key(s)), s, |&s| {
                    hasher.hash_one(log.key(s))
                });
            }
        }
        if m.old.is_empty() {
            *moving = None;
        }
    }

    /// The position of `key`'s latest entry.
    fn position(&self, key: u64) -> Option<u64> {
        let hash = self.hasher.hash_one(key);
        let log = &self.log;
        self.table
            .find(hash, |&s| log.key(s) == key)
            .or_else(|| self.moving.as_ref()?.old.find(hash, |&s| log.key(s) == key))
            .map(|&s| log.resolve(s))
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
            .partition_point(|&(_, t, _)| t.saturating_add(TIME_MARK_MS) <= cutoff_ms);
        let before = match self.times.get(i) {
            Some(&(lsn, ..)) if i > 0 => lsn,
            // Every mark is older: everything indexed may go.
            None if i > 0 => self.newest_lsn()? + 1,
            _ => return None,
        };
        (self.oldest_lsn()? < before).then_some(before)
    }

    /// Forgets the runs archived before `lsn` (a `RunsForgotten` record).
    pub fn forget(&mut self, lsn: u64) {
        while self.log.start < self.log.next() {
            let pos = self.log.start;
            let (key, packed) = self.log.at(pos);
            if Entry::unpack(packed).lsn >= lsn {
                break;
            }
            if self.position(key) == Some(pos) {
                let hash = self.hasher.hash_one(key);
                let log = &self.log;
                let at_pos = |&s: &u32| log.resolve(s) == pos;
                if let Ok(slot) = self.table.find_entry(hash, at_pos) {
                    slot.remove();
                } else if let Some(m) = &mut self.moving
                    && let Ok(slot) = m.old.find_entry(hash, at_pos)
                {
                    slot.remove();
                }
            } else {
                // Stale: the key's latest entry is later.
                self.stale = self.stale.saturating_sub(1);
            }
            self.log.start += 1;
        }
        self.log.trim();
        while self.times.front().is_some_and(|&(l, ..)| l < lsn) {
            self.times.pop_front();
        }
        if self.moving.is_none()
            && self.table.capacity() > TABLE_MIN
            && self.table.len() < self.table.capacity() / 4
        {
            // Mostly empty: a smaller table takes the entries, as a growth does.
            self.start_moving();
        }
        // Inserts move the entries along; so does retention's forgetting, for a shard that
        // takes no new runs (its old table's memory comes back).
        self.move_some(MOVE_PER_FORGET);
    }

    /// The first LSN the log must keep for the retained runs: the oldest archive record,
    /// or an earlier record a retained document points at (`insert`'s `floor`).
    pub fn retained_from(&self) -> Option<u64> {
        let oldest = self.oldest_lsn()?;
        Some(
            self.times
                .iter()
                .fold(oldest, |min, &(.., floor)| min.min(floor)),
        )
    }

    /// LSN of the oldest entry still indexed (a stale one is older than every live one:
    /// the log needs at most a little more than it must keep).
    pub fn oldest_lsn(&self) -> Option<u64> {
        (self.log.start < self.log.next()).then(|| Entry::unpack(self.log.at(self.log.start).1).lsn)
    }

    fn newest_lsn(&self) -> Option<u64> {
        let next = self.log.next();
        (self.log.start < next).then(|| Entry::unpack(self.log.at(next - 1).1).lsn)
    }

    pub fn get(&self, key: u64) -> Option<Entry> {
        self.position(key)
            .map(|pos| Entry::unpack(self.log.at(pos).1))
    }

    pub fn len(&self) -> usize {
        self.table.len() + self.moving.as_ref().map_or(0, |m| m.old.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the index holds (tables at their capacity).
    pub fn memory_bytes(&self) -> u64 {
        // hashbrown: a u32 and one control byte per bucket, buckets a power of two at
        // most 7/8 full.
        let buckets = |table: &HashTable<u32>| {
            (table.capacity() as u64 * 8)
                .div_ceil(7)
                .next_power_of_two()
        };
        let moving = self.moving.as_ref().map_or(0, |m| buckets(&m.old));
        (buckets(&self.table) + moving) * 5
            + (self.log.sealed.len() * CHUNK * 16) as u64
            + self.log.tail.capacity() as u64 * 8
            + self.times.capacity() as u64 * 24
    }

    /// Live entries archived before `below_lsn`, newest first (the archive log is in LSN
    /// order: a binary search finds where to begin).
    pub fn newest_below(&self, below_lsn: u64) -> impl Iterator<Item = (u64, Entry)> + '_ {
        let (mut lo, mut hi) = (self.log.start, self.log.next());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if Entry::unpack(self.log.at(mid).1).lsn < below_lsn {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        (self.log.start..lo).rev().filter_map(|pos| {
            let (key, packed) = self.log.at(pos);
            (self.position(key) == Some(pos)).then(|| (key, Entry::unpack(packed)))
        })
    }

    /// Every live entry, for digests.
    pub fn iter(&self) -> impl Iterator<Item = (u64, Entry)> + '_ {
        let moving = self.moving.iter().flat_map(|m| m.old.iter());
        self.table.iter().chain(moving).map(|&s| {
            let (key, packed) = self.log.at(self.log.resolve(s));
            (key, Entry::unpack(packed))
        })
    }
}

/// The index as a snapshot carries it: raw little-endian words after the rest of the
/// image (millions of entries: no MessagePack value per entry). Layout: entry count,
/// whether any entry is stale (0 or 1), the (key, packed) words of every entry not
/// forgotten in archive order (stale ones too: loading them in order points each key at
/// its latest again); mark count, (LSN, ms). Without stale entries every key is new to
/// the table as it loads: inserted without a lookup (a third of the restart time).
/// Sealed chunks go into the image shared, not copied.
impl RunIndex {
    pub fn write_image(&self, image: &mut Image) {
        let log = &self.log;
        let count = log.next() - log.start;
        let mut head = Vec::with_capacity(16);
        head.extend_from_slice(&count.to_le_bytes());
        head.extend_from_slice(&u64::from(self.stale > 0).to_le_bytes());
        image.push(Part::Bytes(head));
        let skip = (log.start - log.first) as usize;
        for (i, chunk) in log.sealed.iter().enumerate() {
            let from = (skip.saturating_sub(i * CHUNK)).min(CHUNK);
            if from < CHUNK {
                image.push(Part::Words(chunk.clone(), 2 * from..2 * CHUNK));
            }
        }
        let from = skip.saturating_sub(log.sealed.len() * CHUNK);
        let mut rest =
            Vec::with_capacity((log.tail.len() - 2 * from) * 8 + 8 + 24 * self.times.len());
        for w in &log.tail[2 * from..] {
            rest.extend_from_slice(&w.to_le_bytes());
        }
        rest.extend_from_slice(&(self.times.len() as u64).to_le_bytes());
        for (lsn, at, floor) in &self.times {
            rest.extend_from_slice(&lsn.to_le_bytes());
            rest.extend_from_slice(&at.to_le_bytes());
            rest.extend_from_slice(&floor.to_le_bytes());
        }
        image.push(Part::Bytes(rest));
    }

    /// The index `write_image` wrote; the bytes must be exactly that. Images of snapshot
    /// formats before 5 have no floors in their time marks (no document pointed at records
    /// then: each mark's floor is its LSN).
    pub fn read_image(bytes: &[u8], floors: bool) -> Result<RunIndex, RunIndexError> {
        let mut at = 0usize;
        let mut word = |what: &'static str| -> Result<u64, RunIndexError> {
            let w = bytes
                .get(at..at + 8)
                .ok_or(RunIndexError::CutShort { what })?;
            at += 8;
            Ok(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        };
        let bound = bytes.len() as u64 / 16;
        let n = word("entries")?;
        if n > bound {
            return Err(RunIndexError::OutOfRange {
                what: "entry count",
            });
        }
        let any_stale = match word("entries")? {
            0 => false,
            1 => true,
            _ => return Err(RunIndexError::OutOfRange { what: "stale flag" }),
        };
        let mut index = RunIndex::default();
        index.table.reserve(n as usize, |_| 0);
        for _ in 0..n {
            let key = word("entries")?;
            let pos = index.log.push(key, word("entries")?);
            if any_stale {
                index.point(key, pos);
            } else {
                let RunIndex {
                    log, table, hasher, ..
                } = &mut index;
                let hash = hasher.hash_one(key);
                table.insert_unique(hash, pos as u32, |&s| hasher.hash_one(log.key(s)));
            }
        }
        let n = word("time marks")?;
        if n > bound {
            return Err(RunIndexError::OutOfRange {
                what: "time mark count",
            });
        }
        index.times = (0..n)
            .map(|_| {
                let (lsn, at) = (word("time marks")?, word("time marks")?);
                let floor = match floors {
                    true => word("time marks")?,
                    false => lsn,
                };
                Ok((lsn, at, floor))
            })
            .collect::<Result<VecDeque<(u64, u64, u64)>, RunIndexError>>()?;
        if at != bytes.len() {
            return Err(RunIndexError::StrayBytes);
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry archived at `lsn` (the other fields do not matter to the test).
    fn entry(lsn: u64) -> Entry {
        Entry {
            lsn,
            status: 2,
            dead_lettered: false,
            name_tag: 1,
        }
    }

    /// A document that points at earlier records keeps the log from the earliest of them
    /// (its time mark's floor) without keeping its runs longer: forgetting goes by the
    /// marks' own LSNs. An image of a format before 5 has no floors: each is its mark's LSN.
    #[test]
    fn a_floor_keeps_the_log_not_the_runs_and_old_images_load_without_floors() {
        let mut index = RunIndex::default();
        index.insert(1, entry(100), 0, None);
        index.insert(2, entry(110), 10, Some(40));
        index.insert(3, entry(120), 5_000, Some(115));
        assert_eq!(index.oldest_lsn(), Some(100));
        assert_eq!(index.retained_from(), Some(40));
        // Runs finished before 2,000 ms go (the first mark's), the floor with them.
        assert_eq!(index.forget_before(2_000 + TIME_MARK_MS), Some(120));
        index.forget(120);
        assert_eq!(
            (index.oldest_lsn(), index.retained_from()),
            (Some(120), Some(115))
        );
        let mut image = Image::default();
        index.write_image(&mut image);
        let back = RunIndex::read_image(&image.to_bytes(), true).unwrap();
        assert_eq!(back.times, index.times);
        // The layout of format 4: no entries, one mark of (LSN, time).
        let mut old = Vec::new();
        for w in [0u64, 0, 1, 120, 5_000] {
            old.extend_from_slice(&w.to_le_bytes());
        }
        let back = RunIndex::read_image(&old, false).unwrap();
        assert_eq!(back.times, VecDeque::from([(120, 5_000, 120)]));
        assert!(RunIndex::read_image(&old, true).is_err());
    }

    #[test]
    fn the_image_round_trips_and_refuses_cut_or_stray_bytes() {
        // Over two chunks, the front partly forgotten, some keys archived twice.
        let mut index = RunIndex::default();
        let n = 2 * CHUNK as u64 + 1000;
        for i in 1..=n {
            let e = Entry {
                lsn: i * 3,
                status: (i % 7) as u8,
                dead_lettered: i % 2 == 0,
                name_tag: (i % 2048) as u16,
            };
            let key = if i % 10 == 0 { i / 10 } else { i * 0x9e37_79b9 };
            index.insert(key, e, i * 400, None);
        }
        index.forget(3 * 1000);
        let mut image = Image::default();
        index.write_image(&mut image);
        let raw = image.to_bytes();
        assert_eq!(raw.len() as u64, image.len());
        let back = RunIndex::read_image(&raw, true).unwrap();
        let sorted = |x: &RunIndex| {
            let mut v: Vec<(u64, Entry)> = x.iter().collect();
            v.sort_by_key(|p| p.0);
            v
        };
        assert_eq!(sorted(&back), sorted(&index));
        assert!(back.newest_below(u64::MAX).eq(index.newest_below(u64::MAX)));
        assert_eq!(back.times, index.times);
        assert_eq!(back.oldest_lsn(), index.oldest_lsn());
        assert!(RunIndex::read_image(&raw[..raw.len() - 8], true).is_err());
        let mut stray = raw.clone();
        stray.extend_from_slice(&[0; 8]);
        assert!(RunIndex::read_image(&stray, true).is_err());
        assert!(RunIndex::read_image(&[0xff; 8], true).is_err());
    }

    #[test]
    fn an_image_taken_is_not_changed_by_what_the_index_does_after() {
        let mut index = RunIndex::default();
        let n = 2 * CHUNK as u64 + 10;
        for i in 1..=n {
            index.insert(i, entry(i), i, None);
        }
        let mut image = Image::default();
        index.write_image(&mut image);
        let before = image.to_bytes();
        // The shared chunks outlive the index's own: forgotten, refilled, sealed again.
        for i in n + 1..=n + CHUNK as u64 {
            index.insert(i, entry(i), i, None);
        }
        index.forget(CHUNK as u64 + 100);
        index.insert(5, entry(n + CHUNK as u64 + 1), n, None);
        assert_eq!(image.to_bytes(), before);
        let back = RunIndex::read_image(&before, true).unwrap();
        assert_eq!(back.len(), n as usize);
    }

    #[test]
    fn stale_entries_are_counted_until_forgotten_and_an_image_without_them_loads_alike() {
        let mut index = RunIndex::default();
        index.insert(1, entry(10), 10, None);
        index.insert(2, entry(20), 20, None);
        index.insert(1, entry(30), 30, None);
        assert_eq!(index.stale, 1);
        let image_of = |index: &RunIndex| {
            let mut image = Image::default();
            index.write_image(&mut image);
            image.to_bytes()
        };
        let with_stale = image_of(&index);
        assert_eq!(with_stale[8..16], 1u64.to_le_bytes());
        let back = RunIndex::read_image(&with_stale, true).unwrap();
        assert_eq!((back.stale, back.get(1).map(|e| e.lsn)), (1, Some(30)));
        // Forgetting past the stale entry leaves none: the image says so.
        index.forget(15);
        assert_eq!(index.stale, 0);
        let unique = image_of(&index);
        assert_eq!(unique[8..16], 0u64.to_le_bytes());
        let back = RunIndex::read_image(&unique, true).unwrap();
        assert_eq!(back.get(1).map(|e| e.lsn), Some(30));
        assert_eq!(back.get(2).map(|e| e.lsn), Some(20));
        assert_eq!(back.len(), 2);
        let mut bad = unique.clone();
        bad[8] = 7;
        assert!(RunIndex::read_image(&bad, true).is_err());
    }

    /// The insert that starts a growth archives a run again: its earlier entry, in the full
    /// table, is not left beside the new one.
    #[test]
    fn a_run_archived_again_by_the_insert_that_starts_a_growth_is_indexed_once() {
        let mut index = RunIndex::default();
        let mut key = 0;
        while index.moving.is_none() || key < 2 {
            if index.table.len() == index.table.capacity() && key > 1 {
                index.insert(1, entry(key + 1), key + 1, None);
                assert!(index.moving.is_some(), "this insert started a growth");
                break;
            }
            key += 1;
            index.insert(key, entry(key), key, None);
        }
        assert_eq!(index.len(), key as usize);
        assert_eq!(index.get(1).map(|e| e.lsn), Some(key + 1));
        assert_eq!(index.iter().filter(|(k, _)| *k == 1).count(), 1);
    }

    /// The table grows a few entries per insert, not all at once, and shrinks likewise once
    /// retention forgot most runs: meanwhile every run is found (in either table), archived
    /// again, or forgotten, as without the move.
    #[test]
    fn a_growing_table_moves_its_entries_a_few_per_insert_and_answers_throughout() {
        let mut index = RunIndex::default();
        let mut model: std::collections::BTreeMap<u64, u64> = Default::default();
        let (mut growths, mut inserts_while_moving, mut lsn) = (0, 0, 0u64);
        let check = |index: &RunIndex, model: &std::collections::BTreeMap<u64, u64>| {
            assert_eq!(index.len(), model.len());
            for (&key, &lsn) in model {
                assert_eq!(index.get(key).map(|e| e.lsn), Some(lsn), "key {key}");
            }
            assert_eq!(index.iter().count(), model.len());
        };
        for i in 1..=40_000u64 {
            lsn += 1;
            // Mostly new runs; every fifth an earlier run archived again (a stale entry).
            let key = if i % 5 == 0 { i / 2 } else { i };
            let was_moving = index.moving.is_some();
            index.insert(key, entry(lsn), lsn, None);
            model.insert(key, lsn);
            if let Some(m) = &index.moving {
                inserts_while_moving += 1;
                if inserts_while_moving == 50 {
                    // An image taken mid-growth loads whole.
                    let mut image = Image::default();
                    index.write_image(&mut image);
                    let back = RunIndex::read_image(&image.to_bytes(), true).unwrap();
                    check(&back, &model);
                }
                if !was_moving {
                    growths += 1;
                    assert!(m.old.len() >= 1024 * 7 / 8, "small tables grow too");
                }
            }
            if i % 3_000 == 0 {
                // Retention forgets the oldest runs, moved or not.
                let before = lsn - 2_000;
                index.forget(before);
                model.retain(|_, l| *l >= before);
            }
            if i % 997 == 0 || index.moving.is_some() && i % 7 == 0 {
                check(&index, &model);
            }
        }
        check(&index, &model);
        assert!(growths >= 1, "the table grew while it was used");
        assert!(inserts_while_moving > 100, "{inserts_while_moving}");

        // Retention forgets nearly everything: a smaller table takes the rest, moved along
        // by the forgets themselves (no insert comes).
        let big = index.memory_bytes();
        let before = lsn - 100;
        index.forget(before);
        model.retain(|_, l| *l >= before);
        check(&index, &model);
        for _ in 0..100 {
            if index.moving.is_none() {
                break;
            }
            index.forget(before);
            check(&index, &model);
        }
        assert!(index.moving.is_none(), "the shrink ended");
        assert!(index.table.capacity() < 4 * TABLE_MIN);
        assert!(
            index.memory_bytes() < big,
            "{} >= {big}",
            index.memory_bytes()
        );
    }

    #[test]
    fn positions_resolve_across_chunks_and_after_everything_is_forgotten() {
        let mut index = RunIndex::default();
        let n = 3 * CHUNK as u64;
        for i in 1..=n {
            index.insert(i, entry(i), i, None);
        }
        assert_eq!(index.len(), n as usize);
        assert_eq!(
            index.get(CHUNK as u64 + 5).map(|e| e.lsn),
            Some(CHUNK as u64 + 5)
        );
        index.forget(2 * CHUNK as u64 + 7);
        assert_eq!(
            index.log.sealed.len(),
            1,
            "wholly forgotten chunks are freed"
        );
        assert_eq!(index.len(), CHUNK - 6);
        assert!(index.get(5).is_none());
        assert_eq!(index.get(n).map(|e| e.lsn), Some(n));
        index.forget(n + 1);
        assert!(index.is_empty());
        assert_eq!(index.oldest_lsn(), None);
        // Indexing starts again where it stopped.
        index.insert(42, entry(n + 10), n + 10, None);
        assert_eq!(index.get(42).map(|e| e.lsn), Some(n + 10));
        assert_eq!(index.oldest_lsn(), Some(n + 10));
        assert!(index.memory_bytes() < 4 << 20);
    }

    #[test]
    fn retention_forgets_runs_finished_before_the_cutoff_and_keeps_the_rest() {
        let mut index = RunIndex::default();
        // Runs archived at LSNs 10, 20, ... finishing one per 500 ms.
        for i in 1..=20u64 {
            index.insert(100 + i, entry(i * 10), i * 500, None);
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
        index.insert(7, entry(1), 10, None);
        index.insert(8, entry(2), 20, None);
        index.insert(7, entry(3), 30, None);
        let seen = |below| -> Vec<(u64, u64)> {
            index.newest_below(below).map(|(k, e)| (k, e.lsn)).collect()
        };
        // Key 7's first entry is stale: only its latest is listed.
        assert_eq!(seen(u64::MAX), vec![(7, 3), (8, 2)]);
        assert_eq!(index.len(), 2);
        // Listing resumes below an LSN.
        assert_eq!(seen(3), vec![(8, 2)]);
        assert_eq!(seen(2), vec![]);
        assert_eq!(seen(4), vec![(7, 3), (8, 2)]);
    }
}
