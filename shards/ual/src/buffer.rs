//! The append side of the log: records are encoded into the pending batch and given LSNs
//! at once; a flusher takes whole batches, writes and syncs them. Records appended between
//! `begin_group` and `end_group` form a group that recovery applies whole or not at all.

use crate::format::{
    AppendError, FLAG_BATCH_START, FLAG_GROUP_CONT, header_padding, record_flags, set_record_flags,
    write_record,
};
use crate::read::MARK_SPACING_BYTES;

pub struct LogBuffer {
    pending: Vec<u8>,
    /// Record starts in `pending`, one per `MARK_SPACING_BYTES` at most (the batch start
    /// is implied).
    marks: Vec<(u64, u32)>,
    first_lsn: u64,
    next_lsn: u64,
    group: Option<OpenGroup>,
}

/// The buffer as it was at `begin_group`, and where the group's last record starts.
struct OpenGroup {
    start: usize,
    first_lsn: u64,
    next_lsn: u64,
    last_record: Option<usize>,
}

/// A batch taken for writing: bytes start on a block boundary of the segment.
#[derive(Clone)]
pub struct Batch {
    pub bytes: Vec<u8>,
    pub first_lsn: u64,
    pub last_lsn: u64,
    /// (LSN, offset in `bytes`) of records inside the batch, at least `MARK_SPACING_BYTES`
    /// apart and from the batch start: where a reader can start parsing.
    pub marks: Vec<(u64, u32)>,
}

impl LogBuffer {
    pub fn new(next_lsn: u64) -> Self {
        LogBuffer {
            pending: Vec::with_capacity(64 << 10),
            marks: Vec::new(),
            first_lsn: next_lsn,
            next_lsn,
            group: None,
        }
    }

    /// Encodes one record into the pending batch (`write_payload` writes its payload in
    /// place) and returns its LSN. On error the buffer is left as it was and no LSN is used.
    pub fn append(
        &mut self,
        rtype: u16,
        write_payload: impl FnOnce(&mut Vec<u8>),
    ) -> Result<u64, AppendError> {
        let lsn = self.next_lsn;
        let len_before = self.pending.len();
        let mut flags = if self.group.is_some() {
            FLAG_GROUP_CONT
        } else {
            0
        };
        if self.pending.is_empty() {
            flags |= FLAG_BATCH_START;
        } else {
            // The batch starts on a block boundary, so offsets in it are block offsets.
            let pad = header_padding(len_before as u64) as usize;
            self.pending.resize(len_before + pad, 0);
        }
        let start = self.pending.len();
        if let Err(e) = write_record(&mut self.pending, lsn, rtype, flags, write_payload) {
            self.pending.truncate(len_before);
            return Err(e);
        }
        if len_before == 0 {
            self.first_lsn = lsn;
        }
        if let Some(group) = &mut self.group {
            group.last_record = Some(start);
        }
        let since = self.marks.last().map_or(0, |&(_, at)| at as usize);
        if start >= since + MARK_SPACING_BYTES as usize {
            self.marks.push((lsn, start as u32));
        }
        self.next_lsn += 1;
        Ok(lsn)
    }

    /// Opens a group: the records appended until `end_group` are recovered all or none.
    pub fn begin_group(&mut self) {
        debug_assert!(self.group.is_none(), "nested begin_group");
        self.group = Some(OpenGroup {
            start: self.pending.len(),
            first_lsn: self.first_lsn,
            next_lsn: self.next_lsn,
            last_record: None,
        });
    }

    /// Closes the open group: its last record loses `FLAG_GROUP_CONT`. An empty group
    /// leaves no trace.
    pub fn end_group(&mut self) {
        debug_assert!(self.group.is_some(), "end_group without begin_group");
        let Some(group) = self.group.take() else {
            return;
        };
        let Some(last) = group.last_record else {
            return;
        };
        let flags = record_flags(&self.pending, last);
        debug_assert!(flags & FLAG_GROUP_CONT != 0, "group record without CONT");
        set_record_flags(&mut self.pending, last, flags & !FLAG_GROUP_CONT);
    }

    /// Drops every record of the open group: the buffer is exactly as before `begin_group`.
    pub fn abort_group(&mut self) {
        debug_assert!(self.group.is_some(), "abort_group without begin_group");
        let Some(group) = self.group.take() else {
            return;
        };
        self.pending.truncate(group.start);
        self.marks.retain(|&(_, at)| (at as usize) < group.start);
        self.first_lsn = group.first_lsn;
        self.next_lsn = group.next_lsn;
    }

    /// LSN of the last record appended (0 before the first).
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }

    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// LSN of the first record not yet taken, if any is pending.
    pub fn first_pending_lsn(&self) -> Option<u64> {
        (!self.pending.is_empty()).then_some(self.first_lsn)
    }

    /// Takes the pending batch, leaving `spare` (cleared) in its place. Call it between
    /// operations only: a group never spans batches.
    pub fn take(&mut self, mut spare: Vec<u8>) -> Option<Batch> {
        // Not only in debug builds: a batch ending inside a group followed by the next
        // batch reads as mid-log damage, and recovery would refuse the whole log.
        assert!(self.group.is_none(), "take would cut an open group");
        if self.pending.is_empty() {
            return None;
        }
        spare.clear();
        let bytes = std::mem::replace(&mut self.pending, spare);
        Some(Batch {
            bytes,
            first_lsn: self.first_lsn,
            last_lsn: self.next_lsn - 1,
            marks: std::mem::take(&mut self.marks),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Parsed, RECORD_PAYLOAD_BYTES_MAX, parse_record};

    fn put(log: &mut LogBuffer, bytes: usize) -> u64 {
        log.append(5, |o| o.resize(o.len() + bytes, b'x')).unwrap()
    }

    fn flags_of(bytes: &[u8]) -> Vec<u16> {
        let mut flags = Vec::new();
        let mut pos = 0;
        loop {
            match parse_record(bytes, pos) {
                Parsed::Record { flags: f, end, .. } => {
                    flags.push(f);
                    pos = end;
                }
                Parsed::Padding => pos = crate::format::align_up(pos as u64 + 1) as usize,
                Parsed::End => return flags,
                Parsed::Damaged(reason) => panic!("{reason} at {pos}"),
            }
        }
    }

    #[test]
    fn group_records_carry_cont_except_the_last() {
        let mut log = LogBuffer::new(1);
        put(&mut log, 10);
        log.begin_group();
        for bytes in [4000, 30, 5000] {
            put(&mut log, bytes);
        }
        log.end_group();
        put(&mut log, 10);
        let batch = log.take(Vec::new()).unwrap();
        assert_eq!((batch.first_lsn, batch.last_lsn), (1, 5));
        let cont = FLAG_GROUP_CONT;
        assert_eq!(flags_of(&batch.bytes), [FLAG_BATCH_START, cont, cont, 0, 0]);
    }

    #[test]
    fn a_group_starting_a_batch_keeps_the_batch_start_flag() {
        let mut log = LogBuffer::new(1);
        log.begin_group();
        put(&mut log, 10);
        put(&mut log, 10);
        log.end_group();
        let batch = log.take(Vec::new()).unwrap();
        assert_eq!(
            flags_of(&batch.bytes),
            [FLAG_BATCH_START | FLAG_GROUP_CONT, 0]
        );
    }

    #[test]
    fn a_group_of_one_is_byte_identical_to_a_plain_append() {
        let mut plain = LogBuffer::new(7);
        let mut grouped = LogBuffer::new(7);
        for bytes in [100, 4070, 3] {
            put(&mut plain, bytes);
            grouped.begin_group();
            put(&mut grouped, bytes);
            grouped.end_group();
        }
        assert_eq!(
            plain.take(Vec::new()).unwrap().bytes,
            grouped.take(Vec::new()).unwrap().bytes
        );
    }

    #[test]
    fn an_empty_group_leaves_no_trace() {
        let mut log = LogBuffer::new(1);
        log.begin_group();
        log.end_group();
        assert!(log.take(Vec::new()).is_none());
        put(&mut log, 10);
        log.begin_group();
        log.end_group();
        assert_eq!(
            flags_of(&log.take(Vec::new()).unwrap().bytes),
            [FLAG_BATCH_START]
        );
    }

    /// (last LSN, pending bytes, the batch's bytes and LSNs)
    type Observed = (u64, usize, Option<(Vec<u8>, u64, u64)>);

    /// The buffer's observable state: its counters and the next batch it would hand out.
    fn drain(log: &mut LogBuffer) -> Observed {
        let state = (log.last_lsn(), log.pending_bytes());
        let batch = log
            .take(Vec::new())
            .map(|b| (b.bytes, b.first_lsn, b.last_lsn));
        (state.0, state.1, batch)
    }

    #[test]
    fn abort_group_leaves_the_buffer_as_before_begin_group() {
        for before in [0, 1, 3] {
            let mut untouched = LogBuffer::new(10);
            let mut aborted = LogBuffer::new(10);
            for log in [&mut untouched, &mut aborted] {
                for _ in 0..before {
                    put(log, 4090);
                }
            }
            aborted.begin_group();
            put(&mut aborted, 100);
            put(&mut aborted, 5000);
            aborted.abort_group();
            assert_eq!(
                drain(&mut aborted),
                drain(&mut untouched),
                "{before} before"
            );
            // Both continue identically after.
            for log in [&mut untouched, &mut aborted] {
                put(log, 10);
            }
            assert_eq!(
                drain(&mut aborted),
                drain(&mut untouched),
                "{before} before"
            );
        }
    }

    #[test]
    fn oversize_append_returns_too_large_and_leaves_the_buffer_unchanged() {
        for before in [0, 2] {
            let mut untouched = LogBuffer::new(1);
            let mut failed = LogBuffer::new(1);
            for log in [&mut untouched, &mut failed] {
                for _ in 0..before {
                    put(log, 4090);
                }
            }
            failed.begin_group();
            put(&mut failed, 10);
            let err = failed
                .append(5, |o| o.resize(o.len() + RECORD_PAYLOAD_BYTES_MAX + 1, 0))
                .unwrap_err();
            assert_eq!(
                err,
                AppendError::TooLarge {
                    bytes: RECORD_PAYLOAD_BYTES_MAX + 1,
                    max: RECORD_PAYLOAD_BYTES_MAX
                }
            );
            failed.end_group();
            untouched.begin_group();
            put(&mut untouched, 10);
            untouched.end_group();
            assert_eq!(drain(&mut failed), drain(&mut untouched), "{before} before");
            // Outside a group, and on an empty buffer, too.
            let err = failed.append(5, |o| o.resize(o.len() + RECORD_PAYLOAD_BYTES_MAX + 1, 0));
            assert!(err.is_err());
            assert_eq!(drain(&mut failed), drain(&mut untouched));
        }
    }

    #[test]
    #[should_panic(expected = "take would cut an open group")]
    fn take_refuses_to_cut_an_open_group() {
        let mut log = LogBuffer::new(1);
        log.begin_group();
        put(&mut log, 10);
        log.take(Vec::new());
    }
}
