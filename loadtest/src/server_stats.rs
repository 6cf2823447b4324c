//! What a spawned server cost: its resident memory, CPU time and bytes written to disk,
//! read from `/proc/PID/status`, `/proc/PID/stat` and `/proc/PID/io` once a second while
//! the workload runs.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// How often the server is sampled.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// One reading of the server's counters. A counter the kernel would not give is None.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    pub rss_bytes: Option<u64>,
    /// The peak resident set so far (`VmHWM`).
    pub rss_peak_bytes: Option<u64>,
    /// User plus system time, in clock ticks.
    pub cpu_ticks: Option<u64>,
    /// Bytes the process caused to be sent to the storage layer (`write_bytes`).
    pub disk_write_bytes: Option<u64>,
}

/// The server's cost over the workload: from the sample before it to the one after.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    pub samples: u64,
    /// The highest resident set seen (samples and the kernel's own peak).
    pub rss_peak_bytes: Option<u64>,
    pub cpu_s: Option<f64>,
    pub disk_write_bytes: Option<u64>,
    pub elapsed: Duration,
}

impl Usage {
    /// CPU seconds the server spent per 1,000 operations.
    pub fn cpu_s_per_1000_ops(&self, ops: u64) -> Option<f64> {
        (ops > 0).then_some(self.cpu_s? * 1000.0 / ops as f64)
    }

    /// Bytes written to disk per operation.
    pub fn disk_bytes_per_op(&self, ops: u64) -> Option<f64> {
        (ops > 0).then_some(self.disk_write_bytes? as f64 / ops as f64)
    }

    /// The change from `first` to `last`, the peak over `first`, `last` and `peak_rss`.
    fn between(first: &Sample, last: &Sample, peak_rss: Option<u64>, samples: u64) -> Usage {
        let ticks_per_s = clock_ticks_per_s();
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        let peaks = [
            first.rss_bytes,
            last.rss_bytes,
            last.rss_peak_bytes,
            peak_rss,
        ];
        Usage {
            samples,
            rss_peak_bytes: peaks.into_iter().flatten().max(),
            cpu_s: delta(first.cpu_ticks, last.cpu_ticks).map(|t| t as f64 / ticks_per_s),
            disk_write_bytes: delta(first.disk_write_bytes, last.disk_write_bytes),
            elapsed: Duration::ZERO,
        }
    }
}

/// Reads process `pid`'s counters now.
pub fn sample(pid: u32) -> Sample {
    let read = |file: &str| std::fs::read_to_string(format!("/proc/{pid}/{file}")).ok();
    let status = read("status");
    let status_kib = |field| status.as_deref().and_then(|s| status_kib(s, field));
    Sample {
        rss_bytes: status_kib("VmRSS:").map(|kib| kib * 1024),
        rss_peak_bytes: status_kib("VmHWM:").map(|kib| kib * 1024),
        cpu_ticks: read("stat").as_deref().and_then(stat_cpu_ticks),
        disk_write_bytes: read("io").as_deref().and_then(io_write_bytes),
    }
}

/// A `/proc/PID/status` field in KiB (`VmRSS:    123 kB`).
fn status_kib(status: &str, field: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].split_whitespace().next()?.parse().ok()
}

/// `utime + stime` from `/proc/PID/stat` (fields 14 and 15, counted after the command
/// name, which is in parentheses and may hold spaces or parentheses itself).
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `write_bytes` from `/proc/PID/io`.
fn io_write_bytes(io: &str) -> Option<u64> {
    let line = io.lines().find(|l| l.starts_with("write_bytes:"))?;
    line["write_bytes:".len()..].trim().parse().ok()
}

fn clock_ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

/// Samples a process every `SAMPLE_INTERVAL` on a thread of its own until `finish`.
pub struct Sampler {
    stop: mpsc::Sender<()>,
    thread: thread::JoinHandle<(Sample, Option<u64>, u64)>,
    started: Instant,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let (stop, stopped) = mpsc::channel::<()>();
        let first = sample(pid);
        let thread = thread::Builder::new()
            .name("server-stats".into())
            .spawn(move || {
                let mut peak_rss = None;
                let mut samples = 1;
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(SAMPLE_INTERVAL)
                {
                    peak_rss = peak_rss.max(sample(pid).rss_bytes);
                    samples += 1;
                }
                (first, peak_rss, samples)
            })
            .expect("cannot start the server-stats thread");
        Sampler {
            stop,
            thread,
            started: Instant::now(),
        }
    }

    /// Takes the last sample and returns the server's cost since `start`.
    pub fn finish(self, pid: u32) -> Usage {
        drop(self.stop);
        let last = sample(pid);
        let (first, peak_rss, samples) = self.thread.join().expect("server-stats thread");
        let mut usage = Usage::between(&first, &last, peak_rss, samples + 1);
        usage.elapsed = self.started.elapsed();
        usage
    }
}

/// This process's own peak resident set (`VmHWM`), in bytes.
pub fn own_rss_peak_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_kib(&status, "VmHWM:").map(|kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_a_command_name_with_spaces_and_parentheses() {
        let stat = "4242 (flo (shard 0)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    700 55 0 0 20 0 5 0 12345 1000000 2500 18446744073709551615";
        assert_eq!(stat_cpu_ticks(stat), Some(755));
        assert_eq!(stat_cpu_ticks("4242 (flo) S 1"), None);
    }

    #[test]
    fn status_and_io_fields_are_read_by_name() {
        let status = "Name:\tflo\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t5\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(102_400));
        assert_eq!(status_kib(status, "VmHWM:"), Some(204_800));
        assert_eq!(status_kib(status, "VmSwap:"), None);
        let io = "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192000\n\
                  cancelled_write_bytes: 0\n";
        assert_eq!(io_write_bytes(io), Some(8_192_000));
    }

    #[test]
    fn usage_is_the_change_over_the_run_and_the_highest_memory_seen() {
        let first = Sample {
            rss_bytes: Some(10 << 20),
            rss_peak_bytes: Some(12 << 20),
            cpu_ticks: Some(100),
            disk_write_bytes: Some(1_000),
        };
        let last = Sample {
            rss_bytes: Some(40 << 20),
            rss_peak_bytes: Some(50 << 20),
            cpu_ticks: Some(100 + 3 * clock_ticks_per_s() as u64),
            disk_write_bytes: Some(2_001_000),
        };
        let usage = Usage::between(&first, &last, Some(45 << 20), 7);
        assert_eq!(usage.rss_peak_bytes, Some(50 << 20));
        assert_eq!(usage.cpu_s, Some(3.0));
        assert_eq!(usage.disk_write_bytes, Some(2_000_000));
        assert_eq!(usage.cpu_s_per_1000_ops(1_000_000), Some(0.003));
        assert_eq!(usage.disk_bytes_per_op(1_000_000), Some(2.0));
        assert_eq!(usage.disk_bytes_per_op(0), None);
        let unreadable = Usage::between(&first, &Sample::default(), None, 2);
        assert_eq!(
            (unreadable.cpu_s, unreadable.disk_write_bytes),
            (None, None)
        );
        assert_eq!(unreadable.rss_peak_bytes, Some(10 << 20));
    }

    #[test]
    fn this_process_can_be_sampled() {
        let now = sample(std::process::id());
        assert!(now.rss_bytes.is_some_and(|b| b > 0), "{now:?}");
        assert!(now.cpu_ticks.is_some(), "{now:?}");
        assert!(own_rss_peak_bytes().is_some());
    }
}
