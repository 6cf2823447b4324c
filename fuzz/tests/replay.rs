//! What CI runs of the fuzzing (`cargo test --workspace`): every committed input of
//! `fuzz/corpus/TARGET/` and `fuzz/regressions/TARGET/` through its target, and a short
//! deterministic campaign per target (the seeds, then mutations from a fixed seed), all of
//! which must run clean: no panic, no input holding more heap than the limit.

use flo_fuzz::campaign::{self, Config, Problem};
use flo_fuzz::targets::{self, Target};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Mutated inputs per target in the short campaign.
const RUNS: u64 = 20_000;

fn dir(kind: &str, target: &Target) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(kind)
        .join(target.name)
}

/// Time is not judged here (a debug build on a busy CI machine): panics and memory are.
fn config(runs: u64) -> Config {
    Config {
        timeout: Duration::from_secs(60),
        ..Config::new(runs, 1)
    }
}

fn replay_committed(name: &str) {
    let target = targets::by_name(name).unwrap();
    let mut inputs = campaign::read_inputs(&dir("corpus", target)).unwrap();
    let corpus = inputs.len();
    inputs.extend(campaign::read_inputs(&dir("regressions", target)).unwrap());
    assert!(corpus > 0, "no corpus for {name}");
    let failures: Vec<String> = campaign::replay(target, &inputs)
        .into_iter()
        .filter_map(|(path, outcome)| {
            let problem = outcome.problem(&config(0))?;
            Some(format!("{}: {problem}", path.display()))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn short_campaign(name: &str, runs: u64) {
    let target = targets::by_name(name).unwrap();
    let report = campaign::fuzz(target, &config(runs)).unwrap();
    assert_eq!(report.runs, runs + report.initial as u64);
    let findings: Vec<String> = report
        .findings
        .iter()
        .map(|f| {
            format!(
                "{}\n  input: {}",
                f.problem,
                campaign::preview(&f.input, 2000)
            )
        })
        .collect();
    assert!(findings.is_empty(), "{}", findings.join("\n"));
    assert!(report.corpus > report.initial, "nothing new was found");
}

#[test]
fn frame_corpus_and_regressions_run_clean() {
    replay_committed("frame");
}

#[test]
fn record_corpus_and_regressions_run_clean() {
    replay_committed("record");
}

#[test]
fn yaml_corpus_and_regressions_run_clean() {
    replay_committed("yaml");
}

#[test]
fn auth_corpus_and_regressions_run_clean() {
    replay_committed("auth");
}

#[test]
fn frame_short_campaign_finds_nothing() {
    short_campaign("frame", RUNS);
}

#[test]
fn record_short_campaign_finds_nothing() {
    // Each input writes and recovers segment files: fewer of them.
    short_campaign("record", RUNS / 4);
}

#[test]
fn yaml_short_campaign_finds_nothing() {
    short_campaign("yaml", RUNS);
}

#[test]
fn auth_short_campaign_finds_nothing() {
    short_campaign("auth", RUNS);
}

#[test]
fn a_panicking_input_is_a_finding_with_its_place() {
    fn run(data: &[u8]) -> u64 {
        if data.first() == Some(&b'!') {
            let v: Vec<u8> = Vec::new();
            return v[data.len()] as u64;
        }
        data.len() as u64
    }
    static BOOM: Target = Target {
        name: "boom",
        run,
        seeds: || vec![b"ok".to_vec(), b"!".to_vec()],
        dictionary: &[],
        len_max: 16,
    };
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        findings_dir: Some(dir.path().to_path_buf()),
        ..config(100)
    };
    let report = campaign::fuzz(&BOOM, &config).unwrap();
    // One place in the code: one finding, however many inputs reach it.
    assert_eq!(report.findings.len(), 1, "{:?}", report.findings);
    let finding = &report.findings[0];
    let Problem::Panic(at) = &finding.problem else {
        panic!("{:?}", finding.problem);
    };
    assert!(
        at.contains("replay.rs") && at.contains("index out of bounds"),
        "{at}"
    );
    let saved = finding.saved.as_ref().unwrap();
    assert_eq!(std::fs::read(saved).unwrap(), b"!");
}
