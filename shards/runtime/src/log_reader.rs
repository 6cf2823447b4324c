//! Reads records back from the shard's log (`Effect::ReadLog`: an archived run's document).
//! The engine knows LSNs, this knows files: per segment, marks (LSN, offset) of record
//! starts at most `MARK_SPACING_BYTES` apart, from recovery's scan and from each batch the
//! writer writes. A read starts at the mark before the LSN and parses forward, with
//! asynchronous reads on io_uring: the shard never blocks on the disk. Buffered, not
//! O_DIRECT: glommio sends O_DIRECT reads to its poll ring when its probe (a read of an
//! empty, just created segment) said the device polls, and on virtio disks they then fail
//! with EOPNOTSUPP.

use crate::inbox::Inbox;
use flo_engine::Input;
use flo_ual::{Batch, Found, MARK_SPACING_BYTES, RecoveredLog, find_record};
use glommio::io::BufferedFile;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

/// The first read: the mark's block and what follows (most records are found in it).
const READ_BYTES_FIRST: usize = 128 << 10;
/// Reads grow to this at most: the mark spacing, one whole batch and one record.
const READ_BYTES_MAX: usize = 64 << 20;

struct Segment {
    first_lsn: u64,
    path: PathBuf,
    marks: Vec<(u64, u64)>,
    /// Opened on the first read.
    file: Option<Rc<BufferedFile>>,
}

/// Where records are, per segment; shared by the writer (which adds marks) and readers.
#[derive(Default)]
pub(crate) struct LogMap {
    segments: RefCell<Vec<Segment>>,
}

impl LogMap {
    pub fn from_recovered(log: &RecoveredLog) -> LogMap {
        let segments = log
            .segments
            .iter()
            .map(|s| Segment {
                first_lsn: s.first_lsn,
                path: s.path.clone(),
                marks: s.marks.clone(),
                file: None,
            })
            .collect();
        LogMap {
            segments: RefCell::new(segments),
        }
    }

    /// Marks of the segments wholly before `lsn` + 1 (what a snapshot at `lsn` carries: its
    /// recovery will not read them).
    pub fn marks_before(&self, lsn: u64) -> Vec<(u64, Vec<(u64, u64)>)> {
        let segments = self.segments.borrow();
        segments
            .windows(2)
            .filter(|w| w[1].first_lsn <= lsn + 1)
            .map(|w| (w[0].first_lsn, w[0].marks.clone()))
            .collect()
    }

    /// Gives the segments recovery did not read the marks a snapshot carried; the others
    /// (a snapshot that has none for them) are scanned now. Returns the first LSNs of the
    /// segments the snapshot lists after the oldest one present that are gone: a segment
    /// missing from the middle of the log (recovery reads only what follows the snapshot;
    /// the older segments hold the retained finished runs).
    pub fn fill_marks(&self, from_snapshot: Vec<(u64, Vec<(u64, u64)>)>) -> Vec<u64> {
        let mut segments = self.segments.borrow_mut();
        let mut given: std::collections::HashMap<u64, Vec<(u64, u64)>> =
            from_snapshot.into_iter().collect();
        for seg in segments.iter_mut() {
            let listed = given.remove(&seg.first_lsn);
            if !seg.marks.is_empty() {
                continue;
            }
            seg.marks = match listed {
                Some(marks) => marks,
                None => std::fs::read(&seg.path)
                    .map(|bytes| flo_ual::segment_marks(&bytes))
                    .unwrap_or_default(),
            };
        }
        let oldest = segments.first().map_or(u64::MAX, |s| s.first_lsn);
        let mut missing: Vec<u64> = given.into_keys().filter(|&lsn| lsn > oldest).collect();
        missing.sort_unstable();
        missing
    }

    /// Segment files on disk.
    pub fn count(&self) -> u32 {
        self.segments.borrow().len() as u32
    }

    /// (first LSN, path) of every segment, oldest first.
    pub fn segments(&self) -> Vec<(u64, PathBuf)> {
        self.segments
            .borrow()
            .iter()
            .map(|s| (s.first_lsn, s.path.clone()))
            .collect()
    }

    /// Forgets the segments starting before `first_lsn` (deleted).
    pub fn drop_before(&self, first_lsn: u64) {
        self.segments
            .borrow_mut()
            .retain(|s| s.first_lsn >= first_lsn);
    }

    /// `batch` was written at `offset` of the segment starting at `first_lsn` (`path`).
    pub fn note_batch(&self, first_lsn: u64, path: &std::path::Path, offset: u64, batch: &Batch) {
        let mut segments = self.segments.borrow_mut();
        if segments.last().is_none_or(|s| s.first_lsn != first_lsn) {
            segments.push(Segment {
                first_lsn,
                path: path.to_path_buf(),
                marks: Vec::new(),
                file: None,
            });
        }
        let Some(seg) = segments.last_mut() else {
            return;
        };
        let starts = std::iter::once((batch.first_lsn, 0u32)).chain(batch.marks.iter().copied());
        for (lsn, at) in starts {
            let at = offset + at as u64;
            if seg
                .marks
                .last()
                .is_none_or(|&(_, m)| at >= m + MARK_SPACING_BYTES)
            {
                seg.marks.push((lsn, at));
            }
        }
    }

    /// The file and the offset of the last mark at or before `lsn`.
    fn locate(&self, lsn: u64) -> Option<(usize, u64)> {
        let segments = self.segments.borrow();
        let i = segments
            .partition_point(|s| s.first_lsn <= lsn)
            .checked_sub(1)?;
        let marks = &segments[i].marks;
        let m = marks.partition_point(|&(l, _)| l <= lsn).checked_sub(1)?;
        Some((i, marks[m].1))
    }

    async fn file(&self, i: usize) -> Result<Rc<BufferedFile>, String> {
        let path = {
            let segments = self.segments.borrow();
            let seg = segments.get(i).ok_or("the segment is gone")?;
            if let Some(file) = &seg.file {
                return Ok(file.clone());
            }
            seg.path.clone()
        };
        let file = BufferedFile::open(&path)
            .await
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let file = Rc::new(file);
        if let Some(seg) = self.segments.borrow_mut().get_mut(i) {
            seg.file = Some(file.clone());
        }
        Ok(file)
    }
}

/// Reads record `lsn` (durable, so written) and hands its payload to the engine: an
/// archive record whole, with the payloads it points at in earlier records put back
/// (`flo_engine::fill_archived`).
pub(crate) fn read(map: Rc<LogMap>, inbox: Rc<Inbox>, token: u64, lsn: u64) {
    glommio::spawn_local(async move {
        let result = read_whole(&map, lsn).await;
        inbox.push(Input::LogRead { token, result });
    })
    .detach();
}

async fn read_whole(map: &LogMap, lsn: u64) -> Result<Vec<u8>, String> {
    let payload = read_record(map, lsn).await?;
    let refs = flo_engine::archived_refs(&payload);
    if refs.is_empty() {
        return Ok(payload);
    }
    let mut records = Vec::with_capacity(refs.len());
    for at in refs {
        records.push((at, read_record(map, at).await?));
    }
    flo_engine::fill_archived(&payload, &records)
}

async fn read_record(map: &LogMap, lsn: u64) -> Result<Vec<u8>, String> {
    let (segment, start) = map
        .locate(lsn)
        .ok_or_else(|| format!("record {lsn} is in no segment this shard has"))?;
    let file = map.file(segment).await?;
    let base = start - start % flo_ual::BLOCK_BYTES;
    let mut len = READ_BYTES_FIRST;
    loop {
        let buf = crate::poke::poked(file.read_at(base, len))
            .await
            .map_err(|e| format!("cannot read the log: {e}"))?;
        let complete = buf.len() < len || len >= READ_BYTES_MAX;
        match find_record(&buf, (start - base) as usize, lsn, complete) {
            Found::Record { payload, .. } => return Ok(payload.to_vec()),
            Found::Missing(reason) => return Err(format!("record {lsn}: {reason}")),
            Found::More => len = (len * 2).min(READ_BYTES_MAX),
        }
    }
}
