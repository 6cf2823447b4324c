//! A load thread: one connection sending a seeded random mix — KV puts, CAS (current and
//! stale versions), deletes and reads of its own keys; WASM runs whose guest writes a key;
//! user-hosted tasks; workflow starts and signals — recording each answer in its ledger,
//! until the server dies under it (its unanswered operation is *in doubt*) or the cycle ends.

use crate::defs::{GUEST_ACTION, NAMESPACE, SIGNAL, TASK_ACTION, WORKFLOW};
use crate::model::{Counts, KvKey, KvOp, KvState, RunEntry, RunKind, Sent};
use crate::report::Report;
use flo::protocol::{ErrorCode, ErrorValue};
use flo::{Client, InvokeOptions, PutOptions, StartOptions};
use flo_testkit::Rng;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Keys each load thread owns: one writer per key, so the order of its writes is known.
pub const KEYS_PER_CLIENT: u64 = 32;
/// How long an invoke of the guest action waits for the run to finish.
const GUEST_WAIT_MS: u64 = 10_000;

/// The name of key `i` of load thread `client`.
pub fn key_name(client: u32, i: u64) -> String {
    format!("kv/t{client}/k{i:02}")
}

/// What became of a request.
pub enum Answer<T> {
    Ok(T),
    /// Refused by the server: nothing was changed.
    Refused(ErrorValue),
    /// No answer (the connection broke: None), or an error that does not say whether it
    /// was applied (`unavailable`, `internal`: a live server should not give those here).
    InDoubt(Option<ErrorValue>),
}

pub fn answer<T>(result: Result<T, flo::Error>) -> Answer<T> {
    match result {
        Ok(value) => Answer::Ok(value),
        Err(flo::Error::Server(e))
            if matches!(e.code, ErrorCode::Unavailable | ErrorCode::Internal) =>
        {
            Answer::InDoubt(Some(e))
        }
        Err(flo::Error::Server(e)) => Answer::Refused(e),
        Err(_) => Answer::InDoubt(None),
    }
}

/// What one load thread knows; its keys are kept across cycles, its runs until verified.
pub struct ClientLedger {
    pub index: u32,
    pub kv: BTreeMap<String, KvKey>,
    /// Runs asked for this cycle.
    pub runs: Vec<RunEntry>,
    pub counts: Counts,
}

impl ClientLedger {
    pub fn new(index: u32) -> ClientLedger {
        ClientLedger {
            index,
            kv: (0..KEYS_PER_CLIENT)
                .map(|i| (key_name(index, i), KvKey::default()))
                .collect(),
            runs: Vec::new(),
            counts: Counts::default(),
        }
    }
}

/// One load thread's cycle.
pub struct Load<'a> {
    pub cycle: u64,
    pub addr: &'a str,
    pub rng: Rng,
    pub stop: &'a AtomicBool,
    pub report: &'a Report,
    /// Operations sent so far (names the runs and values).
    pub sent: u64,
}

/// A KV write's answer.
enum KvDone {
    Put { version: u64 },
    Delete { deleted: bool },
}

impl Load<'_> {
    /// Sends operations until the cycle ends or one goes unanswered.
    pub fn run(&mut self, ledger: &mut ClientLedger) {
        let Ok(client) = Client::connect(self.addr) else {
            return; // the server is gone already: the main thread reports that
        };
        let mut client = client.with_namespace(NAMESPACE);
        while !self.stop.load(Relaxed) {
            self.sent += 1;
            let going = match self.rng.below(100) {
                0..35 => self.kv_write(&mut client, ledger),
                35..40 => self.kv_stale_cas(&mut client, ledger),
                40..45 => self.kv_read(&mut client, ledger),
                45..60 => self.guest(&mut client, ledger),
                60..72 => self.task(&mut client, ledger),
                72..88 => self.workflow(&mut client, ledger),
                _ => self.signal(&mut client, ledger),
            };
            if !going {
                break;
            }
        }
    }

    fn violation(&self, what: &str) {
        self.report.violation(self.cycle, what, None);
    }

    /// An answer that leaves `what` in doubt from a server that answered.
    fn note_in_doubt(&self, error: Option<ErrorValue>, what: &str) {
        if let Some(e) = error {
            self.violation(&format!("{what}: answered {e}, which leaves it in doubt"));
        }
    }

    fn pick_key(&mut self, ledger: &ClientLedger) -> String {
        key_name(ledger.index, self.rng.below(KEYS_PER_CLIENT))
    }

    fn value(&self, ledger: &ClientLedger) -> Vec<u8> {
        format!("c{}.t{}.n{}", self.cycle, ledger.index, self.sent).into_bytes()
    }

    /// A put (40%), a CAS on the current version (40%) or a delete (20%, half of them
    /// conditional).
    fn kv_write(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = self.pick_key(ledger);
        let version = version_of(&ledger.kv[&key].acked);
        let roll = self.rng.below(100);
        let (op, kind) = if roll < 40 {
            let value = self.value(ledger);
            let op = KvOp::Put {
                value,
                if_version: None,
            };
            (op, "kv put")
        } else if roll < 80 {
            let value = self.value(ledger);
            let op = KvOp::Put {
                value,
                if_version: Some(version),
            };
            (op, "kv cas")
        } else {
            let if_version = self.rng.percent(50).then_some(version);
            (KvOp::Delete { if_version }, "kv delete")
        };
        self.kv_send(client, ledger, &key, op, kind)
    }

    /// A CAS naming a version the key does not have: it must be refused.
    fn kv_stale_cas(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = self.pick_key(ledger);
        let version = version_of(&ledger.kv[&key].acked);
        let op = KvOp::Put {
            value: self.value(ledger),
            if_version: Some(version + 1 + self.rng.below(2)),
        };
        self.kv_send(client, ledger, &key, op, "kv stale cas")
    }

    fn kv_send(
        &mut self,
        client: &mut Client,
        ledger: &mut ClientLedger,
        key: &str,
        op: KvOp,
        kind: &'static str,
    ) -> bool {
        let entry = ledger.kv.get_mut(key).expect("a key of this thread");
        let expected = op.applied_to(&entry.acked);
        let result = match &op {
            KvOp::Put { value, if_version } => {
                let opts = PutOptions {
                    if_version: *if_version,
                    ..PutOptions::default()
                };
                client
                    .kv_put(key, value, opts)
                    .map(|version| KvDone::Put { version })
            }
            KvOp::Delete { if_version } => client
                .kv_delete(key, *if_version)
                .map(|deleted| KvDone::Delete { deleted }),
        };
        match answer(result) {
            Answer::Ok(done) => {
                ledger.counts.ack(kind);
                let (after, deleted_ok) = match (&op, done) {
                    (KvOp::Put { value, .. }, KvDone::Put { version }) => {
                        (Some((value.clone(), version)), true)
                    }
                    (KvOp::Delete { .. }, KvDone::Delete { deleted }) => {
                        (None, deleted == entry.acked.is_some())
                    }
                    _ => unreachable!("a put is answered with a version, a delete with a flag"),
                };
                if expected.as_ref() != Some(&after) || !deleted_ok {
                    self.violation(&format!(
                        "kv {key}: {} acknowledged, leaving {}, but the ledger expected {} \
                         (last acknowledged: {})",
                        describe_op(&op),
                        describe_state(&after),
                        expected.as_ref().map_or("a refusal".into(), describe_state),
                        describe_state(&entry.acked)
                    ));
                }
                entry.acked = after; // build on what the server said
                true
            }
            Answer::Refused(e) if expected.is_none() && e.code == ErrorCode::Conflict => {
                ledger.counts.ack(kind);
                true
            }
            Answer::Refused(e) => {
                self.violation(&format!(
                    "kv {key}: {} refused ({e}); the last acknowledged state was {}",
                    describe_op(&op),
                    describe_state(&entry.acked)
                ));
                self.resync(client, ledger, key)
            }
            Answer::InDoubt(error) => {
                self.note_in_doubt(error, &format!("kv {key}: {}", describe_op(&op)));
                ledger.counts.doubt(kind);
                entry.in_doubt = Some(op);
                false
            }
        }
    }

    /// A read of one of its keys: exactly what its last acknowledged write left.
    fn kv_read(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = self.pick_key(ledger);
        let entry = ledger.kv.get_mut(&key).expect("a key of this thread");
        match answer(client.kv_get(&key)) {
            Answer::Ok(read) => {
                ledger.counts.ack("kv read");
                let read = read.map(|e| (e.value, e.version));
                if read != entry.acked {
                    self.violation(&format!(
                        "kv {key}: read {}, but the last acknowledged write left {}",
                        describe_state(&read),
                        describe_state(&entry.acked)
                    ));
                    entry.acked = read;
                }
                true
            }
            Answer::Refused(e) => {
                self.violation(&format!("kv {key}: read refused ({e})"));
                true
            }
            Answer::InDoubt(error) => {
                self.note_in_doubt(error, &format!("kv {key}: read"));
                ledger.counts.doubt("kv read");
                false
            }
        }
    }

    /// After a violation: take what the server holds now, so one fault is reported once.
    fn resync(&self, client: &mut Client, ledger: &mut ClientLedger, key: &str) -> bool {
        let entry = ledger.kv.get_mut(key).expect("a key of this thread");
        match client.kv_get(key) {
            Ok(read) => {
                entry.acked = read.map(|e| (e.value, e.version));
                true
            }
            Err(_) => false,
        }
    }

    /// A WASM run (idempotency key chosen here), waited for.
    fn guest(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = format!("gi-c{}-t{}-n{}", self.cycle, ledger.index, self.sent);
        let run = RunEntry::new(RunKind::Guest, format!("{GUEST_ACTION}:{key}"), key.clone());
        let opts = InvokeOptions {
            idempotency_key: Some(key),
            ..InvokeOptions::default()
        };
        let result = client
            .invoke_and_wait(GUEST_ACTION, &run.input, opts, GUEST_WAIT_MS)
            .map(|info| {
                (
                    info.run_id,
                    info.status.is_final().then(|| info.status.as_str()),
                )
            });
        self.record_run(ledger, run, result)
    }

    /// A user-hosted task (idempotency key chosen here), not waited for.
    fn task(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = format!("ti-c{}-t{}-n{}", self.cycle, ledger.index, self.sent);
        let run = RunEntry::new(RunKind::Task, format!("{TASK_ACTION}:{key}"), key.clone());
        let opts = InvokeOptions {
            idempotency_key: Some(key),
            ..InvokeOptions::default()
        };
        let result = client
            .invoke(TASK_ACTION, &run.input, opts)
            .map(|run_id| (run_id, None));
        self.record_run(ledger, run, result)
    }

    /// A workflow run with a run id (and the same idempotency key) chosen here.
    fn workflow(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let key = format!("wf-c{}-t{}-n{}", self.cycle, ledger.index, self.sent);
        let run = RunEntry::new(RunKind::Workflow, key.clone(), key.clone());
        let opts = StartOptions {
            version: None,
            idempotency_key: Some(key.clone()),
            run_id: Some(key),
            group: None,
            webhook: None,
        };
        let result = client
            .start_workflow(WORKFLOW, &run.input, opts)
            .map(|run_id| (run_id, None));
        self.record_run(ledger, run, result)
    }

    fn record_run(
        &mut self,
        ledger: &mut ClientLedger,
        mut run: RunEntry,
        result: Result<(String, Option<&'static str>), flo::Error>,
    ) -> bool {
        let kind = run.kind.name();
        match answer(result) {
            Answer::Ok((run_id, final_status)) => {
                ledger.counts.ack(kind);
                if run_id != run.run_id {
                    self.violation(&format!(
                        "{kind} {}: the server answered with run id {run_id}",
                        run.run_id
                    ));
                }
                run.created = Sent::Acked;
                run.acked_final = final_status;
                ledger.runs.push(run);
                true
            }
            Answer::Refused(e) => {
                self.violation(&format!("{kind} {}: refused ({e})", run.run_id));
                true
            }
            Answer::InDoubt(error) => {
                self.note_in_doubt(error, &format!("{kind} {}", run.run_id));
                ledger.counts.doubt(kind);
                run.created = Sent::InDoubt;
                ledger.runs.push(run);
                false
            }
        }
    }

    /// A signal to one of this cycle's workflow runs (a run that finished refuses it).
    fn signal(&mut self, client: &mut Client, ledger: &mut ClientLedger) -> bool {
        let started: Vec<usize> = (0..ledger.runs.len())
            .filter(|&i| {
                let run = &ledger.runs[i];
                run.kind == RunKind::Workflow && run.created == Sent::Acked
            })
            .collect();
        if started.is_empty() {
            return self.workflow(client, ledger);
        }
        let run = &mut ledger.runs[started[self.rng.below(started.len() as u64) as usize]];
        match answer(client.signal_workflow(&run.run_id, SIGNAL, b"{}")) {
            Answer::Ok(()) => {
                run.signals_acked += 1;
                ledger.counts.ack("signal");
                true
            }
            Answer::Refused(e) if e.code == ErrorCode::Conflict => {
                ledger.counts.ack("signal refused (run final)");
                true
            }
            Answer::Refused(e) => {
                let what = format!("signal to workflow run {}: refused ({e})", run.run_id);
                self.violation(&what);
                true
            }
            Answer::InDoubt(error) => {
                let what = format!("signal to workflow run {}", run.run_id);
                self.note_in_doubt(error, &what);
                run.signals_in_doubt += 1;
                ledger.counts.doubt("signal");
                false
            }
        }
    }
}

fn version_of(state: &KvState) -> u64 {
    state.as_ref().map_or(0, |(_, v)| *v)
}

pub fn describe_state(state: &KvState) -> String {
    match state {
        Some((value, version)) => {
            format!("{:?} version {version}", String::from_utf8_lossy(value))
        }
        None => "absent".into(),
    }
}

pub fn describe_op(op: &KvOp) -> String {
    let condition = |v: &Option<u64>| v.map_or(String::new(), |v| format!(" if version {v}"));
    match op {
        KvOp::Put { value, if_version } => format!(
            "put {:?}{}",
            String::from_utf8_lossy(value),
            condition(if_version)
        ),
        KvOp::Delete { if_version } => format!("delete{}", condition(if_version)),
    }
}
