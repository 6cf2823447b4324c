//! Writes batches of the shard's log to segment files with O_DIRECT: one write and one
//! fdatasync per batch, each batch starting on a block boundary and padded to the next.

use super::shard::Shard;
use crate::ual::{Batch, RecoveredLog, align_up, segment_file_name};
use glommio::io::{Directory, DmaFile, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub(crate) struct SegmentWriter {
    dir: PathBuf,
    file: DmaFile,
    offset: u64,
    segment_bytes: u64,
}

/// While log I/O is outstanding, wake the executor at least this often.
const IO_POKE_MS: u64 = 2;

/// Runs `io`, waking the executor every `IO_POKE_MS` until it completes. A completion of
/// an operation the kernel hands to a worker (fallocate, fsync) can fail to wake an
/// otherwise idle executor: start-up then hung in "opening its log" (seen about once in a
/// few hundred starts), and at run time a sync could wait for the next unrelated wake-up.
pub(crate) async fn poked<T>(io: impl std::future::Future<Output = T>) -> T {
    futures_lite::future::or(io, async {
        loop {
            glommio::timer::sleep(std::time::Duration::from_millis(IO_POKE_MS)).await;
        }
    })
    .await
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
    pub async fn open(
        dir: &Path,
        log: &RecoveredLog,
        segment_bytes: u64,
    ) -> io::Result<(Self, u32)> {
        let (name, offset, segments) = match log.segments.last() {
            Some(seg) => (
                seg.path.file_name().unwrap().to_string_lossy().into_owned(),
                align_up(log.tail_end),
                log.segments.len() as u32,
            ),
            None => (segment_file_name(log.last_lsn + 1), 0, 1),
        };
        let file = poked(open_segment(dir, &name, segment_bytes)).await?;
        poked(file.fdatasync()).await.map_err(to_io)?;
        poked(sync_dir(dir)).await?;
        Ok((
            SegmentWriter {
                dir: dir.to_path_buf(),
                file,
                offset,
                segment_bytes,
            },
            segments,
        ))
    }

    /// Writes and syncs one batch; returns true if a new segment was started for it.
    pub async fn write(&mut self, batch: &Batch) -> io::Result<bool> {
        let padded = align_up(batch.bytes.len() as u64);
        let rolled = self.offset > 0 && self.offset + padded > self.segment_bytes;
        if rolled {
            let name = segment_file_name(batch.first_lsn);
            let file = poked(open_segment(&self.dir, &name, self.segment_bytes)).await?;
            poked(sync_dir(&self.dir)).await?;
            let old = std::mem::replace(&mut self.file, file);
            poked(old.close()).await.map_err(to_io)?;
            self.offset = 0;
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
        self.offset += padded;
        Ok(rolled)
    }
}

/// The flusher: takes whatever was appended, writes it, marks it durable, repeats.
pub(crate) async fn flush_loop(shard: Rc<Shard>, mut writer: SegmentWriter) {
    let mut spare = Vec::new();
    loop {
        let batch = shard.core.borrow_mut().log.take(spare);
        let Some(batch) = batch else {
            shard.flush.wait().await;
            spare = Vec::new();
            continue;
        };
        match writer.write(&batch).await {
            Ok(rolled) => {
                if rolled {
                    shard.core.borrow_mut().segments += 1;
                }
                shard.set_durable(batch.last_lsn);
            }
            Err(e) => {
                // Nothing written after a failed write can be trusted to be durable, and
                // nothing unsynced may be acknowledged: stop; recovery restores a clean log.
                eprintln!(
                    "fatal: shard {} cannot write its log: {e}; exiting",
                    shard.id
                );
                std::process::exit(70);
            }
        }
        spare = batch.bytes;
    }
}

/// Waits until everything appended so far is durable.
pub(crate) async fn drain(shard: &Shard) {
    let last = shard.core.borrow().log.last_lsn();
    shard.flush.notify();
    while shard.durable_lsn() < last {
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
}
