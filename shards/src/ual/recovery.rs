//! Startup scan of a shard's segments: verify every record, hand each to `apply` in LSN
//! order, cut a torn tail, and refuse damage that valid records follow.

use super::format::{
    BLOCK_BYTES, FLAG_BATCH_START, Parsed, align_up, parse_record, parse_segment_file_name,
};
use crate::record::Record;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub first_lsn: u64,
    pub path: PathBuf,
}

#[derive(Debug)]
pub struct RecoveredLog {
    /// Segments in LSN order; the last one is where appends continue.
    pub segments: Vec<SegmentInfo>,
    /// LSN of the last valid record (0 for an empty log).
    pub last_lsn: u64,
    /// End of the last valid record in the last segment.
    pub tail_end: u64,
    /// A torn tail was cut: (file, offset, reason).
    pub truncated: Option<(PathBuf, u64, &'static str)>,
}

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
        "record {lsn} in {file} at offset {offset} does not decode ({reason}); it was written by a newer or broken flo"
    )]
    Undecodable {
        file: PathBuf,
        offset: u64,
        lsn: u64,
        reason: String,
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
            segments.push(SegmentInfo {
                first_lsn,
                path: entry.path(),
            });
        }
    }
    segments.sort_by_key(|s| s.first_lsn);
    Ok(segments)
}

/// A valid record flagged as the start of a batch, at a block boundary after `pos`.
fn find_batch_start(buf: &[u8], after: usize) -> Option<usize> {
    let mut off = align_up(after as u64 + 1) as usize;
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

/// Scans `dir`, calling `apply(lsn, record)` for every valid record in order.
pub fn recover(
    dir: &Path,
    mut apply: impl FnMut(u64, Record),
) -> Result<RecoveredLog, RecoveryError> {
    let mut segments = list_segments(dir)?;
    let mut last_lsn = segments.first().map(|s| s.first_lsn - 1).unwrap_or(0);
    let mut tail_end = 0u64;
    let mut truncated = None;

    for index in 0..segments.len() {
        let seg = segments[index].clone();
        if seg.first_lsn != last_lsn + 1 {
            return Err(RecoveryError::Gap {
                file: seg.path.clone(),
                expected: last_lsn + 1,
                found: seg.first_lsn,
            });
        }
        let buf = fs::read(&seg.path).map_err(io_err(dir))?;
        let mut pos = 0usize;
        let mut good_end = 0usize;
        let damage = loop {
            match parse_record(&buf, pos) {
                Parsed::End => break None,
                Parsed::Padding => pos = align_up(pos as u64 + 1) as usize,
                Parsed::Damaged(reason) => break Some((pos, reason)),
                Parsed::Record {
                    lsn, payload, end, ..
                } => {
                    if lsn != last_lsn + 1 {
                        break Some((pos, "record out of sequence"));
                    }
                    let record =
                        Record::decode(payload).map_err(|e| RecoveryError::Undecodable {
                            file: seg.path.clone(),
                            offset: pos as u64,
                            lsn,
                            reason: e.to_string(),
                        })?;
                    apply(lsn, record);
                    last_lsn = lsn;
                    pos = end;
                    good_end = end;
                }
            }
        };
        tail_end = good_end as u64;
        let Some((offset, reason)) = damage else {
            continue;
        };

        // Damage: acceptable only as a torn tail, i.e. no batch was written after it.
        if find_batch_start(&buf, offset).is_some() || later_batch_exists(&segments[index + 1..])? {
            return Err(RecoveryError::Corruption {
                file: seg.path.clone(),
                offset: offset as u64,
                reason,
            });
        }
        cut_tail(&seg.path, good_end as u64).map_err(io_err(dir))?;
        for later in &segments[index + 1..] {
            let mut torn = later.path.clone().into_os_string();
            torn.push(".torn");
            fs::rename(&later.path, torn).map_err(io_err(dir))?;
        }
        segments.truncate(index + 1);
        truncated = Some((seg.path.clone(), offset as u64, reason));
        break;
    }
    Ok(RecoveredLog {
        segments,
        last_lsn,
        tail_end,
        truncated,
    })
}

fn later_batch_exists(later: &[SegmentInfo]) -> Result<bool, RecoveryError> {
    for seg in later {
        let buf = fs::read(&seg.path).map_err(|source| RecoveryError::Io {
            dir: seg.path.clone(),
            source,
        })?;
        let first_is_batch = matches!(parse_record(&buf, 0), Parsed::Record { flags, .. } if flags & FLAG_BATCH_START != 0);
        if first_is_batch || find_batch_start(&buf, 0).is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Cuts the file at `end` so the bytes after the last valid record read as zeros.
fn cut_tail(path: &Path, end: u64) -> io::Result<()> {
    let file = fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(end)?;
    file.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ual::{LogBuffer, segment_file_name};
    use std::io::Write;

    fn put(i: u64) -> Record {
        Record::KvPut {
            namespace: "ns".into(),
            key: format!("k{i}"),
            value: vec![i as u8; 100],
            version: 1,
            expires_at_ms: None,
        }
    }

    /// Writes `batches` batches of `per_batch` records into one segment, padded like the
    /// real writer does. Returns the file path and the start offset of each batch.
    fn write_log(dir: &Path, batches: u64, per_batch: u64) -> (PathBuf, Vec<u64>) {
        let mut log = LogBuffer::new(1);
        let mut file_bytes = Vec::new();
        let mut starts = Vec::new();
        for b in 0..batches {
            for i in 0..per_batch {
                log.append(&put(b * per_batch + i));
            }
            let batch = log.take(Vec::new()).unwrap();
            starts.push(file_bytes.len() as u64);
            file_bytes.extend_from_slice(&batch.bytes);
            file_bytes.resize(align_up(file_bytes.len() as u64) as usize, 0);
        }
        let path = dir.join(segment_file_name(1));
        fs::write(&path, &file_bytes).unwrap();
        (path, starts)
    }

    fn count(dir: &Path) -> Result<u64, RecoveryError> {
        let mut n = 0;
        recover(dir, |_, _| n += 1)?;
        Ok(n)
    }

    #[test]
    fn clean_log_replays_everything() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), 5, 10);
        let rec = recover(dir.path(), |_, _| {}).unwrap();
        assert_eq!(rec.last_lsn, 50);
        assert!(rec.truncated.is_none());
    }

    #[test]
    fn junk_after_the_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = write_log(dir.path(), 3, 10);
        fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"garbage!garbage!garbage!")
            .unwrap();
        assert_eq!(count(dir.path()).unwrap(), 30);
        // The cut is durable: a second recovery sees a clean log.
        assert!(recover(dir.path(), |_, _| {}).unwrap().truncated.is_none());
    }

    #[test]
    fn torn_last_batch_keeps_earlier_batches() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = write_log(dir.path(), 3, 10);
        let cut = starts[2] + 500;
        let file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(cut).unwrap();
        let n = count(dir.path()).unwrap();
        assert!((20..30).contains(&n), "{n}");
    }

    #[test]
    fn records_near_block_ends_replay_whatever_their_sizes() {
        // Batches (one record each) of every size class around a block's end.
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogBuffer::new(1);
        let mut file_bytes = Vec::new();
        for i in 0..400u64 {
            let value = vec![7u8; (i as usize * 37) % 4200];
            log.append(&Record::KvPut {
                namespace: "n".into(),
                key: format!("k{i}"),
                value,
                version: 1,
                expires_at_ms: None,
            });
            if i % 3 == 0 {
                continue; // several records per batch too
            }
            let batch = log.take(Vec::new()).unwrap();
            file_bytes.extend_from_slice(&batch.bytes);
            file_bytes.resize(align_up(file_bytes.len() as u64) as usize, 0);
        }
        let batch = log.take(Vec::new()).unwrap();
        file_bytes.extend_from_slice(&batch.bytes);
        fs::write(dir.path().join(segment_file_name(1)), &file_bytes).unwrap();
        assert_eq!(count(dir.path()).unwrap(), 400);
    }

    #[test]
    fn damage_followed_by_valid_batches_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = write_log(dir.path(), 3, 10);
        let mut bytes = fs::read(&path).unwrap();
        bytes[starts[1] as usize + 300] ^= 0xff;
        fs::write(&path, &bytes).unwrap();
        let err = count(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, RecoveryError::Corruption { .. }), "{msg}");
        assert!(
            msg.contains("00000000000000000001.ual") && msg.contains("offset"),
            "{msg}"
        );
    }
}
