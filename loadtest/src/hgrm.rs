//! `--histogram-out FILE`: a latency histogram as HdrHistogram's percentile distribution
//! (the `.hgrm` text of Java's `outputPercentileDistribution`, values in milliseconds),
//! which HdrHistogram's plotter and most tools that read wrk2's output take.

use hdrhistogram::Histogram;
use std::fmt::Write as _;
use std::path::Path;

/// Steps between two percentile lines per halving of the distance to 100% (the plotter's
/// usual 5).
const TICKS_PER_HALF_DISTANCE: u32 = 5;
/// Recorded values are microseconds; the file's are milliseconds.
const US_PER_MS: f64 = 1000.0;

/// Writes `latency_us` to `path` as a percentile distribution in milliseconds.
pub fn write(path: &Path, latency_us: &Histogram<u64>) -> Result<(), String> {
    std::fs::write(path, distribution(latency_us))
        .map_err(|e| format!("cannot write the histogram to {}: {e}", path.display()))
}

/// The `.hgrm` text of `h` (values in µs, written in ms).
pub fn distribution(h: &Histogram<u64>) -> String {
    let digits = h.sigfig() as usize;
    let mut out = format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
        total += v.count_since_last_iteration();
        let value = v.value_iterated_to() as f64 / US_PER_MS;
        let quantile = v.quantile_iterated_to();
        let _ = if quantile < 1.0 {
            writeln!(
                out,
                "{value:>12.digits$} {quantile:>2.12} {total:>10} {:>14.2}",
                1.0 / (1.0 - quantile)
            )
        } else {
            writeln!(out, "{value:>12.digits$} {quantile:>2.12} {total:>10}")
        };
    }
    let mean = h.mean() / US_PER_MS;
    let stdev = h.stdev() / US_PER_MS;
    let max = h.max() as f64 / US_PER_MS;
    let _ = writeln!(
        out,
        "#[Mean    = {mean:>12.digits$}, StdDeviation   = {stdev:>12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:>12.digits$}, Total count    = {:>12}]",
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets(h.sigfig())
    );
    out
}

/// Sub-buckets per bucket for `sigfig` significant digits: the power of two that holds
/// 2 × 10^sigfig values at unit resolution (2048 for 3).
fn sub_buckets(sigfig: u8) -> u64 {
    (2 * 10u64.pow(sigfig as u32)).next_power_of_two()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::new_histogram;

    #[test]
    fn a_distribution_lists_percentiles_up_to_the_max_and_a_summary() {
        let mut h = new_histogram();
        for us in 1..=10_000u64 {
            h.record(us).unwrap();
        }
        let text = distribution(&h);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].trim_start().starts_with("Value"), "{text}");
        assert_eq!(lines[1], "");
        let rows: Vec<Vec<f64>> = lines[2..]
            .iter()
            .take_while(|l| !l.starts_with('#'))
            .map(|l| l.split_whitespace().map(|f| f.parse().unwrap()).collect())
            .collect();
        assert!(rows.len() > 20, "{text}");
        assert!(
            rows.windows(2)
                .all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1])
        );
        let last = rows.last().unwrap();
        assert_eq!(last.len(), 3, "the 100% line has no 1/(1-p): {text}");
        assert_eq!(last[1], 1.0);
        assert_eq!(last[2], 10_000.0);
        assert!((last[0] - 10.0).abs() < 0.01, "max 10 ms: {text}");
        assert!(text.contains("#[Max     ="), "{text}");
        assert!(text.contains("SubBuckets     =         2048]"), "{text}");
    }
}
