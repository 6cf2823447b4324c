//! Workloads: each produces the operation for a global operation number and judges replies.
//! To add one: a variant of [`Workload`], a [`Generator`], and a line in `main::run_workload`.

use clap::ValueEnum;
use flo::protocol::{ActionKind, ActionSpec, InvokeSpec, Op, Reply, RunStatus};
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// KV puts of fixed-size values over `--keys` keys (`k-0`, `k-1`, ...).
    KvPut,
    /// Invocations of a trivial WASM action, each answered once the run completed.
    WasmInvoke,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::KvPut => "kv-put",
            Workload::WasmInvoke => "wasm-invoke",
        }
    }
}

/// Produces a connection's operations. One per connection thread.
pub trait Generator: Send {
    /// Writes the operation numbered `n` (0-based, global across connections) into `op`.
    /// `op` holds this generator's previous operation (or a placeholder the first time), so
    /// a generator may update it in place instead of allocating a new one.
    fn fill(&mut self, n: u64, op: &mut Op);

    /// Whether a successful reply is the one expected; `Err` counts as an error.
    fn check(&self, reply: &Reply) -> Result<(), String>;
}

/// `kv-put`: `KvPut { key: "k-{n % keys}", value: <value_bytes bytes> }`.
pub struct KvPut {
    namespace: String,
    keys: u64,
    value: Vec<u8>,
}

impl KvPut {
    pub fn new(namespace: &str, keys: u64, value_bytes: usize) -> Self {
        let value = (0..value_bytes).map(|i| b'a' + (i % 26) as u8).collect();
        KvPut {
            namespace: namespace.to_string(),
            keys: keys.max(1),
            value,
        }
    }
}

impl Generator for KvPut {
    fn fill(&mut self, n: u64, op: &mut Op) {
        if !matches!(op, Op::KvPut { .. }) {
            *op = Op::KvPut {
                namespace: self.namespace.clone(),
                key: String::with_capacity(24),
                value: self.value.clone(),
                ttl_ms: None,
                if_version: None,
            };
        }
        if let Op::KvPut { key, .. } = op {
            key.clear();
            let _ = write!(key, "k-{}", n % self.keys);
        }
    }

    fn check(&self, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::KvPut { .. } => Ok(()),
            other => Err(format!("unexpected reply to a KV put: {other:?}")),
        }
    }
}

/// The action `wasm-invoke` runs: returns `{"ok":true}` whatever its input.
pub const WASM_ACTION: &str = "loadtest-ok";
const WASM_ACTION_WAT: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 16) "{\"ok\":true}")
  (func (export "alloc") (param i32) (result i32) (i32.const 1024))
  (func (export "handle") (param i32 i32) (result i64)
    (i64.or (i64.shl (i64.const 16) (i64.const 32)) (i64.const 11))))"#;

/// Registers the action `wasm-invoke` needs.
pub fn register_wasm_action(addr: &str, namespace: &str) -> Result<(), String> {
    let mut client = flo::Client::connect(addr)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let spec = ActionSpec {
        namespace: namespace.into(),
        name: WASM_ACTION.into(),
        kind: ActionKind::Wasm,
        wasm: Some(WASM_ACTION_WAT.as_bytes().to_vec()),
        timeout_ms: Some(5_000),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: Some("flo-loadtest: returns {\"ok\":true}".into()),
        memory_limit_mb: Some(1),
    };
    client
        .register_action(spec)
        .map_err(|e| format!("cannot register {WASM_ACTION}: {e}"))?;
    Ok(())
}

/// `wasm-invoke`: invoke `loadtest-ok` and wait for the completed run in one request.
pub struct WasmInvoke {
    namespace: String,
    input: Vec<u8>,
}

impl WasmInvoke {
    pub fn new(namespace: &str) -> Self {
        WasmInvoke {
            namespace: namespace.into(),
            input: br#"{"n":1}"#.to_vec(),
        }
    }
}

/// Longest the server holds an invoke waiting for its run.
const INVOKE_WAIT_MS: u64 = 30_000;

impl Generator for WasmInvoke {
    fn fill(&mut self, _n: u64, op: &mut Op) {
        if !matches!(op, Op::ActionInvoke(_)) {
            *op = Op::ActionInvoke(InvokeSpec {
                namespace: self.namespace.clone(),
                action: WASM_ACTION.into(),
                input: self.input.clone(),
                priority: None,
                delay_ms: None,
                idempotency_key: None,
                labels: None,
                wait_ms: Some(INVOKE_WAIT_MS),
            });
        }
    }

    fn check(&self, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::Run(run) if run.status == RunStatus::Completed => Ok(()),
            Reply::Run(run) => Err(format!(
                "run {} ended {}: {:?}",
                run.run_id,
                run.status.as_str(),
                run.error
            )),
            other => Err(format!("unexpected reply to an invoke: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_put_cycles_keys_and_reuses_the_op() {
        let mut generator = KvPut::new("ns", 3, 5);
        let mut op = Op::Status;
        generator.fill(4, &mut op);
        let expected = Op::KvPut {
            namespace: "ns".into(),
            key: "k-1".into(),
            value: b"abcde".to_vec(),
            ttl_ms: None,
            if_version: None,
        };
        assert_eq!(op, expected);
        generator.fill(5, &mut op);
        let Op::KvPut { key, .. } = &op else {
            panic!("not a put: {op:?}")
        };
        assert_eq!(key, "k-2");
    }
}
