//! The harness's ledger: what the server acknowledged, and what was sent but still
//! unanswered when the server was killed — *in doubt*: it may or may not have been applied,
//! but if it was, then once.

use std::collections::{BTreeMap, HashMap};

/// A key's state: (value, version), or None when absent.
pub type KvState = Option<(Vec<u8>, u64)>;

/// A KV write the harness sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvOp {
    Put {
        value: Vec<u8>,
        if_version: Option<u64>,
    },
    Delete {
        if_version: Option<u64>,
    },
}

impl KvOp {
    /// The state this write leaves when applied to `state`; None when its condition
    /// refuses it (then it changes nothing).
    pub fn applied_to(&self, state: &KvState) -> Option<KvState> {
        let version = state.as_ref().map_or(0, |(_, v)| *v);
        let (Self::Put { if_version, .. } | Self::Delete { if_version }) = self;
        if if_version.is_some_and(|want| want != version) {
            return None;
        }
        Some(match self {
            // A key written after a delete starts again at version 1.
            Self::Put { value, .. } => Some((value.clone(), version + 1)),
            Self::Delete { .. } => None,
        })
    }
}

/// One key, written by one load thread only (so its operations are in one order).
#[derive(Debug, Clone, Default)]
pub struct KvKey {
    /// What the last acknowledged write left (or the state verification last read).
    pub acked: KvState,
    /// The write that was unanswered when the server died (at most one: a load thread stops
    /// at its first unanswered operation).
    pub in_doubt: Option<KvOp>,
}

impl KvKey {
    /// Whether the key may read `read` after a restart: the acknowledged state, or the
    /// in-doubt write applied to it once.
    pub fn allows(&self, read: &KvState) -> bool {
        *read == self.acked
            || self
                .in_doubt
                .as_ref()
                .and_then(|op| op.applied_to(&self.acked))
                .is_some_and(|after| after == *read)
    }

    /// After verification: what was read is what the next cycle builds on.
    pub fn settle(&mut self, read: KvState) {
        self.acked = read;
        self.in_doubt = None;
    }
}

/// Whether a request's answer came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Acked,
    /// Unanswered when the server died.
    InDoubt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// A WASM action run whose guest writes its key (`g/SUFFIX`), half the time on the
    /// other shard.
    Guest,
    /// A user-hosted action run, completed (or failed) by the worker threads.
    Task,
    /// A workflow run: the guest step, a signal wait with a timer, a child workflow whose
    /// step is a worker task.
    Workflow,
}

impl RunKind {
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Guest => "guest run",
            RunKind::Task => "task run",
            RunKind::Workflow => "workflow run",
        }
    }
}

/// A run the harness asked for, with an id it chose (an idempotency key for action runs,
/// a run id and the same key for workflow runs), so it can look the run up and repeat
/// the request after a crash.
#[derive(Debug, Clone)]
pub struct RunEntry {
    pub kind: RunKind,
    pub run_id: String,
    /// The idempotency key (and the suffix of ids and keys): `gi-c3-t1-n17`.
    pub key: String,
    /// JSON: the key as a string.
    pub input: Vec<u8>,
    pub created: Sent,
    /// A final status a reply acknowledged (an invoke that waited for the run).
    pub acked_final: Option<&'static str>,
    pub signals_acked: u32,
    pub signals_in_doubt: u32,
}

impl RunEntry {
    pub fn new(kind: RunKind, run_id: String, key: String) -> RunEntry {
        let input = format!("\"{key}\"").into_bytes();
        RunEntry {
            kind,
            run_id,
            key,
            input,
            created: Sent::InDoubt,
            acked_final: None,
            signals_acked: 0,
            signals_in_doubt: 0,
        }
    }

    /// The KV key its guest writes (guest runs and the first step of workflow runs).
    pub fn guest_key(&self) -> Option<String> {
        (self.kind != RunKind::Task).then(|| format!("g/{}", self.key))
    }
}

/// A run verified final, kept so later cycles can check it is still there, unchanged
/// (while the retention window says it must be).
#[derive(Debug, Clone)]
pub struct Settled {
    /// When the cycle that created it started: it finished later, so the server may forget
    /// it only a retention window after this.
    pub cycle_started: std::time::Instant,
    pub kind: RunKind,
    pub run_id: String,
    pub status: &'static str,
    /// The guest write that must stay (`"1"`, version 1).
    pub guest_key: Option<String>,
}

/// What the workers were told about each task (a task's id is its run id).
#[derive(Debug, Default)]
pub struct TaskReports {
    /// The acknowledged completion: (attempt, result).
    pub completed: Option<(u32, Vec<u8>)>,
    /// The highest attempt whose failure was acknowledged (0: none).
    pub failed_attempt: u32,
}

#[derive(Debug, Default)]
pub struct TaskLedger {
    tasks: HashMap<String, TaskReports>,
}

impl TaskLedger {
    /// A lease the server gave; a violation when it gives a task whose completion was
    /// acknowledged, or an attempt whose failure was.
    pub fn on_lease(&mut self, task_id: &str, attempt: u32) -> Option<String> {
        let reports = self.tasks.get(task_id)?;
        if let Some((done, _)) = &reports.completed {
            return Some(format!(
                "task {task_id} leased again (attempt {attempt}) after its completion \
                 (attempt {done}) was acknowledged"
            ));
        }
        (attempt <= reports.failed_attempt).then(|| {
            format!(
                "task {task_id} leased at attempt {attempt} after the failure of attempt {} \
                 was acknowledged",
                reports.failed_attempt
            )
        })
    }

    /// An acknowledged completion; a violation when one was acknowledged before.
    pub fn on_completed(&mut self, task_id: &str, attempt: u32, result: Vec<u8>) -> Option<String> {
        let reports = self.tasks.entry(task_id.to_string()).or_default();
        if let Some((first, _)) = &reports.completed {
            return Some(format!(
                "task {task_id} completed twice: attempt {first}, then attempt {attempt}, both \
                 acknowledged"
            ));
        }
        reports.completed = Some((attempt, result));
        None
    }

    /// An acknowledged failure (the task is retried at a later attempt).
    pub fn on_failed(&mut self, task_id: &str, attempt: u32) {
        let reports = self.tasks.entry(task_id.to_string()).or_default();
        reports.failed_attempt = reports.failed_attempt.max(attempt);
    }

    /// The acknowledged completion of a task, if any.
    pub fn completion(&self, task_id: &str) -> Option<&(u32, Vec<u8>)> {
        self.tasks.get(task_id)?.completed.as_ref()
    }
}

/// Operations by kind: acknowledged, and in doubt.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub acked: BTreeMap<&'static str, u64>,
    pub in_doubt: BTreeMap<&'static str, u64>,
}

impl Counts {
    pub fn ack(&mut self, kind: &'static str) {
        *self.acked.entry(kind).or_default() += 1;
    }

    pub fn doubt(&mut self, kind: &'static str) {
        *self.in_doubt.entry(kind).or_default() += 1;
    }

    pub fn merge(&mut self, other: &Counts) {
        for (kind, n) in &other.acked {
            *self.acked.entry(kind).or_default() += n;
        }
        for (kind, n) in &other.in_doubt {
            *self.in_doubt.entry(kind).or_default() += n;
        }
    }

    pub fn acked_total(&self) -> u64 {
        self.acked.values().sum()
    }

    pub fn in_doubt_total(&self) -> u64 {
        self.in_doubt.values().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(value: &str, version: u64) -> KvState {
        Some((value.as_bytes().to_vec(), version))
    }

    fn put(value: &str, if_version: Option<u64>) -> KvOp {
        KvOp::Put {
            value: value.as_bytes().to_vec(),
            if_version,
        }
    }

    #[test]
    fn a_key_reads_its_acknowledged_state_or_its_in_doubt_write_applied_once() {
        let mut key = KvKey {
            acked: state("a", 3),
            in_doubt: None,
        };
        assert!(key.allows(&state("a", 3)));
        assert!(!key.allows(&state("b", 4)), "nothing was in doubt");
        assert!(!key.allows(&None));

        key.in_doubt = Some(put("b", None));
        assert!(key.allows(&state("a", 3)), "not applied");
        assert!(key.allows(&state("b", 4)), "applied once");
        assert!(!key.allows(&state("b", 5)), "applied twice");
        assert!(
            !key.allows(&state("b", 3)),
            "a version chain that went back"
        );

        key.in_doubt = Some(put("b", Some(2)));
        assert!(
            !key.allows(&state("b", 4)),
            "a stale CAS can never be applied"
        );
        key.in_doubt = Some(KvOp::Delete { if_version: None });
        assert!(key.allows(&None));
        key.settle(None);
        assert_eq!(key.acked, None);
        key.in_doubt = Some(put("c", Some(0)));
        assert!(
            key.allows(&state("c", 1)),
            "a key written after a delete starts at 1"
        );
    }

    #[test]
    fn an_acknowledged_completion_is_never_leased_again_nor_completed_twice() {
        let mut ledger = TaskLedger::default();
        assert_eq!(ledger.on_lease("t-1", 1), None);
        ledger.on_failed("t-1", 1);
        assert!(
            ledger.on_lease("t-1", 1).is_some(),
            "a failed attempt again"
        );
        assert_eq!(ledger.on_lease("t-1", 2), None);
        assert_eq!(ledger.on_completed("t-1", 2, b"{}".to_vec()), None);
        assert!(ledger.on_lease("t-1", 3).is_some());
        assert!(ledger.on_completed("t-1", 3, b"{}".to_vec()).is_some());
        assert_eq!(ledger.completion("t-1").map(|c| c.0), Some(2));
    }
}
