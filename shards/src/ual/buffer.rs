//! The append side of the log: records are encoded into the pending batch and given LSNs
//! at once; a flusher takes whole batches, writes and syncs them.

use super::format::{FLAG_BATCH_START, header_padding, write_record};
use crate::record::Record;

pub struct LogBuffer {
    pending: Vec<u8>,
    first_lsn: u64,
    next_lsn: u64,
}

/// A batch taken for writing: bytes start on a block boundary of the segment.
pub struct Batch {
    pub bytes: Vec<u8>,
    pub first_lsn: u64,
    pub last_lsn: u64,
}

impl LogBuffer {
    pub fn new(next_lsn: u64) -> Self {
        LogBuffer {
            pending: Vec::with_capacity(64 << 10),
            first_lsn: next_lsn,
            next_lsn,
        }
    }

    /// Encodes `record` into the pending batch and returns its LSN.
    pub fn append(&mut self, record: &Record) -> u64 {
        let lsn = self.next_lsn;
        let flags = if self.pending.is_empty() {
            self.first_lsn = lsn;
            FLAG_BATCH_START
        } else {
            // The batch starts on a block boundary, so offsets in it are block offsets.
            let pad = header_padding(self.pending.len() as u64) as usize;
            self.pending.resize(self.pending.len() + pad, 0);
            0
        };
        write_record(&mut self.pending, lsn, record.type_code(), flags, |out| {
            record.encode(out)
        });
        self.next_lsn += 1;
        lsn
    }

    /// LSN of the last record appended (0 before the first).
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }

    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Takes the pending batch, leaving `spare` (cleared) in its place.
    pub fn take(&mut self, mut spare: Vec<u8>) -> Option<Batch> {
        if self.pending.is_empty() {
            return None;
        }
        spare.clear();
        let bytes = std::mem::replace(&mut self.pending, spare);
        Some(Batch {
            bytes,
            first_lsn: self.first_lsn,
            last_lsn: self.next_lsn - 1,
        })
    }
}
