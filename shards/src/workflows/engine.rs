//! The workflow engine on the shard owning a run: start, advance through steps, react to
//! action runs, child runs, signals and timers, cancel. Every change is a record committed
//! through `ShardCore::commit`; what the server must do next is collected in `WfEffects`.
//!
//! A run step on `@actions/NAME` creates an action run on this same shard (one attempt: the
//! step's `retry:` decides about retries) and waits for it to be final; WASM runs execute
//! on the shard, user-hosted ones go to workers. `@workflow/NAME[:V]` starts a child run,
//! also on this shard. Everything a run touches is local, so advancing never waits on
//! another shard.

use super::def::{Idempotency, Next, StepAction, Target, WorkflowDef};
use super::state::{WfRun, json_value, run_info};
use crate::actions::Queue;
use crate::engine::{Done, ShardCore};
use crate::kv::validate_namespace;
use crate::record::{Record, StepNext, StepRef, StepWait};
use flo_protocol::{
    ActionKind, ErrorValue, IDEMPOTENCY_KEY_BYTES_MAX, RUN_INPUT_BYTES_MAX, RUN_LIST_LIMIT_DEFAULT,
    RUN_LIST_LIMIT_MAX, Reply, RunStatus, ValidationIssue, WorkflowInfo, WorkflowRunStatus,
    WorkflowStartSpec,
};
use serde_json::{Value, json};
use std::rc::Rc;

/// Steps one advance may take before the run is failed (a loop in the definition).
pub const MAX_ADVANCE_STEPS: usize = 256;
/// Deepest nesting of child workflows.
pub const CHILD_DEPTH_MAX: u32 = 10;
pub const SIGNAL_TYPE_BYTES_MAX: usize = 256;
pub const WORKFLOW_YAML_BYTES_MAX: usize = 1 << 20;

/// What the server does after the engine changed state.
#[derive(Default)]
pub struct WfEffects {
    /// A WASM action run was queued.
    pub wasm_kick: bool,
    /// A timer was set (the timer task must look again).
    pub timers_changed: bool,
    /// Workflow runs that became final (answer their waiters).
    pub wf_finals: Vec<(String, String)>,
    /// Action runs that became final here (cancelled with their workflow).
    pub action_finals: Vec<(String, String)>,
    /// LSN of the last record committed.
    pub lsn: u64,
}

/// The id an idempotency key maps to (the same key always reaches the same shard).
pub fn idempotent_workflow_run_id(workflow: &str, key: &str) -> String {
    format!("wfrun:{workflow}:{key}")
}

fn outcome_chain(outcome: &str) -> Vec<&str> {
    match outcome {
        "target_not_found" => vec!["target_not_found", "execution_failure", "failure"],
        "target_disabled" => vec!["target_disabled", "execution_failure", "failure"],
        "execution_failure" => vec!["execution_failure", "failure"],
        other => vec![other],
    }
}

fn jitter(seed: u64) -> f64 {
    (xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()) % 1000) as f64 / 1000.0
}

impl ShardCore {
    fn wf_commit(&mut self, record: Record, fx: &mut WfEffects) {
        fx.lsn = self.commit(record);
    }

    // ---- definitions ----

    /// Validates a new definition; `None` when this exact version exists already.
    pub fn wf_plan_create(
        &self,
        namespace: &str,
        yaml: &str,
        now_ms: u64,
    ) -> Result<(Option<Record>, String, String, Vec<ValidationIssue>), ErrorValue> {
        validate_namespace(namespace)?;
        if yaml.len() > WORKFLOW_YAML_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "a workflow definition must be at most {WORKFLOW_YAML_BYTES_MAX} bytes"
            )));
        }
        let validated = super::parse_workflow(yaml).map_err(|issues| {
            let lines: Vec<String> = issues
                .iter()
                .map(|i| format!("  {} {}: {}", i.code, i.path, i.message))
                .collect();
            ErrorValue::bad_request(format!(
                "invalid workflow definition:\n{}",
                lines.join("\n")
            ))
        })?;
        let (name, version) = (validated.def.name.clone(), validated.def.version.clone());
        if let Some(existing) = self
            .state
            .workflows
            .def(namespace, &name)
            .and_then(|e| e.get(Some(&version)))
        {
            if existing.yaml == yaml {
                return Ok((None, name, version, validated.warnings));
            }
            return Err(ErrorValue::conflict(format!(
                "workflow {name:?} version {version:?} exists with a different definition; \
                 give the new definition another version"
            )));
        }
        let record = Record::WorkflowDefined {
            namespace: namespace.to_string(),
            name: name.clone(),
            version: version.clone(),
            yaml: yaml.to_string(),
            at_ms: now_ms,
        };
        Ok((Some(record), name, version, validated.warnings))
    }

    pub fn wf_plan_set_enabled(
        &self,
        namespace: &str,
        name: &str,
        enabled: bool,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        self.wf_entry(namespace, name)?;
        Ok(Record::WorkflowEnabled {
            namespace: namespace.to_string(),
            name: name.to_string(),
            enabled,
            at_ms: now_ms,
        })
    }

    fn wf_entry(&self, namespace: &str, name: &str) -> Result<&super::WfEntry, ErrorValue> {
        self.state.workflows.def(namespace, name).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow {name:?} is not defined in namespace {namespace:?} \
                 (create it with flo workflow create -f FILE)"
            ))
        })
    }

    pub fn wf_info(
        &self,
        namespace: &str,
        name: &str,
        version: Option<&str>,
    ) -> Result<WorkflowInfo, ErrorValue> {
        let entry = self.wf_entry(namespace, name)?;
        let v = entry.get(version).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow {name:?} has no version {:?}",
                version.unwrap_or_default()
            ))
        })?;
        Ok(workflow_info(namespace, name, entry, v))
    }

    pub fn wf_list(&self, namespace: &str) -> Vec<WorkflowInfo> {
        super::sorted_defs(&self.state.workflows.defs, namespace)
            .into_iter()
            .filter_map(|(name, entry)| {
                entry
                    .versions
                    .last()
                    .map(|v| workflow_info(namespace, name, entry, v))
            })
            .collect()
    }

    // ---- runs ----

    /// Starts a run on this shard (the caller routed it here) and advances it.
    pub fn wf_start(&mut self, spec: WorkflowStartSpec, fx: &mut WfEffects) -> Done {
        let now = self.clock.now_ms();
        let planned = self.wf_plan_start(&spec);
        let (run_id, version) = match planned {
            Ok(Ok(v)) => v,
            Ok(Err(existing)) => {
                let lsn = self
                    .state
                    .workflows
                    .run(&spec.namespace, &existing)
                    .map_or(0, |r| r.lsn);
                return Done {
                    result: Ok(Reply::WorkflowStarted {
                        run_id: existing,
                        created: false,
                    }),
                    wait_lsn: lsn,
                };
            }
            Err(e) => return Done::now(Err(e)),
        };
        let key = match spec.idempotency_key {
            Some(k) if run_id.starts_with("wfrun:") => Some(k),
            _ => None,
        };
        self.wf_commit(
            Record::WfRunStarted {
                namespace: spec.namespace.clone(),
                run_id: run_id.clone(),
                workflow: spec.name,
                version,
                input: spec.input,
                idempotency_key: key,
                parent: None,
                at_ms: now,
            },
            fx,
        );
        self.wf_advance(&spec.namespace, &run_id, fx);
        Done {
            result: Ok(Reply::WorkflowStarted {
                run_id,
                created: true,
            }),
            wait_lsn: fx.lsn,
        }
    }

    /// The run id and version for a start, or `Ok(Err(id))` for an idempotent repeat.
    fn wf_plan_start(
        &self,
        spec: &WorkflowStartSpec,
    ) -> Result<Result<(String, String), String>, ErrorValue> {
        validate_namespace(&spec.namespace)?;
        let entry = self.wf_entry(&spec.namespace, &spec.name)?;
        if !entry.enabled {
            return Err(ErrorValue::conflict(format!(
                "workflow {:?} is disabled; enable it with flo workflow enable {}",
                spec.name, spec.name
            )));
        }
        let version = entry.get(spec.version.as_deref()).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow {:?} has no version {:?}",
                spec.name,
                spec.version.as_deref().unwrap_or_default()
            ))
        })?;
        let def = version
            .def
            .as_ref()
            .map_err(|e| ErrorValue::conflict(e.clone()))?;
        if spec.input.len() > RUN_INPUT_BYTES_MAX {
            return Err(ErrorValue::bad_request(format!(
                "input of {} bytes exceeds the maximum of {RUN_INPUT_BYTES_MAX} bytes",
                spec.input.len()
            )));
        }
        if !spec.input.is_empty() {
            serde_json::from_slice::<Value>(&spec.input)
                .map_err(|e| ErrorValue::bad_request(format!("input must be JSON: {e}")))?;
        }
        if let Some(key) = &spec.idempotency_key
            && (key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX)
        {
            return Err(ErrorValue::bad_request(format!(
                "idempotency key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"
            )));
        }
        let keyed = match (def.idempotency, &spec.idempotency_key) {
            (Idempotency::Required, None) => {
                return Err(ErrorValue::bad_request(format!(
                    "workflow {:?} requires an idempotency key (--idempotency-key KEY)",
                    spec.name
                )));
            }
            (Idempotency::None, _) | (_, None) => None,
            (_, Some(key)) => Some(idempotent_workflow_run_id(&spec.name, key)),
        };
        if let Some(id) = keyed {
            if self.state.workflows.run(&spec.namespace, &id).is_some() {
                return Ok(Err(id));
            }
            return Ok(Ok((id, version.version.clone())));
        }
        let state = &self.state;
        let id = state
            .workflows
            .next_run_id(&spec.namespace, |id| state.owns(&spec.namespace, id));
        Ok(Ok((id, version.version.clone())))
    }

    fn wf_run(&self, namespace: &str, run_id: &str) -> Result<&WfRun, ErrorValue> {
        self.state.workflows.run(namespace, run_id).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "workflow run {run_id:?} not found in namespace {namespace:?}"
            ))
        })
    }

    pub fn wf_status(&self, namespace: &str, run_id: &str) -> Done {
        match self.wf_run(namespace, run_id) {
            Ok(run) => Done {
                wait_lsn: run.lsn,
                result: Ok(Reply::WorkflowRun(run_info(namespace, run_id, run))),
            },
            Err(e) => Done::now(Err(e)),
        }
    }

    pub fn wf_history(&self, namespace: &str, run_id: &str) -> Done {
        match self.wf_run(namespace, run_id) {
            Ok(run) => Done {
                wait_lsn: run.lsn,
                result: Ok(Reply::WorkflowHistory(run.history.clone())),
            },
            Err(e) => Done::now(Err(e)),
        }
    }

    pub fn wf_list_runs(
        &self,
        namespace: &str,
        name: &str,
        status: Option<WorkflowRunStatus>,
        limit: Option<u32>,
    ) -> Done {
        let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT);
        if limit == 0 || limit > RUN_LIST_LIMIT_MAX {
            return Done::now(Err(ErrorValue::bad_request(format!(
                "limit must be 1 to {RUN_LIST_LIMIT_MAX}, got {limit}"
            ))));
        }
        let mut runs = self.state.workflows.list(namespace, name, status);
        let truncated = runs.len() > limit as usize;
        runs.truncate(limit as usize);
        Done {
            wait_lsn: runs.iter().map(|(_, r)| r.lsn).max().unwrap_or(0),
            result: Ok(Reply::WorkflowRuns {
                runs: runs
                    .iter()
                    .map(|(id, r)| run_info(namespace, id, r))
                    .collect(),
                truncated,
            }),
        }
    }

    /// Stores a signal; a run waiting for its type consumes it and moves on.
    pub fn wf_signal(
        &mut self,
        namespace: &str,
        run_id: &str,
        signal_type: String,
        payload: Vec<u8>,
        fx: &mut WfEffects,
    ) -> Done {
        let now = self.clock.now_ms();
        let check = || -> Result<(), ErrorValue> {
            let run = self.wf_run(namespace, run_id)?;
            if run.status.is_final() {
                return Err(ErrorValue::conflict(format!(
                    "workflow run {run_id:?} is already {}; it takes no more signals",
                    run.status.as_str()
                )));
            }
            if signal_type.is_empty() || signal_type.len() > SIGNAL_TYPE_BYTES_MAX {
                return Err(ErrorValue::bad_request(format!(
                    "signal type must be 1 to {SIGNAL_TYPE_BYTES_MAX} bytes"
                )));
            }
            if payload.len() > RUN_INPUT_BYTES_MAX {
                return Err(ErrorValue::bad_request(format!(
                    "signal payload must be at most {RUN_INPUT_BYTES_MAX} bytes"
                )));
            }
            if !payload.is_empty() {
                serde_json::from_slice::<Value>(&payload).map_err(|e| {
                    ErrorValue::bad_request(format!("signal payload must be JSON: {e}"))
                })?;
            }
            Ok(())
        };
        if let Err(e) = check() {
            return Done::now(Err(e));
        }
        self.wf_commit(
            Record::WfSignalReceived {
                namespace: namespace.to_string(),
                run_id: run_id.to_string(),
                signal_type,
                payload,
                at_ms: now,
            },
            fx,
        );
        self.wf_try_signal(namespace, run_id, fx);
        Done {
            result: Ok(Reply::Done),
            wait_lsn: fx.lsn,
        }
    }

    /// A run waiting for a signal whose type is queued consumes the earliest and moves on.
    fn wf_try_signal(&mut self, namespace: &str, run_id: &str, fx: &mut WfEffects) {
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        let Some(StepWait::Signal { signal_type, .. }) = &run.wait else {
            return;
        };
        let Some((seq, _, payload)) = run.signals.iter().find(|(_, t, _)| t == signal_type) else {
            return;
        };
        let (seq, payload) = (*seq, serde_json::to_vec(payload).unwrap_or_default());
        let step = run.current_step.clone().unwrap_or_default();
        self.wf_finish(
            namespace,
            run_id,
            &step,
            "success",
            Some(payload),
            None,
            Some(seq),
            fx,
        );
        self.wf_advance(namespace, run_id, fx);
    }

    /// Cancels a run, its current action run and its child runs.
    pub fn wf_cancel(
        &mut self,
        namespace: &str,
        run_id: &str,
        reason: Option<String>,
        fx: &mut WfEffects,
    ) -> Done {
        match self.wf_run(namespace, run_id) {
            Err(e) => return Done::now(Err(e)),
            Ok(run) if run.status.is_final() => {
                return Done::now(Err(ErrorValue::conflict(format!(
                    "workflow run {run_id:?} is already {}; only running or waiting runs can \
                     be cancelled",
                    run.status.as_str()
                ))));
            }
            Ok(_) => {}
        }
        self.wf_cancel_tree(namespace, run_id, reason, fx);
        self.wf_notify_parent(namespace, run_id, fx);
        let done = self.wf_status(namespace, run_id);
        Done {
            wait_lsn: fx.lsn.max(done.wait_lsn),
            result: done.result,
        }
    }

    fn wf_cancel_tree(
        &mut self,
        namespace: &str,
        run_id: &str,
        reason: Option<String>,
        fx: &mut WfEffects,
    ) {
        let now = self.clock.now_ms();
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        if run.status.is_final() {
            return;
        }
        let action = match &run.wait {
            Some(StepWait::ActionRun { run_id, .. }) => Some(run_id.clone()),
            _ => None,
        };
        let children = run.children.clone();
        self.wf_commit(
            Record::WfRunCancelled {
                namespace: namespace.to_string(),
                run_id: run_id.to_string(),
                reason: reason.clone(),
                at_ms: now,
            },
            fx,
        );
        fx.wf_finals
            .push((namespace.to_string(), run_id.to_string()));
        if let Some(action) = action
            && let Ok(record) = self.state.runs.plan_cancel(namespace, &action, now)
        {
            self.wf_commit(record, fx);
            fx.action_finals.push((namespace.to_string(), action));
        }
        for child in children {
            let why = Some(format!("parent run {run_id} cancelled"));
            self.wf_cancel_tree(namespace, &child, why, fx);
        }
    }

    // ---- advancing ----

    /// Walks the run forward until it waits, ends, or takes `MAX_ADVANCE_STEPS` steps.
    pub fn wf_advance(&mut self, namespace: &str, run_id: &str, fx: &mut WfEffects) {
        for _ in 0..MAX_ADVANCE_STEPS {
            let now = self.clock.now_ms();
            let Some(run) = self.state.workflows.run(namespace, run_id) else {
                return;
            };
            if run.status.is_final()
                || run.wait.is_some()
                || run.timer_ms.is_some_and(|at| at > now)
            {
                return;
            }
            let def = match &run.def {
                Ok(def) => def.clone(),
                Err(reason) => {
                    let reason = reason.clone();
                    let step = run.current_step.clone().unwrap_or_default();
                    self.wf_end(namespace, run_id, &step, &reason, fx);
                    return;
                }
            };
            let step_name = run.current_step.clone().unwrap_or_default();
            let Some(step) = def.step(&step_name) else {
                let reason = format!("step {step_name:?} is not in the definition");
                self.wf_end(namespace, run_id, &step_name, &reason, fx);
                return;
            };
            match &step.action {
                StepAction::WaitForSignal(wait) => {
                    let queued = run
                        .signals
                        .iter()
                        .find(|(_, t, _)| *t == wait.signal_type)
                        .map(|(seq, _, p)| (*seq, serde_json::to_vec(p).unwrap_or_default()));
                    match queued {
                        Some((seq, payload)) => self.wf_finish(
                            namespace,
                            run_id,
                            &step_name,
                            "success",
                            Some(payload),
                            None,
                            Some(seq),
                            fx,
                        ),
                        None => {
                            let deadline_ms = wait.timeout_ms.map(|t| now.saturating_add(t));
                            let seq = run.seq;
                            self.wf_commit(
                                Record::WfStepStarted {
                                    namespace: namespace.to_string(),
                                    run_id: run_id.to_string(),
                                    step: step_name.clone(),
                                    wait: StepWait::Signal {
                                        signal_type: wait.signal_type.clone(),
                                        deadline_ms,
                                    },
                                    at_ms: now,
                                },
                                fx,
                            );
                            if let Some(at) = deadline_ms {
                                self.scheduler.watch_workflow(
                                    (namespace.to_string(), run_id.to_string()),
                                    seq,
                                    at,
                                );
                                fx.timers_changed = true;
                            }
                            return;
                        }
                    }
                }
                StepAction::Run(target) => {
                    let input = self.wf_step_input(namespace, run_id, step, now);
                    let target = target.clone();
                    if !self.wf_run_target(namespace, run_id, &step_name, &target, input, &def, fx)
                    {
                        return;
                    }
                }
            }
        }
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        if !run.status.is_final() && run.wait.is_none() && run.timer_ms.is_none() {
            let step = run.current_step.clone().unwrap_or_default();
            let reason = format!(
                "the run took more than {MAX_ADVANCE_STEPS} steps without waiting (a loop in \
                 the definition?)"
            );
            self.wf_end(namespace, run_id, &step, &reason, fx);
        }
    }

    /// The step's input: its `inputMapping` resolved, else the run's input.
    fn wf_step_input(
        &self,
        namespace: &str,
        run_id: &str,
        step: &super::Step,
        now: u64,
    ) -> Vec<u8> {
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return Vec::new();
        };
        let Some(mapping) = &step.input_mapping else {
            return run.input_bytes.clone();
        };
        let steps: serde_json::Map<String, Value> = run
            .steps
            .iter()
            .map(|s| {
                (
                    s.name.clone(),
                    json!({"output": s.output.clone().unwrap_or(Value::Null), "outcome": s.outcome}),
                )
            })
            .collect();
        let ctx = json!({
            "input": run.input,
            "steps": steps,
            "flo": {"run_id": run_id, "timestamp": now},
        });
        serde_json::to_vec(&super::resolve_mapping(mapping, &ctx)).unwrap_or_default()
    }

    /// Starts a run step's target; returns whether the run moved on at once (an
    /// execution-level outcome) so advancing continues.
    #[allow(clippy::too_many_arguments)]
    fn wf_run_target(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: &str,
        target: &Target,
        input: Vec<u8>,
        _def: &Rc<WorkflowDef>,
        fx: &mut WfEffects,
    ) -> bool {
        let now = self.clock.now_ms();
        let fail = |outcome: &str, error: String| (outcome.to_string(), error);
        let problem = match target {
            Target::Plan(name) => Some(fail(
                "target_not_found",
                format!("plan {name:?}: inline plans are not supported yet"),
            )),
            Target::Action(name) => match self.state.registry.get(namespace, name) {
                None => Some(fail(
                    "target_not_found",
                    format!("action {name:?} is not registered"),
                )),
                Some(def) if !def.enabled => Some(fail(
                    "target_disabled",
                    format!("action {name:?} is disabled"),
                )),
                Some(_) => None,
            },
            Target::Workflow { name, version } => {
                let depth = self
                    .state
                    .workflows
                    .run(namespace, run_id)
                    .map_or(0, |r| r.depth);
                match self.state.workflows.def(namespace, name) {
                    None => Some(fail(
                        "target_not_found",
                        format!("workflow {name:?} is not defined"),
                    )),
                    Some(e) if e.get(version.as_deref()).is_none() => Some(fail(
                        "target_not_found",
                        format!(
                            "workflow {name:?} has no version {:?}",
                            version.as_deref().unwrap_or_default()
                        ),
                    )),
                    Some(e) if !e.enabled => Some(fail(
                        "target_disabled",
                        format!("workflow {name:?} is disabled"),
                    )),
                    Some(_) if depth + 1 > CHILD_DEPTH_MAX => Some(fail(
                        "execution_failure",
                        format!("child workflows nest at most {CHILD_DEPTH_MAX} deep"),
                    )),
                    Some(_) => None,
                }
            }
        };
        if let Some((outcome, error)) = problem {
            self.wf_finish(
                namespace,
                run_id,
                step,
                &outcome,
                None,
                Some(error),
                None,
                fx,
            );
            return true;
        }
        let step_ref = StepRef {
            run_id: run_id.to_string(),
            step: step.to_string(),
        };
        match target {
            Target::Action(name) => {
                let def = self.state.registry.get(namespace, name).expect("checked");
                let (kind, version) = (def.kind, def.version);
                let state = &self.state;
                let action_run = state
                    .runs
                    .next_run_id(namespace, name, |id| state.owns(namespace, id));
                self.wf_commit(
                    Record::RunCreated {
                        namespace: namespace.to_string(),
                        run_id: action_run.clone(),
                        action: name.clone(),
                        action_version: version,
                        input,
                        priority: crate::actions::PRIORITY_DEFAULT,
                        labels: None,
                        idempotency_key: None,
                        created_at_ms: now,
                        available_at_ms: now,
                        step: Some(step_ref),
                    },
                    fx,
                );
                let run = self
                    .state
                    .runs
                    .get(namespace, &action_run)
                    .expect("just created");
                self.scheduler.schedule(
                    (namespace.to_string(), action_run.clone()),
                    run,
                    Queue::of(kind),
                    now,
                );
                // Applying RunCreated (its `step`) started the step as well.
                fx.wasm_kick |= kind == ActionKind::Wasm;
                false
            }
            Target::Workflow { name, version } => {
                let entry = self.state.workflows.def(namespace, name).expect("checked");
                let version = entry
                    .get(version.as_deref())
                    .expect("checked")
                    .version
                    .clone();
                let state = &self.state;
                let child = state
                    .workflows
                    .next_run_id(namespace, |id| state.owns(namespace, id));
                self.wf_commit(
                    Record::WfRunStarted {
                        namespace: namespace.to_string(),
                        run_id: child.clone(),
                        workflow: name.clone(),
                        version,
                        input,
                        idempotency_key: None,
                        parent: Some(step_ref),
                        at_ms: now,
                    },
                    fx,
                );
                self.wf_commit(
                    Record::WfStepStarted {
                        namespace: namespace.to_string(),
                        run_id: run_id.to_string(),
                        step: step.to_string(),
                        wait: StepWait::ChildRun {
                            run_id: child.clone(),
                        },
                        at_ms: now,
                    },
                    fx,
                );
                self.wf_advance(namespace, &child, fx);
                false
            }
            Target::Plan(_) => unreachable!("refused above"),
        }
    }

    /// Ends the run as failed with `reason` (no transition applies).
    fn wf_end(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: &str,
        reason: &str,
        fx: &mut WfEffects,
    ) {
        let now = self.clock.now_ms();
        self.wf_commit(
            Record::WfStepFinished {
                namespace: namespace.to_string(),
                run_id: run_id.to_string(),
                step: step.to_string(),
                outcome: "execution_failure".to_string(),
                output: None,
                error: None,
                consumed_signal: None,
                next: StepNext::End {
                    terminal: "flo.Failed".to_string(),
                    status: WorkflowRunStatus::Failed,
                    reason: Some(reason.to_string()),
                },
                at_ms: now,
            },
            fx,
        );
        self.wf_after_end(namespace, run_id, fx);
    }

    /// Records that the current step finished with `outcome`, choosing where the run goes:
    /// a retry, a poll, a transition, or the end.
    #[allow(clippy::too_many_arguments)]
    fn wf_finish(
        &mut self,
        namespace: &str,
        run_id: &str,
        step: &str,
        outcome: &str,
        output: Option<Vec<u8>>,
        error: Option<String>,
        consumed_signal: Option<u64>,
        fx: &mut WfEffects,
    ) {
        let now = self.clock.now_ms();
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        let Ok(def) = run.def.clone() else {
            return;
        };
        let Some(step_def) = def.step(step) else {
            return;
        };
        let executions = run.step_executions + 1;
        let mut outcome = outcome.to_string();
        let mut next = None;
        if let Some(retry) = &step_def.retry
            && matches!(outcome.as_str(), "failure" | "execution_failure")
            && executions < retry.max_attempts
        {
            let at = now.saturating_add(
                retry.delay_ms(executions, jitter(run.seq ^ u64::from(executions))),
            );
            let in_budget = retry
                .within_ms
                .is_none_or(|w| at.saturating_sub(run.step_first_at_ms) <= w);
            if in_budget {
                next = Some(StepNext::Retry { at_ms: at });
            }
        }
        if next.is_none()
            && outcome == "pending"
            && let Some(poll) = &step_def.poll
        {
            if run.step_polls < poll.max_attempts {
                let delay = poll.delay_ms(
                    run.step_polls + 1,
                    jitter(run.seq ^ u64::from(run.step_polls)),
                );
                next = Some(StepNext::Poll {
                    at_ms: now.saturating_add(delay),
                });
            } else {
                outcome = "timeout".to_string();
            }
        }
        let next = next.unwrap_or_else(|| transition(&def, step_def, step, &outcome));
        let timer = match &next {
            StepNext::Retry { at_ms } | StepNext::Poll { at_ms } => Some(*at_ms),
            _ => None,
        };
        let ends = matches!(next, StepNext::End { .. });
        let seq = run.seq;
        self.wf_commit(
            Record::WfStepFinished {
                namespace: namespace.to_string(),
                run_id: run_id.to_string(),
                step: step.to_string(),
                outcome,
                output,
                error,
                consumed_signal,
                next,
                at_ms: now,
            },
            fx,
        );
        if let Some(at) = timer {
            self.scheduler
                .watch_workflow((namespace.to_string(), run_id.to_string()), seq, at);
            fx.timers_changed = true;
        }
        if ends {
            self.wf_after_end(namespace, run_id, fx);
        }
    }

    fn wf_after_end(&mut self, namespace: &str, run_id: &str, fx: &mut WfEffects) {
        fx.wf_finals
            .push((namespace.to_string(), run_id.to_string()));
        self.wf_notify_parent(namespace, run_id, fx);
    }

    /// A child run ended: its parent's step finishes (completed → success, else failure).
    fn wf_notify_parent(&mut self, namespace: &str, run_id: &str, fx: &mut WfEffects) {
        let Some(child) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        let Some(parent) = child.parent.clone() else {
            return;
        };
        let (outcome, error) = match child.status {
            WorkflowRunStatus::Completed => ("success", None),
            s => (
                "failure",
                Some(format!(
                    "child workflow run {run_id} ended {}{}",
                    s.as_str(),
                    child
                        .error
                        .as_ref()
                        .map(|e| format!(": {e}"))
                        .unwrap_or_default()
                )),
            ),
        };
        let output = child
            .output
            .as_ref()
            .map(|v| serde_json::to_vec(v).unwrap_or_default());
        let waiting = self
            .state
            .workflows
            .run(namespace, &parent.run_id)
            .is_some_and(
                |p| matches!(&p.wait, Some(StepWait::ChildRun { run_id: c }) if c == run_id),
            );
        if !waiting {
            return;
        }
        self.wf_finish(
            namespace,
            &parent.run_id,
            &parent.step,
            outcome,
            output,
            error,
            None,
            fx,
        );
        self.wf_advance(namespace, &parent.run_id, fx);
    }

    /// An action run became final: the workflow step it executes finishes.
    pub fn wf_on_action_final(&mut self, namespace: &str, action_run: &str, fx: &mut WfEffects) {
        let Some(run) = self.state.runs.get(namespace, action_run) else {
            return;
        };
        let Some(step_ref) = run.step.clone() else {
            return;
        };
        let (outcome, output, error) = match run.status {
            RunStatus::Completed => (
                run.outcome.clone().unwrap_or_else(|| "success".to_string()),
                run.output
                    .as_ref()
                    .map(|o| serde_json::to_vec(&json_value(o)).unwrap_or_default()),
                None,
            ),
            RunStatus::TimedOut => ("timeout".to_string(), None, run.error.clone()),
            RunStatus::Cancelled => (
                "failure".to_string(),
                None,
                Some(format!("action run {action_run} was cancelled")),
            ),
            RunStatus::Failed => ("failure".to_string(), None, run.error.clone()),
            RunStatus::Pending | RunStatus::Running => return,
        };
        let waiting = self
            .state
            .workflows
            .run(namespace, &step_ref.run_id)
            .is_some_and(|w| {
                matches!(&w.wait, Some(StepWait::ActionRun { run_id, .. }) if run_id == action_run)
            });
        if !waiting {
            return;
        }
        self.wf_finish(
            namespace,
            &step_ref.run_id,
            &step_ref.step,
            &outcome,
            output,
            error,
            None,
            fx,
        );
        self.wf_advance(namespace, &step_ref.run_id, fx);
    }

    /// Retries, polls and signal deadlines that came due.
    pub fn wf_fire_timers(&mut self, fx: &mut WfEffects) {
        let now = self.clock.now_ms();
        for (namespace, run_id) in self.scheduler.due_workflows(now) {
            let Some(run) = self.state.workflows.run(&namespace, &run_id) else {
                continue;
            };
            if run.status.is_final() {
                continue;
            }
            match &run.wait {
                Some(StepWait::Signal {
                    deadline_ms: Some(deadline),
                    ..
                }) if *deadline <= now => self.wf_signal_timeout(&namespace, &run_id, fx),
                None if run.timer_ms.is_some_and(|at| at <= now) => {
                    self.wf_advance(&namespace, &run_id, fx)
                }
                _ => {}
            }
        }
    }

    fn wf_signal_timeout(&mut self, namespace: &str, run_id: &str, fx: &mut WfEffects) {
        let now = self.clock.now_ms();
        let Some(run) = self.state.workflows.run(namespace, run_id) else {
            return;
        };
        let Ok(def) = run.def.clone() else {
            return;
        };
        let step = run.current_step.clone().unwrap_or_default();
        let on_timeout = match def.step(&step).map(|s| &s.action) {
            Some(StepAction::WaitForSignal(w)) => w.on_timeout.clone(),
            _ => None,
        };
        let next = match on_timeout.as_deref().and_then(|t| def.resolve(t)) {
            Some(Next::Step(s)) => StepNext::Step(s.to_string()),
            Some(Next::Terminal { name, status }) => StepNext::End {
                terminal: name.to_string(),
                status,
                reason: None,
            },
            None => StepNext::End {
                terminal: "flo.TimedOut".to_string(),
                status: WorkflowRunStatus::TimedOut,
                reason: Some(format!("no signal arrived for step {step:?} in time")),
            },
        };
        let ends = matches!(next, StepNext::End { .. });
        self.wf_commit(
            Record::WfStepFinished {
                namespace: namespace.to_string(),
                run_id: run_id.to_string(),
                step,
                outcome: "timeout".to_string(),
                output: None,
                error: None,
                consumed_signal: None,
                next,
                at_ms: now,
            },
            fx,
        );
        if ends {
            self.wf_after_end(namespace, run_id, fx);
        } else {
            self.wf_advance(namespace, run_id, fx);
        }
    }

    /// After recovery: every in-flight run continues where it was (finishes whose records
    /// were lost with a crash are taken again), and its timers are set again.
    pub fn wf_resume_all(&mut self, fx: &mut WfEffects) {
        let open: Vec<(String, String, u64)> = self
            .state
            .workflows
            .all_runs()
            .filter(|(_, _, r)| !r.status.is_final())
            .map(|(ns, id, r)| (ns.to_string(), id.to_string(), r.seq))
            .collect();
        for (namespace, run_id, seq) in open {
            let Some(run) = self.state.workflows.run(&namespace, &run_id) else {
                continue;
            };
            if run.status.is_final() {
                continue;
            }
            let key = (namespace.clone(), run_id.clone());
            match run.wait.clone() {
                Some(StepWait::ActionRun { run_id: action, .. }) => {
                    let done = self
                        .state
                        .runs
                        .get(&namespace, &action)
                        .is_some_and(|r| r.status.is_final());
                    if done {
                        self.wf_on_action_final(&namespace, &action, fx);
                    }
                }
                Some(StepWait::ChildRun { run_id: child }) => {
                    let done = self
                        .state
                        .workflows
                        .run(&namespace, &child)
                        .is_some_and(|c| c.status.is_final());
                    if done {
                        self.wf_notify_parent(&namespace, &child, fx);
                    }
                }
                Some(StepWait::Signal { deadline_ms, .. }) => {
                    if let Some(at) = deadline_ms {
                        self.scheduler.watch_workflow(key, seq, at);
                        fx.timers_changed = true;
                    }
                    self.wf_try_signal(&namespace, &run_id, fx);
                }
                None => match run.timer_ms {
                    Some(at) => {
                        self.scheduler.watch_workflow(key, seq, at);
                        fx.timers_changed = true;
                    }
                    None => self.wf_advance(&namespace, &run_id, fx),
                },
            }
        }
    }
}

/// Where `outcome` of `step` leads: the first transition of its fallback chain, else the
/// run fails naming step and outcome.
fn transition(def: &WorkflowDef, step_def: &super::Step, step: &str, outcome: &str) -> StepNext {
    for candidate in outcome_chain(outcome) {
        let Some(target) = step_def.transitions.get(candidate) else {
            continue;
        };
        match def.resolve(target) {
            Some(Next::Step(s)) => return StepNext::Step(s.to_string()),
            Some(Next::Terminal { name, status }) => {
                return StepNext::End {
                    terminal: name.to_string(),
                    status,
                    reason: None,
                };
            }
            None => {
                return StepNext::End {
                    terminal: "flo.Failed".to_string(),
                    status: WorkflowRunStatus::Failed,
                    reason: Some(format!(
                        "step {step:?}: transition {candidate:?} leads to unknown {target:?}"
                    )),
                };
            }
        }
    }
    StepNext::End {
        terminal: "flo.Failed".to_string(),
        status: WorkflowRunStatus::Failed,
        reason: Some(format!(
            "step {step:?} has no transition for outcome {outcome:?}"
        )),
    }
}

fn workflow_info(
    namespace: &str,
    name: &str,
    entry: &super::WfEntry,
    v: &super::WfVersion,
) -> WorkflowInfo {
    WorkflowInfo {
        namespace: namespace.to_string(),
        name: name.to_string(),
        version: v.version.clone(),
        versions: entry.versions.iter().map(|x| x.version.clone()).collect(),
        enabled: entry.enabled,
        yaml: v.yaml.clone(),
        created_at_ms: v.created_at_ms,
        updated_at_ms: entry.updated_at_ms,
    }
}
