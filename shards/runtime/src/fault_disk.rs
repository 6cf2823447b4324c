//! A disk of a set capacity, for tests (`flo server --fault-disk-capacity-file PATH`,
//! hidden): the data directory's files may take at most the number of bytes written in
//! PATH, read again at every check, so a test fills the "disk" and frees it by rewriting the
//! file. The log writer checks before it allocates a segment file, the snapshot writer
//! before it writes a snapshot or grows the reserve (`snapshots.rs`), and they fail as a
//! full disk would (`StorageFull`). No mount or privilege needed; a real full file system (a small
//! tmpfs) takes the same path in the writer.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Directory levels under the data directory whose files count (the shards' directories).
const DEPTH_MAX: u32 = 2;

#[derive(Debug, Clone)]
pub struct FaultDisk {
    /// Holds the capacity in bytes (a decimal number); unreadable: no limit.
    pub capacity_file: PathBuf,
    pub data_dir: PathBuf,
}

impl FaultDisk {
    /// Fails like a full disk when `more` bytes would take the data directory past the
    /// capacity (blocking: a directory walk; run it off the shard thread).
    pub fn check(&self, more: u64) -> io::Result<()> {
        let Some(capacity) = fs::read_to_string(&self.capacity_file)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
        else {
            return Ok(());
        };
        let used = used_bytes(&self.data_dir, DEPTH_MAX);
        if used.saturating_add(more) <= capacity {
            return Ok(());
        }
        Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "no space left on device (injected: {used} bytes used, {more} more asked, \
                 capacity {capacity} in {})",
                self.capacity_file.display()
            ),
        ))
    }
}

/// Bytes of the files under `dir`, `depth` levels down.
fn used_bytes(dir: &Path, depth: u32) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.path(), e.metadata().ok()?)))
        .map(|(path, meta)| match meta.is_dir() {
            true if depth > 0 => used_bytes(&path, depth - 1),
            true => 0,
            false => meta.len(),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_capacity_counts_every_shards_files_and_is_read_again_at_each_check() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        fs::create_dir_all(data.join("shard-000")).unwrap();
        fs::write(data.join("shard-000/a"), vec![0; 1000]).unwrap();
        fs::write(data.join("flo.meta"), vec![0; 24]).unwrap();
        let disk = FaultDisk {
            capacity_file: dir.path().join("capacity"),
            data_dir: data,
        };
        assert!(disk.check(u64::MAX).is_ok(), "no file: no limit");
        fs::write(&disk.capacity_file, "2024\n").unwrap();
        assert!(disk.check(1000).is_ok());
        let full = disk.check(1001).unwrap_err();
        assert_eq!(full.kind(), io::ErrorKind::StorageFull);
        fs::write(&disk.capacity_file, "4096").unwrap();
        assert!(disk.check(1001).is_ok());
    }
}
