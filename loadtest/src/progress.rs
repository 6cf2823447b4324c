//! Progress on stderr while a workload runs. On a terminal: a live bar (indicatif) with the
//! operations done of the total, the last second's rate and p99 latency, the time elapsed
//! and the ETA. Otherwise (a log file, a pipe, `scripts/bench.sh`): one plain line a
//! second, `[  3s] 812345 ops  271234 ops/s  p99 3.210 ms`.

use hdrhistogram::Histogram;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

/// How often the bar is drawn again.
const BAR_REFRESH: Duration = Duration::from_millis(250);
/// The span the bar's rate and p99 cover.
const RATE_WINDOW: Duration = Duration::from_secs(1);

/// Every bar of the run (the driver's, the workers'), drawn together; None when stderr is
/// not a terminal.
fn bars() -> Option<&'static MultiProgress> {
    static BARS: OnceLock<Option<MultiProgress>> = OnceLock::new();
    BARS.get_or_init(|| {
        std::io::stderr()
            .is_terminal()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()))
    })
    .as_ref()
}

/// A line on stderr while bars may be drawn (above them, not through them).
pub fn note(line: &str) {
    match bars() {
        Some(bars) => {
            let _ = bars.println(line);
        }
        None => eprintln!("{line}"),
    }
}

/// What a reporter watches: a count going up, out of `total` if known, and for the p99 the
/// latencies (µs) recorded since its last look, which it takes and empties.
pub struct Watched<'a> {
    /// What is counted, plural: `ops`, `tasks completed`.
    pub unit: &'static str,
    pub total: Option<u64>,
    pub done: &'a AtomicU64,
    pub window_us: Option<&'a Mutex<Histogram<u64>>>,
}

/// Reports `watched` on stderr until `stop` closes: a bar on a terminal, a line every
/// second otherwise.
pub fn report(start: Instant, watched: Watched<'_>, stop: mpsc::Receiver<()>) {
    match bars() {
        Some(bars) => report_bar(bars, start, &watched, &stop),
        None => report_lines(start, &watched, &stop),
    }
}

/// The p99 of the latencies recorded since the last call, in ms (None without any).
fn take_p99_ms(window_us: Option<&Mutex<Histogram<u64>>>) -> Option<f64> {
    let mut window = window_us?.lock().unwrap();
    if window.is_empty() {
        return None;
    }
    let p99 = window.value_at_quantile(0.99) as f64 / 1000.0;
    window.reset();
    Some(p99)
}

fn report_lines(start: Instant, watched: &Watched<'_>, stop: &mpsc::Receiver<()>) {
    let mut last = 0;
    for second in 1u64.. {
        let at = start + Duration::from_secs(second);
        match stop.recv_timeout(at.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let done = watched.done.load(Relaxed);
        let unit = watched.unit;
        let rate_unit = unit.split(' ').next().unwrap_or(unit);
        let p99 = take_p99_ms(watched.window_us)
            .map(|ms| format!("  p99 {ms:.3} ms"))
            .unwrap_or_default();
        eprintln!(
            "[{second:>3}s] {done} {unit}  {} {rate_unit}/s{p99}",
            done - last
        );
        last = done;
    }
}

fn report_bar(
    bars: &MultiProgress,
    start: Instant,
    watched: &Watched<'_>,
    stop: &mpsc::Receiver<()>,
) {
    let unit = watched.unit;
    let rate_unit = unit.split(' ').next().unwrap_or(unit);
    let bar = match watched.total {
        Some(total) => ProgressBar::new(total).with_style(style(
            "{elapsed_precise} [{wide_bar}] {pos}/{len} {msg}  ETA {eta}",
        )),
        None => ProgressBar::no_length().with_style(style("{elapsed_precise} {pos} {msg}")),
    };
    // Fixed widths, so the bar keeps its length as the numbers change.
    let message = |rate: f64, p99: Option<f64>| {
        let p99 = match (watched.window_us, p99) {
            (None, _) => String::new(),
            (Some(_), Some(ms)) => format!("  p99 {ms:>9.2} ms"),
            (Some(_), None) => format!("  p99 {:>9} ms", "-"),
        };
        format!("{unit} {rate:>9.0} {rate_unit}/s{p99}")
    };
    let bar = bars.add(
        bar.with_elapsed(start.elapsed())
            .with_message(message(0.0, None)),
    );
    // (when, count) a second apart at most: the rate over the last second.
    let mut since = (Instant::now(), watched.done.load(Relaxed));
    let mut p99 = None::<f64>;
    loop {
        let done = watched.done.load(Relaxed);
        let now = Instant::now();
        if now - since.0 >= RATE_WINDOW {
            let rate = (done - since.1) as f64 / (now - since.0).as_secs_f64();
            since = (now, done);
            p99 = take_p99_ms(watched.window_us).or(p99);
            bar.set_message(message(rate, p99));
        }
        bar.set_position(done);
        match stop.recv_timeout(BAR_REFRESH) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => break,
        }
    }
    bar.set_position(watched.done.load(Relaxed));
    bar.abandon();
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
}
