//! The `plan` workload: starts of `loadtest-plan`, a one-step workflow whose step runs a
//! two-executor inline plan; the first executor (`loadtest-fail`, a guest that always
//! fails) opens its breaker at its first failure for an hour, so every step skips it and
//! runs the second (`loadtest-ok`). With `--plain-workflow` the step runs `loadtest-ok`
//! directly: the difference is what a plan step costs.

use crate::workload::register_wasm_action;
use flo_protocol::{ActionKind, ActionSpec};

pub const WORKFLOW: &str = "loadtest-plan";
const FAILING_ACTION: &str = "loadtest-fail";

const PLAN_YAML: &str = r#"kind: Workflow
name: loadtest-plan
version: "1"
plans:
  charge:
    executors:
      - name: broken
        action: "@actions/loadtest-fail"
        priority: 2
        breaker: {failure_threshold: 1, cooldown_ms: 3600000, half_open_max_calls: 1}
      - {name: working, action: "@actions/loadtest-ok", priority: 1}
start:
  run: "@plan/charge"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;

const PLAIN_YAML: &str = r#"kind: Workflow
name: loadtest-plan
version: "1"
start:
  run: "@actions/loadtest-ok"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;

/// Registers the two actions and creates the workflow (`plain`: without the plan).
pub fn prepare(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    plain: bool,
) -> Result<(), String> {
    register_wasm_action(addr, token, namespace)?;
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let spec = ActionSpec {
        namespace: namespace.into(),
        name: FAILING_ACTION.into(),
        kind: ActionKind::Wasm,
        wasm: Some(flo_testkit::guests::failing_guest().into_bytes()),
        timeout_ms: Some(5_000),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: Some("flo-loadtest: always fails".into()),
        memory_limit_mb: Some(1),
        wasm_entrypoint: None,
    };
    client
        .register_action(spec)
        .map_err(|e| format!("cannot register {FAILING_ACTION}: {e}"))?;
    let yaml = if plain { PLAIN_YAML } else { PLAN_YAML };
    client
        .create_workflow(yaml)
        .map_err(|e| format!("cannot create {WORKFLOW}: {e}"))?;
    Ok(())
}
