//! The acknowledged mark: a small file beside the segments saying up to which LSN records
//! were synced (and so may have been acknowledged). Recovery cuts a damaged tail only above
//! it: damage below it is not a torn write but lost acknowledged data, and is refused.
//!
//! Layout: two slots of `ACKED_SLOT_BYTES`, written alternately (a torn write of one leaves
//! the other), each `MAGIC`, the LSN (u64 LE) and a CRC32 of both; zeros after. The mark
//! read back is the larger valid one. The writer updates it after the log's fdatasync, so
//! it lags the acknowledgements by at most one of its own writes; a missing file reads as 0
//! (nothing protected: a log from before the mark existed, or an operator who removed it
//! to accept the loss of the damaged records).

use std::fs;
use std::io;
use std::path::Path;

/// The mark's file name in a shard's log directory.
pub const ACKED_MARK_FILE: &str = "acked.mark";
/// One slot: a block, so a slot is written whole with O_DIRECT.
pub const ACKED_SLOT_BYTES: usize = 4096;
/// Both slots.
pub const ACKED_MARK_BYTES: u64 = 2 * ACKED_SLOT_BYTES as u64;
const MAGIC: &[u8; 8] = b"floacked";
const FILLED_BYTES: usize = 20;

/// Where the `seq`-th update of the mark goes, and what it writes there (fill a zeroed
/// slot of `ACKED_SLOT_BYTES` with it).
pub fn acked_slot(seq: u64, lsn: u64) -> (u64, [u8; FILLED_BYTES]) {
    let mut bytes = [0u8; FILLED_BYTES];
    bytes[..8].copy_from_slice(MAGIC);
    bytes[8..16].copy_from_slice(&lsn.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..16]);
    bytes[16..20].copy_from_slice(&crc.to_le_bytes());
    ((seq % 2) * ACKED_SLOT_BYTES as u64, bytes)
}

fn parse_slot(slot: &[u8]) -> Option<u64> {
    let filled = slot.get(..FILLED_BYTES)?;
    if &filled[..8] != MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(filled[16..20].try_into().ok()?);
    if crc != crc32fast::hash(&filled[..16]) {
        return None;
    }
    Some(u64::from_le_bytes(filled[8..16].try_into().ok()?))
}

/// The LSN up to which the log in `dir` was synced, as its mark says (0 without a mark).
pub fn read_acked_mark(dir: &Path) -> io::Result<u64> {
    let bytes = match fs::read(dir.join(ACKED_MARK_FILE)) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    Ok(bytes
        .chunks(ACKED_SLOT_BYTES)
        .take(2)
        .filter_map(parse_slot)
        .max()
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, slots: &[(u64, u64)]) {
        let mut file = vec![0u8; ACKED_MARK_BYTES as usize];
        for &(seq, lsn) in slots {
            let (at, bytes) = acked_slot(seq, lsn);
            file[at as usize..at as usize + bytes.len()].copy_from_slice(&bytes);
        }
        fs::write(path.join(ACKED_MARK_FILE), file).unwrap();
    }

    #[test]
    fn the_mark_is_the_larger_valid_slot() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(read_acked_mark(tmp.path()).unwrap(), 0, "no file, no mark");
        write(tmp.path(), &[(0, 10), (1, 12)]);
        assert_eq!(read_acked_mark(tmp.path()).unwrap(), 12);
        write(tmp.path(), &[(1, 12), (2, 15)]);
        assert_eq!(read_acked_mark(tmp.path()).unwrap(), 15);
        // A damaged slot (a torn write of the newer one) leaves the other.
        let path = tmp.path().join(ACKED_MARK_FILE);
        let mut bytes = fs::read(&path).unwrap();
        bytes[9] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(read_acked_mark(tmp.path()).unwrap(), 12);
    }
}
