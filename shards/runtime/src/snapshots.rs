//! Snapshot files of a shard: `snapshot-<LSN>.snap` in the shard's directory, holding the
//! engine's image of its fold at that LSN and the log marks of the segments before it.
//! Written in the background (a blocking-pool thread: temporary name, CRC, fdatasync,
//! rename, directory sync) once the log is durable up to the LSN; the newest two are kept,
//! so a damaged newest one falls back to the one before. Recovery loads the newest valid
//! one and replays only the log after it; old segments that no snapshot and no retained
//! run needs are then deleted.
//!
//! **Room for one snapshot.** A full disk is left through a snapshot (it lets segments
//! go), which needs room itself: each shard keeps a preallocated file, `RESERVE_FILE`
//! (`reserve.rs`), as large as its last image and a quarter more. A snapshot that finds
//! no room removes it and tries again; after each snapshot it is made again, before the
//! log writer hears that segments were deleted, so the log never takes that room (but for
//! a batch stuck without a next segment, which borrows it). While the disk is full the
//! loop takes a snapshot whenever something was logged since the last (deletes are still
//! taken), at most every `READ_ONLY_SNAPSHOT_EVERY_MS`.

use crate::fault_disk::FaultDisk;
use crate::reserve::{self, RESERVE_FILE, is_no_space};
use flo_engine::image::Image;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"FLOSNAP1";
const PREFIX: &str = "snapshot-";
const SUFFIX: &str = ".snap";
/// Snapshots kept on disk: the newest, and the one before in case it is damaged.
pub const SNAPSHOTS_KEPT: usize = 2;
/// A snapshot file is written and synced this much at a time.
const SYNC_SLICE_BYTES: usize = 8 << 20;
/// Log bytes between two snapshots, by default.
pub const SNAPSHOT_BYTES_DEFAULT: u64 = 256 << 20;
/// While the disk is full, a snapshot at most this often (each one may let segments go).
const READ_ONLY_SNAPSHOT_EVERY_MS: u64 = 2_000;

/// `write`, and when it finds no room: the reserve released and `write` once more.
/// Returns what `write` returns and whether the reserve was released.
pub fn write_with_reserve(
    dir: &Path,
    lsn: u64,
    image: &Image,
    marks: &SegmentMarks,
    fault: Option<&FaultDisk>,
) -> (io::Result<Vec<u64>>, bool) {
    match write(dir, lsn, image, marks, fault) {
        Err(e) if is_no_space(&e) => {
            let released = clean_temporaries(dir).and_then(|()| reserve::release(dir));
            match released {
                Ok(true) => (write(dir, lsn, image, marks, fault), true),
                Ok(false) => (Err(e), false),
                Err(r) => (Err(io::Error::new(e.kind(), format!("{e}; {r}"))), false),
            }
        }
        other => (other, false),
    }
}

/// Segment marks a snapshot carries: (segment first LSN, its (LSN, offset) marks).
pub type SegmentMarks = Vec<(u64, Vec<(u64, u64)>)>;

pub fn file_name(lsn: u64) -> String {
    format!("{PREFIX}{lsn:020}{SUFFIX}")
}

fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The snapshots in `dir`, newest first: (LSN, path).
pub fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Some(lsn) = entry.file_name().to_str().and_then(parse_name) {
            found.push((lsn, entry.path()));
        }
    }
    found.sort_by_key(|s| std::cmp::Reverse(s.0));
    Ok(found)
}

/// Writes a snapshot file's bytes to `out`: header, the image as it is (never copied
/// whole), marks, CRC of everything before it. `sync` is called after every
/// `SYNC_SLICE_BYTES` written and at the end.
fn write_framed<W: Write>(
    out: &mut W,
    lsn: u64,
    image: &Image,
    marks: &SegmentMarks,
    sync: impl FnMut(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    struct Framed<'a, W, S> {
        out: &'a mut W,
        crc: crc32fast::Hasher,
        unsynced: usize,
        sync: S,
    }
    impl<W: Write, S: FnMut(&mut W) -> io::Result<()>> Write for Framed<'_, W, S> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.out.write_all(buf)?;
            self.crc.update(buf);
            self.unsynced += buf.len();
            if self.unsynced >= SYNC_SLICE_BYTES {
                (self.sync)(self.out)?;
                self.unsynced = 0;
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.out.flush()
        }
    }
    let marks = rmp_serde::to_vec(marks).unwrap_or_default();
    let mut framed = Framed {
        out,
        crc: crc32fast::Hasher::new(),
        unsynced: 0,
        sync,
    };
    framed.write_all(MAGIC)?;
    framed.write_all(&lsn.to_le_bytes())?;
    framed.write_all(&image.len().to_le_bytes())?;
    image.write_to(&mut framed)?;
    framed.write_all(&(marks.len() as u64).to_le_bytes())?;
    framed.write_all(&marks)?;
    let crc = framed.crc.clone().finalize();
    framed.out.write_all(&crc.to_le_bytes())?;
    (framed.sync)(framed.out)
}

/// The bytes of a snapshot file, in one piece (tests).
#[cfg(test)]
pub fn encode(lsn: u64, image: &[u8], marks: &SegmentMarks) -> Vec<u8> {
    let mut out = Vec::new();
    let image = Image::from(image.to_vec());
    write_framed(&mut out, lsn, &image, marks, |_| Ok(())).unwrap();
    out
}

/// A snapshot read back: its LSN, the engine's image, the marks.
pub struct Loaded<'a> {
    pub lsn: u64,
    pub image: &'a [u8],
    pub marks: SegmentMarks,
}

/// Checks and splits a snapshot file's bytes.
pub fn decode(bytes: &[u8]) -> Result<Loaded<'_>, String> {
    if bytes.len() < 8 + 8 + 8 + 8 + 4 || &bytes[..8] != MAGIC {
        return Err("not a flo snapshot (bad header)".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let crc = u32::from_le_bytes(crc.try_into().map_err(|_| "short file")?);
    if crc32fast::hash(body) != crc {
        return Err("checksum mismatch (damaged or cut short)".into());
    }
    let word = |at: usize| -> Result<usize, String> {
        body.get(at..at.saturating_add(8))
            .and_then(|w| w.try_into().ok())
            .map(u64::from_le_bytes)
            .and_then(|w| usize::try_from(w).ok())
            .ok_or_else(|| "cut short".to_string())
    };
    // Lengths come from the file: every range is checked, none may overflow.
    let cut = |what: &str| format!("{what} cut short");
    let lsn = word(8)? as u64;
    let image_end = word(16)?.checked_add(24).ok_or_else(|| cut("image"))?;
    let image = body.get(24..image_end).ok_or_else(|| cut("image"))?;
    let marks_at = image_end.checked_add(8).ok_or_else(|| cut("marks"))?;
    let marks_end = word(image_end)?
        .checked_add(marks_at)
        .ok_or_else(|| cut("marks"))?;
    let marks = body.get(marks_at..marks_end).ok_or_else(|| cut("marks"))?;
    let marks: SegmentMarks = rmp_serde::from_slice(marks).map_err(|e| e.to_string())?;
    Ok(Loaded { lsn, image, marks })
}

/// Writes a snapshot durably (blocking: run it on the blocking pool): a temporary file,
/// fdatasync, rename, directory sync. Then removes all but the newest `SNAPSHOTS_KEPT`.
/// Returns the LSNs of the snapshots now on disk, newest first.
pub fn write(
    dir: &Path,
    lsn: u64,
    image: &Image,
    marks: &SegmentMarks,
    fault: Option<&FaultDisk>,
) -> io::Result<Vec<u64>> {
    let name = file_name(lsn);
    if let Some(fault) = fault {
        // The file's size: header, image, marks (at most 32 bytes a segment), CRC.
        let marks_bytes: usize = marks.iter().map(|(_, m)| 16 + 24 * m.len()).sum();
        fault.check(64 + image.len() + marks_bytes as u64)?;
    }
    let tmp = dir.join(format!("{name}.tmp"));
    {
        let mut file = io::BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?);
        // Synced in slices: hundreds of MB of dirty pages flushed at once stall the log's
        // own fdatasync on the same disk for seconds.
        write_framed(&mut file, lsn, image, marks, |file| {
            file.flush()?;
            file.get_ref().sync_data()
        })?;
    }
    fs::rename(&tmp, dir.join(&name))?;
    fs::File::open(dir)?.sync_all()?;
    let snapshots = list(dir)?;
    for (_, path) in snapshots.iter().skip(SNAPSHOTS_KEPT) {
        fs::remove_file(path)?;
    }
    Ok(snapshots
        .iter()
        .take(SNAPSHOTS_KEPT)
        .map(|(lsn, _)| *lsn)
        .collect())
}

/// Removes temporary files a crash left behind.
pub fn clean_temporaries(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(PREFIX) && name.ends_with(".tmp") {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The shard loop's side of snapshots: when to take one, the background write, and the
/// segment deletion after it.
pub(crate) struct Snapshotter {
    pub dir: PathBuf,
    pub shard: u32,
    /// Take a snapshot after this many bytes of log.
    pub every_bytes: u64,
    logged: std::cell::Cell<u64>,
    /// Bytes of log handed to the writer since the last snapshot started (failed or not):
    /// while the disk is full, a snapshot is tried again only after more.
    logged_since_attempt: std::cell::Cell<u64>,
    busy: std::cell::Cell<bool>,
    info: std::cell::RefCell<flo_engine::StorageInfo>,
    /// LSNs of the snapshots on disk, newest first.
    kept: std::cell::RefCell<Vec<u64>>,
    release_memory: fn(),
    /// The last image's size: the next snapshot waits for at least twice that much log,
    /// so writing snapshots never costs more than half the log's own writes.
    last_image_bytes: std::cell::Cell<u64>,
    /// When the last snapshot started.
    started_at: std::cell::Cell<Option<std::time::Instant>>,
    /// Said once: there is no room for the reserve.
    reserve_warned: std::cell::Cell<bool>,
    fault: Option<FaultDisk>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Bytes of the shard's segment and snapshot files.
fn disk_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

impl Snapshotter {
    pub fn new(
        dir: PathBuf,
        shard: u32,
        every_bytes: u64,
        kept: Vec<u64>,
        release_memory: fn(),
        fault: Option<FaultDisk>,
    ) -> Snapshotter {
        let snapshotter = Snapshotter {
            dir,
            shard,
            every_bytes,
            logged: Default::default(),
            logged_since_attempt: Default::default(),
            busy: Default::default(),
            info: Default::default(),
            kept: std::cell::RefCell::new(kept),
            release_memory,
            last_image_bytes: Default::default(),
            started_at: Default::default(),
            reserve_warned: Default::default(),
            fault,
        };
        // At start-up, before the shard serves: blocking file work is fine here. The
        // reserve is made (or grown) for the newest snapshot's size.
        let newest = match snapshotter.last_lsn() {
            0 => 0,
            lsn => fs::metadata(snapshotter.dir.join(file_name(lsn))).map_or(0, |m| m.len()),
        };
        snapshotter.refresh_reserve(newest);
        snapshotter.info.borrow_mut().disk_bytes = disk_bytes(&snapshotter.dir);
        snapshotter
    }

    /// Makes the reserve for an image of `image_bytes` (blocking); says once per shard
    /// when there is no room for it.
    fn refresh_reserve(&self, image_bytes: u64) {
        let bytes = reserve::bytes_for(image_bytes);
        self.reserved(bytes, reserve::keep(&self.dir, bytes, self.fault.as_ref()));
    }

    /// What making the reserve came to: said once while there is no room for it.
    fn reserved(&self, bytes: u64, result: io::Result<u64>) {
        match result {
            Ok(_) => self.reserve_warned.set(false),
            Err(e) if !self.reserve_warned.replace(true) => tracing::warn!(
                target: "flo::snapshot",
                shard = self.shard,
                "no room for the snapshot reserve ({RESERVE_FILE} of {bytes} bytes: {e}); on a \
                 full disk a snapshot may then find no room to let segments go"
            ),
            Err(_) => {}
        }
    }

    /// `bytes` more of log were handed to the writer.
    pub fn logged(&self, bytes: usize) {
        self.logged.set(self.logged.get() + bytes as u64);
        self.logged_since_attempt
            .set(self.logged_since_attempt.get() + bytes as u64);
    }

    /// Whether a snapshot is being written.
    pub fn busy(&self) -> bool {
        self.busy.get()
    }

    /// LSN of the newest snapshot on disk (0: none).
    pub fn last_lsn(&self) -> u64 {
        self.kept.borrow().first().copied().unwrap_or(0)
    }

    /// Whether to take a snapshot now: enough log was written since the last; or the disk
    /// is full (`read_only`), something was logged since the last attempt and that started
    /// `READ_ONLY_SNAPSHOT_EVERY_MS` ago (each one may let segments go; one that failed is
    /// not tried again before something more is logged).
    pub fn due(&self, read_only: bool) -> bool {
        if self.busy.get() {
            return false;
        }
        if read_only {
            let every = std::time::Duration::from_millis(READ_ONLY_SNAPSHOT_EVERY_MS);
            return self.logged_since_attempt.get() > 0
                && self.started_at.get().is_none_or(|t| t.elapsed() >= every);
        }
        let every = self.every_bytes.max(2 * self.last_image_bytes.get());
        self.logged.get() >= every
    }

    /// What to tell the engine about the files (status).
    pub fn storage(&self, segments: u32) -> flo_engine::Input {
        let mut info = self.info.borrow().clone();
        info.segments = segments;
        flo_engine::Input::Storage(Box::new(info))
    }

    /// At start-up: the snapshot recovery loaded.
    pub fn loaded(&self, lsn: u64) {
        if lsn > 0 {
            let mut info = self.info.borrow_mut();
            info.snapshot_lsn = lsn;
            let path = self.dir.join(file_name(lsn));
            info.snapshot_at_ms = fs::metadata(path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64);
        }
    }

    /// Starts a snapshot of the image taken at `lsn` (the shard paused `pause_ms` for it):
    /// once the log is durable up to `lsn`, the file is written on the blocking pool, then
    /// segments wholly before what is still needed are deleted. `retained_from`: the
    /// first LSN retained runs need. Returns the task, which the caller may await (at stop)
    /// or detach.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        self: &std::rc::Rc<Self>,
        lsn: u64,
        image: Image,
        marks: SegmentMarks,
        pause_ms: u64,
        retained_from: Option<u64>,
        slot: std::rc::Rc<crate::log_writer::LogSlot>,
        map: std::rc::Rc<crate::log_reader::LogMap>,
        inbox: std::rc::Rc<crate::inbox::Inbox>,
    ) -> glommio::Task<()> {
        self.busy.set(true);
        self.started_at.set(Some(std::time::Instant::now()));
        self.logged.set(0);
        self.logged_since_attempt.set(0);
        let me = self.clone();
        glommio::spawn_local(async move {
            // A snapshot never stands ahead of the log it continues. A batch stuck for lack
            // of room waits for the operator to free space (seconds or more): looked at less
            // often.
            while slot.written_lsn() < lsn {
                let ms = if slot.stuck() { 100 } else { 1 };
                glommio::timer::sleep(std::time::Duration::from_millis(ms)).await;
            }
            let started = std::time::Instant::now();
            let dir = me.dir.clone();
            let fault = me.fault.clone();
            let (written, released, image_bytes) =
                crate::poke::poked(glommio::executor().spawn_blocking(move || {
                    let (kept, released) =
                        write_with_reserve(&dir, lsn, &image, &marks, fault.as_ref());
                    (kept, released, image.len())
                }))
                .await;
            (me.release_memory)();
            me.last_image_bytes.set(image_bytes);
            if released {
                tracing::info!(
                    target: "flo::snapshot",
                    shard = me.shard,
                    "the snapshot at LSN {lsn} found no room and used the reserve \
                     ({RESERVE_FILE}), made again once there is room"
                );
            }
            let kept = match written {
                Ok(kept) => kept,
                Err(e) => {
                    tracing::warn!(
                        target: "flo::snapshot",
                        shard = me.shard,
                        "cannot write the snapshot at LSN {lsn}: {e}; the log is kept whole \
                         and the next snapshot tries again"
                    );
                    // Not left behind half written (on a full disk, what it took is back).
                    let dir = me.dir.clone();
                    let cleaned = crate::poke::poked(
                        glommio::executor().spawn_blocking(move || clean_temporaries(&dir)),
                    )
                    .await;
                    if let Err(e) = cleaned {
                        tracing::warn!(
                            target: "flo::snapshot",
                            shard = me.shard,
                            "cannot remove a snapshot's temporary file: {e}"
                        );
                    }
                    me.busy.set(false);
                    return;
                }
            };
            {
                let mut info = me.info.borrow_mut();
                info.snapshot_lsn = lsn;
                info.snapshot_at_ms = now_ms();
                info.snapshot_pause_ms = pause_ms;
                info.snapshot_write_ms = started.elapsed().as_millis() as u64;
            }
            *me.kept.borrow_mut() = kept.clone();
            // Replay from the older of the two snapshots kept (the newest may prove
            // damaged; with one only, from the start) and the archive records of retained
            // runs need their records.
            let replay_from = match kept.as_slice() {
                [_, older, ..] => older + 1,
                _ => 1,
            };
            let needed_from = retained_from.map_or(replay_from, |r| r.min(replay_from));
            let segments = map.segments();
            let doomed: Vec<PathBuf> = segments
                .windows(2)
                .filter(|w| w[1].0 <= needed_from)
                .map(|w| w[0].1.clone())
                .collect();
            if let Some(keep_from) = segments.get(doomed.len()).map(|s| s.0)
                && !doomed.is_empty()
            {
                map.drop_before(keep_from);
                let dir = me.dir.clone();
                let removed = crate::poke::poked(glommio::executor().spawn_blocking(
                    move || -> io::Result<()> {
                        for path in &doomed {
                            fs::remove_file(path)?;
                        }
                        fs::File::open(&dir)?.sync_all()
                    },
                ))
                .await;
                if let Err(e) = removed {
                    tracing::warn!(
                        target: "flo::snapshot",
                        shard = me.shard,
                        "cannot delete old log segments: {e}"
                    );
                }
            }
            // The reserve first (sized for this image), then the log: a writer short of
            // space looks again now.
            let bytes = reserve::bytes_for(image_bytes);
            let (dir, fault) = (me.dir.clone(), me.fault.clone());
            let reserved = crate::poke::poked(
                glommio::executor()
                    .spawn_blocking(move || reserve::keep(&dir, bytes, fault.as_ref())),
            )
            .await;
            me.reserved(bytes, reserved);
            slot.space_freed();
            // Measured off the shard thread (a directory listing).
            let dir = me.dir.clone();
            let bytes =
                crate::poke::poked(glommio::executor().spawn_blocking(move || disk_bytes(&dir)))
                    .await;
            me.info.borrow_mut().disk_bytes = bytes;
            me.busy.set(false);
            inbox.push(me.storage(map.count()));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_file_round_trips_and_any_damage_is_detected() {
        let marks = vec![(1, vec![(1, 0), (40, 70_000)])];
        let bytes = encode(99, b"the image", &marks);
        let loaded = decode(&bytes).unwrap();
        assert_eq!((loaded.lsn, loaded.image), (99, &b"the image"[..]));
        assert_eq!(loaded.marks, marks);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad).is_err(), "a flip at byte {i} went unnoticed");
        }
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn writing_keeps_the_newest_two() {
        let dir = tempfile::tempdir().unwrap();
        for lsn in [10, 20, 30] {
            let image = Image::from(b"x".to_vec());
            let kept = write(dir.path(), lsn, &image, &Vec::new(), None).unwrap();
            assert!(kept.len() <= SNAPSHOTS_KEPT);
        }
        let on_disk: Vec<u64> = list(dir.path()).unwrap().iter().map(|s| s.0).collect();
        assert_eq!(on_disk, vec![30, 20]);
        assert_eq!(parse_name(&file_name(7)), Some(7));
        assert_eq!(parse_name("snapshot-7.snap"), None);
    }
}
