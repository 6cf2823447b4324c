//! Record layout (little-endian):
//!
//! ```text
//! 0  u32 payload length (0 = padding up to the next block boundary)
//! 4  u32 CRC32 over bytes 0..4, 8..20 and the payload
//! 8  u64 LSN
//! 16 u16 record type
//! 18 u16 flags
//! 20 payload (opaque bytes, 1..=RECORD_PAYLOAD_BYTES_MAX)
//! ```
//!
//! Flags:
//! - bit 0, `FLAG_BATCH_START`: the first record of a batch (recovery tells a later batch,
//!   hence mid-log damage, from a torn tail by it).
//! - bit 1, `FLAG_GROUP_CONT`: more records of the same group follow. A group is a run of
//!   consecutive records, all but the last flagged; recovery applies a group whole or not
//!   at all. A record without the flag ends its group, so records written before groups
//!   existed are each a group of one. A group never spans batches, so it lies in one
//!   batch of one segment.
//!
//! Every batch starts on a block boundary and is padded with zeros to the next one, so a
//! block holding acknowledged records is never written again. A record never starts in
//! the last `RECORD_HEADER_BYTES - 1` bytes of a block (the writer pads to the boundary
//! instead), so zeros there are always padding and never the start of a header.

pub const BLOCK_BYTES: u64 = 4096;
pub const RECORD_HEADER_BYTES: usize = 20;
pub const RECORD_PAYLOAD_BYTES_MAX: usize = 8 << 20;
pub const FLAG_BATCH_START: u16 = 1;
pub const FLAG_GROUP_CONT: u16 = 2;
pub const SEGMENT_BYTES_DEFAULT: u64 = 64 << 20;
pub const SEGMENT_BYTES_MIN: u64 = 64 << 10;
/// The largest LSN a log holds (LSNs start at 1). Far beyond any real log, it bounds what a
/// damaged segment name or snapshot may claim, so that recovery's LSN arithmetic (a
/// segment's first LSN − 1, a snapshot's LSN + 1, plus the records a segment can hold)
/// never overflows.
pub const LSN_MAX: u64 = (1 << 62) - 1;

pub fn align_up(v: u64) -> u64 {
    v.div_ceil(BLOCK_BYTES) * BLOCK_BYTES
}

pub fn segment_file_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.ual")
}

pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".ual")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[0..4]);
    h.update(&header[8..RECORD_HEADER_BYTES]);
    h.update(payload);
    h.finalize()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    #[error(
        "the record of {bytes} bytes exceeds the maximum of {max} bytes; split the data or \
         store it elsewhere"
    )]
    TooLarge { bytes: usize, max: usize },
}

/// Appends one record to `out`; `write_payload` encodes the payload in place. On error
/// `out` is left as it was.
///
/// Panics if `write_payload` writes nothing: a zero length marks padding, so an empty
/// record cannot be encoded (every record type has a non-empty encoding).
pub fn write_record(
    out: &mut Vec<u8>,
    lsn: u64,
    rtype: u16,
    flags: u16,
    write_payload: impl FnOnce(&mut Vec<u8>),
) -> Result<(), AppendError> {
    let start = out.len();
    let capacity = out.capacity();
    out.extend_from_slice(&[0; RECORD_HEADER_BYTES]);
    write_payload(out);
    let len = out.len() - start - RECORD_HEADER_BYTES;
    assert!(len > 0, "empty record payload (rtype {rtype}, LSN {lsn})");
    if len > RECORD_PAYLOAD_BYTES_MAX {
        out.truncate(start);
        // Do not keep the oversize allocation alive in a long-lived buffer.
        out.shrink_to(capacity);
        return Err(AppendError::TooLarge {
            bytes: len,
            max: RECORD_PAYLOAD_BYTES_MAX,
        });
    }
    let (head, payload) = out[start..].split_at_mut(RECORD_HEADER_BYTES);
    head[0..4].copy_from_slice(&(len as u32).to_le_bytes());
    head[8..16].copy_from_slice(&lsn.to_le_bytes());
    head[16..18].copy_from_slice(&rtype.to_le_bytes());
    head[18..20].copy_from_slice(&flags.to_le_bytes());
    let crc = checksum(head, payload);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

/// Flags of the record written by `write_record` at `start` of `buf`.
pub fn record_flags(buf: &[u8], start: usize) -> u16 {
    u16::from_le_bytes(buf[start + 18..start + 20].try_into().unwrap())
}

/// Replaces the flags of the record written by `write_record` at `start` of `buf` and
/// recomputes its checksum.
pub fn set_record_flags(buf: &mut [u8], start: usize, flags: u16) {
    let len = u32::from_le_bytes(buf[start..start + 4].try_into().unwrap()) as usize;
    debug_assert!(
        len > 0 && len <= RECORD_PAYLOAD_BYTES_MAX,
        "no record at {start}"
    );
    let (head, payload) =
        buf[start..start + RECORD_HEADER_BYTES + len].split_at_mut(RECORD_HEADER_BYTES);
    head[18..20].copy_from_slice(&flags.to_le_bytes());
    let crc = checksum(head, payload);
    head[4..8].copy_from_slice(&crc.to_le_bytes());
}

#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    Record {
        lsn: u64,
        rtype: u16,
        flags: u16,
        payload: &'a [u8],
        end: usize,
    },
    /// All-zero header: padding (or unwritten space) up to the next block boundary.
    Padding,
    /// The file ends here (nothing but zeros, or no bytes at all, remain in this block).
    End,
    Damaged(&'static str),
}

/// Zero bytes that put the next record at the block boundary when `pos` is too close to
/// it for a header.
pub fn header_padding(pos: u64) -> u64 {
    let room = BLOCK_BYTES - pos % BLOCK_BYTES;
    if room < RECORD_HEADER_BYTES as u64 {
        room
    } else {
        0
    }
}

pub fn parse_record(buf: &[u8], pos: usize) -> Parsed<'_> {
    let pad = header_padding(pos as u64) as usize;
    if pad > 0 {
        let tail = &buf[pos.min(buf.len())..(pos + pad).min(buf.len())];
        if tail.iter().any(|&b| b != 0) {
            return Parsed::Damaged("bytes where only padding may be");
        }
        return if pos + pad >= buf.len() {
            Parsed::End
        } else {
            Parsed::Padding
        };
    }
    let rest = &buf[pos.min(buf.len())..];
    if rest.len() < RECORD_HEADER_BYTES {
        return if rest.iter().all(|&b| b == 0) {
            Parsed::End
        } else {
            Parsed::Damaged("partial record header")
        };
    }
    let head = &rest[..RECORD_HEADER_BYTES];
    let len = u32::from_le_bytes(head[0..4].try_into().unwrap()) as usize;
    if len == 0 {
        return if head.iter().all(|&b| b == 0) {
            Parsed::Padding
        } else {
            Parsed::Damaged("invalid record header")
        };
    }
    if len > RECORD_PAYLOAD_BYTES_MAX {
        return Parsed::Damaged("record length out of range");
    }
    if rest.len() < RECORD_HEADER_BYTES + len {
        return Parsed::Damaged("record cut short");
    }
    let payload = &rest[RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len];
    let crc = u32::from_le_bytes(head[4..8].try_into().unwrap());
    if crc != checksum(head, payload) {
        return Parsed::Damaged("record checksum mismatch");
    }
    Parsed::Record {
        lsn: u64::from_le_bytes(head[8..16].try_into().unwrap()),
        rtype: u16::from_le_bytes(head[16..18].try_into().unwrap()),
        flags: u16::from_le_bytes(head[18..20].try_into().unwrap()),
        payload,
        end: pos + RECORD_HEADER_BYTES + len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_and_detects_flips() {
        let mut buf = Vec::new();
        write_record(&mut buf, 42, 7, FLAG_BATCH_START, |o| {
            o.extend_from_slice(b"hello")
        })
        .unwrap();
        match parse_record(&buf, 0) {
            Parsed::Record {
                lsn,
                rtype,
                flags,
                payload,
                end,
            } => {
                assert_eq!(
                    (lsn, rtype, flags, payload, end),
                    (42, 7, 1, &b"hello"[..], buf.len())
                );
            }
            other => panic!("{other:?}"),
        }
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(parse_record(&bad, 0), Parsed::Damaged(_)),
                "flip at {i}"
            );
        }
        assert_eq!(parse_record(&[0u8; 64], 0), Parsed::Padding);
        // Near a block end, zeros are padding even when the next block holds records.
        let mut two_blocks = vec![0u8; 2 * BLOCK_BYTES as usize];
        two_blocks[BLOCK_BYTES as usize] = 9;
        assert_eq!(
            parse_record(&two_blocks, BLOCK_BYTES as usize - 5),
            Parsed::Padding
        );
        two_blocks[BLOCK_BYTES as usize - 2] = 1;
        assert!(matches!(
            parse_record(&two_blocks, BLOCK_BYTES as usize - 5),
            Parsed::Damaged(_)
        ));
        assert_eq!(parse_record(&[0u8; 5], 0), Parsed::End);
        assert!(matches!(
            parse_record(&buf[..buf.len() - 1], 0),
            Parsed::Damaged(_)
        ));
    }

    #[test]
    fn segment_names_sort_by_lsn() {
        assert_eq!(segment_file_name(1), "00000000000000000001.ual");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(12345)),
            Some(12345)
        );
        assert_eq!(parse_segment_file_name("12.ual"), None);
        assert_eq!(
            parse_segment_file_name("00000000000000000001.ual.torn"),
            None
        );
    }

    #[test]
    fn oversize_payload_is_refused_and_leaves_the_output_unchanged() {
        let mut buf = b"earlier bytes".to_vec();
        let err = write_record(&mut buf, 1, 1, 0, |o| {
            o.resize(o.len() + RECORD_PAYLOAD_BYTES_MAX + 1, 7)
        })
        .unwrap_err();
        let max = RECORD_PAYLOAD_BYTES_MAX;
        assert_eq!(
            err,
            AppendError::TooLarge {
                bytes: max + 1,
                max
            }
        );
        assert_eq!(buf, b"earlier bytes");
        assert!(
            err.to_string().starts_with(&format!(
                "the record of {} bytes exceeds the maximum of {max} bytes",
                max + 1
            )),
            "{err}"
        );
        // The maximum itself is fine.
        write_record(&mut buf, 1, 1, 0, |o| o.resize(o.len() + max, 7)).unwrap();
    }

    #[test]
    fn rewritten_flags_keep_the_record_valid() {
        let mut buf = vec![0u8; 8];
        write_record(&mut buf, 3, 9, FLAG_BATCH_START | FLAG_GROUP_CONT, |o| {
            o.extend_from_slice(b"payload")
        })
        .unwrap();
        assert_eq!(record_flags(&buf, 8), FLAG_BATCH_START | FLAG_GROUP_CONT);
        set_record_flags(&mut buf, 8, FLAG_BATCH_START);
        let mut expected = vec![0u8; 8];
        write_record(&mut expected, 3, 9, FLAG_BATCH_START, |o| {
            o.extend_from_slice(b"payload")
        })
        .unwrap();
        assert_eq!(buf, expected);
    }
}
