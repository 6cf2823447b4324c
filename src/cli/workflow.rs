//! `flo workflow ...` and `flo validate workflow`.

use super::CliError;
use super::args::{ValidateCommand, WorkflowCommand};
use super::output::{Output, bytes_json, line, more_hint, time_text};
use flo::protocol::{
    HistoryEvent, SharedScope, ValidationIssue, WorkflowEvent, WorkflowInfo, WorkflowRunInfo,
    WorkflowRunStatus,
};
use flo::{Client, StartOptions};
use serde_json::{Map, Value, json};
use std::io::{IsTerminal, Read};
use std::path::Path;

/// How long one wait request is held by the server; `start --wait` repeats it.
const WAIT_CHUNK_MS: u64 = 30_000;

/// Validates what can be judged without the server (JSON arguments, status names), so a
/// mistake is reported before connecting.
pub fn check(cmd: &WorkflowCommand) -> Result<(), CliError> {
    match cmd {
        WorkflowCommand::Start { input, .. } => parse_json("the input", input).map(drop),
        WorkflowCommand::Signal { payload, .. } => {
            parse_json("the signal payload", payload).map(drop)
        }
        WorkflowCommand::UpdateState { state, .. } | WorkflowCommand::SetState { state, .. } => {
            match parse_json("the state", state)? {
                Value::Object(_) => Ok(()),
                _ => Err(CliError::Usage(
                    "the state must be a JSON object of names and values, e.g. '{\"approved\": true}'"
                        .to_string(),
                )),
            }
        }
        WorkflowCommand::ListRuns {
            status: Some(status),
            ..
        } => parse_status(status).map(drop),
        _ => Ok(()),
    }
}

/// `flo workflow state` (and what `update-state`/`set-state` answer): the state document,
/// the step the run is at (`next_step`), the step that finished last (`previous_step`) and
/// each step's statistics.
fn print_state(run: &WorkflowRunInfo, out: &Output) {
    let state: Value = run
        .state
        .as_deref()
        .and_then(|s| serde_json::from_slice(s).ok())
        .unwrap_or(Value::Null);
    let previous = run
        .steps
        .iter()
        .filter(|s| s.outcome.is_some())
        .max_by_key(|s| s.last_finished_ms)
        .map(|s| s.name.clone());
    let doc = json!({
        "run_id": run.run_id,
        "status": run.status.as_str(),
        "current_step": run.current_step,
        "next_step": run.current_step,
        "previous_step": previous,
        "waiting_for": run.waiting_for,
        "steps": run.steps.iter().map(|s| json!({
            "name": s.name,
            "outcome": s.outcome,
            "executions": s.executions,
            "visits": s.visits,
            "first_started_ms": s.first_started_ms,
            "last_finished_ms": s.last_finished_ms,
            "total_ms": s.total_ms,
        })).collect::<Vec<_>>(),
        "state": state,
    });
    out.print(doc, || {
        let pretty = serde_json::to_string_pretty(&state).unwrap_or_default();
        let step = run.current_step.as_deref().unwrap_or("-");
        let previous = previous.as_deref().unwrap_or("-");
        let waiting = match &run.waiting_for {
            Some(w) => format!(", waiting for {w}"),
            None => String::new(),
        };
        format!(
            "{} {} (next step {step}, previous step {previous}{waiting})\n{pretty}",
            run.run_id,
            run.status.as_str()
        )
    });
}

fn parse_json(what: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| {
        CliError::Usage(format!(
            "{what} is not valid JSON ({e}): pass JSON text, e.g. '{{\"order_id\":\"ORD-1\"}}'"
        ))
    })
}

fn parse_status(s: &str) -> Result<WorkflowRunStatus, CliError> {
    WorkflowRunStatus::parse(s).ok_or_else(|| {
        CliError::Usage(format!(
            "unknown status {s:?}: use pending, running, waiting, completed, failed, cancelled or timed_out"
        ))
    })
}

/// A definition file's text; `-` is standard input.
fn read_definition(path: &Path) -> Result<String, CliError> {
    let unreadable = |e: std::io::Error| {
        CliError::Usage(format!(
            "cannot read workflow definition {}: {e}",
            path.display()
        ))
    };
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(unreadable)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(unreadable)
    }
}

pub fn run(client: &mut Client, cmd: &WorkflowCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        WorkflowCommand::Create { file } => {
            let yaml = read_definition(file)?;
            let (name, version, created, warnings) = client
                .create_workflow(&yaml)
                .map_err(CliError::definition)?;
            let doc = json!({
                "name": name,
                "version": version,
                "created": created,
                "warnings": warnings.iter().map(issue_json).collect::<Vec<_>>(),
            });
            out.print(doc, || {
                let mut text = if created {
                    format!("created workflow {name} version {version}")
                } else {
                    format!("workflow {name} version {version} exists unchanged")
                };
                for w in &warnings {
                    text.push('\n');
                    text.push_str(&issue_text("warning", w));
                }
                text
            });
        }
        WorkflowCommand::Start {
            name,
            input,
            version,
            idempotency_key,
            run_id,
            group,
            webhook,
            wait,
        } => {
            let opts = StartOptions {
                version: version.clone(),
                idempotency_key: idempotency_key.clone(),
                run_id: run_id.clone(),
                group: group.clone(),
                webhook: webhook.clone(),
            };
            if !*wait {
                let run_id = client.start_workflow(name, input.as_bytes(), opts)?;
                out.print(json!({ "run_id": run_id }), || run_id.clone());
                return Ok(());
            }
            let mut run =
                client.start_workflow_and_wait(name, input.as_bytes(), opts, WAIT_CHUNK_MS)?;
            while !run.status.is_final() {
                run = client.wait_workflow(&run.run_id, WAIT_CHUNK_MS)?;
            }
            out.print(run_json(&run), || run_text(&run));
            ended(&run)?;
        }
        WorkflowCommand::Status {
            run_id,
            watch: false,
            ..
        } => {
            let run = client.workflow_run(run_id)?;
            out.print(run_json(&run), || run_text(&run));
        }
        WorkflowCommand::Status {
            run_id,
            watch: true,
            interval,
        } => watch(client, run_id, *interval, out)?,
        WorkflowCommand::UpdateState {
            run_id,
            state,
            continue_run,
        } => {
            let run = client.update_workflow_state(run_id, state.as_bytes(), *continue_run)?;
            print_state(&run, out);
        }
        WorkflowCommand::SetState {
            run_id,
            state,
            continue_run,
        } => {
            let run = client.set_workflow_state(run_id, state.as_bytes(), *continue_run)?;
            print_state(&run, out);
        }
        WorkflowCommand::SharedState { group, flow } => {
            let fields = match (group, flow) {
                (Some(group), _) => client.shared_state(SharedScope::Group, group)?,
                (None, Some(flow)) => client.shared_state(SharedScope::Flow, flow)?,
                (None, None) => unreachable!("clap requires one"),
            };
            let doc = Value::Object(fields);
            out.print(doc.clone(), || {
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            });
        }
        WorkflowCommand::State { run_id } => {
            let run = client.workflow_run(run_id)?;
            print_state(&run, out);
        }
        WorkflowCommand::Events {
            workflow,
            from,
            follow,
            limit,
        } => events(
            client,
            workflow.as_deref(),
            from.clone(),
            *follow,
            *limit,
            out,
        )?,
        WorkflowCommand::History {
            run_id,
            limit: None,
            after: None,
        } => {
            let events = client.workflow_history(run_id)?;
            let doc = json!({
                "run_id": run_id,
                "events": events.iter().map(event_json).collect::<Vec<_>>(),
            });
            out.print(doc, || history_text(&events));
        }
        WorkflowCommand::History {
            run_id,
            limit,
            after,
        } => {
            let page = client.workflow_history_page(run_id, *limit, *after)?;
            let doc = json!({
                "run_id": run_id,
                "events": page.events.iter().map(event_json).collect::<Vec<_>>(),
                "next_after": page.next_after,
            });
            out.print(doc, || {
                let mut text = history_text(&page.events);
                if let Some(next) = page.next_after {
                    let limit = limit.map_or(String::new(), |l| format!(" --limit {l}"));
                    text.push_str(&format!(
                        "\n(more events: flo workflow history {run_id}{limit} --after {next})"
                    ));
                }
                text
            });
        }
        WorkflowCommand::Signal {
            run_id,
            signal_type,
            payload,
        } => {
            client.signal_workflow(run_id, signal_type, payload.as_bytes())?;
            out.print(
                json!({ "run_id": run_id, "type": signal_type, "sent": true }),
                || format!("sent signal {signal_type} to {run_id}"),
            );
        }
        WorkflowCommand::Cancel { run_id, reason } => {
            let run = client.cancel_workflow(run_id, reason.as_deref())?;
            out.print(run_json(&run), || {
                format!("run {} {}", run.run_id, run.status.as_str())
            });
        }
        WorkflowCommand::Pause { run_id }
        | WorkflowCommand::Resume { run_id }
        | WorkflowCommand::Continue { run_id, .. } => {
            let run = match cmd {
                WorkflowCommand::Pause { .. } => client.pause_workflow(run_id)?,
                WorkflowCommand::Resume { .. } => client.resume_workflow(run_id)?,
                WorkflowCommand::Continue { reset_visits, .. } => {
                    client.continue_workflow(run_id, *reset_visits)?
                }
                _ => unreachable!("matched above"),
            };
            out.print(run_json(&run), || {
                format!("run {} {}", run.run_id, run.status.as_str())
            });
        }
        WorkflowCommand::TimedOut {
            name,
            older_than,
            limit,
        } => {
            let runs = timed_out(client, name.as_deref(), *older_than, *limit)?;
            let doc = json!({ "runs": runs.iter().map(run_json).collect::<Vec<_>>() });
            out.print(doc, || {
                let mut text = format!("{:<24} {:<24} {:<20} SINCE", "RUN", "WORKFLOW", "STEP");
                for r in &runs {
                    for (step, since) in run_steps_since(r) {
                        text.push_str(&format!(
                            "\n{:<24} {:<24} {:<20} {}",
                            r.run_id,
                            r.workflow,
                            step,
                            time_text(since)
                        ));
                    }
                }
                text
            });
        }
        WorkflowCommand::ContinueTimedOut {
            name,
            older_than,
            reset_visits,
            max,
        } => {
            // In batches: a continued run leaves the list (its step starts again).
            let mut continued = Vec::new();
            while continued.len() < *max as usize {
                let room = (*max as usize - continued.len()).min(CONTINUE_BATCH) as u32;
                let batch = timed_out(client, name.as_deref(), *older_than, room)?;
                let before = continued.len();
                for r in batch {
                    // A run that moved on meanwhile has nothing to continue.
                    if client.continue_workflow(&r.run_id, *reset_visits).is_ok() {
                        continued.push(r.run_id);
                    }
                }
                if continued.len() == before {
                    break;
                }
            }
            let doc = json!({ "continued": continued.len(), "runs": continued });
            out.print(doc, || format!("continued {} runs", continued.len()));
        }
        WorkflowCommand::List => {
            let list = client.list_workflows()?;
            let doc = json!({ "workflows": list.iter().map(definition_json).collect::<Vec<_>>() });
            out.print(doc, || {
                let mut text = format!(
                    "{:<28} {:<12} {:<8} {:<24} VERSIONS",
                    "NAME", "LATEST", "ENABLED", "UPDATED"
                );
                for w in &list {
                    text.push_str(&format!(
                        "\n{:<28} {:<12} {:<8} {:<24} {}",
                        w.name,
                        w.version,
                        w.enabled,
                        time_text(w.updated_at_ms),
                        w.versions.join(", ")
                    ));
                }
                text
            });
        }
        WorkflowCommand::PlanStatus { name, plan } => {
            let rows = client.plan_status(name, plan.as_deref())?;
            super::plan::print_status(out, &rows);
        }
        WorkflowCommand::ListRuns {
            name,
            status,
            query: Some(query),
            order_by,
            limit,
            cursor,
        } => {
            let ascending = match order_by.as_deref() {
                None | Some("started_at" | "started_at:desc") => false,
                Some("started_at:asc") => true,
                Some(other) => {
                    return Err(CliError::Usage(format!(
                        "--order-by {other}: runs are ordered by `started_at` (newest first) or \
                         `started_at:asc`"
                    )));
                }
            };
            let query = match status {
                Some(s) => format!("status = \"{}\" AND ({query})", parse_status(s)?.as_str()),
                None => query.clone(),
            };
            let page = client.query_workflow_runs(
                name.as_deref(),
                &query,
                ascending,
                *limit,
                cursor.as_deref(),
            )?;
            let runs = &page.items;
            let doc = json!({
                "runs": runs.iter().map(|r| json!({
                    "run_id": r.run_id,
                    "workflow": r.workflow,
                    "status": r.status.as_str(),
                    "created_at": time_text(r.created_at_ms),
                    "created_at_ms": r.created_at_ms,
                    "updated_at_ms": r.updated_at_ms,
                    "search_attributes": bytes_json(&r.search_attributes),
                })).collect::<Vec<_>>(),
                "next_cursor": page.next_cursor,
            });
            out.print(doc, || {
                let mut text = format!(
                    "{:<32} {:<20} {:<10} {:<26} ATTRIBUTES",
                    "RUN ID", "WORKFLOW", "STATUS", "CREATED"
                );
                for r in runs {
                    text.push_str(&format!(
                        "\n{:<32} {:<20} {:<10} {:<26} {}",
                        r.run_id,
                        r.workflow,
                        r.status.as_str(),
                        time_text(r.created_at_ms),
                        String::from_utf8_lossy(&r.search_attributes)
                    ));
                }
                if let Some(hint) = more_hint(page.next_cursor.as_deref(), "runs") {
                    text.push('\n');
                    text.push_str(&hint);
                }
                text
            });
        }
        WorkflowCommand::ListRuns {
            name,
            status,
            query: None,
            limit,
            cursor,
            ..
        } => {
            let Some(name) = name else {
                return Err(CliError::Usage(
                    "name the workflow whose runs to list (or give --query)".to_string(),
                ));
            };
            let status = status.as_deref().map(parse_status).transpose()?;
            let page = client.list_workflow_runs_page(name, status, *limit, cursor.as_deref())?;
            let runs = &page.items;
            let doc = json!({
                "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
                "truncated": page.next_cursor.is_some(),
                "next_cursor": page.next_cursor,
            });
            out.print(doc, || {
                let mut text = format!(
                    "{:<32} {:<10} {:<10} {:<20} CREATED",
                    "RUN ID", "STATUS", "VERSION", "STEP"
                );
                for r in runs {
                    text.push_str(&format!(
                        "\n{:<32} {:<10} {:<10} {:<20} {}",
                        r.run_id,
                        r.status.as_str(),
                        r.version,
                        r.current_step
                            .as_deref()
                            .or(r.terminal.as_deref())
                            .unwrap_or(""),
                        time_text(r.created_at_ms)
                    ));
                }
                if let Some(hint) = more_hint(page.next_cursor.as_deref(), "runs") {
                    text.push('\n');
                    text.push_str(&hint);
                }
                text
            });
        }
        WorkflowCommand::Definition { name, version } => {
            let info = client.workflow(name, version.as_deref())?;
            out.print(definition_json(&info), || {
                info.yaml.trim_end_matches('\n').to_string()
            });
        }
        WorkflowCommand::Disable { name } | WorkflowCommand::Enable { name } => {
            let enable = matches!(cmd, WorkflowCommand::Enable { .. });
            let info = client.set_workflow_enabled(name, enable)?;
            out.print(definition_json(&info), || {
                format!(
                    "workflow {} {}",
                    info.name,
                    if enable { "enabled" } else { "disabled" }
                )
            });
        }
    }
    Ok(())
}

/// A final run's exit: 0 completed, 1 (`Failed`) any other end.
fn ended(run: &WorkflowRunInfo) -> Result<(), CliError> {
    if run.status == WorkflowRunStatus::Completed {
        return Ok(());
    }
    Err(CliError::Failed(format!(
        "run {} ended {}",
        run.run_id,
        run.status.as_str()
    )))
}

/// `flo workflow status RUN --watch`: the run shown again whenever it changes, until it is
/// final. Each look is a wait of at most `interval_ms`, so the end is seen at once. With
/// --json, one document per change; on a terminal the run is drawn again in place, else a
/// line per change and the whole run at its end.
fn watch(
    client: &mut Client,
    run_id: &str,
    interval_ms: u64,
    out: &Output,
) -> Result<(), CliError> {
    let redraw = !out.json && std::io::stdout().is_terminal();
    let mut shown: Option<Value> = None;
    loop {
        let run = client.wait_workflow(run_id, interval_ms)?;
        let doc = run_json(&run);
        let changed = shown.as_ref() != Some(&doc);
        let last = run.status.is_final();
        if changed {
            match (out.json, redraw, last) {
                (true, _, _) => line(&doc.to_string()),
                // Home, clear the screen, draw.
                (false, true, _) => line(&format!("\x1b[H\x1b[2J{}", run_text(&run))),
                (false, false, false) => line(&change_text(&run)),
                (false, false, true) => line(&run_text(&run)),
            }
            shown = Some(doc);
        }
        if last {
            return ended(&run);
        }
    }
}

/// One line on a change of a watched run: when, status, where it stands.
fn change_text(r: &WorkflowRunInfo) -> String {
    let mut text = format!(
        "{} {} {}",
        time_text(r.updated_at_ms),
        r.run_id,
        r.status.as_str()
    );
    if let Some(step) = &r.current_step {
        text.push_str(&format!(" step {step}"));
    }
    if let Some(waiting) = &r.waiting_for {
        text.push_str(&format!(" (waiting for {waiting})"));
    }
    text
}

/// `flo validate workflow -f FILE`: the server's own validator, run locally. Exit 0 when
/// the definition would be accepted (warnings printed), 1 with every error otherwise.
pub fn validate(cmd: &ValidateCommand, out: &Output) -> Result<(), CliError> {
    let ValidateCommand::Workflow { file } = cmd;
    let yaml = read_definition(file)?;
    match flo_workflow::parse_workflow(&yaml) {
        Ok(valid) => {
            let doc = json!({
                "valid": true,
                "name": valid.def.name,
                "version": valid.def.version,
                "errors": [],
                "warnings": valid.warnings.iter().map(issue_json).collect::<Vec<_>>(),
            });
            out.print(doc, || {
                let mut text = format!(
                    "valid: workflow {} version {} ({} warning{})",
                    valid.def.name,
                    valid.def.version,
                    valid.warnings.len(),
                    if valid.warnings.len() == 1 { "" } else { "s" }
                );
                for w in &valid.warnings {
                    text.push('\n');
                    text.push_str(&issue_text("warning", w));
                }
                text
            });
            Ok(())
        }
        Err(errors) => {
            if out.json {
                let doc = json!({
                    "valid": false,
                    "errors": errors.iter().map(issue_json).collect::<Vec<_>>(),
                    "warnings": [],
                });
                line(&doc.to_string());
            }
            let mut text = format!(
                "{} is not a valid workflow definition ({} error{}):",
                file.display(),
                errors.len(),
                if errors.len() == 1 { "" } else { "s" }
            );
            for e in &errors {
                text.push_str("\n  ");
                text.push_str(&issue_text("", e));
            }
            Err(CliError::Invalid(text))
        }
    }
}

fn issue_json(i: &ValidationIssue) -> Value {
    json!({ "code": i.code, "path": i.path, "message": i.message })
}

/// `warning W101 steps.audit: ...`, or without the prefix when `kind` is empty.
fn issue_text(kind: &str, i: &ValidationIssue) -> String {
    let at = if i.path.is_empty() {
        String::new()
    } else {
        format!(" {}", i.path)
    };
    let kind = if kind.is_empty() {
        String::new()
    } else {
        format!("{kind} ")
    };
    format!("{kind}{}{at}: {}", i.code, i.message)
}

fn definition_json(w: &WorkflowInfo) -> Value {
    json!({
        "namespace": w.namespace,
        "name": w.name,
        "version": w.version,
        "versions": w.versions,
        "enabled": w.enabled,
        "yaml": w.yaml,
        "created_at": time_text(w.created_at_ms),
        "created_at_ms": w.created_at_ms,
        "updated_at": time_text(w.updated_at_ms),
        "updated_at_ms": w.updated_at_ms,
    })
}

fn opt_json(bytes: Option<&[u8]>) -> Value {
    bytes.map_or(Value::Null, bytes_json)
}

/// A run as the spec shows it: run_id, workflow, version, status, current step, input,
/// each step's outcome/output (`steps`) and the outputs by step name (`outputs`).
pub fn run_json(r: &WorkflowRunInfo) -> Value {
    let outputs: Map<String, Value> = r
        .steps
        .iter()
        .map(|s| (s.name.clone(), opt_json(s.output.as_deref())))
        .collect();
    json!({
        "run_id": r.run_id,
        "namespace": r.namespace,
        "workflow": r.workflow,
        "version": r.version,
        "status": r.status.as_str(),
        "current_step": r.current_step,
        "waiting_for": r.waiting_for,
        "branches": r.branches.iter().map(|b| json!({
            "step": b.step,
            "status": b.status.as_str(),
            "waiting_for": b.waiting_for,
        })).collect::<Vec<_>>(),
        "input": bytes_json(&r.input),
        "output": opt_json(r.output.as_deref()),
        "outputs": outputs,
        "steps": r.steps.iter().map(|s| json!({
            "name": s.name,
            "outcome": s.outcome,
            "output": opt_json(s.output.as_deref()),
            "executions": s.executions,
            "visits": s.visits,
            "first_started_ms": s.first_started_ms,
            "last_finished_ms": s.last_finished_ms,
            "total_ms": s.total_ms,
        })).collect::<Vec<_>>(),
        "terminal": r.terminal,
        "error": r.error,
        "idempotency_key": r.idempotency_key,
        "parent_run_id": r.parent_run_id,
        "created_at": time_text(r.created_at_ms),
        "created_at_ms": r.created_at_ms,
        "updated_at": time_text(r.updated_at_ms),
        "updated_at_ms": r.updated_at_ms,
        "search_attributes": opt_json(r.search_attributes.as_deref()),
    })
}

/// Runs `continue-timed-out` lists and continues at a time.
const CONTINUE_BATCH: usize = 100;

/// The timed-out runs of `name`, or of every workflow of the namespace.
fn timed_out(
    client: &mut Client,
    name: Option<&str>,
    older_than: Option<u64>,
    limit: u32,
) -> Result<Vec<WorkflowRunInfo>, CliError> {
    let names = match name {
        Some(name) => vec![name.to_string()],
        None => client
            .list_workflows()?
            .into_iter()
            .map(|w| w.name)
            .collect(),
    };
    let mut runs = Vec::new();
    for name in names {
        runs.extend(client.timed_out_runs(&name, older_than, Some(limit))?);
    }
    Ok(runs)
}

/// The steps a run is at, with when each began.
fn run_steps_since(r: &WorkflowRunInfo) -> Vec<(String, u64)> {
    match (&r.current_step, r.step_since_ms) {
        (Some(step), Some(since)) => vec![(step.clone(), since)],
        _ => r
            .branches
            .iter()
            .map(|b| (b.step.clone(), b.since_ms))
            .collect(),
    }
}

fn run_text(r: &WorkflowRunInfo) -> String {
    let mut text = format!(
        "run        {}\nworkflow   {} (version {})\nstatus     {}",
        r.run_id,
        r.workflow,
        r.version,
        r.status.as_str()
    );
    let mut line = |label: &str, value: &str| {
        text.push_str(&format!("\n{label:<10} {value}"));
    };
    if let Some(step) = &r.current_step {
        line("step", step);
    }
    if let Some(waiting) = &r.waiting_for {
        line("waiting", waiting);
    }
    for b in &r.branches {
        let waiting = b
            .waiting_for
            .as_ref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        line(
            "branch",
            &format!("{} {}{waiting}", b.step, b.status.as_str()),
        );
    }
    if let Some(terminal) = &r.terminal {
        line("terminal", terminal);
    }
    if let Some(error) = &r.error {
        line("error", error);
    }
    if let Some(parent) = &r.parent_run_id {
        line("parent", parent);
    }
    if let Some(key) = &r.idempotency_key {
        line("idem key", key);
    }
    line("input", &bytes_json(&r.input).to_string());
    if let Some(output) = &r.output {
        line("output", &bytes_json(output).to_string());
    }
    if let Some(attrs) = &r.search_attributes {
        line("search", &bytes_json(attrs).to_string());
    }
    line("created", &time_text(r.created_at_ms));
    line("updated", &time_text(r.updated_at_ms));
    if !r.steps.is_empty() {
        text.push_str(&format!(
            "\n\n{:<20} {:<18} {:>5} {:>6} {:>9}  OUTPUT",
            "STEP", "OUTCOME", "EXECS", "VISITS", "TOTAL MS"
        ));
        for s in &r.steps {
            text.push_str(&format!(
                "\n{:<20} {:<18} {:>5} {:>6} {:>9}  {}",
                s.name,
                s.outcome.as_deref().unwrap_or("-"),
                s.executions,
                s.visits,
                s.total_ms,
                opt_json(s.output.as_deref())
            ));
        }
    }
    text
}

fn event_json(e: &HistoryEvent) -> Value {
    json!({
        "seq": e.seq,
        "type": e.event_type,
        "step": e.step,
        "detail": e.detail,
        "at": time_text(e.at_ms),
        "at_ms": e.at_ms,
    })
}

/// `flo workflow events`: one page, or with `follow` every page as it comes (one JSON
/// document per event with --json), asking again every 200 ms when nothing is new.
fn events(
    client: &mut Client,
    workflow: Option<&str>,
    mut cursor: Option<String>,
    follow: bool,
    limit: Option<u32>,
    out: &Output,
) -> Result<(), CliError> {
    let event_json = |e: &WorkflowEvent| {
        json!({
            "event": e.event, "run_id": e.run_id, "workflow": e.workflow, "step": e.step,
            "at_ms": e.at_ms, "shard": e.shard, "position": e.position,
        })
    };
    let event_text = |e: &WorkflowEvent| {
        format!(
            "{:<24} {:<19} {:<20} {:<24} {}",
            time_text(e.at_ms),
            e.event,
            e.workflow,
            e.run_id,
            e.step.as_deref().unwrap_or("-")
        )
    };
    if !follow {
        let page = client.workflow_events(workflow, cursor.as_deref(), limit)?;
        let doc = json!({
            "events": page.events.iter().map(event_json).collect::<Vec<_>>(),
            "cursor": page.cursor,
            "gap": page.gap,
        });
        out.print(doc, || {
            let mut text = format!("{:<24} {:<19} {:<20} {:<24} STEP", "TIME", "EVENT", "WORKFLOW", "RUN");
            for e in &page.events {
                text.push('\n');
                text.push_str(&event_text(e));
            }
            if page.gap {
                text.push_str("\n(events before these were dropped unread: each shard keeps the newest 65,536)");
            }
            text.push_str(&format!("\nnext: --from {}", page.cursor));
            text
        });
        return Ok(());
    }
    loop {
        let page = client.workflow_events(workflow, cursor.as_deref(), limit)?;
        if page.gap {
            super::output::error_line(
                "some events were dropped unread (each shard keeps the newest 65,536)",
            );
        }
        for e in &page.events {
            out.print(event_json(e), || event_text(e));
        }
        if page.events.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        cursor = Some(page.cursor);
    }
}

fn history_text(events: &[HistoryEvent]) -> String {
    let mut text = format!(
        "{:>5} {:<24} {:<22} {:<20} DETAIL",
        "SEQ", "TIME", "EVENT", "STEP"
    );
    for e in events {
        text.push_str(&format!(
            "\n{:>5} {:<24} {:<22} {:<20} {}",
            e.seq,
            time_text(e.at_ms),
            e.event_type,
            e.step.as_deref().unwrap_or("-"),
            e.detail
        ));
    }
    text
}
