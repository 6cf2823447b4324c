//! The snapshot reserve: a preallocated file in each shard's directory, `RESERVE_FILE`, that
//! keeps room for one snapshot on a full disk (a snapshot is what lets segments go). The
//! snapshot writer makes it (`keep`, after each snapshot, as large as the image and a
//! quarter more) and releases it when it finds no room (`release`); the log writer borrows
//! from it (`lend`) for a batch the shard took before it knew there is no room for the next
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
    use std::os::fd::AsRawFd;
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
        .and_then(|()| {
            // SAFETY: posix_fallocate on a file descriptor we own; it returns the error.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, bytes as libc::off_t) };
            match rc {
                0 => file.sync_all(),
                rc => Err(io::Error::from_raw_os_error(rc)),
            }
        });
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

/// Gives `bytes` of the reserve back to the disk, for the log to take: the reserve is cut
/// by as much (the next snapshot makes it whole again). Whether it held as much (else it
/// is left as it is).
pub fn lend(dir: &Path, bytes: u64) -> io::Result<bool> {
    let file = match fs::OpenOptions::new()
        .write(true)
        .open(dir.join(RESERVE_FILE))
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let had = file.metadata()?.len();
    if had < bytes {
        return Ok(false);
    }
    file.set_len(had - bytes)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_lends_what_it_holds_and_no_more() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!lend(dir.path(), 4096).unwrap(), "no reserve: nothing lent");
        assert_eq!(keep(dir.path(), 1 << 20, None).unwrap(), 1 << 20);
        assert!(lend(dir.path(), 4096).unwrap());
        let len = || fs::metadata(dir.path().join(RESERVE_FILE)).unwrap().len();
        assert_eq!(len(), (1 << 20) - 4096);
        assert!(!lend(dir.path(), 1 << 20).unwrap(), "more than it holds");
        assert_eq!(len(), (1 << 20) - 4096);
        assert_eq!(
            keep(dir.path(), 1 << 20, None).unwrap(),
            1 << 20,
            "made whole"
        );
        assert!(release(dir.path()).unwrap());
        assert!(!release(dir.path()).unwrap());
    }
}
