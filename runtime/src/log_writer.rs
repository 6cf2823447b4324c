//! Writes batches of the shard's log to segment files with O_DIRECT: one write and one
//! fdatasync per batch, each batch starting on a block boundary and padded to the next.
//! The shard loop hands over whatever the engine appended while the previous batch was
//! being written (group commit); the writer answers with `Input::Durable`.

use crate::inbox::{Inbox, Signal};
use crate::log_reader::LogMap;
use crate::poke::poked;
use flo_engine::Input;
use flo_ual::{Batch, RecoveredLog, align_up, segment_file_name};
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::cell::{Cell, RefCell};
use std::io;
use std::path::{Path, PathBuf};

pub(crate) struct SegmentWriter {
    dir: PathBuf,
    /// The segment being written: its first LSN (its name) and its file.
    first_lsn: u64,
    file: DmaFile,
    offset: u64,
    segment_bytes: u64,
    segments: u32,
}

fn to_io(e: glommio::GlommioError<()>) -> io::Error {
    io::Error::other(e.to_string())
}

async fn open_segment(dir: &Path, name: &str, segment_bytes: u64) -> io::Result<DmaFile> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .dma_open(dir.join(name))
        .await
        .map_err(to_io)?;
    if file.file_size().await.map_err(to_io)? < segment_bytes {
        file.pre_allocate(segment_bytes, false)
            .await
            .map_err(to_io)?;
    }
    Ok(file)
}

async fn sync_dir(dir: &Path) -> io::Result<()> {
    let d = Directory::open(dir).await.map_err(to_io)?;
    d.sync().await.map_err(to_io)?;
    d.close().await.map_err(to_io)
}

impl SegmentWriter {
    /// Continues the recovered log: appends go after its last valid record.
    pub async fn open(dir: &Path, log: &RecoveredLog, segment_bytes: u64) -> io::Result<Self> {
        let (first_lsn, offset, segments) = match log.segments.last() {
            Some(seg) => (
                seg.first_lsn,
                align_up(log.tail_end),
                log.segments.len() as u32,
            ),
            None => (log.last_lsn + 1, 0, 1),
        };
        let name = segment_file_name(first_lsn);
        let file = poked(open_segment(dir, &name, segment_bytes)).await?;
        poked(file.fdatasync()).await.map_err(to_io)?;
        poked(sync_dir(dir)).await?;
        Ok(SegmentWriter {
            dir: dir.to_path_buf(),
            first_lsn,
            file,
            offset,
            segment_bytes,
            segments,
        })
    }

    pub fn segments(&self) -> u32 {
        self.segments
    }

    /// Writes and syncs one batch; `map` learns where its records are.
    pub async fn write(&mut self, batch: &Batch, map: &LogMap) -> io::Result<()> {
        let padded = align_up(batch.bytes.len() as u64);
        let rolled = self.offset > 0 && self.offset + padded > self.segment_bytes;
        if rolled {
            let name = segment_file_name(batch.first_lsn);
            let file = poked(open_segment(&self.dir, &name, self.segment_bytes)).await?;
            poked(sync_dir(&self.dir)).await?;
            let old = std::mem::replace(&mut self.file, file);
            poked(old.close()).await.map_err(to_io)?;
            self.first_lsn = batch.first_lsn;
            self.offset = 0;
            self.segments += 1;
        }
        let mut buf = self.file.alloc_dma_buffer(padded as usize);
        let bytes = buf.as_bytes_mut();
        bytes[..batch.bytes.len()].copy_from_slice(&batch.bytes);
        bytes[batch.bytes.len()..].fill(0);
        let written = poked(self.file.write_at(buf, self.offset))
            .await
            .map_err(to_io)?;
        if written as u64 != padded {
            return Err(io::Error::other(format!(
                "short write: {written} of {padded} bytes"
            )));
        }
        poked(self.file.fdatasync()).await.map_err(to_io)?;
        let path = self.dir.join(segment_file_name(self.first_lsn));
        map.note_batch(self.first_lsn, &path, self.offset, batch);
        self.offset += padded;
        Ok(())
    }
}

/// The hand-over between the shard loop and the writer.
#[derive(Default)]
pub(crate) struct LogSlot {
    batch: RefCell<Option<Batch>>,
    busy: Cell<bool>,
    /// The buffer of the last batch written, reused for the next one.
    spare: RefCell<Vec<u8>>,
    signal: Signal,
    /// The last batch written: (its last LSN, segments), until the loop takes it.
    durable: Cell<Option<(u64, u32)>>,
    /// Every record up to this LSN is written and synced.
    written: Cell<u64>,
}

impl LogSlot {
    /// Whether a batch is being written.
    pub fn busy(&self) -> bool {
        self.busy.get()
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

    /// Hands `batch` to the writer (which must be idle).
    pub fn hand_over(&self, batch: Batch) {
        debug_assert!(!self.busy.get());
        self.busy.set(true);
        *self.batch.borrow_mut() = Some(batch);
        self.signal.notify();
    }
}

/// The writer: writes each batch handed over, then tells the loop it is durable.
pub(crate) async fn writer_loop(
    slot: std::rc::Rc<LogSlot>,
    mut writer: SegmentWriter,
    map: std::rc::Rc<LogMap>,
    inbox: std::rc::Rc<Inbox>,
    shard: u32,
) {
    loop {
        let Some(batch) = slot.batch.borrow_mut().take() else {
            slot.signal.wait().await;
            continue;
        };
        if let Err(e) = writer.write(&batch, &map).await {
            // Nothing written after a failed write can be trusted to be durable, and
            // nothing unsynced may be acknowledged: stop; recovery restores a clean log.
            eprintln!("fatal: shard {shard} cannot write its log: {e}; exiting");
            std::process::exit(70);
        }
        *slot.spare.borrow_mut() = batch.bytes;
        slot.busy.set(false);
        // Not queued behind the inputs waiting: the loop looks at it before each input, so
        // replies go out and the next batch is handed over without delay.
        slot.durable.set(Some((batch.last_lsn, map.count())));
        slot.written.set(batch.last_lsn);
        inbox.poke();
    }
}
