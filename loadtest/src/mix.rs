//! The `mixed` workload: a weighted blend of KV puts and gets, WASM action invokes, worker
//! tasks and workflow starts, from `--mix kv=50,wasm=20,worker=15,workflow=15`.
//!
//! Operation `n` is of the kind `table[n % table.len()]`, the table laid out by smooth
//! weighted round-robin: every window of `table.len()` operations holds each kind exactly
//! its weight's times, interleaved (with weights 2:1, `A B A`, not `A A B`).

use crate::workload::{Generator, KvGet, KvPut, UserInvoke, WasmInvoke, WorkflowStart};
use flo::protocol::{Op, Reply};
use std::time::Instant;

/// The kinds of operation `mixed` blends, in the order they are reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A KV put (the `kv-put` workload's).
    KvPut,
    /// A KV get of one of the keys the puts write (found or not).
    KvGet,
    /// An invoke of the WASM action, answered once the run completed (`wasm-invoke`'s).
    Wasm,
    /// An invoke of the user-hosted action, completed by a worker (`worker`'s).
    Worker,
    /// A start of the 3-step WASM workflow, answered once it completed (`workflow`'s).
    Workflow,
}

pub const KINDS: [Kind; 5] = [
    Kind::KvPut,
    Kind::KvGet,
    Kind::Wasm,
    Kind::Worker,
    Kind::Workflow,
];
/// `KINDS`' names, as `--mix` and the report spell them.
pub const KIND_NAMES: [&str; 5] = ["kv-put", "kv-get", "wasm", "worker", "workflow"];
/// Highest weight of one kind in `--mix`.
pub const MIX_WEIGHT_MAX: u32 = 1000;
pub const MIX_DEFAULT: &str = "kv=50,wasm=20,worker=15,workflow=15";

impl Kind {
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        KIND_NAMES[self.index()]
    }
}

/// A validated `--mix`: each kind's weight, at least one of them above 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; KINDS.len()],
    /// One entry per unit of weight (sum of the weights), each a kind's index.
    table: Vec<u8>,
}

impl Mix {
    /// Parses `NAME=WEIGHT,...`: names `kv-put`, `kv-get`, `wasm`, `worker`, `workflow`, and
    /// `kv` for puts and gets half and half (an odd weight's extra unit goes to puts).
    /// Kinds not named get weight 0.
    pub fn parse(text: &str) -> Result<Mix, String> {
        let mut weights = [0u32; KINDS.len()];
        let mut named = [false; KINDS.len()];
        for part in text.split(',') {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` in --mix is not NAME=WEIGHT"))?;
            let weight: u32 = weight
                .trim()
                .parse()
                .ok()
                .filter(|w| *w <= MIX_WEIGHT_MAX)
                .ok_or_else(|| {
                    format!("the weight of `{name}` must be a whole number, 0 to {MIX_WEIGHT_MAX}")
                })?;
            let shares: &[(Kind, u32)] = match name.trim() {
                "kv" => &[
                    (Kind::KvPut, weight - weight / 2),
                    (Kind::KvGet, weight / 2),
                ],
                other => match KIND_NAMES.iter().position(|n| *n == other) {
                    Some(i) => &[(KINDS[i], weight)],
                    None => {
                        return Err(format!(
                            "unknown kind `{other}` in --mix: kv, kv-put, kv-get, wasm, worker or workflow"
                        ));
                    }
                },
            };
            for &(kind, share) in shares {
                if std::mem::replace(&mut named[kind.index()], true) {
                    return Err(format!("--mix names {} twice", kind.name()));
                }
                weights[kind.index()] = share;
            }
        }
        if weights.iter().all(|w| *w == 0) {
            return Err("--mix gives every kind weight 0".into());
        }
        Ok(Mix {
            weights,
            table: interleave(&weights),
        })
    }

    pub fn weight(&self, kind: Kind) -> u32 {
        self.weights[kind.index()]
    }

    /// The kind of operation `n`.
    pub fn kind_of(&self, n: u64) -> Kind {
        KINDS[usize::from(self.table[(n % self.table.len() as u64) as usize])]
    }

    /// `kv-put=25,kv-get=25,...`: the weights, zeros left out.
    pub fn describe(&self) -> String {
        KINDS
            .iter()
            .filter(|k| self.weight(**k) > 0)
            .map(|k| format!("{}={}", k.name(), self.weight(*k)))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Smooth weighted round-robin: at each step every kind gains its weight, the kind with the
/// most credit (the first such on a tie) is taken and pays the total.
fn interleave(weights: &[u32; KINDS.len()]) -> Vec<u8> {
    let total: i64 = weights.iter().map(|w| i64::from(*w)).sum();
    let mut credit = [0i64; KINDS.len()];
    let mut table = Vec::with_capacity(total as usize);
    for _ in 0..total {
        for (c, w) in credit.iter_mut().zip(weights) {
            *c += i64::from(*w);
        }
        let (best, _) = credit
            .iter()
            .enumerate()
            .rev()
            .max_by_key(|(_, c)| **c)
            .expect("five kinds");
        credit[best] -= total;
        table.push(best as u8);
    }
    table
}

/// One connection's generator of `mixed`: each kind's own generator, picked by `mix`.
///
/// Each kind keeps its own `Op` between its operations, so a generator that updates its op
/// in place never sees another kind's (a WASM invoke and a worker invoke are both
/// `ActionInvoke`s, with different actions and waits).
pub struct Mixed {
    mix: Mix,
    /// The ops of the kinds other than `current`, parked.
    parked: [Op; KINDS.len()],
    /// The kind of the op the driver holds.
    current: usize,
    kv_put: KvPut,
    kv_get: KvGet,
    wasm: WasmInvoke,
    worker: UserInvoke,
    workflow: WorkflowStart,
}

/// What `Mixed` needs to make each kind's generator.
pub struct MixedConfig<'a> {
    pub mix: &'a Mix,
    pub namespace: &'a str,
    pub keys: u64,
    pub value_bytes: usize,
    /// The user-hosted action the worker tasks run.
    pub action: &'a str,
    /// The clock of the worker tasks' `sent_ns`.
    pub epoch: Instant,
}

impl Mixed {
    pub fn new(cfg: &MixedConfig<'_>) -> Mixed {
        Mixed {
            mix: cfg.mix.clone(),
            parked: std::array::from_fn(|_| Op::Status),
            current: 0,
            kv_put: KvPut::new(cfg.namespace, cfg.keys, cfg.value_bytes),
            kv_get: KvGet::new(cfg.namespace, cfg.keys),
            wasm: WasmInvoke::new(cfg.namespace),
            worker: UserInvoke::new(cfg.namespace, cfg.action, cfg.epoch),
            workflow: WorkflowStart::new(cfg.namespace),
        }
    }

    fn generator(&mut self, n: u64) -> &mut dyn Generator {
        match self.mix.kind_of(n) {
            Kind::KvPut => &mut self.kv_put,
            Kind::KvGet => &mut self.kv_get,
            Kind::Wasm => &mut self.wasm,
            Kind::Worker => &mut self.worker,
            Kind::Workflow => &mut self.workflow,
        }
    }

    fn checker(&self, n: u64) -> &dyn Generator {
        match self.mix.kind_of(n) {
            Kind::KvPut => &self.kv_put,
            Kind::KvGet => &self.kv_get,
            Kind::Wasm => &self.wasm,
            Kind::Worker => &self.worker,
            Kind::Workflow => &self.workflow,
        }
    }
}

impl Generator for Mixed {
    fn kind_names(&self) -> &'static [&'static str] {
        &KIND_NAMES
    }

    fn kind(&self, n: u64) -> usize {
        self.mix.kind_of(n).index()
    }

    fn completed_by_worker(&self, n: u64) -> bool {
        self.mix.kind_of(n) == Kind::Worker
    }

    fn fill(&mut self, n: u64, intended: Option<Instant>, op: &mut Op) {
        let kind = self.kind(n);
        if kind != self.current {
            std::mem::swap(op, &mut self.parked[self.current]);
            std::mem::swap(op, &mut self.parked[kind]);
            self.current = kind;
        }
        self.generator(n).fill(n, intended, op);
    }

    fn check(&self, n: u64, reply: &Reply) -> Result<(), String> {
        self.checker(n).check(n, reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WASM_ACTION;

    fn counts(mix: &Mix, ops: u64) -> [u64; KINDS.len()] {
        let mut counts = [0; KINDS.len()];
        for n in 0..ops {
            counts[mix.kind_of(n).index()] += 1;
        }
        counts
    }

    #[test]
    fn the_default_mix_splits_kv_between_puts_and_gets() {
        let mix = Mix::parse(MIX_DEFAULT).unwrap();
        assert_eq!(
            mix.describe(),
            "kv-put=25,kv-get=25,wasm=20,worker=15,workflow=15"
        );
        assert_eq!(counts(&mix, 100), [25, 25, 20, 15, 15]);
        assert_eq!(
            counts(&mix, 1_000_000),
            [250_000, 250_000, 200_000, 150_000, 150_000]
        );
    }

    #[test]
    fn every_window_holds_each_kind_its_weight_interleaved() {
        let mix = Mix::parse("kv-put=2,wasm=1").unwrap();
        let kinds: Vec<Kind> = (0..6).map(|n| mix.kind_of(n)).collect();
        use Kind::*;
        assert_eq!(kinds, [KvPut, Wasm, KvPut, KvPut, Wasm, KvPut]);
        let mix = Mix::parse("kv-get=1,worker=3").unwrap();
        assert_eq!(counts(&mix, 4), [0, 1, 0, 3, 0]);
        assert_ne!(mix.kind_of(0), mix.kind_of(1), "not all of one kind first");
    }

    #[test]
    fn an_odd_kv_weight_gives_its_extra_unit_to_puts() {
        let mix = Mix::parse("kv=3,workflow=0").unwrap();
        assert_eq!((mix.weight(Kind::KvPut), mix.weight(Kind::KvGet)), (2, 1));
        assert_eq!(mix.weight(Kind::Workflow), 0);
        assert_eq!(counts(&mix, 3), [2, 1, 0, 0, 0]);
    }

    #[test]
    fn mixed_sends_each_operation_as_its_kind() {
        let mix = Mix::parse(MIX_DEFAULT).unwrap();
        let mut mixed = Mixed::new(&MixedConfig {
            mix: &mix,
            namespace: "ns",
            keys: 10,
            value_bytes: 4,
            action: "lt-task",
            epoch: Instant::now(),
        });
        let mut op = Op::Status;
        for n in 0..200 {
            mixed.fill(n, None, &mut op);
            let kind = mix.kind_of(n);
            let sent = match &op {
                Op::KvPut { .. } => Kind::KvPut,
                Op::KvGet { .. } => Kind::KvGet,
                Op::ActionInvoke(spec) if spec.action == "lt-task" && spec.wait_ms.is_none() => {
                    Kind::Worker
                }
                Op::ActionInvoke(spec) if spec.action == WASM_ACTION && spec.wait_ms.is_some() => {
                    Kind::Wasm
                }
                Op::WorkflowStart(_) => Kind::Workflow,
                other => panic!("op {n}: unexpected {other:?}"),
            };
            assert_eq!(sent, kind, "op {n}");
            assert_eq!(mixed.kind(n), kind.index());
            assert_eq!(mixed.completed_by_worker(n), kind == Kind::Worker);
        }
    }

    #[test]
    fn bad_mixes_are_refused_with_a_reason() {
        for (text, reason) in [
            ("kv=50,wasm", "not NAME=WEIGHT"),
            ("kv=-1", "whole number"),
            ("kv=1001", "whole number"),
            ("queue=5", "unknown kind `queue`"),
            ("kv=1,kv-put=1", "kv-put twice"),
            ("wasm=1,wasm=2", "wasm twice"),
            ("kv=0,wasm=0", "weight 0"),
            ("", "not NAME=WEIGHT"),
        ] {
            let error = Mix::parse(text).expect_err(text);
            assert!(error.contains(reason), "{text}: {error}");
        }
    }
}
