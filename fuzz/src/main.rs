//! `flo-fuzz TARGET --runs N [--seed S] [--corpus DIR]...`: a fuzzing campaign on the
//! stable toolchain. `--replay PATH...` runs saved inputs once; `--minimize-into DIR`
//! writes a small corpus reaching what the loaded one reaches. See `docs/fuzz.md`.

use clap::Parser;
use flo_fuzz::campaign::{self, Config, Report};
use flo_fuzz::targets::{self, Target};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Where LLVM's SanitizerCoverage says its counters are (in a build with the flags of
/// `scripts/fuzz.sh`). Defined in the binary, whose own objects are always linked, so
/// that every instrumented library finds it.
#[unsafe(no_mangle)]
pub extern "C" fn __sanitizer_cov_8bit_counters_init(start: *mut u8, stop: *mut u8) {
    flo_fuzz::coverage::register(start, stop);
}

/// Fuzz one of flo's decoders of untrusted bytes.
#[derive(Parser, Debug)]
#[command(name = "flo-fuzz")]
struct Args {
    /// The target: frame, record, yaml or auth.
    target: String,
    /// Mutated inputs to run (after the seeds and the corpus).
    #[arg(long, default_value_t = 1_000_000)]
    runs: u64,
    /// The campaign's random seed: the same seed and corpus give the same inputs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Directories of inputs to start from (default: fuzz/corpus/TARGET and
    /// fuzz/regressions/TARGET).
    #[arg(long)]
    corpus: Vec<PathBuf>,
    /// Write each new input that reached something new into this directory.
    #[arg(long)]
    save_corpus: Option<PathBuf>,
    /// Where findings are saved (default: fuzz/regressions/TARGET).
    #[arg(long)]
    findings: Option<PathBuf>,
    /// An input taking longer than this is a finding.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// An input holding more heap than this at once is a finding.
    #[arg(long, default_value_t = 256)]
    alloc_mb_max: usize,
    /// Keep the slowest input so far in this file.
    #[arg(long)]
    save_slowest: Option<PathBuf>,
    /// Run these files (or every file of these directories) once each, and stop.
    #[arg(long, num_args = 1..)]
    replay: Vec<PathBuf>,
    /// Write a minimal corpus of the loaded inputs (seeds, --corpus) into this directory,
    /// and stop.
    #[arg(long)]
    minimize_into: Option<PathBuf>,
    /// With --minimize-into: at most this many files...
    #[arg(long, default_value_t = 200)]
    files_max: usize,
    /// ...holding at most this many bytes.
    #[arg(long, default_value_t = 200 << 10)]
    bytes_max: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let Some(target) = targets::by_name(&args.target) else {
        eprintln!(
            "error: no target {:?}; the targets are {}",
            args.target,
            targets::names().join(", ")
        );
        return ExitCode::from(2);
    };
    let result = if !args.replay.is_empty() {
        replay(target, &args.replay)
    } else if let Some(out) = &args.minimize_into {
        minimize(target, &args, out)
    } else {
        fuzz(target, &args)
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn fuzz_dir(kind: &str, target: &Target) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target.name)
}

fn corpus_dirs(target: &Target, args: &Args) -> Vec<PathBuf> {
    match args.corpus.is_empty() {
        true => vec![fuzz_dir("corpus", target), fuzz_dir("regressions", target)],
        false => args.corpus.clone(),
    }
}

/// True when nothing was found.
fn fuzz(target: &'static Target, args: &Args) -> std::io::Result<bool> {
    let config = Config {
        corpus_dirs: corpus_dirs(target, args),
        save_corpus: args.save_corpus.clone(),
        findings_dir: Some(
            args.findings
                .clone()
                .unwrap_or_else(|| fuzz_dir("regressions", target)),
        ),
        save_slowest: args.save_slowest.clone(),
        timeout: Duration::from_millis(args.timeout_ms),
        alloc_bytes_max: args.alloc_mb_max << 20,
        status_every: Some(Duration::from_secs(10)),
        ..Config::new(args.runs, args.seed)
    };
    eprintln!(
        "flo-fuzz {}: {} runs, seed {}, corpus from {}",
        target.name,
        args.runs,
        args.seed,
        config
            .corpus_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let report = campaign::fuzz(target, &config)?;
    print_report(&report);
    Ok(report.findings.is_empty())
}

fn print_report(r: &Report) {
    let coverage = match r.edges {
        Some((edges, counters)) => format!("{edges} of {counters} edges reached"),
        None => "no coverage counters in this build (see scripts/fuzz.sh)".into(),
    };
    println!(
        "target {}: {} inputs ({} initial) in {:.1} s, {:.0} inputs/s; corpus {}; {coverage}",
        r.target,
        r.runs,
        r.initial,
        r.elapsed.as_secs_f64(),
        r.runs_per_second(),
        r.corpus
    );
    println!(
        "slowest input {:.2} ms ({} bytes); most heap held by one input {} KiB",
        r.slowest.as_secs_f64() * 1000.0,
        r.slowest_input.len(),
        r.alloc_peak >> 10
    );
    println!("findings: {}", r.findings.len());
    for f in &r.findings {
        let saved = f
            .saved
            .as_ref()
            .map_or(String::new(), |p| format!(" ({})", p.display()));
        println!("  {}{saved}", f.problem);
    }
}

fn replay(target: &Target, paths: &[PathBuf]) -> std::io::Result<bool> {
    let mut inputs = Vec::new();
    for path in paths {
        match path.is_dir() {
            true => inputs.extend(campaign::read_inputs(path)?),
            false => inputs.push((path.clone(), std::fs::read(path)?)),
        }
    }
    let config = Config::new(0, 0);
    let mut clean = true;
    for (path, outcome) in campaign::replay(target, &inputs) {
        let verdict = match outcome.problem(&config) {
            Some(problem) => {
                clean = false;
                problem.to_string()
            }
            None => "ok".into(),
        };
        println!(
            "{}: {verdict} ({:.2} ms, {} KiB)",
            path.display(),
            outcome.elapsed.as_secs_f64() * 1000.0,
            outcome.alloc_bytes >> 10
        );
    }
    Ok(clean)
}

fn minimize(target: &Target, args: &Args, out: &Path) -> std::io::Result<bool> {
    let mut inputs = (target.seeds)();
    for dir in corpus_dirs(target, args) {
        inputs.extend(campaign::read_inputs(&dir)?.into_iter().map(|(_, b)| b));
    }
    let kept = campaign::minimize(target, &inputs, args.files_max, args.bytes_max);
    std::fs::create_dir_all(out)?;
    let bytes: usize = kept.inputs.iter().map(Vec::len).sum();
    for input in &kept.inputs {
        std::fs::write(out.join(campaign::input_name(input)), input)?;
    }
    let what = match flo_fuzz::coverage::Coverage::new().active() {
        true => "edges",
        false => "fingerprints",
    };
    println!(
        "{} of {} inputs kept ({bytes} bytes) in {}; they reach {} of the {} {what} all reach",
        kept.inputs.len(),
        inputs.len(),
        out.display(),
        kept.reached,
        kept.of
    );
    Ok(true)
}
