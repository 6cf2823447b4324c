//! Writes batches of the shard's log to segment files with O_DIRECT and O_DSYNC: one write
//! per batch, durable when it returns (it did what a write and an `fdatasync` did, in one
//! trip into the kernel), each batch starting on a block boundary and padded to the next.
//! The shard loop hands over whatever the engine appended while the previous batches were
//! being written (group commit); the writer answers with `Input::Durable`.
//!
//! **Writes in flight.** Up to `--log-writes` batches (`LOG_WRITES_DEFAULT`) are written
//! at once, each at its own place: a disk syncs two writes about as fast as one, so a
//! record that comes while a batch is being written starts its own write instead of
//! waiting for that one to end. They are acknowledged in order: a batch is durable once it
//! and every batch before it are written. A crash can then leave a batch torn or missing
//! with the next one whole; recovery reads that as a torn tail (nothing in either was
//! acknowledged), as long as no more batches follow than were in flight. A segment rolls
//! only once every write to it has ended.
//!
//! **Written ahead.** When it has nothing to write, the writer writes zeros a little ahead
//! of its appends (`FILL_CHUNK_BYTES` at a time, written beside the batches: a batch waits
//! for a slice only if it would reach into it):
//! an append then overwrites blocks the file system has already written, and its sync
//! writes no metadata (into space allocated but never written, each sync also records the
//! space as written: about a third of the sync's time on this machine's disk). Zeros read
//! as padding, so recovery reads them as it reads allocated space.
//!
//! **Disk full.** The next segment's file is made ahead, by a task beside the writes,
//! under a name recovery never reads (`SPARE_FILE`), once the current segment is half
//! full, and renamed at rollover (which waits for it). The directory sync that makes the
//! name durable goes on beside the new segment's first writes, which are acknowledged once
//! it ended (`Naming`).
//! When there is no room for it, the shard hears `DiskSpace::Full` while half a segment of
//! room is left for the work in flight, and becomes read-only; the writer tries again every
//! `SPACE_RETRY_MS` and as soon as a snapshot deleted segments, and says `Available` once
//! it succeeds. A batch that does not fit the segment when there is no next one (taken
//! before the shard knew) goes into the segment grown with room the snapshot reserve lends
//! (`SegmentWriter::grow`). A batch write that finds no space is kept and written again
//! later (nothing in it was acknowledged); a write failed otherwise (its sync among it),
//! or any other error, stops the process: a sync is never retried.

use crate::fault_disk::FaultDisk;
use crate::inbox::{Inbox, Signal};
use crate::log_reader::LogMap;
use crate::metrics::ShardMetrics;
use crate::poke::poked;
use crate::reserve::is_no_space;
use flo_engine::{DiskSpace, Input};
use flo_ual::{Batch, RecoveredLog, align_up, segment_file_name};
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

/// Batches written at once (`--log-writes`): two, where the disk syncs two writes about as
/// fast as one (measured: 7,800 O_DSYNC writes a second one at a time, 15,200 two at a
/// time, with the same latency).
pub const LOG_WRITES_DEFAULT: usize = 2;
/// The most `--log-writes` may say: recovery takes up to this many batches after a torn
/// one as the crash's tail (`flo_ual::BATCHES_IN_FLIGHT_MAX`).
pub const LOG_WRITES_MAX: usize = flo_ual::BATCHES_IN_FLIGHT_MAX;

/// The next segment's file, allocated ahead; renamed to its segment name at rollover.
/// Recovery lists `*.ual` files only, so one left by a crash is never read as a segment;
/// the writer removes it when it opens the log (it may hold records of a segment whose
/// rename the crash lost: none of them was acknowledged).
pub(crate) const SPARE_FILE: &str = "next-segment.spare";
/// While the disk is full, room for the next segment is looked for this often.
const SPACE_RETRY_MS: u64 = 1000;
/// Zeros written ahead of the appends at a time (`SegmentWriter::fill_ahead`), and how
/// far ahead at least: about 30 ms of appends at 30 MB/s, and little for a server that
/// writes little.
const FILL_CHUNK_BYTES: u64 = 256 << 10;
const FILL_AHEAD_BYTES: u64 = 1 << 20;

/// Why a write or the making of room failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LogWriteError {
    /// ENOSPC or EDQUOT before anything was synced: nothing in the batch was
    /// acknowledged, it may be written again once there is room.
    #[error("no space for the log: {0}")]
    NoSpace(io::Error),
    /// Anything else, and every failed sync (a write's, or an `fdatasync`: the kernel may
    /// have dropped what it could not write; a retried sync would report success over lost
    /// data).
    #[error("{0}")]
    Fatal(io::Error),
}

impl LogWriteError {
    fn into_io(self) -> io::Error {
        match self {
            LogWriteError::NoSpace(e) | LogWriteError::Fatal(e) => e,
        }
    }
}

fn to_io(e: glommio::GlommioError<()>) -> io::Error {
    // Keeps the error's kind (StorageFull, QuotaExceeded): glommio's conversion does.
    io::Error::from(e)
}

/// An error of an operation that may be tried again when it is for lack of space.
fn retryable(e: glommio::GlommioError<()>) -> LogWriteError {
    let e = to_io(e);
    match is_no_space(&e) {
        true => LogWriteError::NoSpace(e),
        false => LogWriteError::Fatal(e),
    }
}

/// An error of a sync: never tried again.
fn fatal(e: glommio::GlommioError<()>) -> LogWriteError {
    LogWriteError::Fatal(to_io(e))
}

async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = Directory::open(dir).await.map_err(to_io)?;
    d.sync().await.map_err(to_io)?;
    d.close().await.map_err(to_io)
}

/// Opens a segment file (or the spare) for O_DIRECT writes that return once durable
/// (`O_DSYNC`: the data, what the file system needs to find it, and the disk's cache
/// flushed). One write then does what a write and an `fdatasync` did, without coming back
/// between them or handing the sync to io_uring's worker thread.
async fn open_segment(path: PathBuf) -> Result<DmaFile, LogWriteError> {
    open_file(path, libc::O_DSYNC).await
}

async fn open_file(path: PathBuf, flags: i32) -> Result<DmaFile, LogWriteError> {
    poked(
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .custom_flags(flags)
            .dma_open(path),
    )
    .await
    .map_err(retryable)
}

/// Gives `file` the segment size (it may have it already: the segment recovery continues).
async fn allocate(
    file: &DmaFile,
    segment_bytes: u64,
    fault: Option<&FaultDisk>,
) -> Result<(), LogWriteError> {
    let size = poked(file.file_size()).await.map_err(retryable)?;
    if size >= segment_bytes {
        return Ok(());
    }
    if let Some(fault) = fault.cloned() {
        let more = segment_bytes - size;
        poked(glommio::executor().spawn_blocking(move || fault.check(more)))
            .await
            .map_err(LogWriteError::NoSpace)?;
    }
    poked(file.pre_allocate(segment_bytes, false))
        .await
        .map_err(retryable)
}

/// Makes the next segment's file (allocated and synced, under `SPARE_FILE`). When it
/// cannot get space, the file is removed: what it got goes back to the disk.
async fn make_spare(
    dir: &Path,
    segment_bytes: u64,
    fault: Option<&FaultDisk>,
) -> Result<DmaFile, LogWriteError> {
    let file = open_segment(dir.join(SPARE_FILE)).await?;
    if let Err(e) = allocate(&file, segment_bytes, fault).await {
        let removed = poked(file.remove()).await;
        let _ = poked(file.close()).await;
        return match removed {
            Ok(()) => Err(e),
            Err(r) => Err(LogWriteError::Fatal(io::Error::other(format!(
                "{e}; and cannot remove {SPARE_FILE}: {r}"
            )))),
        };
    }
    poked(file.fdatasync()).await.map_err(fatal)?;
    Ok(file)
}

/// Work of the writer's that goes on beside its batch writes; the slot's signal says
/// when it ended.
struct Beside<T> {
    task: glommio::Task<Result<T, LogWriteError>>,
    /// Set once the task's outcome is ready.
    ended: Rc<Cell<bool>>,
}

impl<T: 'static> Beside<T> {
    fn spawn(
        done: Rc<LogSlot>,
        work: impl std::future::Future<Output = Result<T, LogWriteError>> + 'static,
    ) -> Self {
        let ended = Rc::new(Cell::new(false));
        let told = ended.clone();
        let task = glommio::spawn_local(async move {
            let outcome = work.await;
            told.set(true);
            done.signal.notify();
            outcome
        });
        Beside { task, ended }
    }

    /// Whether its outcome is to be taken now: it ended, or the taker waits for it.
    fn over(&self, wait: bool) -> bool {
        wait || self.ended.get()
    }
}

/// The next segment's file.
enum Spare {
    None,
    Making(Beside<DmaFile>),
    Ready(DmaFile),
}

/// A rollover's directory sync (the new segment's name made durable), going on beside the
/// first writes to that segment (`SegmentWriter::roll`).
struct Naming {
    /// The new segment's first LSN.
    segment: u64,
    sync: Beside<()>,
}

/// A slice of zeros being written ahead of the appends (`SegmentWriter::fill_ahead`).
struct Fill {
    from: u64,
    len: u64,
    write: Beside<()>,
}

pub(crate) struct SegmentWriter {
    dir: PathBuf,
    /// The segment being written: its first LSN (its name) and its file.
    first_lsn: u64,
    /// Shared with the writes in flight (`SegmentWriter::start`).
    file: Rc<DmaFile>,
    /// Where the next batch goes: past every batch written or being written.
    offset: u64,
    segment_bytes: u64,
    segments: u32,
    /// The next segment's file (`SPARE_FILE`), made beside the writes.
    spare: Spare,
    /// The current segment holds records or zeros up to here (`fill_ahead`).
    filled: u64,
    /// The current segment opened without O_DSYNC, for the zeros (`fill_ahead`): they need
    /// not be durable by themselves, and a sync per slice held up the batch behind it.
    /// With the segment's first LSN; opened on the first slice.
    zeros: Option<(u64, Rc<DmaFile>)>,
    /// A slice of zeros being written: batches below it go on meanwhile.
    fill: Option<Fill>,
    /// The last rollover's directory sync, while it goes on.
    naming: Option<Naming>,
    /// Tests: a disk of a set capacity.
    fault: Option<FaultDisk>,
    /// Bytes the current segment's file holds past `segment_bytes`: lent by the snapshot
    /// reserve for batches that found no room for the next segment (`grow`).
    grown: u64,
}

impl SegmentWriter {
    /// Continues the recovered log: appends go after its last valid record.
    pub async fn open(
        dir: &Path,
        log: &RecoveredLog,
        segment_bytes: u64,
        fault: Option<FaultDisk>,
    ) -> io::Result<Self> {
        let (first_lsn, offset, segments) = match log.segments.last() {
            Some(seg) => (
                seg.first_lsn,
                align_up(log.tail_end),
                log.segments.len() as u32,
            ),
            None => (log.last_lsn + 1, 0, 1),
        };
        let name = segment_file_name(first_lsn);
        let file = open_segment(dir.join(&name))
            .await
            .map_err(LogWriteError::into_io)?;
        let mut writer = SegmentWriter {
            dir: dir.to_path_buf(),
            first_lsn,
            file: Rc::new(file),
            offset,
            segment_bytes,
            segments,
            spare: Spare::None,
            filled: offset,
            zeros: None,
            fill: None,
            naming: None,
            fault,
            grown: 0,
        };
        allocate(&writer.file, segment_bytes, writer.fault.as_ref())
            .await
            .map_err(LogWriteError::into_io)?;
        let size = poked(writer.file.file_size()).await.map_err(to_io)?;
        writer.grown = size.saturating_sub(segment_bytes);
        poked(writer.file.fdatasync()).await.map_err(to_io)?;
        let spare = dir.join(SPARE_FILE);
        if spare.exists() {
            poked(glommio::io::remove(spare)).await.map_err(to_io)?;
        }
        poked(sync_dir(dir)).await?;
        Ok(writer)
    }

    pub fn segments(&self) -> u32 {
        self.segments
    }

    /// Whether the next segment's file should be made now: the current one is half full.
    pub fn wants_room(&self) -> bool {
        matches!(self.spare, Spare::None) && self.offset >= self.segment_bytes / 2
    }

    /// Starts making the next segment's file beside the writes (it allocates and syncs a
    /// file: milliseconds, tens of them on a busy disk, that acknowledgements and batches
    /// need not wait for). `done` hears when it is made or failed (`settle_room`).
    pub fn start_room(&mut self, done: Rc<LogSlot>) {
        if !matches!(self.spare, Spare::None) {
            return;
        }
        let (dir, bytes, fault) = (self.dir.clone(), self.segment_bytes, self.fault.clone());
        self.spare = Spare::Making(Beside::spawn(done, async move {
            make_spare(&dir, bytes, fault.as_ref()).await
        }));
    }

    /// Takes the outcome of the next segment's file being made, once it ended (or, with
    /// `wait`, when it does). A failed one is gone: `wants_room` asks for it again.
    async fn settle_room(&mut self, wait: bool) -> Result<(), LogWriteError> {
        match &self.spare {
            Spare::Making(made) if made.over(wait) => {}
            _ => return Ok(()),
        }
        let Spare::Making(made) = std::mem::replace(&mut self.spare, Spare::None) else {
            unreachable!("matched just above")
        };
        self.spare = Spare::Ready(made.task.await?);
        Ok(())
    }

    /// Makes the next segment's file now, or waits for the one being made.
    pub async fn make_room(&mut self) -> Result<(), LogWriteError> {
        self.settle_room(true).await?;
        if matches!(self.spare, Spare::None) {
            self.spare =
                Spare::Ready(make_spare(&self.dir, self.segment_bytes, self.fault.as_ref()).await?);
        }
        Ok(())
    }

    /// Starts writing the next slice of zeros when the appends came within
    /// `FILL_AHEAD_BYTES` of the zeros' end and no slice is being written. Slices are whole
    /// (`FILL_CHUNK_BYTES`), never a block at a time: each slice written makes the next
    /// batch's sync record its space as written, so they must be few. Not durable by
    /// themselves (a plain handle): a crash leaves zeros or space never written, which read
    /// the same. Batches below the slice are written meanwhile (`clear_of_zeros`); `done`
    /// hears when it ends (`settle_fill`). Returns whether it started one.
    pub async fn fill_ahead(&mut self, done: Rc<LogSlot>) -> Result<bool, LogWriteError> {
        if self.fill.is_some() {
            return Ok(false);
        }
        self.filled = self.filled.max(self.offset);
        if self.filled >= self.segment_bytes.min(self.offset + FILL_AHEAD_BYTES) {
            return Ok(false);
        }
        let len = FILL_CHUNK_BYTES.min(self.segment_bytes - self.filled);
        if self
            .zeros
            .as_ref()
            .is_none_or(|(lsn, _)| *lsn != self.first_lsn)
        {
            let path = self.dir.join(segment_file_name(self.first_lsn));
            let file = Rc::new(open_file(path, 0).await?);
            // No slice is in flight: nothing else holds the old one.
            if let Some((_, old)) = self.zeros.replace((self.first_lsn, file))
                && let Ok(old) = Rc::try_unwrap(old)
            {
                poked(old.close()).await.map_err(fatal)?;
            }
        }
        let (_, zeros) = self.zeros.as_ref().expect("opened just above");
        let zeros = zeros.clone();
        let mut buf = zeros.alloc_dma_buffer(len as usize);
        buf.as_bytes_mut().fill(0);
        let from = self.filled;
        let write = Beside::spawn(done, async move {
            match poked(zeros.write_at(buf, from)).await {
                Ok(written) if written as u64 == len => Ok(()),
                Ok(written) => Err(LogWriteError::NoSpace(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("short write of zeros: {written} of {len} bytes"),
                ))),
                Err(e) => Err(retryable(e)),
            }
        });
        self.fill = Some(Fill { from, len, write });
        Ok(true)
    }

    /// Takes the outcome of the slice of zeros being written, once it ended (or, with
    /// `wait`, when it does).
    pub async fn settle_fill(&mut self, wait: bool) -> Result<(), LogWriteError> {
        let Some(fill) = self.fill.take_if(|f| f.write.over(wait)) else {
            return Ok(());
        };
        fill.write.task.await?;
        self.filled = self.filled.max(fill.from + fill.len);
        Ok(())
    }

    /// Whether `batch` (which fits the segment) ends before the slice of zeros being
    /// written, if one is: a batch never goes where zeros are still on their way.
    fn clear_of_zeros(&self, batch: &Batch) -> bool {
        self.fill
            .as_ref()
            .is_none_or(|f| self.offset + align_up(batch.bytes.len() as u64) <= f.from)
    }

    /// Moves on to a new segment starting at `first_lsn`: the spare file, made now if it
    /// was not, takes its name. The directory's sync that makes the name durable goes on
    /// beside the writes to the new segment (`Naming`); `done` hears when it ends.
    async fn roll(&mut self, first_lsn: u64, done: Rc<LogSlot>) -> Result<(), LogWriteError> {
        debug_assert!(
            self.fill.is_none(),
            "a segment rolls once its zeros are written"
        );
        self.settle_naming(true).await?;
        self.make_room().await?;
        let Spare::Ready(spare) = std::mem::replace(&mut self.spare, Spare::None) else {
            unreachable!("made just above")
        };
        let name = segment_file_name(first_lsn);
        if let Err(e) = poked(spare.rename(self.dir.join(&name))).await {
            self.spare = Spare::Ready(spare);
            return Err(retryable(e));
        }
        let old = std::mem::replace(&mut self.file, Rc::new(spare));
        let dir = self.dir.clone();
        let sync = Beside::spawn(done, async move {
            // Every write to it has ended (`fits`): no copy of it is left.
            if let Ok(old) = Rc::try_unwrap(old) {
                poked(old.close()).await.map_err(fatal)?;
            }
            poked(sync_dir(&dir)).await.map_err(LogWriteError::Fatal)
        });
        self.naming = Some(Naming {
            segment: first_lsn,
            sync,
        });
        self.first_lsn = first_lsn;
        self.offset = 0;
        self.filled = 0;
        self.grown = 0;
        self.segments += 1;
        Ok(())
    }

    /// There is no room for the next segment, and a batch of `batch_bytes` does not fit the
    /// current one (the shard took it before it knew): the current segment grows by the
    /// batch, with room the snapshot reserve lends (`reserve::lend_to`). No snapshot could
    /// get past the batch otherwise (one never stands ahead of the log), so it is lent even
    /// if what is left may be short for the next image. Whether it grew (false: the reserve
    /// holds less, or is gone). Only while no write to the segment is in flight.
    async fn grow(&mut self, batch_bytes: usize) -> Result<bool, LogWriteError> {
        let end = self.offset + align_up(batch_bytes as u64);
        let (dir, fault) = (self.dir.clone(), self.fault.clone());
        let path = self.dir.join(segment_file_name(self.first_lsn));
        let lent = poked(
            glommio::executor()
                .spawn_blocking(move || crate::reserve::lend_to(&dir, &path, end, fault.as_ref())),
        )
        .await;
        // An error other than a full disk stops the process, as any in the writer does.
        if !lent.map_err(LogWriteError::Fatal)? {
            return Ok(false);
        }
        poked(self.file.fdatasync()).await.map_err(fatal)?;
        self.grown = end.max(self.segment_bytes) - self.segment_bytes;
        Ok(true)
    }

    /// Takes the outcome of the last rollover's directory sync, once it ended (or, with
    /// `wait`, when it does): the new segment's writes may be acknowledged from then on.
    async fn settle_naming(&mut self, wait: bool) -> Result<(), LogWriteError> {
        match self.naming.take_if(|n| n.sync.over(wait)) {
            Some(naming) => naming.sync.task.await,
            None => Ok(()),
        }
    }

    /// Whether `write`'s segment has its name for good (a write to a segment whose
    /// directory sync is still going on is not acknowledged: a crash could leave its
    /// records under the spare's name, where recovery never looks).
    fn named(&self, write: &Write) -> bool {
        self.naming
            .as_ref()
            .is_none_or(|n| n.segment != write.segment)
    }

    /// Whether `batch` goes in the current segment (else the segment rolls first, once no
    /// write to it is in flight).
    fn fits(&self, batch: &Batch) -> bool {
        self.offset == 0
            || self.offset + align_up(batch.bytes.len() as u64) <= self.segment_bytes + self.grown
    }

    /// Starts writing `batch` in the current segment, after what was written or started
    /// before it (the segment must have room: `fits`). The write runs by itself; it is
    /// durable when the returned `Write`'s outcome is.
    fn start(&mut self, batch: Batch) -> Write {
        debug_assert!(self.fits(&batch));
        let write = Write {
            segment: self.first_lsn,
            offset: self.offset,
            batch,
            outcome: Rc::default(),
        };
        self.offset += align_up(write.batch.bytes.len() as u64);
        write
    }

    /// Writes `write`'s batch at its place (again, after it found no space): sets its
    /// outcome and notifies `done` once the write returns.
    fn launch(&self, write: &Write, done: Rc<LogSlot>) {
        let file = self.file.clone();
        let padded = align_up(write.batch.bytes.len() as u64);
        let mut buf = file.alloc_dma_buffer(padded as usize);
        let bytes = buf.as_bytes_mut();
        let len = write.batch.bytes.len();
        bytes[..len].copy_from_slice(&write.batch.bytes);
        bytes[len..].fill(0);
        let (offset, outcome) = (write.offset, write.outcome.clone());
        glommio::spawn_local(async move {
            let writing = std::time::Instant::now();
            // Durable when it returns (the file is O_DSYNC): an error other than no space
            // may have left the batch half on disk, and stops the process.
            let result = match poked(file.write_at(buf, offset)).await {
                Ok(written) if written as u64 == padded => Ok(writing.elapsed()),
                // A short write is how a file system reports running out part way.
                Ok(written) => Err(LogWriteError::NoSpace(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("short write: {written} of {padded} bytes"),
                ))),
                Err(e) => Err(retryable(e)),
            };
            drop(file);
            *outcome.borrow_mut() = Some(result);
            done.signal.notify();
        })
        .detach();
    }

    /// Where `write`'s records are, for `map` (once it is durable).
    fn note(&self, write: &Write, map: &LogMap) {
        let path = self.dir.join(segment_file_name(write.segment));
        map.note_batch(write.segment, &path, write.offset, &write.batch);
    }

    /// Writes one batch, durable when this returns; `map` learns where its records are.
    /// Returns how long the write took. On `NoSpace` the batch may be written again (at
    /// the same place).
    #[cfg(test)]
    pub async fn write(&mut self, batch: &Batch, map: &LogMap) -> Result<Duration, LogWriteError> {
        let slot = Rc::new(LogSlot::new(1));
        if !self.fits(batch) {
            // As the writer's loop does it: the batch in the slot meanwhile.
            *slot.batch.borrow_mut() = Some(batch.clone());
            let rolled = roll_or_grow(self, batch.first_lsn, &slot, 0).await;
            slot.batch.borrow_mut().take();
            rolled.map_err(LogWriteError::NoSpace)?;
        }
        let write = self.start(batch.clone());
        self.launch(&write, slot.clone());
        while write.outcome.borrow().is_none() {
            slot.signal.wait().await;
        }
        let outcome = write.outcome.borrow_mut().take().expect("just seen");
        match outcome {
            Ok(took) => {
                self.settle_naming(true).await?;
                self.note(&write, map);
                Ok(took)
            }
            Err(e) => {
                // Its place is taken again by the same batch.
                self.offset = write.offset;
                Err(e)
            }
        }
    }
}

/// A batch being written, or written and waiting for the batches before it.
struct Write {
    batch: Batch,
    /// The first LSN of its segment, and its place there.
    segment: u64,
    offset: u64,
    /// Set when its write returns: how long it took, or why it failed.
    outcome: Rc<RefCell<Option<Result<Duration, LogWriteError>>>>,
}

/// The hand-over between the shard loop and the writer.
pub(crate) struct LogSlot {
    /// A batch handed over and not yet started.
    batch: RefCell<Option<Batch>>,
    /// Batches started and not yet durable.
    in_flight: Cell<usize>,
    /// The most batches written at once (`--log-writes`).
    writes: usize,
    /// A batch found no space: it waits to be written again.
    stuck: Cell<bool>,
    /// The buffer of the last batch written, reused for the next one.
    spare: RefCell<Vec<u8>>,
    signal: Signal,
    /// The last batch written: (its last LSN, segments), until the loop takes it.
    durable: Cell<Option<(u64, u32)>>,
    /// Every record up to this LSN is written and synced.
    written: Cell<u64>,
    /// `written` moved: the acknowledged mark follows it (`acked_mark_loop`).
    mark: Signal,
}

impl LogSlot {
    /// A slot for a writer that writes up to `writes` batches at once.
    pub fn new(writes: usize) -> LogSlot {
        LogSlot {
            batch: RefCell::default(),
            in_flight: Cell::default(),
            writes: writes.clamp(1, LOG_WRITES_MAX),
            stuck: Cell::default(),
            spare: RefCell::default(),
            signal: Signal::default(),
            durable: Cell::default(),
            written: Cell::default(),
            mark: Signal::default(),
        }
    }

    /// Whether the writer takes no batch now: one handed over waits, or as many as it
    /// writes at once are being written.
    pub fn busy(&self) -> bool {
        self.batch.borrow().is_some() || self.in_flight.get() >= self.writes
    }

    /// Whether a batch cannot be written for lack of space (until there is).
    pub fn stuck(&self) -> bool {
        self.stuck.get()
    }

    /// What became durable since the last call, as the engine's input.
    pub fn take_durable(&self) -> Option<Input> {
        let (lsn, segments) = self.durable.take()?;
        Some(Input::Durable { lsn, segments })
    }

    /// Every record up to this LSN is on disk.
    pub fn written_lsn(&self) -> u64 {
        self.written.get()
    }

    /// At start-up: the recovered log is on disk up to `lsn`.
    pub fn set_written(&self, lsn: u64) {
        self.written.set(lsn);
    }

    pub fn take_spare(&self) -> Vec<u8> {
        std::mem::take(&mut *self.spare.borrow_mut())
    }

    /// Hands `batch` to the writer (which must not be busy).
    pub fn hand_over(&self, batch: Batch) {
        debug_assert!(!self.busy());
        *self.batch.borrow_mut() = Some(batch);
        self.signal.notify();
    }

    /// Files were deleted: a writer short of space looks again at once.
    pub fn space_freed(&self) {
        self.signal.notify();
    }
}

/// The writer: starts each batch handed over (while fewer than the slot's `writes` are in
/// flight), tells the loop what is durable in order; keeps the next segment's file ready
/// and tells the engine when the disk is full, or no longer.
pub(crate) async fn writer_loop(
    slot: Rc<LogSlot>,
    mut writer: SegmentWriter,
    map: Rc<LogMap>,
    inbox: Rc<Inbox>,
    shard: u32,
    metrics: std::sync::Arc<ShardMetrics>,
) {
    let mut space = DiskSpace::Available;
    let mut filling = true;
    let mut writes: VecDeque<Write> = VecDeque::new();
    // Writes that found no space go again after the next wait.
    let mut retry = false;
    // The next segment's file could not be made: the disk is full (for the engine) until it
    // is, made again in the loop after each wait.
    let mut room_short: Option<io::Error> = None;
    loop {
        if std::mem::take(&mut retry) {
            for write in writes.iter().filter(|w| w.no_space().is_some()) {
                write.outcome.borrow_mut().take();
                writer.launch(write, slot.clone());
            }
        }
        // What goes on beside the batches: the last rollover's directory sync (first: the
        // writes it holds are acknowledged just below), the zeros, the next segment's file.
        if let Err(e) = writer.settle_naming(false).await {
            exit_fatal(shard, e.into_io());
        }
        let mut outcome = settle(&slot, &mut writes, &writer, &map, &inbox, shard, &metrics);
        if let Err(e) = writer.settle_fill(false).await {
            filling = zeros_failed(shard, e);
        }
        match writer.settle_room(false).await {
            Ok(()) if matches!(writer.spare, Spare::Ready(_)) => room_short = None,
            Ok(()) => {}
            Err(LogWriteError::NoSpace(e)) => room_short = Some(e),
            Err(LogWriteError::Fatal(e)) => exit_fatal(shard, e),
        }
        if outcome.is_ok() && startable(&slot, &writes, &writer) {
            // Not the segment's: it rolls (no write is in flight). The batch stays in the
            // slot meanwhile, so nothing is handed over behind it.
            let roll = slot
                .batch
                .borrow()
                .as_ref()
                .filter(|b| !writer.fits(b))
                .map(|b| b.first_lsn);
            if let Some(first_lsn) = roll {
                match roll_or_grow(&mut writer, first_lsn, &slot, shard).await {
                    Ok(short) => room_short = short,
                    Err(e) => {
                        if !slot.stuck.replace(true) {
                            inbox.poke();
                        }
                        outcome = Err(e);
                    }
                }
            }
            if outcome.is_ok()
                && let Some(batch) = slot.batch.borrow_mut().take()
            {
                let write = writer.start(batch);
                writer.launch(&write, slot.clone());
                writes.push_back(write);
                slot.in_flight.set(writes.len());
                slot.stuck.set(false);
            }
        }
        if outcome.is_ok() && writer.wants_room() {
            if room_short.is_none() {
                writer.start_room(slot.clone());
            } else {
                // Short of room: tried here, after each wait, until there is.
                match writer.make_room().await {
                    Ok(()) => room_short = None,
                    Err(LogWriteError::NoSpace(e)) => room_short = Some(e),
                    Err(LogWriteError::Fatal(e)) => exit_fatal(shard, e),
                }
            }
        }
        // Full for the engine while a write or the next segment's file found no room (the
        // batches still go into what is left of the segment).
        let short = room_short
            .as_ref()
            .filter(|_| outcome.is_ok())
            .map(|e| Err(io::Error::new(e.kind(), e.to_string())));
        space = tell_space(space, short.as_ref().unwrap_or(&outcome), shard, &inbox);
        let idle = writes.is_empty() && slot.batch.borrow().is_none();
        // Nothing to write: zeros ahead, a slice at a time (batches that come meanwhile go
        // below it).
        if filling
            && outcome.is_ok()
            && room_short.is_none()
            && idle
            && let Err(e) = writer.fill_ahead(slot.clone()).await
        {
            filling = zeros_failed(shard, e);
        }
        if outcome.is_ok() && startable(&slot, &writes, &writer) {
            continue;
        }
        // A write ends, a batch comes; while the disk is full, another look every second
        // (at once when a snapshot deleted segments).
        match (space, &outcome) {
            (DiskSpace::Full, _) | (_, Err(_)) => {
                let wait = glommio::timer::sleep(Duration::from_millis(SPACE_RETRY_MS));
                futures_lite::future::or(slot.signal.wait(), async {
                    wait.await;
                })
                .await;
                retry = true;
            }
            (DiskSpace::Available, Ok(())) => slot.signal.wait().await,
        }
    }
}

/// Rolls the segment for the batch in the slot (which does not fit the current one) or,
/// without room for the next segment, grows the current one with room the snapshot reserve
/// lends (then the room is still short: the error). Err: no room either way (the batch
/// waits).
async fn roll_or_grow(
    writer: &mut SegmentWriter,
    first_lsn: u64,
    slot: &Rc<LogSlot>,
    shard: u32,
) -> Result<Option<io::Error>, io::Error> {
    let short = match writer.roll(first_lsn, slot.clone()).await {
        Ok(()) => return Ok(None),
        Err(LogWriteError::NoSpace(e)) => e,
        Err(LogWriteError::Fatal(e)) => exit_fatal(shard, e),
    };
    let len = slot.batch.borrow().as_ref().map_or(0, |b| b.bytes.len());
    match writer.grow(len).await {
        Ok(true) => {
            tracing::warn!(
                target: "flo::storage",
                shard,
                "no room for the next log segment ({short}): the current one grew by a batch \
                 taken before that was known, with room from {}",
                crate::reserve::RESERVE_FILE
            );
            Ok(Some(short))
        }
        Ok(false) | Err(LogWriteError::NoSpace(_)) => {
            if !slot.stuck() {
                tracing::warn!(
                    target: "flo::storage",
                    shard,
                    "no room for the next log segment ({short}), and {} cannot hold the \
                     {len}-byte batch that needs it: the batch waits for room (free disk \
                     space, see docs/operations.md, \"Disk full\")",
                    crate::reserve::RESERVE_FILE
                );
            }
            Err(short)
        }
        Err(LogWriteError::Fatal(e)) => exit_fatal(shard, e),
    }
}

/// Whether the batch handed over can start now: a write is free, and its segment has room
/// below the zeros being written, or rolls first (only once no write to it is in flight).
fn startable(slot: &LogSlot, writes: &VecDeque<Write>, writer: &SegmentWriter) -> bool {
    writes.len() < slot.writes
        && slot.batch.borrow().as_ref().is_some_and(|b| {
            if writer.fits(b) {
                writer.clear_of_zeros(b)
            } else {
                writes.is_empty() && writer.fill.is_none()
            }
        })
}

/// The zeros could not be written: appends into space not filled are as durable, only
/// slower to sync, so they go on without (returns false: no more zeros); a failure other
/// than no space stops the process.
fn zeros_failed(shard: u32, e: LogWriteError) -> bool {
    match e {
        LogWriteError::NoSpace(e) => {
            tracing::warn!(
                target: "flo::storage",
                shard,
                "cannot write zeros ahead of the log ({e}); appends go on without"
            );
            false
        }
        LogWriteError::Fatal(e) => exit_fatal(shard, e),
    }
}

/// Acknowledges the writes that ended, in order: each durable once the ones before it
/// are. Stops the process on a failed sync; `Err` when the first write found no space.
fn settle(
    slot: &LogSlot,
    writes: &mut VecDeque<Write>,
    writer: &SegmentWriter,
    map: &LogMap,
    inbox: &Inbox,
    shard: u32,
    metrics: &ShardMetrics,
) -> io::Result<()> {
    if let Some(w) = writes.iter().find(|w| w.fatal()) {
        let Some(Err(LogWriteError::Fatal(e))) = w.outcome.borrow_mut().take() else {
            unreachable!("found fatal just above")
        };
        exit_fatal(shard, e);
    }
    let mut acked = None;
    while writes.front().is_some_and(|w| w.ok() && writer.named(w)) {
        let write = writes.pop_front().expect("just seen");
        let Some(Ok(took)) = write.outcome.borrow_mut().take() else {
            unreachable!("just seen ok")
        };
        let records = write.batch.last_lsn + 1 - write.batch.first_lsn;
        let bytes = align_up(write.batch.bytes.len() as u64);
        metrics.log_batch(records, bytes, took.as_nanos() as u64);
        writer.note(&write, map);
        acked = Some(write.batch);
    }
    slot.in_flight.set(writes.len());
    if let Some(batch) = acked {
        written(slot, batch, map.count(), inbox);
    }
    match writes.front().and_then(Write::no_space) {
        Some(e) => {
            if !slot.stuck.replace(true) {
                // A stop asked meanwhile need not wait for it (`ShardLoop::run`).
                inbox.poke();
            }
            Err(e)
        }
        None => Ok(()),
    }
}

impl Write {
    fn ok(&self) -> bool {
        matches!(&*self.outcome.borrow(), Some(Ok(_)))
    }

    fn fatal(&self) -> bool {
        matches!(&*self.outcome.borrow(), Some(Err(LogWriteError::Fatal(_))))
    }

    /// Why its write found no space, if it did.
    fn no_space(&self) -> Option<io::Error> {
        match &*self.outcome.borrow() {
            Some(Err(LogWriteError::NoSpace(e))) => Some(io::Error::new(e.kind(), e.to_string())),
            _ => None,
        }
    }
}

/// `batch`, the last of those acknowledged together, is written and synced, and every
/// batch before it: the loop learns it before its next input.
fn written(slot: &LogSlot, batch: Batch, segments: u32, inbox: &Inbox) {
    *slot.spare.borrow_mut() = batch.bytes;
    // Not queued behind the inputs waiting: the loop looks at it before each input, so
    // replies go out and the next batch is handed over without delay.
    slot.durable.set(Some((batch.last_lsn, segments)));
    slot.written.set(batch.last_lsn);
    slot.mark.notify();
    inbox.poke();
}

/// After an update of the acknowledged mark, the next waits at least this long: under
/// load the mark costs at most this many fdatasyncs of its own file a second (1000 / it),
/// and lags the acknowledgements by about this plus one sync.
const ACKED_MARK_SPACING_MS: u64 = 5;

/// Keeps the log's acknowledged mark (`flo_ual::ACKED_MARK_FILE`) following what is
/// synced, so recovery never cuts a synced record as a torn tail. The file is made at
/// its full size once; each update writes one of its two blocks in place and syncs it,
/// beside the segment writes (never before an acknowledgement: it costs them nothing).
/// A failure to update it is said once and the mark stays where it was (it only ever
/// protects less, never refuses a good log).
pub(crate) async fn acked_mark_loop(slot: std::rc::Rc<LogSlot>, dir: PathBuf, shard: u32) {
    let path = dir.join(flo_ual::ACKED_MARK_FILE);
    let file = match open_mark(&dir, &path).await {
        Ok(file) => file,
        Err(e) => {
            tracing::warn!(
                target: "flo::storage",
                shard,
                "cannot keep the acknowledged mark {}: {e}; recovery will not tell synced \
                 records from a torn tail",
                path.display()
            );
            return;
        }
    };
    let mut marked = 0u64;
    let mut seq = 0u64;
    loop {
        slot.mark.wait().await;
        let lsn = slot.written_lsn();
        if lsn <= marked {
            continue;
        }
        if let Err(e) = write_mark(&file, seq, lsn).await {
            tracing::warn!(
                target: "flo::storage",
                shard,
                "cannot update the acknowledged mark {}: {e}; it stays at LSN {marked}",
                path.display()
            );
            return;
        }
        marked = lsn;
        seq += 1;
        glommio::timer::sleep(Duration::from_millis(ACKED_MARK_SPACING_MS)).await;
    }
}

async fn open_mark(dir: &Path, path: &Path) -> io::Result<DmaFile> {
    let file = open_file(path.to_path_buf(), 0)
        .await
        .map_err(LogWriteError::into_io)?;
    let size = poked(file.file_size()).await.map_err(to_io)?;
    if size < flo_ual::ACKED_MARK_BYTES {
        poked(file.pre_allocate(flo_ual::ACKED_MARK_BYTES, false))
            .await
            .map_err(to_io)?;
        poked(file.fdatasync()).await.map_err(to_io)?;
        poked(sync_dir(dir)).await?;
    }
    Ok(file)
}

async fn write_mark(file: &DmaFile, seq: u64, lsn: u64) -> io::Result<()> {
    let (offset, filled) = flo_ual::acked_slot(seq, lsn);
    let mut buf = file.alloc_dma_buffer(flo_ual::ACKED_SLOT_BYTES);
    let bytes = buf.as_bytes_mut();
    bytes.fill(0);
    bytes[..filled.len()].copy_from_slice(&filled);
    let written = poked(file.write_at(buf, offset)).await.map_err(to_io)?;
    if written != flo_ual::ACKED_SLOT_BYTES {
        return Err(io::Error::other(format!("short write: {written} bytes")));
    }
    poked(file.fdatasync()).await.map_err(to_io)
}

/// Tells the engine when the disk became full (`outcome` is the lack of space) or has
/// room again; returns what it knows now.
fn tell_space(was: DiskSpace, outcome: &io::Result<()>, shard: u32, inbox: &Inbox) -> DiskSpace {
    let now = match outcome {
        Ok(()) => DiskSpace::Available,
        Err(_) => DiskSpace::Full,
    };
    if now == was {
        return now;
    }
    match outcome {
        Err(e) => tracing::warn!(
            target: "flo::storage",
            shard,
            "disk full ({e}); the shard is read-only (mutations answer unavailable, reads go \
             on) until space is freed"
        ),
        Ok(()) => tracing::info!(
            target: "flo::storage",
            shard,
            "disk space is back; the shard accepts writes again"
        ),
    }
    inbox.push(Input::DiskSpace(now));
    now
}

/// Nothing written after a failed write or sync can be trusted to be durable, and nothing
/// unsynced may be acknowledged: stop; recovery restores a clean log.
fn exit_fatal(shard: u32, e: io::Error) -> ! {
    tracing::error!(
        target: "flo::storage",
        shard,
        "cannot write the log: {e}; exiting"
    );
    crate::stderr::exit_after_flush(70)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flo_ual::LogBuffer;
    use std::fs;

    const SEGMENT: u64 = flo_ual::SEGMENT_BYTES_MIN;

    fn run<T>(test: impl std::future::Future<Output = T>) -> T {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .io_memory(1 << 20)
            .make()
            .expect("an executor")
            .run(test)
    }

    /// A new shard directory (removed with the returned guard).
    fn shard_dir() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("shard-000");
        fs::create_dir_all(&dir).unwrap();
        (tmp, dir)
    }

    /// The log in `dir`, recovered (its records read and dropped).
    fn recovered(dir: &Path) -> flo_ual::RecoveredLog {
        flo_ual::recover(dir, |_, _, _| Ok::<(), flo_ual::ApplyError>(())).unwrap()
    }

    /// A shard directory on a disk of `bytes` (the fault-injecting capacity file): its
    /// guard, the directory, the capacity file and the disk.
    fn capped_shard_dir(bytes: u64) -> (tempfile::TempDir, PathBuf, PathBuf, FaultDisk) {
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("data");
        let dir = data.join("shard-000");
        fs::create_dir_all(&dir).unwrap();
        let capacity = tmp.path().join("capacity");
        fs::write(&capacity, bytes.to_string()).unwrap();
        let fault = FaultDisk {
            capacity_file: capacity.clone(),
            data_dir: data,
        };
        (tmp, dir, capacity, fault)
    }

    /// A writer of `segment`-byte segments on the log in `dir` (on `fault`'s disk, if any).
    async fn opened(dir: &Path, segment: u64, fault: Option<FaultDisk>) -> (SegmentWriter, LogMap) {
        let log = recovered(dir);
        let map = LogMap::from_recovered(&log);
        let w = SegmentWriter::open(dir, &log, segment, fault)
            .await
            .unwrap();
        (w, map)
    }

    /// One record of ~3 KB: a batch of one block.
    fn batch(buf: &mut LogBuffer) -> Batch {
        buf.append(1, |p| p.extend_from_slice(&[7; 3000])).unwrap();
        buf.take(Vec::new()).unwrap()
    }

    /// Writes the next slice of zeros, if one is due; whether it was.
    async fn fill(w: &mut SegmentWriter) -> bool {
        let started = w.fill_ahead(Rc::new(LogSlot::new(1))).await.unwrap();
        w.settle_fill(true).await.unwrap();
        started
    }

    fn files(dir: &Path, ext: &str) -> Vec<String> {
        let mut found: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(ext))
            .collect();
        found.sort();
        found
    }

    /// Zeros go ahead of the appends in whole slices, at most `FILL_AHEAD_BYTES` plus one
    /// slice past them, never over a record; every record recovers, in this segment and
    /// the next (which starts filling from its start).
    #[test]
    fn zeros_go_ahead_of_the_appends_and_never_over_a_record() {
        let (_tmp, dir) = shard_dir();
        let segment = 4 * FILL_AHEAD_BYTES;
        run(async move {
            let (mut w, map) = opened(&dir, segment, None).await;
            let mut buf = LogBuffer::new(1);
            let mut slices = 0;
            while fill(&mut w).await {
                slices += 1;
            }
            assert_eq!(slices, FILL_AHEAD_BYTES / FILL_CHUNK_BYTES);
            assert_eq!(w.filled, FILL_AHEAD_BYTES);
            let per_segment = segment / 4096;
            for i in 1..=per_segment + 10 {
                w.write(&batch(&mut buf), &map).await.unwrap();
                let before = w.filled.max(w.offset);
                while fill(&mut w).await {}
                let slice = (w.filled - before) % FILL_CHUNK_BYTES;
                assert!(slice == 0 || w.filled == segment, "{i}: a part slice");
                assert!(
                    w.filled >= w.offset + FILL_AHEAD_BYTES.min(segment - w.offset)
                        && w.filled <= w.offset + FILL_AHEAD_BYTES + FILL_CHUNK_BYTES,
                    "{i}: filled {} offset {}",
                    w.filled,
                    w.offset
                );
            }
            assert_eq!(w.segments(), 2);
            let mut lsns = Vec::new();
            let log = flo_ual::recover(&dir, |lsn, _, payload| {
                assert_eq!(payload, &[7; 3000][..]);
                lsns.push(lsn);
                Ok::<(), flo_ual::ApplyError>(())
            })
            .unwrap();
            assert_eq!(lsns, (1..=per_segment + 10).collect::<Vec<_>>());
            assert!(log.truncated.is_none());
        });
    }

    /// A slice of zeros is written beside the batches: one below it starts at once, one that
    /// would reach into it waits for it; every record recovers.
    #[test]
    fn batches_below_the_zeros_being_written_go_beside_them() {
        let (_tmp, dir) = shard_dir();
        run(async move {
            let log = recovered(&dir);
            let map = LogMap::from_recovered(&log);
            let mut w = SegmentWriter::open(&dir, &log, 4 * FILL_AHEAD_BYTES, None)
                .await
                .unwrap();
            while fill(&mut w).await {}
            let mut buf = LogBuffer::new(1);
            w.write(&batch(&mut buf), &map).await.unwrap();
            let slot = Rc::new(LogSlot::new(2));
            assert!(
                w.fill_ahead(slot.clone()).await.unwrap(),
                "the appends moved on"
            );
            assert!(
                !w.fill_ahead(slot.clone()).await.unwrap(),
                "one slice at a time"
            );
            let from = w.fill.as_ref().unwrap().from;
            assert_eq!(from, FILL_AHEAD_BYTES);
            let small = batch(&mut buf);
            assert!(w.clear_of_zeros(&small));
            let write = w.start(small);
            w.launch(&write, slot.clone());
            // A batch reaching past the slice's start waits for it.
            for _ in 0..(from - w.offset) / 3000 + 1 {
                buf.append(1, |p| p.extend_from_slice(&[7; 3000])).unwrap();
            }
            let large = buf.take(Vec::new()).unwrap();
            assert!(w.fits(&large) && !w.clear_of_zeros(&large));
            while write.outcome.borrow().is_none() {
                slot.signal.wait().await;
            }
            assert!(matches!(&*write.outcome.borrow(), Some(Ok(_))));
            w.note(&write, &map);
            w.settle_fill(true).await.unwrap();
            assert_eq!(w.filled, from + FILL_CHUNK_BYTES);
            assert!(w.clear_of_zeros(&large));
            w.write(&large, &map).await.unwrap();
            let mut records = 0;
            let log = flo_ual::recover(&dir, |_, _, payload| {
                assert_eq!(payload, &[7; 3000][..]);
                records += 1;
                Ok::<(), flo_ual::ApplyError>(())
            })
            .unwrap();
            assert!(log.truncated.is_none());
            assert_eq!(records, large.last_lsn);
        });
    }

    /// A batch is durable when its write returns only because the segment files (the
    /// current one and the spare that becomes the next) are open O_DSYNC: no `fdatasync`
    /// follows the write. A crash test cannot see a missing flag (kill -9 loses nothing the
    /// disk's cache holds; a power cut would), so this looks at the files' flags.
    #[test]
    fn segment_files_are_written_o_dsync() {
        use std::os::fd::AsRawFd;
        let (_tmp, dir) = shard_dir();
        run(async move {
            let log = recovered(&dir);
            let mut w = SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            w.make_room().await.unwrap();
            let Spare::Ready(spare) = &w.spare else {
                panic!("made just above")
            };
            for fd in [w.file.as_raw_fd(), spare.as_raw_fd()] {
                // SAFETY: F_GETFL on a descriptor the writer holds open.
                let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
                assert!(
                    flags >= 0 && flags & libc::O_DSYNC == libc::O_DSYNC,
                    "{flags:#o}"
                );
            }
        });
    }

    /// Whether the block device holding `path` polls its queue (`queue/io_poll` in sysfs,
    /// of the device or, for a partition, of its disk); `None` when sysfs does not say.
    fn device_polls(path: &Path) -> Option<bool> {
        use std::os::unix::fs::MetadataExt;
        let dev = fs::metadata(path).unwrap().dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let sys = format!("/sys/dev/block/{major}:{minor}");
        [
            format!("{sys}/queue/io_poll"),
            format!("{sys}/../queue/io_poll"),
        ]
        .iter()
        .find_map(|p| fs::read_to_string(p).ok())
        .map(|text| text.trim() != "0")
    }

    /// On a device whose queue does not poll (no poll queues: virtio-blk, most cloud
    /// disks), the log's writes go through the executor's main ring, not its poll ring:
    /// the poll ring must be entered on each turn of the executor while a write is in
    /// flight, and keeps it from sleeping (it spun at 15–20% of a core per shard).
    #[test]
    fn a_device_that_does_not_poll_gets_the_logs_writes_on_the_main_ring() {
        let (_tmp, dir) = shard_dir();
        let Some(false) = device_polls(&dir) else {
            eprintln!("skipped: the device under {} polls", dir.display());
            return;
        };
        run(async move {
            let log = recovered(&dir);
            let map = LogMap::from_recovered(&log);
            let mut w = SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            let mut buf = LogBuffer::new(1);
            let _ = glommio::executor().io_stats();
            for _ in 0..8 {
                w.write(&batch(&mut buf), &map).await.unwrap();
            }
            let stats = glommio::executor().io_stats();
            assert_eq!(stats.poll_ring.file_writes().0, 0, "{stats:?}");
            assert!(stats.main_ring.file_writes().0 >= 8, "{stats:?}");
        });
    }

    /// Batches handed over while one is being written start at once, never more than the
    /// slot's `writes`; what is durable only ever moves forward, a segment rolls between
    /// writes, and the log recovers whole.
    #[test]
    fn batches_are_written_two_at_a_time_and_acknowledged_in_order() {
        let (_tmp, dir) = shard_dir();
        run(async move {
            let log = recovered(&dir);
            let map = Rc::new(LogMap::from_recovered(&log));
            let writer = SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            let slot = Rc::new(LogSlot::new(2));
            let inbox = Rc::new(Inbox::default());
            let metrics = std::sync::Arc::new(ShardMetrics::new(0, false));
            glommio::spawn_local(writer_loop(
                slot.clone(),
                writer,
                map.clone(),
                inbox,
                0,
                metrics,
            ))
            .detach();
            // Three segments' worth of one-block batches.
            let total = 3 * SEGMENT / 4096 - 5;
            let mut buf = LogBuffer::new(1);
            let (mut handed, mut most, mut durable) = (0, 0, 0);
            while durable < total {
                while handed < total && !slot.busy() {
                    slot.hand_over(batch(&mut buf));
                    handed += 1;
                }
                most = most.max(slot.in_flight.get());
                if let Some(Input::Durable { lsn, .. }) = slot.take_durable() {
                    assert!(
                        lsn > durable && lsn <= handed,
                        "durable {lsn} after {durable}"
                    );
                    assert_eq!(slot.written_lsn(), lsn);
                    durable = lsn;
                }
                glommio::timer::sleep(Duration::from_micros(20)).await;
            }
            assert_eq!(most, 2, "two batches in flight at once, never more");
            assert_eq!(files(&dir, ".ual").len(), 3);
            let mut lsns = Vec::new();
            let log = flo_ual::recover(&dir, |lsn, _, _| {
                lsns.push(lsn);
                Ok::<(), flo_ual::ApplyError>(())
            })
            .unwrap();
            assert_eq!(lsns, (1..=total).collect::<Vec<_>>());
            assert!(log.truncated.is_none());
        });
    }

    /// A rollover does not wait for the directory's sync that makes the new segment's name
    /// durable: the next batch is written at once, and acknowledged (with every one behind
    /// it) only once the sync ended.
    #[test]
    fn a_new_segments_writes_are_acknowledged_once_its_name_is_durable() {
        let (_tmp, dir) = shard_dir();
        run(async move {
            let log = recovered(&dir);
            let map = LogMap::from_recovered(&log);
            let inbox = Inbox::default();
            let metrics = ShardMetrics::new(0, false);
            let mut w = SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            let mut buf = LogBuffer::new(1);
            let slot = Rc::new(LogSlot::new(2));
            let mut next = batch(&mut buf);
            while w.fits(&next) {
                w.write(&next, &map).await.unwrap();
                next = batch(&mut buf);
            }
            w.roll(next.first_lsn, slot.clone()).await.unwrap();
            // Spawned, not yet run: the rollover returned without waiting for it.
            assert!(
                w.naming.as_ref().is_some_and(|n| !n.sync.ended.get()),
                "the sync goes on beside"
            );
            // Held: the rollover's sync stands in for one that takes long.
            w.settle_naming(true).await.unwrap();
            let gate = Rc::new(Signal::default());
            let opened = gate.clone();
            w.naming = Some(Naming {
                segment: w.first_lsn,
                sync: Beside::spawn(slot.clone(), async move {
                    opened.wait().await;
                    Ok(())
                }),
            });
            let mut writes = VecDeque::new();
            for b in [next, batch(&mut buf)] {
                let write = w.start(b);
                w.launch(&write, slot.clone());
                writes.push_back(write);
            }
            while !writes.iter().all(Write::ok) {
                slot.signal.wait().await;
            }
            settle(&slot, &mut writes, &w, &map, &inbox, 0, &metrics).unwrap();
            assert_eq!(writes.len(), 2, "written, not acknowledged");
            assert!(slot.take_durable().is_none());
            gate.notify();
            while w.naming.is_some() {
                slot.signal.wait().await;
                w.settle_naming(false).await.unwrap();
            }
            settle(&slot, &mut writes, &w, &map, &inbox, 0, &metrics).unwrap();
            assert!(writes.is_empty());
            let per_segment = SEGMENT / 4096;
            assert!(matches!(
                slot.take_durable(),
                Some(Input::Durable { lsn, .. }) if lsn == per_segment + 2
            ));
            assert_eq!(
                files(&dir, ".ual").last(),
                Some(&segment_file_name(per_segment + 1))
            );
        });
    }

    /// Room for two segment files and a snapshot reserve: a batch that needs a third
    /// segment is written into the second, grown with room the reserve lends, as long as the
    /// reserve holds enough; then it waits for room. Room lent that went elsewhere goes back
    /// to the reserve. Recovery reads the grown segment whole.
    #[test]
    fn a_batch_without_room_for_the_next_segment_grows_the_current_one_from_the_reserve() {
        const RESERVE: u64 = 4 * 4096;
        let room = 2 * SEGMENT + RESERVE;
        let (_tmp, dir, capacity, fault) = capped_shard_dir(room);
        crate::reserve::keep(&dir, RESERVE, None).unwrap();
        run(async move {
            let (mut w, map) = opened(&dir, SEGMENT, Some(fault)).await;
            let mut buf = LogBuffer::new(1);
            let per_segment = SEGMENT / 4096;
            for _ in 0..2 * per_segment {
                w.write(&batch(&mut buf), &map).await.unwrap();
                if w.wants_room() {
                    let _ = w.make_room().await;
                }
            }
            assert_eq!(w.segments(), 2);
            let reserve = dir.join(crate::reserve::RESERVE_FILE);
            let second = dir.join(segment_file_name(per_segment + 1));
            let len = |p: &Path| fs::metadata(p).unwrap().len();
            for lent in 1..=2 {
                w.write(&batch(&mut buf), &map).await.unwrap();
                assert_eq!(w.segments(), 2);
                assert_eq!(len(&second), SEGMENT + lent * 4096);
                assert_eq!(len(&reserve), RESERVE - lent * 4096);
            }
            // The room the reserve lends is taken by something else: the batch waits, and
            // the reserve takes its room back each time.
            fs::write(&capacity, (room - 4096).to_string()).unwrap();
            let next = batch(&mut buf);
            for _ in 0..2 {
                let e = w.write(&next, &map).await.unwrap_err();
                assert!(matches!(e, LogWriteError::NoSpace(_)), "{e}");
                assert_eq!(len(&reserve), RESERVE - 2 * 4096);
                assert_eq!(len(&second), SEGMENT + 2 * 4096);
            }
            fs::write(&capacity, room.to_string()).unwrap();
            w.write(&next, &map).await.unwrap();
            assert_eq!(len(&second), SEGMENT + 3 * 4096);
            assert_eq!(len(&reserve), RESERVE - 3 * 4096);
            w.write(&batch(&mut buf), &map).await.unwrap();
            assert_eq!(len(&reserve), 0);
            let e = w.write(&batch(&mut buf), &map).await.unwrap_err();
            assert!(matches!(e, LogWriteError::NoSpace(_)), "{e}");
            assert_eq!(files(&dir, ".ual").len(), 2);
            drop(w);
            let mut lsns = Vec::new();
            let log = flo_ual::recover(&dir, |lsn, _, _| {
                lsns.push(lsn);
                Ok::<(), flo_ual::ApplyError>(())
            })
            .unwrap();
            assert_eq!(lsns, (1..=2 * per_segment + 4).collect::<Vec<_>>());
            // Opened again with room: the next batch starts the third segment.
            let map = LogMap::from_recovered(&log);
            let mut w = SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            let mut buf = LogBuffer::new(2 * per_segment + 5);
            w.write(&batch(&mut buf), &map).await.unwrap();
            assert_eq!((w.segments(), files(&dir, ".ual").len()), (3, 3));
            assert_eq!(len(&second), SEGMENT + 4 * 4096);
        });
    }

    /// A segment file longer than the writer's segments (grown, or made with a larger
    /// `--segment-bytes`) is written to its end before the log rolls.
    #[test]
    fn a_segment_file_longer_than_the_segments_is_used_to_its_end() {
        let (_tmp, dir) = shard_dir();
        run(async move {
            let (mut w, map) = opened(&dir, SEGMENT, None).await;
            let mut buf = LogBuffer::new(1);
            let per_segment = SEGMENT / 4096;
            for _ in 0..per_segment / 2 {
                w.write(&batch(&mut buf), &map).await.unwrap();
            }
            drop(w);
            let (mut w, map) = opened(&dir, SEGMENT / 4, None).await;
            let mut buf = LogBuffer::new(per_segment / 2 + 1);
            for _ in 0..per_segment / 2 {
                w.write(&batch(&mut buf), &map).await.unwrap();
                assert_eq!((w.segments(), files(&dir, ".ual").len()), (1, 1));
            }
            w.write(&batch(&mut buf), &map).await.unwrap();
            assert_eq!((w.segments(), files(&dir, ".ual").len()), (2, 2));
        });
    }

    /// Room for two segment files: the first, and the spare that becomes the second. The
    /// third cannot be made ahead (the shard would turn read-only), the second segment is
    /// still filled, the batch that needs a third fails with no space and is written once
    /// there is room; recovery finds every record and ignores the spare.
    #[test]
    fn the_next_segment_is_made_ahead_and_a_batch_without_room_is_written_once_there_is() {
        let (_tmp, dir, capacity, fault) = capped_shard_dir(2 * SEGMENT + 4096);
        run(async move {
            let (mut w, map) = opened(&dir, SEGMENT, Some(fault)).await;
            let mut buf = LogBuffer::new(1);
            let per_segment = SEGMENT / 4096;
            for i in 1..=per_segment + per_segment / 2 {
                w.write(&batch(&mut buf), &map).await.unwrap();
                if w.wants_room() {
                    let made = w.make_room().await;
                    match i < per_segment {
                        true => made.unwrap(),
                        false => assert!(matches!(made, Err(LogWriteError::NoSpace(_)))),
                    }
                }
            }
            assert_eq!(w.segments(), 2);
            assert!(
                files(&dir, ".spare").is_empty(),
                "a failed spare is removed"
            );
            for _ in 0..per_segment / 2 {
                w.write(&batch(&mut buf), &map).await.unwrap();
            }
            let last = batch(&mut buf);
            for _ in 0..2 {
                let e = w.write(&last, &map).await.unwrap_err();
                assert!(matches!(e, LogWriteError::NoSpace(_)), "{e}");
            }
            assert_eq!(files(&dir, ".ual").len(), 2);
            fs::write(&capacity, (8 * SEGMENT).to_string()).unwrap();
            w.write(&last, &map).await.unwrap();
            assert_eq!((w.segments(), files(&dir, ".ual").len()), (3, 3));
            // A spare left behind (as by a crash) is not a segment, and goes when the log
            // is opened again (it could hold records of a segment whose name was lost).
            w.make_room().await.unwrap();
            assert_eq!(files(&dir, ".spare").len(), 1);
            drop(w);
            let mut lsns = Vec::new();
            let log = flo_ual::recover(&dir, |lsn, _, payload| {
                assert_eq!(payload.len(), 3000);
                lsns.push(lsn);
                Ok::<(), flo_ual::ApplyError>(())
            })
            .unwrap();
            assert_eq!(log.segments.len(), 3);
            assert_eq!(lsns, (1..=2 * per_segment + 1).collect::<Vec<_>>());
            SegmentWriter::open(&dir, &log, SEGMENT, None)
                .await
                .unwrap();
            assert!(files(&dir, ".spare").is_empty());
        });
    }
}
