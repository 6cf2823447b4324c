//! Disk I/O that cannot hang an idle executor.

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
