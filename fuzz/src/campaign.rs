//! The driver: runs a target on its seeds and corpus, then on mutations of the corpus,
//! each input under `catch_unwind`, timed and its heap counted; keeps an input that
//! reached something new (edge coverage when the build counts it, the target's fingerprint
//! otherwise); saves every problem found — a panic, an input slower than the time limit,
//! an input holding more heap than the memory limit — as a finding.

use crate::coverage::Coverage;
use crate::guard;
use crate::mutate::Mutator;
use crate::targets::Target;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Inputs kept in memory at most, and their bytes: past either, new inputs are not kept.
pub const CORPUS_INPUTS_MAX: usize = 100_000;
pub const CORPUS_BYTES_MAX: usize = 256 << 20;
/// Findings of one kind kept per campaign (panics: one per place in the code).
const FINDINGS_PER_KIND_MAX: usize = 5;
/// A hung input stops the process after this many times the time limit (at least
/// `HARD_LIMIT_MIN`).
const HARD_LIMIT_FACTOR: u32 = 10;
const HARD_LIMIT_MIN: Duration = Duration::from_secs(10);
/// Share of picks among the most recent additions (1 in this many), and how many count as
/// recent: newly found inputs get mutated soon.
const RECENT_PICK_ONE_IN: u64 = 4;
const RECENT_INPUTS: usize = 32;
/// Runs again of an input that looked slow (the fastest run counts).
const SLOW_RERUNS: usize = 2;
/// The stack inputs run on: the server's shard threads have std's default (glommio does
/// not set one), so a recursion that overflows there overflows here.
pub const TARGET_STACK_BYTES: usize = 2 << 20;

/// Runs `f` on a thread with `TARGET_STACK_BYTES` of stack.
fn on_target_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("flo-fuzz-target".into())
            .stack_size(TARGET_STACK_BYTES)
            .spawn_scoped(scope, f)
            .expect("the target thread starts");
        thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[derive(Debug, Clone)]
pub struct Config {
    pub runs: u64,
    pub seed: u64,
    /// Directories whose files join the target's seeds at the start.
    pub corpus_dirs: Vec<PathBuf>,
    /// Inputs found to reach something new are written here too.
    pub save_corpus: Option<PathBuf>,
    /// Findings are saved here (None: only reported).
    pub findings_dir: Option<PathBuf>,
    /// The slowest input so far is written here each time there is a new one.
    pub save_slowest: Option<PathBuf>,
    /// An input taking longer is a finding.
    pub timeout: Duration,
    /// An input holding more heap at once is a finding.
    pub alloc_bytes_max: usize,
    /// A status line on stderr this often (None: quiet).
    pub status_every: Option<Duration>,
}

impl Config {
    pub fn new(runs: u64, seed: u64) -> Config {
        Config {
            runs,
            seed,
            corpus_dirs: Vec::new(),
            save_corpus: None,
            findings_dir: None,
            save_slowest: None,
            timeout: Duration::from_secs(1),
            alloc_bytes_max: 256 << 20,
            status_every: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// Where (file:line:column) and the message.
    Panic(String),
    Slow(Duration),
    /// Peak heap bytes held by the input.
    Memory(usize),
}

impl Problem {
    fn kind(&self) -> &'static str {
        match self {
            Problem::Panic(_) => "panic",
            Problem::Slow(_) => "slow",
            Problem::Memory(_) => "memory",
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Panic(at) => write!(f, "panic at {at}"),
            Problem::Slow(d) => write!(f, "slow: {} ms", d.as_millis()),
            Problem::Memory(b) => write!(f, "memory: held {} MiB at once", b >> 20),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Finding {
    pub problem: Problem,
    pub input: Vec<u8>,
    pub saved: Option<PathBuf>,
}

/// One input's run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The target's fingerprint; None when it panicked.
    pub signal: Option<u64>,
    pub panic: Option<String>,
    pub elapsed: Duration,
    /// Peak heap bytes the input held beyond what was live before it.
    pub alloc_bytes: usize,
}

impl Outcome {
    /// What is wrong with this run under `config`'s limits, if anything.
    pub fn problem(&self, config: &Config) -> Option<Problem> {
        if let Some(p) = &self.panic {
            return Some(Problem::Panic(p.clone()));
        }
        if self.elapsed > config.timeout {
            return Some(Problem::Slow(self.elapsed));
        }
        if self.alloc_bytes > config.alloc_bytes_max {
            return Some(Problem::Memory(self.alloc_bytes));
        }
        None
    }
}

#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    /// Inputs run: the initial ones and the mutations.
    pub runs: u64,
    pub initial: usize,
    pub elapsed: Duration,
    pub corpus: usize,
    /// Edges reached and counters in the build, with coverage.
    pub edges: Option<(usize, usize)>,
    pub findings: Vec<Finding>,
    pub slowest: Duration,
    pub slowest_input: Vec<u8>,
    pub alloc_peak: usize,
}

impl Report {
    pub fn runs_per_second(&self) -> f64 {
        self.runs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs one input under `catch_unwind`, timing it and counting its heap. Install the silent
/// panic hook first (`guard::install_silent_panic_hook`) to keep panics quiet.
pub fn execute(target: &Target, input: &[u8], coverage: Option<&Coverage>) -> Outcome {
    if let Some(c) = coverage {
        c.reset();
    }
    let _ = guard::take_panic();
    let live = guard::live_bytes();
    guard::reset_peak();
    guard::begin_input(input);
    let start = Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (target.run)(input)));
    let elapsed = start.elapsed();
    guard::end_input();
    let alloc_bytes = guard::peak_bytes().saturating_sub(live);
    match result {
        Ok(signal) => Outcome {
            signal: Some(signal),
            panic: None,
            elapsed,
            alloc_bytes,
        },
        Err(payload) => {
            let panic = guard::take_panic().unwrap_or_else(|| {
                payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(a panic without a message)".into())
            });
            Outcome {
                signal: None,
                panic: Some(panic),
                elapsed,
                alloc_bytes,
            }
        }
    }
}

/// A 64-bit FNV-1a of the bytes, in hex: the file name of a saved input.
pub fn input_name(input: &[u8]) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in input {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The files of `dir` (sorted by name; hidden files and READMEs skipped), with their bytes.
/// A missing directory has none.
pub fn read_inputs(dir: &Path) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name.starts_with("README") || !entry.file_type()?.is_file() {
            continue;
        }
        paths.push(entry.path());
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| std::fs::read(&p).map(|bytes| (p, bytes)))
        .collect()
}

/// A printable preview of an input: text as it is, other bytes escaped.
pub fn preview(input: &[u8], max: usize) -> String {
    let mut out: String = input
        .iter()
        .take(max)
        .flat_map(|&b| std::ascii::escape_default(b))
        .map(char::from)
        .collect();
    if input.len() > max {
        out.push_str(&format!("… ({} more bytes)", input.len() - max));
    }
    out
}

struct Campaign<'a> {
    target: &'static Target,
    config: &'a Config,
    coverage: Coverage,
    signals: HashSet<u64>,
    corpus: Vec<Vec<u8>>,
    corpus_bytes: usize,
    findings: Vec<Finding>,
    /// Panic places already reported.
    panic_places: HashSet<String>,
    runs: u64,
    slowest: Duration,
    slowest_input: Vec<u8>,
    alloc_peak: usize,
}

/// Fuzzes `target` as `config` says and reports what it found.
pub fn fuzz(target: &'static Target, config: &Config) -> std::io::Result<Report> {
    on_target_stack(|| fuzz_here(target, config))
}

fn fuzz_here(target: &'static Target, config: &Config) -> std::io::Result<Report> {
    guard::install_silent_panic_hook();
    if let Some(dir) = &config.findings_dir {
        std::fs::create_dir_all(dir)?;
        let hard = (config.timeout * HARD_LIMIT_FACTOR).max(HARD_LIMIT_MIN);
        guard::install_crash_guards(&dir.join("crash-abort"), hard);
    }
    if let Some(dir) = &config.save_corpus {
        std::fs::create_dir_all(dir)?;
    }
    let mut initial = (target.seeds)();
    for dir in &config.corpus_dirs {
        initial.extend(read_inputs(dir)?.into_iter().map(|(_, bytes)| bytes));
    }
    let started = Instant::now();
    let mut c = Campaign {
        target,
        config,
        coverage: Coverage::new(),
        signals: HashSet::new(),
        corpus: Vec::new(),
        corpus_bytes: 0,
        findings: Vec::new(),
        panic_places: HashSet::new(),
        runs: 0,
        slowest: Duration::ZERO,
        slowest_input: Vec::new(),
        alloc_peak: 0,
    };
    let initial_count = initial.len();
    for input in &initial {
        // Every initial input stays, whatever it reaches: they are the corpus's base.
        c.try_input(input, true)?;
    }
    if c.corpus.is_empty() {
        c.corpus.push(Vec::new());
    }
    let mut mutator = Mutator::new(config.seed, target.dictionary, target.len_max);
    let mut input = Vec::with_capacity(target.len_max);
    let mut last_status = Instant::now();
    for _ in 0..config.runs {
        let a = c.pick(&mut mutator);
        let b = mutator.rng().index(c.corpus.len());
        input.clear();
        input.extend_from_slice(&c.corpus[a]);
        mutator.mutate(&mut input, &c.corpus[b]);
        c.try_input(&input, false)?;
        if let Some(every) = config.status_every
            && last_status.elapsed() >= every
        {
            last_status = Instant::now();
            eprintln!("{}", c.status(started.elapsed()));
        }
    }
    crate::targets::remove_scratch();
    Ok(Report {
        target: target.name,
        runs: c.runs,
        initial: initial_count,
        elapsed: started.elapsed(),
        corpus: c.corpus.len(),
        edges: c
            .coverage
            .active()
            .then(|| (c.coverage.edges(), c.coverage.counters())),
        findings: c.findings,
        slowest: c.slowest,
        slowest_input: c.slowest_input,
        alloc_peak: c.alloc_peak,
    })
}

impl Campaign<'_> {
    fn pick(&self, mutator: &mut Mutator) -> usize {
        let n = self.corpus.len();
        if n > RECENT_INPUTS && mutator.rng().one_in(RECENT_PICK_ONE_IN) {
            return n - 1 - mutator.rng().index(RECENT_INPUTS);
        }
        mutator.rng().index(n)
    }

    fn try_input(&mut self, input: &[u8], initial: bool) -> std::io::Result<()> {
        let coverage = self.coverage.active().then_some(&self.coverage);
        let mut outcome = execute(self.target, input, coverage);
        self.runs += 1;
        let new = match (outcome.signal, self.coverage.active()) {
            (None, _) => false,
            (Some(_), true) => self.coverage.absorb(),
            (Some(signal), false) => self.signals.insert(signal),
        };
        if outcome.elapsed > self.slowest.min(self.config.timeout) {
            outcome.elapsed = self.confirmed_elapsed(input, outcome.elapsed);
        }
        if outcome.elapsed > self.slowest {
            self.slowest = outcome.elapsed;
            self.slowest_input = input.to_vec();
            if let Some(path) = &self.config.save_slowest {
                std::fs::write(path, input)?;
            }
        }
        self.alloc_peak = self.alloc_peak.max(outcome.alloc_bytes);
        if let Some(problem) = outcome.problem(self.config) {
            self.found(problem, input)?;
        }
        if !(new || (initial && outcome.signal.is_some())) {
            return Ok(());
        }
        if self.corpus.len() >= CORPUS_INPUTS_MAX
            || self.corpus_bytes + input.len() > CORPUS_BYTES_MAX
        {
            return Ok(());
        }
        self.corpus.push(input.to_vec());
        self.corpus_bytes += input.len();
        if let Some(dir) = &self.config.save_corpus
            && !initial
        {
            std::fs::write(dir.join(input_name(input)), input)?;
        }
        Ok(())
    }

    /// The time of an input that looked slow, run again: the fastest of its runs, so that
    /// a pause of this shared machine is not taken for a slow input.
    fn confirmed_elapsed(&self, input: &[u8], first: Duration) -> Duration {
        (0..SLOW_RERUNS).fold(first, |fastest, _| {
            fastest.min(execute(self.target, input, None).elapsed)
        })
    }

    fn found(&mut self, problem: Problem, input: &[u8]) -> std::io::Result<()> {
        let fresh = match &problem {
            Problem::Panic(at) => {
                let place = at.split(": ").next().unwrap_or(at).to_string();
                self.panic_places.insert(place)
                    && self.count(problem.kind()) < FINDINGS_PER_KIND_MAX * 4
            }
            _ => self.count(problem.kind()) < FINDINGS_PER_KIND_MAX,
        };
        if !fresh {
            return Ok(());
        }
        let saved = match &self.config.findings_dir {
            Some(dir) => {
                let path = dir.join(format!("{}-{}", problem.kind(), input_name(input)));
                std::fs::write(&path, input)?;
                Some(path)
            }
            None => None,
        };
        if self.config.status_every.is_some() {
            eprintln!(
                "finding in {} after {} runs: {problem}\n  input ({} bytes){}: {}",
                self.target.name,
                self.runs,
                input.len(),
                saved
                    .as_ref()
                    .map_or(String::new(), |p| format!(" saved to {}", p.display())),
                preview(input, 400)
            );
        }
        self.findings.push(Finding {
            problem,
            input: input.to_vec(),
            saved,
        });
        Ok(())
    }

    fn count(&self, kind: &str) -> usize {
        self.findings
            .iter()
            .filter(|f| f.problem.kind() == kind)
            .count()
    }

    fn status(&self, elapsed: Duration) -> String {
        let edges = match self.coverage.active() {
            true => format!(
                "edges {}/{}",
                self.coverage.edges(),
                self.coverage.counters()
            ),
            false => format!("signals {}", self.signals.len()),
        };
        format!(
            "#{} {:.0}/s corpus {} {edges} findings {} slowest {:.1} ms peak heap {} KiB",
            self.runs,
            self.runs as f64 / elapsed.as_secs_f64().max(1e-9),
            self.corpus.len(),
            self.findings.len(),
            self.slowest.as_secs_f64() * 1000.0,
            self.alloc_peak >> 10,
        )
    }
}

/// Runs every input once; returns each with its outcome.
pub fn replay(target: &Target, inputs: &[(PathBuf, Vec<u8>)]) -> Vec<(PathBuf, Outcome)> {
    on_target_stack(|| replay_here(target, inputs))
}

fn replay_here(target: &Target, inputs: &[(PathBuf, Vec<u8>)]) -> Vec<(PathBuf, Outcome)> {
    guard::install_silent_panic_hook();
    let coverage = Coverage::new();
    let coverage = coverage.active().then_some(&coverage);
    let outcomes = inputs
        .iter()
        .map(|(path, input)| (path.clone(), execute(target, input, coverage)))
        .collect();
    crate::targets::remove_scratch();
    outcomes
}

/// A small corpus that reaches what `inputs` reach: a greedy cover of the edges they reach
/// (of their fingerprints, without coverage) — the input reaching most edges not yet
/// reached per byte first — of at most `files_max` inputs holding at most `bytes_max`
/// bytes. Panicking inputs are left out.
pub fn minimize(
    target: &Target,
    inputs: &[Vec<u8>],
    files_max: usize,
    bytes_max: usize,
) -> Minimized {
    on_target_stack(|| minimize_here(target, inputs, files_max, bytes_max))
}

/// What `minimize` kept.
#[derive(Debug)]
pub struct Minimized {
    pub inputs: Vec<Vec<u8>>,
    /// Edges (fingerprints) the kept inputs reach, of those all the inputs reach.
    pub reached: usize,
    pub of: usize,
}

fn minimize_here(
    target: &Target,
    inputs: &[Vec<u8>],
    files_max: usize,
    bytes_max: usize,
) -> Minimized {
    guard::install_silent_panic_hook();
    let coverage = Coverage::new();
    let reached = |input: &[u8], out: &mut Vec<u64>| {
        let outcome = execute(target, input, coverage.active().then_some(&coverage));
        out.clear();
        match (outcome.signal, coverage.active()) {
            (None, _) => {}
            (Some(_), true) => coverage.edges_hit(out),
            (Some(signal), false) => out.push(signal),
        }
    };
    // Candidates: the smallest input reaching each feature.
    let mut smallest: HashMap<u64, usize> = HashMap::new();
    let mut features = Vec::new();
    for (i, input) in inputs.iter().enumerate() {
        reached(input, &mut features);
        for &f in &features {
            let slot = smallest.entry(f).or_insert(i);
            if input.len() < inputs[*slot].len() {
                *slot = i;
            }
        }
    }
    let smallest_len = smallest.len();
    let candidates: HashSet<usize> = smallest.into_values().collect();
    let mut reaches: HashMap<usize, Vec<u64>> = HashMap::new();
    let mut heap = BinaryHeap::new();
    for &i in &candidates {
        let mut features = Vec::new();
        reached(&inputs[i], &mut features);
        heap.push((per_byte(features.len(), inputs[i].len()), i));
        reaches.insert(i, features);
    }
    crate::targets::remove_scratch();
    // Lazy greedy: a candidate's gain only shrinks, so one whose fresh gain still tops the
    // heap is the best.
    fn per_byte(features: usize, len: usize) -> u64 {
        (features as u64 * 1_000_000) / (len as u64 + 1024)
    }
    let mut covered: HashSet<u64> = HashSet::new();
    let (mut chosen, mut bytes) = (Vec::new(), 0usize);
    while let Some((gain, i)) = heap.pop() {
        if chosen.len() == files_max {
            break;
        }
        let len = inputs[i].len();
        let fresh = reaches[&i].iter().filter(|f| !covered.contains(f)).count();
        if fresh == 0 || bytes + len > bytes_max {
            continue;
        }
        if per_byte(fresh, len) < gain {
            heap.push((per_byte(fresh, len), i));
            continue;
        }
        covered.extend(reaches[&i].iter().copied());
        chosen.push(i);
        bytes += len;
    }
    chosen.sort();
    Minimized {
        inputs: chosen.into_iter().map(|i| inputs[i].clone()).collect(),
        reached: covered.len(),
        of: smallest_len,
    }
}
