//! The open-file limit: the soft limit is raised to the hard one at start, and the
//! connections taken at once are bounded by it, leaving descriptors for what the shards
//! open besides (a connection beyond is answered `overloaded`, not left to hang).

use crate::listener::REFUSING_CONNECTIONS_MAX;

/// Descriptors kept for the process besides its shards: standard streams, the data
/// directory and its lock, the stderr writer, the WebAssembly engine.
pub const FDS_RESERVED_BASE: u64 = 64;
/// Descriptors kept per shard besides its connections: its rings and event descriptors,
/// its listening socket, the mesh, the log segments being written and read, snapshots
/// being written and read, directory syncs, and the connections it is refusing.
pub const FDS_RESERVED_PER_SHARD: u64 = 32 + REFUSING_CONNECTIONS_MAX as u64;
/// The highest soft limit asked for when the hard one is unlimited (the kernel's default
/// `fs.nr_open`).
const OPEN_FILES_ASKED_MAX: u64 = 1 << 20;

/// Descriptors kept for everything but client connections on a server of `shards`.
pub fn fds_reserved(shards: u32) -> u64 {
    FDS_RESERVED_BASE + FDS_RESERVED_PER_SHARD * u64::from(shards)
}

/// Raises the soft limit on open files to the hard limit (as far as the kernel allows);
/// returns the soft limit in force after.
pub fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, nothing else.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return OPEN_FILES_ASKED_MAX;
    }
    let hard = limit.rlim_max.min(OPEN_FILES_ASKED_MAX);
    if limit.rlim_cur >= hard {
        return limit.rlim_cur;
    }
    let raised = libc::rlimit {
        rlim_cur: hard,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads the struct it is given; raising the soft limit up to the
    // hard one needs no privilege.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        hard
    } else {
        limit.rlim_cur
    }
}

/// The connections a server of `shards` takes at once when `open_files` descriptors may
/// be open: `requested`, or fewer when the limit leaves less room (at least one).
pub fn connections_within(requested: usize, open_files: u64, shards: u32) -> usize {
    let room = open_files.saturating_sub(fds_reserved(shards)).max(1);
    requested.min(usize::try_from(room).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_leave_room_for_the_shards_files() {
        let reserved = fds_reserved(2);
        assert_eq!(connections_within(10_000, 1 << 20, 2), 10_000);
        assert_eq!(
            connections_within(10_000, 1024, 2),
            (1024 - reserved) as usize
        );
        assert_eq!(connections_within(10, reserved + 100, 2), 10);
        // A limit below the reserve still takes one connection (and says so at start).
        assert_eq!(connections_within(10_000, 16, 2), 1);
    }
}
