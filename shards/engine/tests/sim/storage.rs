//! A shard's files in the simulation, made and dropped as the runtime makes and drops them
//! (`shards/runtime/src/log_writer.rs`, `shards/runtime/src/snapshots.rs`):
//!
//! - log segments named by their first LSN; the writer rolls to a new one (created, the
//!   directory synced) when the next batch would not fit in `segment_bytes`;
//! - a snapshot is taken (the image and the first LSN retained runs need), written once the
//!   log is durable up to its LSN under a temporary name, renamed, the directory synced;
//!   all but the newest `SNAPSHOTS_KEPT` are unlinked; then the segments wholly before
//!   min(older kept snapshot + 1, oldest retained archive record) are unlinked oldest
//!   first, and the directory synced.
//!
//! An unlink is durable only once the directory is synced: a crash may bring back any file
//! unlinked since the last sync. A crash finds a snapshot being written (its temporary
//! file) gone, and one renamed but not synced there or not. Crash points are chosen by the
//! caller (`CrashPlan`); `Node::files_after_crash` says what a crash leaves.

use super::{Node, parse_log};
use flo_ual::{Found, align_up, find_record};

/// Snapshots kept on disk (`shards/runtime/src/snapshots.rs`: `SNAPSHOTS_KEPT`).
pub const SNAPSHOTS_KEPT: usize = 2;

/// A segment file the writer moved past: it no longer changes.
#[derive(Clone, Debug)]
pub struct Segment {
    pub first_lsn: u64,
    /// Its last record (first_lsn - 1 when empty).
    pub last_lsn: u64,
    pub bytes: Vec<u8>,
}

impl Segment {
    pub fn new(first_lsn: u64, bytes: Vec<u8>) -> Segment {
        let last_lsn = parse_log(&bytes).last().map_or(first_lsn - 1, |r| r.0);
        Segment {
            first_lsn,
            last_lsn,
            bytes,
        }
    }
}

/// A snapshot file on disk.
#[derive(Clone, Debug)]
pub struct SnapFile {
    pub lsn: u64,
    pub image: Vec<u8>,
    /// Its checksum fails: recovery passes over it (as boot does) but it stays on disk and
    /// is listed with the others, as the runtime leaves it.
    pub damaged: bool,
}

/// A file unlinked since the directory was last synced.
#[derive(Clone, Debug)]
pub enum Unlinked {
    Segment(Segment),
    Snapshot(SnapFile),
}

/// Where a snapshot being written stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapPhase {
    /// The image is taken; the file is written once the log is durable up to its LSN.
    Waiting,
    /// The temporary file is being written (boot removes one a crash leaves).
    Writing,
    /// Renamed, the directory not synced yet: after a crash it may be there or not.
    Renamed,
    /// Installed; these segments (first LSNs) are still to be unlinked, oldest first.
    Deleting { doomed: Vec<u64> },
}

#[derive(Clone, Debug)]
pub struct SnapJob {
    pub lsn: u64,
    /// Held as the engine handed it over: its run-index chunks are shared with the live
    /// index (copy-on-write) until the file is written.
    pub image: flo_engine::image::Image,
    /// `Engine::retained_from_lsn` when the image was taken.
    pub retained_from: Option<u64>,
    pub phase: SnapPhase,
}

/// Where a crash strikes a shard's files.
#[derive(Clone, Debug, Default)]
pub struct CrashPlan {
    /// Bytes of the batch being written that reached the disk.
    pub torn: usize,
    /// With none: the writer had begun, so it made the new segment the batch rolls to.
    pub roll_begun: bool,
    /// A snapshot renamed but not synced is there after the crash.
    pub renamed_kept: bool,
    /// For each file unlinked since the last directory sync (in unlink order): it is back.
    pub unlinked_back: Vec<bool>,
    /// The newest snapshot on disk after the crash is damaged (its checksum fails).
    pub damage_newest: bool,
    /// A media fault: one byte of the last acknowledged record flipped (recovery must
    /// refuse it; the file is then restored).
    pub flip_acked: bool,
    /// A media fault: a segment in the middle of what recovery reads is gone (recovery
    /// must refuse; the file is then put back).
    pub drop_segment: bool,
}

/// What a crash leaves of a shard's files.
pub struct CrashFiles {
    /// In LSN order.
    pub segments: Vec<Segment>,
    /// Newest first.
    pub snaps: Vec<SnapFile>,
}

/// The runtime's deletion rule (`Snapshotter::start` in `shards/runtime/src/snapshots.rs`): with
/// `kept` the snapshots on disk after the write (newest first) and `retained_from` the
/// first LSN retained runs need, the segments (by first LSN, in order) wholly before
/// min(the older kept snapshot + 1 — or 1 with one only —, `retained_from`).
pub fn doomed_segments(firsts: &[u64], kept: &[u64], retained_from: Option<u64>) -> Vec<u64> {
    let replay_from = match kept {
        [_, older, ..] => older + 1,
        _ => 1,
    };
    let needed_from = retained_from.map_or(replay_from, |r| r.min(replay_from));
    firsts
        .windows(2)
        .filter(|w| w[1] <= needed_from)
        .map(|w| w[0])
        .collect()
}

impl Node {
    /// First LSNs of the segment files, in order (the one being written last).
    pub fn segment_firsts(&self) -> Vec<u64> {
        let mut firsts: Vec<u64> = self.sealed.iter().map(|s| s.first_lsn).collect();
        firsts.push(self.disk_first);
        firsts
    }

    /// Segment files on disk.
    pub fn segment_count(&self) -> u32 {
        self.sealed.len() as u32 + 1
    }

    /// Whether the batch `bytes` long goes to a new segment (`SegmentWriter::write`).
    pub fn rolls(&self, bytes: usize) -> bool {
        !self.disk.is_empty()
            && self.disk.len() as u64 + align_up(bytes as u64) > self.segment_bytes
    }

    /// Moves to a new segment starting at `first_lsn`; creating it syncs the directory.
    pub fn roll(&mut self, first_lsn: u64) {
        let bytes = std::mem::take(&mut self.disk);
        self.sealed.push(Segment::new(self.disk_first, bytes));
        self.disk_first = first_lsn;
        self.unlinked.clear();
    }

    /// Record `lsn` read from the segment files as the runtime's reader finds it.
    pub fn read_record(&self, lsn: u64) -> Result<Vec<u8>, String> {
        let bytes = if lsn >= self.disk_first {
            &self.disk
        } else {
            let at = self.sealed.partition_point(|s| s.first_lsn <= lsn);
            match at.checked_sub(1).map(|i| &self.sealed[i]) {
                Some(seg) => &seg.bytes,
                None => return Err(format!("record {lsn} is in no segment this shard has")),
            }
        };
        match find_record(bytes, 0, lsn, true) {
            Found::Record { payload, .. } => Ok(payload.to_vec()),
            other => Err(format!("record {lsn}: {other:?}")),
        }
    }

    /// Whether record `lsn` is in a segment file (by the segments' LSN ranges).
    pub fn on_disk(&self, lsn: u64) -> bool {
        if lsn >= self.disk_first {
            return lsn <= self.engine.durable_lsn();
        }
        let at = self.sealed.partition_point(|s| s.first_lsn <= lsn);
        at.checked_sub(1)
            .is_some_and(|i| lsn <= self.sealed[i].last_lsn)
    }

    /// The loop takes an image (`ShardLoop::snapshot`); it is written later.
    pub fn start_snapshot(&mut self) {
        let (lsn, image) = self.engine.snapshot();
        self.job = Some(SnapJob {
            lsn,
            image,
            retained_from: self.engine.retained_from_lsn(),
            phase: SnapPhase::Waiting,
        });
        self.logged = 0;
    }

    /// The snapshot being written takes its next step; says which (None: nothing moved).
    pub fn advance_snapshot(&mut self) -> Option<String> {
        let job = self.job.as_mut()?;
        match &mut job.phase {
            SnapPhase::Waiting => {
                // A snapshot never stands ahead of the log it continues.
                if self.engine.durable_lsn() < job.lsn {
                    return None;
                }
                job.phase = SnapPhase::Writing;
                Some(format!(
                    "snapshot {} written to its temporary file",
                    job.lsn
                ))
            }
            SnapPhase::Writing => {
                job.phase = SnapPhase::Renamed;
                Some(format!("snapshot {} renamed", job.lsn))
            }
            SnapPhase::Renamed => {
                let (lsn, retained_from) = (job.lsn, job.retained_from);
                let file = SnapFile {
                    lsn,
                    image: job.image.to_bytes(),
                    damaged: false,
                };
                // The directory sync makes the rename and every unlink before it durable.
                self.unlinked.clear();
                self.snaps.retain(|s| s.lsn != lsn);
                self.snaps.push(file);
                self.snaps.sort_by_key(|s| std::cmp::Reverse(s.lsn));
                for old in self.snaps.split_off(SNAPSHOTS_KEPT.min(self.snaps.len())) {
                    self.unlinked.push(Unlinked::Snapshot(old));
                }
                let kept: Vec<u64> = self.snaps.iter().map(|s| s.lsn).collect();
                let doomed = doomed_segments(&self.segment_firsts(), &kept, retained_from);
                self.stats.snapshots += 1;
                let line = format!(
                    "snapshot {lsn} installed (kept {kept:?}, retained from {retained_from:?}); \
                     segments to delete {doomed:?}"
                );
                // Nothing to delete: the runtime is done, and syncs nothing more.
                match doomed.is_empty() {
                    true => self.job = None,
                    false => self.job.as_mut().unwrap().phase = SnapPhase::Deleting { doomed },
                }
                Some(line)
            }
            SnapPhase::Deleting { doomed } => {
                if doomed.is_empty() {
                    // Unlinks done: the directory sync makes them durable.
                    self.job = None;
                    self.unlinked.clear();
                    return Some("old segments deleted, directory synced".into());
                }
                let first = doomed.remove(0);
                let at = self
                    .sealed
                    .iter()
                    .position(|s| s.first_lsn == first)
                    .expect("a doomed segment is a sealed one");
                let seg = self.sealed.remove(at);
                self.unlinked.push(Unlinked::Segment(seg));
                self.stats.segments_deleted += 1;
                Some(format!("segment {first} unlinked"))
            }
        }
    }

    /// The files a crash following `plan` leaves; `self` keeps what it had.
    pub fn files_after_crash(&self, plan: &CrashPlan) -> CrashFiles {
        let mut segments = self.sealed.clone();
        let mut unlinked = self.unlinked.clone();
        let mut active = (self.disk_first, self.disk.clone());
        if let Some(batch) = &self.writing {
            let torn = plan.torn.min(batch.bytes.len());
            // The writer rolls before it writes: only a write begun made the new file.
            if self.rolls(batch.bytes.len()) && (torn > 0 || plan.roll_begun) {
                segments.push(Segment::new(active.0, std::mem::take(&mut active.1)));
                active.0 = batch.first_lsn;
                unlinked.clear();
            }
            active.1.extend_from_slice(&batch.bytes[..torn]);
        }
        segments.push(Segment {
            first_lsn: active.0,
            last_lsn: 0,
            bytes: active.1,
        });
        let mut snaps = self.snaps.clone();
        if let Some(job) = &self.job
            && job.phase == SnapPhase::Renamed
            && plan.renamed_kept
        {
            snaps.retain(|s| s.lsn != job.lsn);
            snaps.push(SnapFile {
                lsn: job.lsn,
                image: job.image.to_bytes(),
                damaged: false,
            });
        }
        for (i, file) in unlinked.into_iter().enumerate() {
            if !plan.unlinked_back.get(i).copied().unwrap_or(false) {
                continue;
            }
            match file {
                Unlinked::Segment(seg) => segments.push(seg),
                Unlinked::Snapshot(snap) => snaps.push(snap),
            }
        }
        segments.sort_by_key(|s| s.first_lsn);
        snaps.sort_by_key(|s| std::cmp::Reverse(s.lsn));
        if plan.damage_newest
            && let Some(newest) = snaps.first_mut()
        {
            newest.damaged = true;
        }
        CrashFiles { segments, snaps }
    }
}

/// What a seed did to its files, for the summary line.
#[derive(Clone, Copy, Debug, Default)]
pub struct StorageStats {
    pub snapshots: u64,
    pub segments_deleted: u64,
    pub rolls: u64,
}
