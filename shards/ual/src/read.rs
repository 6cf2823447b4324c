//! Finding one record by LSN in bytes read from a segment: a reader starts at a mark (a
//! known record start at or before the LSN) and parses forward.

use crate::format::{Parsed, align_up, parse_record};

/// At most one mark per this many bytes of a segment (recovery and the writer both keep
/// to it): a record is at most this far plus one batch from the mark before it.
pub const MARK_SPACING_BYTES: u64 = 64 << 10;

#[derive(Debug, PartialEq, Eq)]
pub enum Found<'a> {
    Record {
        rtype: u16,
        payload: &'a [u8],
    },
    /// The bytes ended before the record: read more.
    More,
    /// The record is not where it should be.
    Missing(&'static str),
}

/// Looks for the record `lsn` in `buf`, which holds a segment's bytes from a block
/// boundary on, starting at `start` (a record start). `complete`: `buf` reaches the end of
/// the file.
pub fn find_record(buf: &[u8], start: usize, lsn: u64, complete: bool) -> Found<'_> {
    let mut pos = start;
    loop {
        match parse_record(buf, pos) {
            Parsed::Record {
                lsn: at,
                rtype,
                payload,
                end,
                ..
            } => {
                if at == lsn {
                    return Found::Record { rtype, payload };
                }
                if at > lsn {
                    return Found::Missing("no record with this LSN where its mark points");
                }
                pos = end;
            }
            Parsed::Padding => pos = align_up(pos as u64 + 1) as usize,
            Parsed::End if complete => return Found::Missing("the segment ends before it"),
            Parsed::Damaged(reason) if complete => return Found::Missing(reason),
            Parsed::End | Parsed::Damaged(_) => return Found::More,
        }
    }
}

/// The marks of a segment's bytes (what recovery's scan notes), for a segment recovery
/// did not read: parsing stops at the first byte that is not a valid record.
pub fn segment_marks(buf: &[u8]) -> Vec<(u64, u64)> {
    let mut marks: Vec<(u64, u64)> = Vec::new();
    let mut pos = 0usize;
    loop {
        match parse_record(buf, pos) {
            Parsed::Record { lsn, end, .. } => {
                if marks
                    .last()
                    .is_none_or(|&(_, at)| pos as u64 >= at + MARK_SPACING_BYTES)
                {
                    marks.push((lsn, pos as u64));
                }
                pos = end;
            }
            Parsed::Padding => pos = align_up(pos as u64 + 1) as usize,
            Parsed::End | Parsed::Damaged(_) => return marks,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LogBuffer;

    #[test]
    fn finds_each_record_from_the_batch_start_and_asks_for_more_when_cut() {
        let mut log = LogBuffer::new(10);
        for i in 0..50u64 {
            let n = 100 + (i as usize * 37) % 3000;
            log.append(7, |o| o.resize(o.len() + n, i as u8)).unwrap();
        }
        let batch = log.take(Vec::new()).unwrap();
        for lsn in 10..60u64 {
            match find_record(&batch.bytes, 0, lsn, true) {
                Found::Record { rtype, payload } => {
                    assert_eq!(rtype, 7);
                    assert!(payload.iter().all(|&b| b == (lsn - 10) as u8));
                }
                other => panic!("{lsn}: {other:?}"),
            }
        }
        assert!(matches!(
            find_record(&batch.bytes, 0, 9, true),
            Found::Missing(_)
        ));
        assert!(matches!(
            find_record(&batch.bytes, 0, 60, true),
            Found::Missing(_)
        ));
        assert_eq!(find_record(&batch.bytes[..5000], 0, 59, false), Found::More);
        // Every mark inside the batch is a record start that finds the records after it.
        for &(lsn, off) in &batch.marks {
            assert!(matches!(
                find_record(&batch.bytes, off as usize, lsn, true),
                Found::Record { .. }
            ));
        }
    }
}
