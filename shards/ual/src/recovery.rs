//! Startup scan of a shard's segments: verify every record, hand each complete group to
//! `apply` in LSN order, cut a torn tail (including a group it leaves incomplete), and
//! refuse damage that valid records follow.
//!
//! A group's records are held back until its last record (the first without
//! `FLAG_GROUP_CONT`) is read and verified, then applied in order. A group still open
//! where the data ends, or where damage makes a torn tail, is dropped with the tail: the
//! file is cut at the end of the last complete group.
//!
//! A writer may have up to `BATCHES_IN_FLIGHT_MAX` batches of a segment in flight at once,
//! acknowledged in order: a crash can leave one torn or missing and the ones started after
//! it whole, none of them acknowledged. Damage (or a group left open) that at most
//! `BATCHES_IN_FLIGHT_MAX - 1` batches follow, in its segment and none in a later one, is
//! such a tail and is cut with them; more batches after it mean acknowledged records were
//! lost: refused. Damage below the log's acknowledged mark is refused whatever follows.

use crate::acked::{ACKED_MARK_FILE, read_acked_mark};
use crate::format::{
    BLOCK_BYTES, FLAG_BATCH_START, FLAG_GROUP_CONT, LSN_MAX, Parsed, align_up, parse_record,
    parse_segment_file_name,
};
use crate::read::MARK_SPACING_BYTES;
use std::fs;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// The most batches a writer has in flight at once (each at its own place in one segment,
/// acknowledged in order): the batches after a torn one that recovery cuts with it.
pub const BATCHES_IN_FLIGHT_MAX: usize = 4;

/// `truncated` reason when the log ends inside a group.
const INCOMPLETE_GROUP_AT_END: &str = "incomplete group at the end of the log";
/// `Corruption` reason when a group is left open and valid records follow.
const INCOMPLETE_GROUP: &str = "incomplete group";

#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub first_lsn: u64,
    pub path: PathBuf,
    /// Where records start: one (LSN, offset) mark per `MARK_SPACING_BYTES` of the
    /// segment at most, so a record is found by reading forward from the mark before it.
    pub marks: Vec<(u64, u64)>,
}

#[derive(Debug)]
pub struct RecoveredLog {
    /// Segments in LSN order; the last one is where appends continue.
    pub segments: Vec<SegmentInfo>,
    /// LSN of the last record applied, i.e. of the last complete group (0 for an empty log).
    pub last_lsn: u64,
    /// End of the last complete group in the last segment (0 if it has none); appends
    /// continue at the block boundary from here.
    pub tail_end: u64,
    /// A torn tail was cut: (file, offset, reason). The offset is where the dropped bytes
    /// start: the damage, or the first record of the group it left incomplete.
    pub truncated: Option<(PathBuf, u64, &'static str)>,
}

/// Why the caller could not apply a record it was handed (it knows what records mean; the
/// log does not).
pub type ApplyError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("cannot read the log in {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
    #[error(
        "log corruption in {file} at offset {offset}: {reason}, and valid records follow it; \
         refusing to start so that no acknowledged write is dropped (restore the file from a \
         backup, or move the shard's segments away knowingly)"
    )]
    Corruption {
        file: PathBuf,
        offset: u64,
        reason: &'static str,
    },
    #[error(
        "log gap before {file}: expected LSN {expected}, the segment starts at {found}; \
         a segment file is missing"
    )]
    Gap {
        file: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error(
        "log records {from} to {to} are missing from {dir}: {what}, but the first segment \
         starts at {to_plus_one}; a segment file was deleted or lost (restore it, or move \
         this shard's data away knowingly)",
        to_plus_one = to + 1
    )]
    Missing {
        dir: PathBuf,
        from: u64,
        to: u64,
        /// What says the records should be there.
        what: String,
    },
    #[error(
        "log damage in {file} at offset {offset} ({reason}) takes records {from} to {to}, \
         which were synced and may have been acknowledged (the log's acknowledged mark, \
         {ACKED_MARK_FILE}, is at LSN {to}): this is not a torn write, and flo refuses to \
         start rather than drop them. Restore the segment from a backup or a copy; or, to \
         start without those records knowingly, remove {ACKED_MARK_FILE} from the shard's \
         directory (docs/reliability.md, \"Damage below the acknowledged mark\")"
    )]
    AckedDamaged {
        file: PathBuf,
        offset: u64,
        reason: &'static str,
        from: u64,
        to: u64,
    },
    #[error(
        "the log in {dir} ends at LSN {last}, but records up to LSN {acked} were synced \
         and may have been acknowledged (its {ACKED_MARK_FILE}): a segment was cut or \
         lost. Restore it; or, to start without those records knowingly, remove \
         {ACKED_MARK_FILE} from {dir}"
    )]
    AckedMissing { dir: PathBuf, last: u64, acked: u64 },
    #[error(
        "the log in {dir} ends at LSN {last}, before its snapshot at LSN {snapshot}; a \
         segment was cut or lost"
    )]
    Behind {
        dir: PathBuf,
        last: u64,
        snapshot: u64,
    },
    #[error(
        "{what} says LSN {lsn}, outside the LSNs a log holds (1 to {LSN_MAX}): it was not \
         written by flo; move it away"
    )]
    LsnOutOfRange { what: String, lsn: u64 },
    #[error(
        "record {lsn} in {file} at offset {offset} does not decode ({source}); it was written by a newer or broken flo"
    )]
    Undecodable {
        file: PathBuf,
        offset: u64,
        lsn: u64,
        source: ApplyError,
    },
}

fn io_err(dir: &Path) -> impl Fn(io::Error) -> RecoveryError + '_ {
    move |source| RecoveryError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

fn list_segments(dir: &Path) -> Result<Vec<SegmentInfo>, RecoveryError> {
    let mut segments = Vec::new();
    for entry in fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        if let Some(first_lsn) = name.to_str().and_then(parse_segment_file_name) {
            if !(1..=LSN_MAX).contains(&first_lsn) {
                return Err(RecoveryError::LsnOutOfRange {
                    what: format!("the name of segment {}", entry.path().display()),
                    lsn: first_lsn,
                });
            }
            segments.push(SegmentInfo {
                first_lsn,
                path: entry.path(),
                marks: Vec::new(),
            });
        }
    }
    segments.sort_by_key(|s| s.first_lsn);
    Ok(segments)
}

/// Batches starting at block boundaries from `from` on.
fn batches_from(buf: &[u8], from: usize) -> usize {
    let mut count = 0;
    let mut at = from;
    while let Some(start) = find_batch_start(buf, at) {
        count += 1;
        at = start + 1;
    }
    count
}

/// A valid record flagged as the start of a batch, at a block boundary from `from` on.
fn find_batch_start(buf: &[u8], from: usize) -> Option<usize> {
    let mut off = align_up(from as u64) as usize;
    while off < buf.len() {
        if let Parsed::Record { flags, .. } = parse_record(buf, off)
            && flags & FLAG_BATCH_START != 0
        {
            return Some(off);
        }
        off += BLOCK_BYTES as usize;
    }
    None
}

/// Scans `dir`, calling `apply(lsn, rtype, payload)` for every valid record in order, the
/// records of a group only once the whole group has been read and verified. An error from
/// `apply` stops recovery with `RecoveryError::Undecodable`.
pub fn recover<E: Into<ApplyError>>(
    dir: &Path,
    apply: impl FnMut(u64, u16, &[u8]) -> Result<(), E>,
) -> Result<RecoveredLog, RecoveryError> {
    recover_from(dir, 0, apply)
}

/// `recover` for a state that already holds every record up to `after_lsn` (a snapshot's):
/// segments wholly before it are listed but not read (their `marks` are empty), the records
/// after it are applied. The log must hold LSN `after_lsn + 1` on (LSN 1 on without a
/// snapshot): a first segment that starts later is refused, naming the missing records.
pub fn recover_from<E: Into<ApplyError>>(
    dir: &Path,
    after_lsn: u64,
    mut apply: impl FnMut(u64, u16, &[u8]) -> Result<(), E>,
) -> Result<RecoveredLog, RecoveryError> {
    if after_lsn > LSN_MAX {
        return Err(RecoveryError::LsnOutOfRange {
            what: format!("the snapshot of {}", dir.display()),
            lsn: after_lsn,
        });
    }
    let mut segments = list_segments(dir)?;
    let acked = read_acked_mark(dir).map_err(io_err(dir))?;
    if let Some(first) = segments.first()
        && first.first_lsn > after_lsn + 1
    {
        return Err(RecoveryError::Missing {
            dir: dir.to_path_buf(),
            from: after_lsn + 1,
            to: first.first_lsn - 1,
            what: match after_lsn {
                0 => "a log without a snapshot starts at LSN 1".to_string(),
                lsn => format!("the snapshot stands at LSN {lsn}"),
            },
        });
    }
    // The first segment that may hold a record after `after_lsn`.
    let start = segments
        .partition_point(|s| s.first_lsn <= after_lsn + 1)
        .saturating_sub(1);
    let mut last_lsn = segments.get(start).map_or(after_lsn, |s| s.first_lsn - 1);
    let mut tail_end = 0u64;
    let mut truncated = None;
    let mut apply = |lsn: u64, rtype: u16, payload: &[u8]| -> Result<(), ApplyError> {
        if lsn <= after_lsn {
            return Ok(());
        }
        apply(lsn, rtype, payload).map_err(Into::into)
    };

    for index in start..segments.len() {
        let seg = segments[index].clone();
        if seg.first_lsn != last_lsn + 1 {
            return Err(RecoveryError::Gap {
                file: seg.path.clone(),
                expected: last_lsn + 1,
                found: seg.first_lsn,
            });
        }
        let buf = fs::read(&seg.path).map_err(io_err(dir))?;
        let mut marks = Vec::new();
        let (good_end, stop) =
            scan_segment(&buf, &seg.path, &mut last_lsn, &mut marks, &mut apply)?;
        tail_end = good_end as u64;
        marks.retain(|&(_, offset)| offset < tail_end);
        segments[index].marks = marks;

        // Damage or an open group: acceptable only as a torn tail, i.e. no more batches
        // were written after it than were in flight with it (`BATCHES_IN_FLIGHT_MAX`).
        let (offset, reason, group_start, batches_after) = match stop {
            Stop::Clean => continue,
            // The later batches start after the group's first record.
            Stop::BatchInGroup { group_start } => (
                group_start,
                INCOMPLETE_GROUP,
                None,
                batches_from(&buf, group_start + 1),
            ),
            Stop::OpenGroup { group_start } => {
                (group_start, INCOMPLETE_GROUP, Some(group_start), 0)
            }
            Stop::Damaged {
                offset,
                reason,
                group_start,
            } => (offset, reason, group_start, batches_from(&buf, offset)),
        };
        if batches_after >= BATCHES_IN_FLIGHT_MAX || later_batch_exists(&segments[index + 1..])? {
            return Err(RecoveryError::Corruption {
                file: seg.path.clone(),
                offset: offset as u64,
                reason,
            });
        }
        if last_lsn < acked {
            return Err(RecoveryError::AckedDamaged {
                file: seg.path.clone(),
                offset: offset as u64,
                reason,
                from: last_lsn + 1,
                to: acked,
            });
        }
        cut_tail(&seg.path, tail_end).map_err(io_err(dir))?;
        for later in &segments[index + 1..] {
            let mut torn = later.path.clone().into_os_string();
            torn.push(".torn");
            fs::rename(&later.path, torn).map_err(io_err(dir))?;
        }
        segments.truncate(index + 1);
        truncated = Some(match group_start {
            Some(start) => (seg.path.clone(), start as u64, INCOMPLETE_GROUP_AT_END),
            None => (seg.path.clone(), offset as u64, reason),
        });
        break;
    }
    if last_lsn < acked && truncated.is_none() {
        return Err(RecoveryError::AckedMissing {
            dir: dir.to_path_buf(),
            last: last_lsn,
            acked,
        });
    }
    if last_lsn < after_lsn {
        return Err(RecoveryError::Behind {
            dir: dir.to_path_buf(),
            last: last_lsn,
            snapshot: after_lsn,
        });
    }
    Ok(RecoveredLog {
        segments,
        last_lsn,
        tail_end,
        truncated,
    })
}

/// Where the scan of one segment stopped.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The data ended with every group complete.
    Clean,
    /// The data ended inside the group whose first record is at `group_start`.
    OpenGroup { group_start: usize },
    /// A batch starts inside the group whose first record is at `group_start`: the
    /// group's batch was damaged, and a later batch follows.
    BatchInGroup { group_start: usize },
    /// No valid record at `offset`; `group_start` is the group this leaves open, if any.
    Damaged {
        offset: usize,
        reason: &'static str,
        group_start: Option<usize>,
    },
}

/// A verified record held back until its group is complete.
struct Held {
    offset: usize,
    lsn: u64,
    rtype: u16,
    payload: Range<usize>,
}

/// Reads the records of one segment, applying each group once its last record is read.
/// Returns the end of the last complete group and why the scan stopped; `last_lsn` is the
/// LSN of the last record applied.
fn scan_segment(
    buf: &[u8],
    file: &Path,
    last_lsn: &mut u64,
    marks: &mut Vec<(u64, u64)>,
    apply: &mut impl FnMut(u64, u16, &[u8]) -> Result<(), ApplyError>,
) -> Result<(usize, Stop), RecoveryError> {
    let mut group: Vec<Held> = Vec::new();
    let mut pos = 0usize;
    let mut good_end = 0usize;
    loop {
        let group_start = group.first().map(|h| h.offset);
        let (lsn, rtype, flags, payload, end) = match parse_record(buf, pos) {
            Parsed::End => break,
            Parsed::Padding => {
                pos = align_up(pos as u64 + 1) as usize;
                continue;
            }
            Parsed::Damaged(reason) => {
                let stop = Stop::Damaged {
                    offset: pos,
                    reason,
                    group_start,
                };
                return Ok((good_end, stop));
            }
            Parsed::Record {
                lsn,
                rtype,
                flags,
                payload,
                end,
            } => (lsn, rtype, flags, payload, end),
        };
        // A batch starting while a group is open means the group's batch lost its end,
        // whatever this record's LSN (the lost records leave it out of sequence).
        if flags & FLAG_BATCH_START != 0
            && let Some(group_start) = group_start
        {
            return Ok((good_end, Stop::BatchInGroup { group_start }));
        }
        if lsn != *last_lsn + group.len() as u64 + 1 {
            let stop = Stop::Damaged {
                offset: pos,
                reason: "record out of sequence",
                group_start,
            };
            return Ok((good_end, stop));
        }
        if marks
            .last()
            .is_none_or(|&(_, at)| pos as u64 >= at + MARK_SPACING_BYTES)
        {
            marks.push((lsn, pos as u64));
        }
        group.push(Held {
            offset: pos,
            lsn,
            rtype,
            payload: end - payload.len()..end,
        });
        pos = end;
        if flags & FLAG_GROUP_CONT != 0 {
            continue;
        }
        for held in group.drain(..) {
            apply(held.lsn, held.rtype, &buf[held.payload]).map_err(|source| {
                RecoveryError::Undecodable {
                    file: file.to_path_buf(),
                    offset: held.offset as u64,
                    lsn: held.lsn,
                    source,
                }
            })?;
        }
        *last_lsn = lsn;
        good_end = end;
    }
    let stop = match group.first() {
        Some(held) => Stop::OpenGroup {
            group_start: held.offset,
        },
        None => Stop::Clean,
    };
    Ok((good_end, stop))
}

fn later_batch_exists(later: &[SegmentInfo]) -> Result<bool, RecoveryError> {
    for seg in later {
        let buf = fs::read(&seg.path).map_err(|source| RecoveryError::Io {
            dir: seg.path.clone(),
            source,
        })?;
        if find_batch_start(&buf, 0).is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Cuts the file at `end` so the bytes after the last complete group read as zeros.
fn cut_tail(path: &Path, end: u64) -> io::Result<()> {
    let file = fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(end)?;
    file.sync_all()
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::header_padding;
    use crate::{LogBuffer, RECORD_HEADER_BYTES, segment_file_name};
    use std::io::Write;

    /// A recognisable payload of `bytes` bytes for the record with LSN `lsn`.
    fn payload(lsn: u64, bytes: usize) -> Vec<u8> {
        format!("record {lsn} ")
            .bytes()
            .cycle()
            .take(bytes)
            .collect()
    }

    fn rtype(lsn: u64) -> u16 {
        (lsn % 5) as u16 + 1
    }

    /// Where one record landed in its segment file.
    #[derive(Debug, Clone, Copy)]
    struct Placed {
        lsn: u64,
        bytes: usize,
        start: u64,
        end: u64,
    }

    /// Writes one segment file the way the real writer does: every batch at the block
    /// boundary after the previous one, appends continuing at `align_up(tail_end)`.
    struct SegmentWriter {
        path: PathBuf,
        file_bytes: Vec<u8>,
        log: LogBuffer,
        batch_starts: Vec<u64>,
        records: Vec<Placed>,
    }

    impl SegmentWriter {
        fn new(dir: &Path, first_lsn: u64) -> Self {
            SegmentWriter {
                path: dir.join(segment_file_name(first_lsn)),
                file_bytes: Vec::new(),
                log: LogBuffer::new(first_lsn),
                batch_starts: Vec::new(),
                records: Vec::new(),
            }
        }

        /// Continues the last segment of a recovered log.
        fn resume(rec: &RecoveredLog) -> Self {
            let path = rec.segments.last().unwrap().path.clone();
            let mut file_bytes = fs::read(&path).unwrap();
            assert_eq!(file_bytes.len() as u64, rec.tail_end);
            file_bytes.resize(align_up(rec.tail_end) as usize, 0);
            SegmentWriter {
                path,
                file_bytes,
                log: LogBuffer::new(rec.last_lsn + 1),
                batch_starts: Vec::new(),
                records: Vec::new(),
            }
        }

        /// Writes one batch; each group is the payload sizes of its records, and a group
        /// of one is a plain append (the format of logs written before groups existed).
        fn batch(&mut self, groups: &[Vec<usize>]) -> &mut Self {
            let batch_start = align_up(self.file_bytes.len() as u64);
            for group in groups {
                if group.len() > 1 {
                    self.log.begin_group();
                }
                for &bytes in group {
                    let before = self.log.pending_bytes() as u64;
                    let lsn = self.log.last_lsn() + 1;
                    let appended = self
                        .log
                        .append(rtype(lsn), |o| o.extend_from_slice(&payload(lsn, bytes)));
                    assert_eq!(appended, Ok(lsn));
                    self.records.push(Placed {
                        lsn,
                        bytes,
                        start: batch_start + before + header_padding(before),
                        end: batch_start + self.log.pending_bytes() as u64,
                    });
                }
                if group.len() > 1 {
                    self.log.end_group();
                }
            }
            let batch = self.log.take(Vec::new()).unwrap();
            self.file_bytes.resize(batch_start as usize, 0);
            self.file_bytes.extend_from_slice(&batch.bytes);
            self.file_bytes
                .resize(align_up(self.file_bytes.len() as u64) as usize, 0);
            self.batch_starts.push(batch_start);
            fs::write(&self.path, &self.file_bytes).unwrap();
            self
        }

        fn record(&self, lsn: u64) -> Placed {
            *self.records.iter().find(|r| r.lsn == lsn).unwrap()
        }
    }

    /// `n` groups of `per_group` records of `bytes` bytes each.
    fn groups(n: usize, per_group: usize, bytes: usize) -> Vec<Vec<usize>> {
        vec![vec![bytes; per_group]; n]
    }

    type Applied = Vec<(u64, u16, Vec<u8>)>;

    fn replay(dir: &Path) -> Result<(RecoveredLog, Applied), RecoveryError> {
        let mut applied = Vec::new();
        let rec = recover(dir, |lsn, rtype, payload| {
            applied.push((lsn, rtype, payload.to_vec()));
            Ok::<(), ApplyError>(())
        })?;
        Ok((rec, applied))
    }

    /// Asserts that exactly the records `lsns` of the writers were applied, in order.
    fn assert_applied(applied: &Applied, lsns: Range<u64>, writers: &[&SegmentWriter]) {
        let expected: Applied = lsns
            .map(|lsn| {
                let placed = writers
                    .iter()
                    .find_map(|w| w.records.iter().find(|r| r.lsn == lsn))
                    .unwrap();
                (lsn, rtype(lsn), payload(lsn, placed.bytes))
            })
            .collect();
        let got: Vec<u64> = applied.iter().map(|a| a.0).collect();
        assert_eq!(applied.len(), expected.len(), "applied LSNs {got:?}");
        assert!(applied == &expected, "applied LSNs {got:?}");
    }

    fn set_len(path: &Path, len: u64) {
        let file = fs::OpenOptions::new().write(true).open(path).unwrap();
        file.set_len(len).unwrap();
    }

    fn zero(path: &Path, range: Range<u64>) {
        let mut bytes = fs::read(path).unwrap();
        bytes[range.start as usize..range.end as usize].fill(0);
        fs::write(path, &bytes).unwrap();
    }

    #[test]
    fn clean_log_replays_everything() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..5 {
            w.batch(&groups(10, 1, 100));
        }
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_eq!(rec.last_lsn, 50);
        assert_eq!(rec.tail_end, w.record(50).end);
        assert!(rec.truncated.is_none());
        assert_applied(&applied, 1..51, &[&w]);
    }

    #[test]
    fn empty_directory_is_an_empty_log() {
        let dir = tempfile::tempdir().unwrap();
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_eq!((rec.last_lsn, rec.tail_end), (0, 0));
        assert!(rec.segments.is_empty() && rec.truncated.is_none() && applied.is_empty());
    }

    #[test]
    fn junk_after_the_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..3 {
            w.batch(&groups(10, 1, 100));
        }
        fs::OpenOptions::new()
            .append(true)
            .open(&w.path)
            .unwrap()
            .write_all(b"garbage!garbage!garbage!")
            .unwrap();
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..31, &[&w]);
        assert!(rec.truncated.is_some());
        // The cut is durable: a second recovery sees a clean log.
        let (rec, applied) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_none());
        assert_applied(&applied, 1..31, &[&w]);
    }

    #[test]
    fn torn_last_batch_keeps_earlier_batches() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..3 {
            w.batch(&groups(10, 1, 100));
        }
        set_len(&w.path, w.batch_starts[2] + 500);
        let (rec, applied) = replay(dir.path()).unwrap();
        // Records of the torn batch are each a group of one: those read whole are kept.
        let kept = w
            .records
            .iter()
            .filter(|r| r.end <= w.batch_starts[2] + 500)
            .count() as u64;
        assert!((21..30).contains(&kept), "{kept}");
        assert_applied(&applied, 1..kept + 1, &[&w]);
        assert_eq!(rec.last_lsn, kept);
    }

    /// A writer with batches in flight at once crashed: one is lost whole, or its last
    /// record, or the end of a group, and the batches started after it were written whole.
    /// None of them was acknowledged (they are, in order): a torn tail, cut with them.
    #[test]
    fn a_torn_batch_followed_by_the_batches_in_flight_with_it_is_a_torn_tail() {
        // The second batch holds 5, 6-7 (a group) and 8; the records kept.
        type Damage = fn(&SegmentWriter) -> Range<u64>;
        let damages: [(&str, Damage, u64); 3] = [
            (
                "the whole batch",
                |w| w.batch_starts[1]..w.batch_starts[2],
                4,
            ),
            ("its last record", |w| w.record(8).start..w.record(8).end, 7),
            (
                "a group's last record",
                |w| w.record(7).start..w.record(7).end,
                5,
            ),
        ];
        for (what, damage, kept) in damages {
            for after in 1..BATCHES_IN_FLIGHT_MAX {
                let dir = tempfile::tempdir().unwrap();
                let mut w = SegmentWriter::new(dir.path(), 1);
                w.batch(&groups(4, 1, 100))
                    .batch(&[vec![100], vec![100; 2], vec![100]]);
                for _ in 0..after {
                    w.batch(&groups(3, 1, 1000));
                }
                zero(&w.path, damage(&w));
                let (rec, applied) =
                    replay(dir.path()).unwrap_or_else(|e| panic!("{what}, {after} after: {e}"));
                assert_applied(&applied, 1..kept + 1, &[&w]);
                assert_eq!((rec.last_lsn, rec.tail_end), (kept, w.record(kept).end));
                assert!(rec.truncated.is_some(), "{what}, {after} after");
                // The cut is durable: the batches after it are gone.
                let (rec, applied) = replay(dir.path()).unwrap();
                assert!(rec.truncated.is_none(), "{what}, {after} after");
                assert_applied(&applied, 1..kept + 1, &[&w]);
            }
        }
    }

    /// The same tail below the acknowledged mark: the lost batch was synced (the mark
    /// follows what is), so this is damage, not a crash.
    #[test]
    fn a_lost_batch_below_the_acknowledged_mark_is_refused_whatever_follows_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(4, 1, 100))
            .batch(&groups(3, 1, 100))
            .batch(&groups(3, 1, 100));
        zero(&w.path, w.batch_starts[1]..w.batch_starts[2]);
        write_mark(dir.path(), 7);
        let err = replay(dir.path()).unwrap_err();
        assert!(matches!(err, RecoveryError::AckedDamaged { .. }), "{err}");
    }

    fn write_mark(dir: &Path, lsn: u64) {
        let mut file = vec![0u8; crate::ACKED_MARK_BYTES as usize];
        let (at, bytes) = crate::acked_slot(0, lsn);
        file[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
        fs::write(dir.join(ACKED_MARK_FILE), file).unwrap();
    }

    /// Issue 21, item 5: one flipped byte in the last batch, which was synced (and
    /// acknowledged) before the crash. Without the mark it reads as a torn tail and is cut;
    /// with the mark past it, recovery refuses and names the records, and cuts nothing.
    #[test]
    fn damage_below_the_acknowledged_mark_is_refused_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..3 {
            w.batch(&groups(10, 1, 100));
        }
        let mut bytes = fs::read(&w.path).unwrap();
        let at = w.record(25).start as usize + RECORD_HEADER_BYTES + 3;
        bytes[at] ^= 0x40;
        fs::write(&w.path, &bytes).unwrap();
        let len = bytes.len() as u64;
        write_mark(dir.path(), 30);
        let err = replay(dir.path()).unwrap_err();
        match &err {
            RecoveryError::AckedDamaged { from, to, .. } => assert_eq!((*from, *to), (25, 30)),
            other => panic!("{other}"),
        }
        assert!(err.to_string().contains(ACKED_MARK_FILE), "{err}");
        assert_eq!(fs::metadata(&w.path).unwrap().len(), len, "nothing was cut");
        // A mark below the damage: the damaged records were never synced, a torn tail.
        write_mark(dir.path(), 24);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..25, &[&w]);
        assert!(rec.truncated.is_some());
    }

    /// The operator's way out: without the mark, the damaged tail is cut as before.
    #[test]
    fn removing_the_mark_lets_recovery_cut_the_damaged_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..2 {
            w.batch(&groups(10, 1, 100));
        }
        set_len(&w.path, w.batch_starts[1] + 300);
        write_mark(dir.path(), 20);
        assert!(matches!(
            replay(dir.path()),
            Err(RecoveryError::AckedDamaged { .. })
        ));
        fs::remove_file(dir.path().join(ACKED_MARK_FILE)).unwrap();
        let (rec, _) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_some() && rec.last_lsn < 20);
    }

    /// A log that simply ends before the mark (its last segment lost) is refused too.
    #[test]
    fn a_log_shorter_than_the_acknowledged_mark_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(10, 1, 100));
        write_mark(dir.path(), 15);
        let err = replay(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                RecoveryError::AckedMissing {
                    last: 10,
                    acked: 15,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn old_format_log_recovers_record_by_record() {
        // Written without groups, as before they existed: no record carries FLAG_GROUP_CONT.
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(10, 1, 300));
        let sixth = w.record(6);
        set_len(&w.path, sixth.start + 30);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..6, &[&w]);
        assert_eq!((rec.last_lsn, rec.tail_end), (5, sixth.start));
        let (file, offset, reason) = rec.truncated.unwrap();
        assert_eq!(
            (file, offset, reason),
            (w.path.clone(), sixth.start, "record cut short")
        );
    }

    #[test]
    fn records_near_block_ends_replay_whatever_their_sizes() {
        // Batches (one record each) of every size class around a block's end.
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        let mut batch = Vec::new();
        for i in 0..400usize {
            batch.push(vec![(i * 37) % 4200 + 1]);
            if i % 3 == 0 && i != 399 {
                continue; // several records per batch too
            }
            w.batch(&batch);
            batch.clear();
        }
        let (rec, applied) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_none());
        assert_applied(&applied, 1..401, &[&w]);
    }

    /// More batches after the damage than a writer has in flight at once: they were
    /// written after the damaged one was acknowledged.
    #[test]
    fn damage_followed_by_valid_batches_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        for _ in 0..2 + BATCHES_IN_FLIGHT_MAX {
            w.batch(&groups(5, 2, 100));
        }
        let mut bytes = fs::read(&w.path).unwrap();
        bytes[w.batch_starts[1] as usize + 300] ^= 0xff;
        fs::write(&w.path, &bytes).unwrap();
        let err = replay(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, RecoveryError::Corruption { .. }), "{msg}");
        assert!(
            msg.contains("00000000000000000001.ual") && msg.contains("offset"),
            "{msg}"
        );
    }

    #[test]
    fn lost_record_before_more_later_batches_than_were_in_flight_is_refused() {
        // Zeros read as padding, so the scan meets the next batch out of sequence: so many
        // batches were written after it that the lost record was acknowledged.
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(4, 1, 100));
        for _ in 0..BATCHES_IN_FLIGHT_MAX {
            w.batch(&groups(2, 1, 100));
        }
        let last = w.record(4);
        zero(&w.path, last.start..last.end);
        let err = replay(dir.path()).unwrap_err();
        let RecoveryError::Corruption { offset, reason, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(
            (*offset, *reason),
            (w.batch_starts[1], "record out of sequence")
        );
    }

    #[test]
    fn group_torn_after_its_first_record_is_not_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(3, 3, 200)).batch(&groups(2, 4, 200));
        w.batch(&[vec![500; 5]]);
        let first = w.record(18);
        set_len(&w.path, first.end + 7); // part of the second record's header
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..18, &[&w]);
        assert_eq!((rec.last_lsn, rec.tail_end), (17, w.record(17).end));
        let truncated = (w.path.clone(), first.start, INCOMPLETE_GROUP_AT_END);
        assert_eq!(rec.truncated, Some(truncated));
        assert_eq!(fs::metadata(&w.path).unwrap().len(), rec.tail_end);
    }

    #[test]
    fn complete_groups_before_the_torn_group_of_a_batch_are_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(2, 3, 200));
        w.batch(&[vec![300; 2], vec![300], vec![300; 3], vec![300; 4]]);
        // LSNs 7-8, 9, 10-12 are complete; 13-16 are torn in their third record.
        let third = w.record(15);
        let mut bytes = fs::read(&w.path).unwrap();
        bytes[third.start as usize + 100] ^= 0x01;
        fs::write(&w.path, &bytes).unwrap();
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..13, &[&w]);
        assert_eq!((rec.last_lsn, rec.tail_end), (12, w.record(12).end));
        let truncated = (w.path.clone(), w.record(13).start, INCOMPLETE_GROUP_AT_END);
        assert_eq!(rec.truncated, Some(truncated));
    }

    #[test]
    fn open_group_at_a_clean_end_of_data_is_cut_durably() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(2, 2, 100))
            .batch(&[vec![100], vec![100; 3]]);
        // The group's last record was never written: zeros to the end of the file.
        let last = w.record(8);
        zero(&w.path, last.start..last.end);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..6, &[&w]);
        assert_eq!((rec.last_lsn, rec.tail_end), (5, w.record(5).end));
        let truncated = (w.path.clone(), w.record(6).start, INCOMPLETE_GROUP_AT_END);
        assert_eq!(rec.truncated, Some(truncated));

        let (rec, applied) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_none());
        assert_eq!((rec.last_lsn, rec.tail_end), (5, w.record(5).end));
        assert_applied(&applied, 1..6, &[&w]);
    }

    #[test]
    fn appends_after_a_cut_replay_with_consecutive_lsns() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(2, 2, 100))
            .batch(&[vec![100], vec![2000; 3]]);
        set_len(&w.path, w.record(7).end);
        let (rec, _) = replay(dir.path()).unwrap();
        assert_eq!(rec.last_lsn, 5);

        let mut resumed = SegmentWriter::resume(&rec);
        resumed.batch(&groups(2, 3, 100)).batch(&groups(1, 1, 100));
        assert_eq!(resumed.records.first().unwrap().lsn, 6);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_none());
        assert_eq!((rec.last_lsn, rec.tail_end), (12, resumed.record(12).end));
        let old = &applied[..5];
        let new = &applied[5..];
        assert_applied(&old.to_vec(), 1..6, &[&w]);
        assert_applied(&new.to_vec(), 6..13, &[&resumed]);
    }

    #[test]
    fn group_straddling_block_boundaries_recovers_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        // The first record ends 10 bytes before a block boundary: the group starts there.
        let first = BLOCK_BYTES as usize - 2 * RECORD_HEADER_BYTES - 10;
        w.batch(&[vec![first], vec![4000, 5000, 4076, 3, 9000, 4070]]);
        let straddling = w.records[1..]
            .iter()
            .filter(|r| r.start / BLOCK_BYTES != (r.end - 1) / BLOCK_BYTES)
            .count();
        assert!(straddling >= 4, "{:?}", w.records);
        assert!(w.record(7).start / BLOCK_BYTES >= 5, "{:?}", w.records);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert!(rec.truncated.is_none());
        assert_applied(&applied, 1..8, &[&w]);

        // Torn inside its last record, several blocks after its first: none of it applies.
        set_len(&w.path, w.record(7).start + 3000);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..2, &[&w]);
        assert_eq!((rec.last_lsn, rec.tail_end), (1, w.record(1).end));
        let truncated = (w.path.clone(), w.record(2).start, INCOMPLETE_GROUP_AT_END);
        assert_eq!(rec.truncated, Some(truncated));
    }

    #[test]
    fn open_group_followed_by_a_later_valid_batch_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(1, 2, 100))
            .batch(&[vec![100], vec![100; 3]]);
        for _ in 0..BATCHES_IN_FLIGHT_MAX {
            w.batch(&groups(2, 2, 100));
        }
        // The group's last record is lost, yet more batches were written than can have
        // been in flight with it.
        let group_start = w.record(4).start;
        let last = w.record(6);
        zero(&w.path, last.start..last.end);
        let err = replay(dir.path()).unwrap_err();
        let RecoveryError::Corruption { file, offset, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!((file, *offset), (&w.path, group_start), "{err}");
    }

    #[test]
    fn open_group_followed_by_a_batch_in_a_later_segment_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = SegmentWriter::new(dir.path(), 1);
        first.batch(&[vec![100], vec![100; 3]]);
        let mut second = SegmentWriter::new(dir.path(), 5);
        second.batch(&groups(2, 2, 100));
        let last = first.record(4);
        set_len(&first.path, last.start);
        let err = replay(dir.path()).unwrap_err();
        let RecoveryError::Corruption { file, offset, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(
            (file, *offset),
            (&first.path, first.record(2).start),
            "{err}"
        );
    }

    #[test]
    fn open_group_before_an_empty_later_segment_is_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = SegmentWriter::new(dir.path(), 1);
        first.batch(&[vec![100], vec![100; 3]]);
        let later = dir.path().join(segment_file_name(5));
        fs::write(&later, vec![0u8; 2 * BLOCK_BYTES as usize]).unwrap();
        set_len(&first.path, first.record(4).start);
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..2, &[&first]);
        assert_eq!(rec.segments.len(), 1);
        assert_eq!((rec.last_lsn, rec.tail_end), (1, first.record(1).end));
        assert!(!later.exists());
        assert!(
            dir.path()
                .join(format!("{}.torn", segment_file_name(5)))
                .exists()
        );
    }

    #[test]
    fn segments_continue_the_lsns_and_a_gap_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = SegmentWriter::new(dir.path(), 1);
        first.batch(&groups(2, 2, 100));
        let mut second = SegmentWriter::new(dir.path(), 5);
        second.batch(&groups(1, 3, 100));
        let (rec, applied) = replay(dir.path()).unwrap();
        assert_applied(&applied, 1..8, &[&first, &second]);
        assert_eq!((rec.last_lsn, rec.tail_end), (7, second.record(7).end));

        fs::remove_file(&second.path).unwrap();
        SegmentWriter::new(dir.path(), 6).batch(&groups(1, 1, 100));
        let err = replay(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                RecoveryError::Gap {
                    expected: 5,
                    found: 6,
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn apply_error_stops_recovery_as_undecodable() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = SegmentWriter::new(dir.path(), 1);
        w.batch(&groups(2, 2, 100));
        let err = recover(dir.path(), |lsn, _, _| {
            if lsn == 3 {
                Err::<(), ApplyError>("unknown type".into())
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        let RecoveryError::Undecodable {
            file,
            offset,
            lsn,
            source,
        } = &err
        else {
            panic!("{err}");
        };
        assert_eq!(
            (file, *offset, *lsn, source.to_string().as_str()),
            (&w.path, w.record(3).start, 3, "unknown type")
        );
    }

    fn replay_from(dir: &Path, after: u64) -> Result<(RecoveredLog, Applied), RecoveryError> {
        let mut applied = Vec::new();
        let rec = recover_from(dir, after, |lsn, rtype, payload| {
            applied.push((lsn, rtype, payload.to_vec()));
            Ok::<(), ApplyError>(())
        })?;
        Ok((rec, applied))
    }

    #[test]
    fn from_a_snapshot_only_the_segments_after_it_are_read_and_applied() {
        let dir = tempfile::tempdir().unwrap();
        let mut first = SegmentWriter::new(dir.path(), 1);
        first.batch(&groups(10, 1, 300));
        let mut second = SegmentWriter::new(dir.path(), 11);
        second.batch(&groups(10, 1, 300));
        let mut third = SegmentWriter::new(dir.path(), 21);
        third.batch(&groups(5, 1, 300));
        // The first segment is not even read: damage there goes unnoticed.
        zero(&first.path, 0..64);
        let (rec, applied) = replay_from(dir.path(), 15).unwrap();
        assert_applied(&applied, 16..26, &[&second, &third]);
        assert_eq!(rec.last_lsn, 25);
        assert_eq!(rec.segments.len(), 3);
        assert!(
            rec.segments[0].marks.is_empty(),
            "an unread segment has no marks"
        );
        assert_eq!(rec.segments[1].marks.first(), Some(&(11, 0)));
        // A snapshot at the end of a segment starts with the next one.
        let (_, applied) = replay_from(dir.path(), 20).unwrap();
        assert_applied(&applied, 21..26, &[&third]);
    }

    #[test]
    fn a_log_that_does_not_reach_back_to_its_snapshot_or_to_lsn_1_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut second = SegmentWriter::new(dir.path(), 11);
        second.batch(&groups(10, 1, 300));
        let err = replay(dir.path()).unwrap_err();
        assert!(
            matches!(
                err,
                RecoveryError::Missing {
                    from: 1,
                    to: 10,
                    ..
                }
            ),
            "{err}"
        );
        let text = err.to_string();
        assert!(text.contains("records 1 to 10 are missing"), "{text}");
        let err = replay_from(dir.path(), 5).unwrap_err();
        assert!(
            matches!(
                err,
                RecoveryError::Missing {
                    from: 6,
                    to: 10,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("snapshot stands at LSN 5"),
            "{err}"
        );
        // From a snapshot inside it, the segment is read.
        let (_, applied) = replay_from(dir.path(), 10).unwrap();
        assert_applied(&applied, 11..21, &[&second]);
        // A snapshot past the end of the log: the log lost records it had.
        let err = replay_from(dir.path(), 30).unwrap_err();
        assert!(
            matches!(
                err,
                RecoveryError::Behind {
                    last: 20,
                    snapshot: 30,
                    ..
                }
            ),
            "{err}"
        );
    }

    /// Found by fuzzing (fuzz/regressions/record): `first LSN − 1` and `snapshot LSN + 1`
    /// overflowed on such names and snapshots.
    #[test]
    fn a_segment_name_or_snapshot_outside_the_lsn_range_is_refused() {
        for first_lsn in [0, LSN_MAX + 1, u64::MAX] {
            let dir = tempfile::tempdir().unwrap();
            fs::write(dir.path().join(segment_file_name(first_lsn)), b"").unwrap();
            let err = replay(dir.path()).unwrap_err();
            assert!(
                matches!(err, RecoveryError::LsnOutOfRange { lsn, .. } if lsn == first_lsn),
                "{err}"
            );
            assert!(err.to_string().contains("the name of segment"), "{err}");
        }
        let dir = tempfile::tempdir().unwrap();
        SegmentWriter::new(dir.path(), LSN_MAX).batch(&groups(3, 1, 100));
        let (rec, _) = replay_from(dir.path(), LSN_MAX - 1).unwrap();
        assert_eq!(rec.last_lsn, LSN_MAX + 2);
        let err = replay_from(dir.path(), u64::MAX).unwrap_err();
        assert!(
            matches!(err, RecoveryError::LsnOutOfRange { lsn: u64::MAX, .. }),
            "{err}"
        );
    }
}
