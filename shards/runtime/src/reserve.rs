//! The snapshot reserve: a preallocated file in each shard's directory, `RESERVE_FILE`, that
//! keeps room for one snapshot on a full disk (a snapshot is what lets segments go). The
//! snapshot writer makes it (`keep`, after each snapshot, as large as the image and a
//! quarter more) and releases it when it finds no room (`release`); the log writer borrows
//! from it (`lend_to`) for a batch the shard took before it knew there is no room for the next
//! segment, which no snapshot could otherwise get past (a snapshot never stands ahead of
//! the log). Blocking calls: run them off the shard thread.

use crate::fault_disk::FaultDisk;
use std::fs;
use std::io;
use std::path::Path;

/// The file keeping room for one snapshot (not a segment, not a snapshot: recovery never
/// reads it; an operator may delete it, see `docs/operations.md`).
pub const RESERVE_FILE: &str = "snapshot.reserve";
/// The smallest reserve (a shard without a snapshot yet).
const RESERVE_BYTES_MIN: u64 = 1 << 20;

/// Whether `e` says the disk is full (ENOSPC, or EDQUOT: a quota's limit).
pub fn is_no_space(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
    )
}

/// The reserve for a shard whose last image took `image_bytes`.
pub fn bytes_for(image_bytes: u64) -> u64 {
    (image_bytes + image_bytes / 4).max(RESERVE_BYTES_MIN)
}

/// Makes the reserve file `bytes` long, allocated. A smaller one grows if there is room,
/// else keeps its size; a larger one shrinks. Returns its size now.
pub fn keep(dir: &Path, bytes: u64, fault: Option<&FaultDisk>) -> io::Result<u64> {
    let path = dir.join(RESERVE_FILE);
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let had = file.metadata()?.len();
    if had >= bytes {
        if had > bytes {
            file.set_len(bytes)?;
        }
        return Ok(bytes);
    }
    let grown = fault
        .map_or(Ok(()), |f| f.check(bytes - had))
        .and_then(|()| allocate(&file, bytes))
        .and_then(|()| file.sync_all());
    match grown {
        Ok(()) => Ok(bytes),
        Err(e) => {
            // What a failed allocation took goes back.
            file.set_len(had)?;
            if had == 0 {
                fs::remove_file(&path)?;
            }
            Err(e)
        }
    }
}

/// Removes the reserve. Whether there was one.
pub fn release(dir: &Path) -> io::Result<bool> {
    match fs::remove_file(dir.join(RESERVE_FILE)) {
        Ok(()) => {
            fs::File::open(dir)?.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Moves room from the reserve to a log segment, `file`, so that it is allocated to `end`
/// bytes: the reserve is cut by what the segment needs more, and the segment allocated, in
/// one call (a snapshot's `keep` cannot take the room between). Whether it did: false when
/// the reserve holds less (or is gone), or when the room went elsewhere meanwhile (then the
/// reserve takes it back, if it can, as after any error). The caller syncs the segment.
pub fn lend_to(dir: &Path, file: &Path, end: u64, fault: Option<&FaultDisk>) -> io::Result<bool> {
    let segment = fs::OpenOptions::new().write(true).open(file)?;
    let more = end.saturating_sub(segment.metadata()?.len());
    if more == 0 {
        return Ok(true);
    }
    let reserve = match fs::OpenOptions::new()
        .write(true)
        .open(dir.join(RESERVE_FILE))
    {
        Ok(reserve) => reserve,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let had = reserve.metadata()?.len();
    if had < more {
        return Ok(false);
    }
    reserve.set_len(had - more)?;
    let taken = fault
        .map_or(Ok(()), |f| f.check(more))
        .and_then(|()| allocate(&segment, end));
    match taken {
        Ok(()) => Ok(true),
        Err(e) => {
            // The room went elsewhere (or the segment could not take it): the reserve takes
            // back what it can, so that trying again does not wear it away.
            let _ = allocate(&reserve, had);
            match is_no_space(&e) {
                true => Ok(false),
                false => Err(e),
            }
        }
    }
}

/// Allocates `file`'s first `len` bytes (its size grows to `len` if smaller).
fn allocate(file: &fs::File, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: posix_fallocate on a file descriptor we own; it returns the error.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) } {
        0 => Ok(()),
        rc => Err(io::Error::from_raw_os_error(rc)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_lends_to_a_segment_what_it_holds_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("1.ual");
        fs::write(&segment, vec![0; 8192]).unwrap();
        let len = |name: &str| fs::metadata(dir.path().join(name)).unwrap().len();
        assert!(
            !lend_to(dir.path(), &segment, 12288, None).unwrap(),
            "no reserve"
        );
        assert_eq!(keep(dir.path(), 1 << 20, None).unwrap(), 1 << 20);
        assert!(lend_to(dir.path(), &segment, 12288, None).unwrap());
        assert_eq!((len("1.ual"), len(RESERVE_FILE)), (12288, (1 << 20) - 4096));
        assert!(
            lend_to(dir.path(), &segment, 8192, None).unwrap(),
            "as long already"
        );
        assert!(
            !lend_to(dir.path(), &segment, 2 << 20, None).unwrap(),
            "more than it holds"
        );
        assert_eq!((len("1.ual"), len(RESERVE_FILE)), (12288, (1 << 20) - 4096));
        assert_eq!(
            keep(dir.path(), 1 << 20, None).unwrap(),
            1 << 20,
            "made whole"
        );
        assert!(release(dir.path()).unwrap());
        assert!(!release(dir.path()).unwrap());
    }
}
