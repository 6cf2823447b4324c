//! After a restart, what the ledger says must hold:
//!
//! - every key reads its last acknowledged state, or its in-doubt write applied once;
//! - every run whose start was acknowledged exists: repeating the start with its
//!   idempotency key returns that run, not a new one (an in-doubt start may go either way);
//! - every run reaches a final status within `--settle-ms`, and a status an answer
//!   acknowledged stays;
//! - every guest write of a completed run is there once (`1`, version 1);
//! - a task whose completion was acknowledged is completed with that result;
//! - a workflow run's history has each step completed once per execution (`history`);
//! - runs verified in earlier cycles are still there, unchanged, while the retention
//!   window keeps them (a sample).
//!
//! An `Err` is a server that stopped answering: the campaign cannot go on.

use crate::defs::{GUEST_ACTION, NAMESPACE, TASK_ACTION, WORKFLOW};
use crate::history;
use crate::load::{ClientLedger, describe_op, describe_state};
use crate::model::{KvState, RunEntry, RunKind, Sent, Settled, TaskLedger};
use crate::report::{Report, Verified};
use flo::Client;
use flo::protocol::{
    ErrorValue, InvokeSpec, KV_LIST_LIMIT_MAX, Op, RUN_WAIT_MS_MAX, Reply, WorkflowStartSpec,
};
use flo_testkit::Rng;
use std::collections::HashMap;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// How long a completed run's guest write may take to reach a key of another shard.
const GUEST_WRITE_PATIENCE: Duration = Duration::from_secs(5);
/// How long the server has to accept a connection after its `listening` line.
const CONNECT_PATIENCE: Duration = Duration::from_secs(5);
/// Runs of earlier cycles checked again after each restart.
const OLD_RUNS_SAMPLED: u64 = 50;
const POLL: Duration = Duration::from_millis(20);
/// Runs that finished within this much of the end of their retention window are no longer
/// sampled (the server's clock and ours, its once-a-second forgetting).
const RETENTION_MARGIN: Duration = Duration::from_secs(10);

/// A server that stopped answering.
pub type Fatal = String;

/// What one verification is about.
pub struct Context<'a> {
    pub cycle: u64,
    /// When this cycle's load began (its runs finished later).
    pub cycle_started: Instant,
    pub report: &'a Report,
    pub tasks: &'a Mutex<TaskLedger>,
    pub verified: &'a mut Verified,
    /// Every run must be final by then.
    pub deadline: Instant,
    /// The server's retention window.
    pub retention: Duration,
    /// Chooses the earlier runs sampled.
    pub rng: Rng,
}

pub struct Verify<'a> {
    cx: Context<'a>,
    client: Client,
}

/// A server error is a violation to report; anything else ends the verification.
fn server<T>(result: Result<T, flo::Error>) -> Result<Result<T, ErrorValue>, Fatal> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(flo::Error::Server(e)) => Ok(Err(e)),
        Err(e) => Err(format!(
            "the server stopped answering during verification: {e}"
        )),
    }
}

impl<'a> Verify<'a> {
    pub fn connect(addr: &str, cx: Context<'a>) -> Result<Verify<'a>, Fatal> {
        let until = Instant::now() + CONNECT_PATIENCE;
        loop {
            match Client::connect(addr) {
                Ok(client) => {
                    let client = client.with_namespace(NAMESPACE);
                    return Ok(Verify { cx, client });
                }
                Err(e) if Instant::now() >= until => {
                    return Err(format!("cannot connect to the restarted server: {e}"));
                }
                Err(_) => thread::sleep(POLL),
            }
        }
    }

    fn violation(&self, what: &str) {
        self.cx.report.violation(self.cx.cycle, what, None);
    }

    /// Every key of every load thread, from one listing; then the ledger takes what was
    /// read as the state the next cycle builds on.
    pub fn kv(&mut self, ledgers: &mut [ClientLedger]) -> Result<(), Fatal> {
        let listed = server(self.client.kv_list("kv/", Some(KV_LIST_LIMIT_MAX)))?;
        let (entries, truncated) = match listed {
            Ok(listed) => listed,
            Err(e) => {
                self.violation(&format!("kv list refused after the restart ({e})"));
                return Ok(());
            }
        };
        if truncated {
            self.violation("kv list truncated: more keys than the load threads ever wrote");
        }
        let mut found: HashMap<String, KvState> = entries
            .into_iter()
            .map(|e| (e.key, Some((e.value, e.version))))
            .collect();
        for ledger in ledgers.iter_mut() {
            for (key, entry) in &mut ledger.kv {
                let read = found.remove(key).flatten();
                self.cx.verified.kv_keys += 1;
                if !entry.allows(&read) {
                    let in_doubt = entry.in_doubt.as_ref().map_or(String::new(), |op| {
                        format!("; {} was in doubt", describe_op(op))
                    });
                    self.violation(&format!(
                        "kv {key}: reads {} after the restart; the last acknowledged write left \
                         {}{in_doubt}",
                        describe_state(&read),
                        describe_state(&entry.acked)
                    ));
                }
                entry.settle(read);
            }
        }
        for key in found.keys() {
            self.violation(&format!(
                "kv {key}: present after the restart, but no load thread wrote it"
            ));
        }
        Ok(())
    }

    /// This cycle's runs: repeat each start, wait for each to be final, check it.
    pub fn runs(
        &mut self,
        ledgers: &mut [ClientLedger],
        settled: &mut Vec<Settled>,
    ) -> Result<(), Fatal> {
        // Taken from the ledger only once verified: a verification the server stopped
        // answering is done again.
        let runs: Vec<RunEntry> = ledgers.iter().flat_map(|l| l.runs.clone()).collect();
        for run in &runs {
            self.repeat_start(run)?;
        }
        let mut done = Vec::with_capacity(runs.len());
        for run in &runs {
            done.extend(self.settle(run)?);
        }
        for ledger in ledgers.iter_mut() {
            ledger.runs.clear();
        }
        settled.extend(done);
        Ok(())
    }

    /// Repeats the start with its idempotency key: the same run must come back, created
    /// anew only if its start was in doubt (an in-doubt start that was applied now counts
    /// as acknowledged, as does one the repeat created).
    fn repeat_start(&mut self, run: &RunEntry) -> Result<(), Fatal> {
        let op = match run.kind {
            RunKind::Guest | RunKind::Task => Op::ActionInvoke(InvokeSpec {
                namespace: NAMESPACE.into(),
                action: if run.kind == RunKind::Guest {
                    GUEST_ACTION
                } else {
                    TASK_ACTION
                }
                .into(),
                input: run.input.clone(),
                priority: None,
                delay_ms: None,
                idempotency_key: Some(run.key.clone()),
                labels: None,
                wait_ms: None,
            }),
            RunKind::Workflow => Op::WorkflowStart(WorkflowStartSpec {
                namespace: NAMESPACE.into(),
                name: WORKFLOW.into(),
                version: None,
                input: run.input.clone(),
                idempotency_key: Some(run.key.clone()),
                wait_ms: None,
                run_id: Some(run.run_id.clone()),
                group: None,
                webhook: None,
            }),
        };
        let kind = run.kind.name();
        let (run_id, created) = match server(self.client.call(op))? {
            Ok(Reply::Invoked { run_id, created } | Reply::WorkflowStarted { run_id, created }) => {
                (run_id, created)
            }
            Ok(other) => {
                self.violation(&format!(
                    "{kind} {}: unexpected answer to a repeated start: {other:?}",
                    run.run_id
                ));
                return Ok(());
            }
            Err(e) => {
                self.violation(&format!(
                    "{kind} {}: a repeat of its start after the restart was refused ({e})",
                    run.run_id
                ));
                return Ok(());
            }
        };
        if run_id != run.run_id {
            self.violation(&format!(
                "{kind} {}: a repeat of its start with the same idempotency key answered run {run_id}",
                run.run_id
            ));
        }
        match (run.created, created) {
            (Sent::Acked, true) => self.violation(&format!(
                "{kind} {}: its start was acknowledged, but the run was gone after the restart \
                 (a repeat of the start created it anew)",
                run.run_id
            )),
            (Sent::InDoubt, false) => self.cx.verified.in_doubt_found += 1,
            _ => {}
        }
        Ok(())
    }

    fn wait_ms(&self) -> u64 {
        let left = self.cx.deadline.saturating_duration_since(Instant::now());
        (left.as_millis() as u64).clamp(1, RUN_WAIT_MS_MAX)
    }

    /// Waits for the run to be final and checks what it left; what later cycles check.
    fn settle(&mut self, run: &RunEntry) -> Result<Option<Settled>, Fatal> {
        match run.kind {
            RunKind::Guest | RunKind::Task => self.settle_action_run(run),
            RunKind::Workflow => self.settle_workflow_run(run),
        }
    }

    fn settle_action_run(&mut self, run: &RunEntry) -> Result<Option<Settled>, Fatal> {
        let kind = run.kind.name();
        let info = match server(self.client.wait_run(&run.run_id, self.wait_ms()))? {
            Ok(info) => info,
            Err(e) => {
                self.violation(&format!(
                    "{kind} {}: status after the restart: {e}",
                    run.run_id
                ));
                return Ok(None);
            }
        };
        if !info.status.is_final() {
            self.violation(&format!(
                "{kind} {}: still {} (attempt {}) when every run should be final",
                run.run_id,
                info.status.as_str(),
                info.attempt
            ));
            return Ok(None);
        }
        self.cx.verified.runs_final += 1;
        let status = info.status.as_str();
        self.check_acked_final(run, status);
        let mut guest_key = None;
        if run.kind == RunKind::Guest {
            if status == "completed" {
                let key = run.guest_key().expect("a guest run writes a key");
                if self.guest_write(&run.run_id, &key)? {
                    guest_key = Some(key);
                }
            } else {
                self.violation(&format!(
                    "{kind} {}: ended {status} ({}), a guest that cannot fail",
                    run.run_id,
                    info.error.as_deref().unwrap_or("no error")
                ));
            }
        } else {
            let completion = self
                .cx
                .tasks
                .lock()
                .unwrap()
                .completion(&run.run_id)
                .cloned();
            if let Some((attempt, output)) = completion {
                self.cx.verified.task_results += 1;
                if status != "completed" || info.output.as_deref() != Some(output.as_slice()) {
                    self.violation(&format!(
                        "{kind} {}: the completion of attempt {attempt} was acknowledged, but \
                         the run is {status} with output {:?}",
                        run.run_id,
                        info.output.as_deref().map(String::from_utf8_lossy)
                    ));
                }
            }
        }
        Ok(Some(Settled {
            cycle_started: self.cx.cycle_started,
            kind: run.kind,
            run_id: run.run_id.clone(),
            status,
            guest_key,
        }))
    }

    fn settle_workflow_run(&mut self, run: &RunEntry) -> Result<Option<Settled>, Fatal> {
        let kind = run.kind.name();
        let info = match server(self.client.wait_workflow(&run.run_id, self.wait_ms()))? {
            Ok(info) => info,
            Err(e) => {
                self.violation(&format!(
                    "{kind} {}: status after the restart: {e}",
                    run.run_id
                ));
                return Ok(None);
            }
        };
        if !info.status.is_final() {
            self.violation(&format!(
                "{kind} {}: still {} at step {:?} ({}) when every run should be final",
                run.run_id,
                info.status.as_str(),
                info.current_step,
                info.waiting_for.as_deref().unwrap_or("-")
            ));
            return Ok(None);
        }
        self.cx.verified.runs_final += 1;
        let status = info.status.as_str();
        self.check_acked_final(run, status);
        match server(self.client.workflow_history(&run.run_id))? {
            Ok(events) => {
                self.cx.verified.histories += 1;
                let found = history::problems(
                    &events,
                    &info.steps,
                    run.signals_acked,
                    run.signals_in_doubt,
                );
                if !found.is_empty() {
                    let names: Vec<String> = events
                        .iter()
                        .map(|e| format!("{}:{}", e.event_type, e.step.as_deref().unwrap_or("")))
                        .collect();
                    self.violation(&format!(
                        "{kind} {}: history: {}; events: {}",
                        run.run_id,
                        found.join("; "),
                        names.join(" ")
                    ));
                }
            }
            Err(e) => self.violation(&format!("{kind} {}: history refused ({e})", run.run_id)),
        }
        let guest_step = info.steps.iter().find(|s| s.name == "_start");
        let mut guest_key = None;
        match guest_step.and_then(|s| s.outcome.as_deref()) {
            Some("success") => {
                let key = run
                    .guest_key()
                    .expect("a workflow run's guest writes a key");
                if self.guest_write(&run.run_id, &key)? {
                    guest_key = Some(key);
                }
            }
            outcome => self.violation(&format!(
                "{kind} {}: its guest step ended {outcome:?}, a guest that cannot fail",
                run.run_id
            )),
        }
        Ok(Some(Settled {
            cycle_started: self.cx.cycle_started,
            kind: run.kind,
            run_id: run.run_id.clone(),
            status,
            guest_key,
        }))
    }

    fn check_acked_final(&self, run: &RunEntry, status: &str) {
        if let Some(acked) = run.acked_final
            && acked != status
        {
            self.violation(&format!(
                "{} {}: acknowledged {acked} before the kill, {status} after the restart",
                run.kind.name(),
                run.run_id
            ));
        }
    }

    /// The write of a completed guest: `1`, version 1 (waiting for one forwarded to
    /// another shard). True when it is so.
    fn guest_write(&mut self, run_id: &str, key: &str) -> Result<bool, Fatal> {
        let until = Instant::now() + GUEST_WRITE_PATIENCE;
        loop {
            match server(self.client.kv_get(key))? {
                Ok(Some(entry)) => {
                    self.cx.verified.guest_writes += 1;
                    if entry.value == b"1" && entry.version == 1 {
                        return Ok(true);
                    }
                    self.violation(&format!(
                        "guest write {key} of run {run_id}: reads {:?} version {}: applied \
                         twice, or written again by a second execution",
                        String::from_utf8_lossy(&entry.value),
                        entry.version
                    ));
                    return Ok(false);
                }
                Ok(None) if Instant::now() < until => thread::sleep(POLL),
                Ok(None) => {
                    self.violation(&format!(
                        "guest write {key} of run {run_id}: lost (the run completed; the key \
                         is still absent {} s later)",
                        GUEST_WRITE_PATIENCE.as_secs()
                    ));
                    return Ok(false);
                }
                Err(e) => {
                    self.violation(&format!(
                        "guest write {key} of run {run_id}: read refused ({e})"
                    ));
                    return Ok(false);
                }
            }
        }
    }

    /// A sample of the runs verified in earlier cycles that the retention window still
    /// keeps: there, same status, their guest writes unchanged.
    pub fn old_runs(&mut self, settled: &mut Vec<Settled>) -> Result<(), Fatal> {
        // Runs the server may have forgotten by now leave the sample for good.
        let horizon = Instant::now() + RETENTION_MARGIN;
        let retention = self.cx.retention;
        let forgettable = settled.partition_point(|s| s.cycle_started + retention <= horizon);
        settled.drain(..forgettable);
        if settled.is_empty() {
            return Ok(());
        }
        for _ in 0..OLD_RUNS_SAMPLED.min(settled.len() as u64) {
            let old = &settled[self.cx.rng.below(settled.len() as u64) as usize];
            let status = match old.kind {
                RunKind::Workflow => {
                    server(self.client.workflow_run(&old.run_id))?.map(|info| info.status.as_str())
                }
                RunKind::Guest | RunKind::Task => {
                    server(self.client.run(&old.run_id))?.map(|info| info.status.as_str())
                }
            };
            self.cx.verified.old_runs += 1;
            let kind = old.kind.name();
            match status {
                Ok(status) if status == old.status => {}
                Ok(status) => self.violation(&format!(
                    "{kind} {}: {} when verified in an earlier cycle, {status} now",
                    old.run_id, old.status
                )),
                Err(e) => self.violation(&format!(
                    "{kind} {}: {} when verified in an earlier cycle, now: {e}",
                    old.run_id, old.status
                )),
            }
            let Some(key) = &old.guest_key else { continue };
            let read = server(self.client.kv_get(key))?;
            let fine = matches!(&read, Ok(Some(e)) if e.value == b"1" && e.version == 1);
            if !fine {
                self.violation(&format!(
                    "guest write {key} of run {} (verified in an earlier cycle): now {read:?}",
                    old.run_id
                ));
            }
        }
        Ok(())
    }
}
