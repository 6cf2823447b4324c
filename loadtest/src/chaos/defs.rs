//! What the campaign registers on its server: a WASM action whose guest writes a KV key,
//! a user-hosted action for the workers, and a workflow that uses both, a signal wait with
//! a timer, and a child workflow.

use flo::Client;
use flo::protocol::{ActionKind, ActionSpec};

/// Everything happens in this namespace.
pub const NAMESPACE: &str = "chaos";
/// The WASM action: input `"SUFFIX"` (a JSON string); writes `g/SUFFIX` = `1` when the key
/// is absent, `2` when it is there already (so a write applied twice, or a guest that ran
/// again after its write was kept, shows in the value or the version).
pub const GUEST_ACTION: &str = "chaos-guest";
/// The user-hosted action the worker threads serve.
pub const TASK_ACTION: &str = "chaos-task";
/// The workflow the load starts.
pub const WORKFLOW: &str = "chaos-flow";
/// The signal its wait step takes.
pub const SIGNAL: &str = "go";
/// A task's lease (its action's timeout): short, so tasks leased when the server died are
/// offered again soon after the restart.
pub const TASK_LEASE_MS: u64 = 1000;

/// `g/` + the input between its quotes, read, then written: `1` if it was absent, else `2`.
const GUEST_WAT: &str = r#"(module
  (import "flo" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "flo" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "g/")
  (data (i32.const 16) "1")
  (data (i32.const 32) "2")
  (data (i32.const 48) "{}")
  (func $alloc (export "alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (local $key i32) (local $buf i32) (local $value i32)
    (if (i32.lt_u (local.get $len) (i32.const 3)) (then (return (i64.const -1))))
    ;; the key: "g/" and the input without its quotes (as long as the input)
    (local.set $key (call $alloc (local.get $len)))
    (memory.copy (local.get $key) (i32.const 0) (i32.const 2))
    (memory.copy (i32.add (local.get $key) (i32.const 2))
                 (i32.add (local.get $ptr) (i32.const 1))
                 (i32.sub (local.get $len) (i32.const 2)))
    (local.set $buf (call $alloc (i32.const 64)))
    (local.set $value (i32.const 16))
    (if (i32.ge_s (call $kv_get (local.get $key) (local.get $len) (local.get $buf) (i32.const 64))
                  (i32.const 0))
      (then (local.set $value (i32.const 32))))
    (if (i32.ne (call $kv_set (local.get $key) (local.get $len) (local.get $value) (i32.const 1))
                (i32.const 0))
      (then (return (i64.const -3))))
    (i64.or (i64.shl (i64.const 48) (i64.const 32)) (i64.const 2)))
)"#;

/// The child: one worker step, retried on failure (a worker's `fail`).
const CHILD_YAML: &str = r#"
kind: Workflow
name: chaos-child
version: "1"
start:
  run: "@actions/chaos-task"
  retry:
    max_attempts: 4
    backoff: constant
    initial_delay_ms: 50
  transitions:
    success: flo.Completed
    failure: flo.Failed
    timeout: flo.Failed
"#;

/// The guest step, a signal wait whose timer moves on without the signal, the child.
const FLOW_YAML: &str = r#"
kind: Workflow
name: chaos-flow
version: "1"
idempotency: optional
start:
  run: "@actions/chaos-guest"
  transitions:
    success: approve
    failure: flo.Failed
steps:
  approve:
    waitForSignal:
      type: go
      timeoutMs: 400
      onTimeout: child
    transitions:
      success: child
  child:
    run: "@workflow/chaos-child"
    transitions:
      success: flo.Completed
      failure: flo.Failed
      timeout: flo.Failed
"#;

/// Registers the actions and creates the workflows (the child first).
pub fn register(addr: &str) -> Result<(), String> {
    let mut client = Client::connect(addr)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(NAMESPACE);
    let action = |name: &str, kind, wasm: Option<&str>, timeout_ms, max_retries| ActionSpec {
        namespace: String::new(),
        name: name.into(),
        kind,
        wasm: wasm.map(|w| w.as_bytes().to_vec()),
        timeout_ms,
        max_retries: Some(max_retries),
        retry_delay_ms: Some(50),
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    };
    let specs = [
        action(GUEST_ACTION, ActionKind::Wasm, Some(GUEST_WAT), None, 3),
        action(TASK_ACTION, ActionKind::User, None, Some(TASK_LEASE_MS), 5),
    ];
    for spec in specs {
        let name = spec.name.clone();
        client
            .register_action(spec)
            .map_err(|e| format!("cannot register action {name}: {e}"))?;
    }
    for yaml in [CHILD_YAML, FLOW_YAML] {
        client
            .create_workflow(yaml)
            .map_err(|e| format!("cannot create a workflow: {e}\n{yaml}"))?;
    }
    Ok(())
}
