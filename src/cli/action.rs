use super::CliError;
use super::arg_value::ArgText;
use super::args::ActionCommand;
use super::output::{Output, bytes_json, more_hint, time_text};
use flo::protocol::{ActionInfo, ActionKind, ActionSpec, RunInfo, RunStatus};
use flo::{Client, InvokeOptions, Page};
use serde_json::{Value, json};

/// How long one wait request is held by the server; `--wait` repeats it.
const WAIT_CHUNK_MS: u64 = 30_000;

pub fn run(client: &mut Client, cmd: &ActionCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        ActionCommand::Register {
            name,
            wasm,
            timeout_ms,
            max_retries,
            retry_delay_ms,
            description,
            memory_limit_mb,
            entrypoint,
        } => {
            if entrypoint.is_some() && wasm.is_none() {
                return Err(CliError::Usage(
                    "--entrypoint names the export of a --wasm module; give --wasm FILE".into(),
                ));
            }
            let module = match wasm {
                Some(path) => Some(std::fs::read(path).map_err(|e| {
                    CliError::Usage(format!("cannot read wasm module {}: {e}", path.display()))
                })?),
                None => None,
            };
            let spec = ActionSpec {
                namespace: String::new(),
                name: name.clone(),
                kind: if module.is_some() {
                    ActionKind::Wasm
                } else {
                    ActionKind::User
                },
                wasm: module,
                timeout_ms: *timeout_ms,
                max_retries: *max_retries,
                retry_delay_ms: *retry_delay_ms,
                description: description.clone(),
                memory_limit_mb: *memory_limit_mb,
                wasm_entrypoint: entrypoint.clone(),
            };
            let info = client.register_action(spec)?;
            out.print(action_json(&info), || {
                format!(
                    "registered {} action {} (version {})",
                    info.kind.as_str(),
                    info.name,
                    info.version
                )
            });
        }
        ActionCommand::Invoke {
            name,
            input,
            priority,
            delay_ms,
            idempotency_key,
            labels,
            wait,
        } => {
            let opts = InvokeOptions {
                priority: *priority,
                delay_ms: *delay_ms,
                idempotency_key: idempotency_key.clone(),
                labels: labels.clone().map(ArgText::into_string),
            };
            let run_id = client.invoke(name, input, opts)?;
            if !*wait {
                out.print(json!({ "run_id": run_id }), || run_id.clone());
                return Ok(());
            }
            let mut info = client.wait_run(&run_id, WAIT_CHUNK_MS)?;
            while !info.status.is_final() {
                info = client.wait_run(&run_id, WAIT_CHUNK_MS)?;
            }
            out.print(run_json(&info), || match info.status {
                RunStatus::Completed => bytes_text(info.output.as_deref().unwrap_or_default()),
                _ => format!(
                    "run {} {}: {}",
                    info.run_id,
                    info.status.as_str(),
                    info.error.as_deref().unwrap_or("no error recorded")
                ),
            });
            if info.status != RunStatus::Completed {
                return Err(CliError::Failed(format!(
                    "run {} ended {}",
                    info.run_id,
                    info.status.as_str()
                )));
            }
        }
        ActionCommand::Status { run_id } => {
            let info = client.run(run_id)?;
            out.print(run_json(&info), || run_text(&info));
        }
        ActionCommand::Info { name } => {
            let info = client.action(name)?;
            out.print(action_json(&info), || action_text(&info));
        }
        ActionCommand::List => {
            let list = client.list_actions()?;
            out.print(
                json!({ "actions": list.iter().map(action_json).collect::<Vec<_>>() }),
                || {
                    let mut text = format!(
                        "{:<24} {:<5} {:>7} {:<8} {:>9} {:>7}  DESCRIPTION",
                        "NAME", "TYPE", "VERSION", "ENABLED", "TIMEOUT", "RETRIES"
                    );
                    for a in &list {
                        text.push_str(&format!(
                            "\n{:<24} {:<5} {:>7} {:<8} {:>9} {:>7}  {}",
                            a.name,
                            a.kind.as_str(),
                            a.version,
                            a.enabled,
                            format!("{}ms", a.timeout_ms),
                            a.max_retries,
                            a.description.as_deref().unwrap_or("")
                        ));
                    }
                    text
                },
            );
        }
        ActionCommand::Runs {
            name,
            status,
            query: Some(query),
            limit,
            cursor,
        } => {
            // --status is one more term of the query.
            let query = match status {
                Some(s) => format!("status = {s:?} AND ({query})"),
                None => query.clone(),
            };
            let page = client.query_runs(name.as_deref(), &query, *limit, cursor.as_deref())?;
            print_runs_of(out, &page, name.is_none());
        }
        ActionCommand::Runs {
            name,
            status,
            query: None,
            limit,
            cursor,
        } => {
            let name = name.as_deref().unwrap_or_default();
            let status = match status {
                Some(s) => Some(RunStatus::parse(s).ok_or_else(|| {
                    CliError::Usage(format!(
                        "unknown status {s:?}: use pending, running, completed, failed, cancelled or timed_out"
                    ))
                })?),
                None => None,
            };
            let page = client.list_runs_page(name, status, false, *limit, cursor.as_deref())?;
            print_runs(out, &page);
        }
        ActionCommand::Dlq {
            name,
            runs,
            redrive: true,
            limit,
            ..
        } => redrive(client, out, name, runs, *limit)?,
        ActionCommand::Dlq {
            name,
            limit,
            cursor,
            ..
        } => {
            let page = client.list_runs_page(name, None, true, *limit, cursor.as_deref())?;
            print_runs(out, &page);
        }
        ActionCommand::Cancel { run_id } => {
            let info = client.cancel_run(run_id)?;
            out.print(run_json(&info), || format!("cancelled {}", info.run_id));
        }
        ActionCommand::Delete { name } => {
            client.delete_action(name)?;
            out.print(json!({ "name": name, "deleted": true }), || {
                format!("deleted action {name}")
            });
        }
        ActionCommand::Enable { name } | ActionCommand::Disable { name } => {
            let enable = matches!(cmd, ActionCommand::Enable { .. });
            let info = client.set_action_enabled(name, enable)?;
            out.print(action_json(&info), || {
                format!(
                    "action {} {}",
                    info.name,
                    if enable { "enabled" } else { "disabled" }
                )
            });
        }
    }
    Ok(())
}

/// Dead-lettered runs listed at once while gathering those to redrive.
const REDRIVE_PAGE_RUNS: u32 = 1000;

/// `action dlq NAME --redrive [RUN...]`: each run (every dead-lettered run of the action
/// when none is named, at most `limit`) queued again as a new attempt. Prints the runs
/// redriven; those refused make it fail, naming each.
fn redrive(
    client: &mut Client,
    out: &Output,
    action: &str,
    named: &[String],
    limit: Option<u32>,
) -> Result<(), CliError> {
    let mut runs: Vec<String> = named.to_vec();
    if runs.is_empty() {
        let most = limit.map_or(usize::MAX, |n| n as usize);
        let mut cursor: Option<String> = None;
        loop {
            let page = client.list_runs_page(
                action,
                None,
                true,
                Some(REDRIVE_PAGE_RUNS),
                cursor.as_deref(),
            )?;
            runs.extend(page.items.into_iter().map(|r| r.run_id));
            cursor = page.next_cursor;
            if cursor.is_none() || runs.len() >= most {
                break;
            }
        }
        runs.truncate(most);
    }
    let mut redriven = Vec::new();
    let mut refused = Vec::new();
    for run_id in &runs {
        match client.redrive_run(run_id, Some(action)) {
            Ok(info) => redriven.push(info),
            Err(flo::Error::Server(e)) => refused.push((run_id.clone(), e.message)),
            Err(e) => return Err(e.into()),
        }
    }
    let doc = json!({
        "redriven": redriven.iter().map(run_json).collect::<Vec<_>>(),
        "refused": refused
            .iter()
            .map(|(id, e)| json!({"run_id": id, "error": e}))
            .collect::<Vec<_>>(),
    });
    out.print(doc, || {
        if redriven.is_empty() && refused.is_empty() {
            return format!("no dead-lettered run of {action} to redrive");
        }
        redriven
            .iter()
            .map(|r| {
                format!(
                    "redriven {} (attempt {}, {})",
                    r.run_id,
                    r.attempt,
                    r.status.as_str()
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    });
    if refused.is_empty() {
        return Ok(());
    }
    let reasons: Vec<String> = refused.iter().map(|(id, e)| format!("{id}: {e}")).collect();
    Err(CliError::Failed(format!(
        "{} of {} runs not redriven: {}",
        refused.len(),
        runs.len(),
        reasons.join("; ")
    )))
}

fn print_runs(out: &Output, page: &Page<RunInfo>) {
    print_runs_of(out, page, false)
}

/// A page of runs; `with_action`: a column names each run's action.
fn print_runs_of(out: &Output, page: &Page<RunInfo>, with_action: bool) {
    let runs = &page.items;
    let doc = json!({
        "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
        "truncated": page.next_cursor.is_some(),
        "next_cursor": page.next_cursor,
    });
    out.print(doc, || {
        let action = |name: &str| match with_action {
            true => format!("{name:<20} "),
            false => String::new(),
        };
        let mut text = format!(
            "{:<32} {}{:<10} {:>7}  {:<24} ERROR",
            "RUN ID",
            action("ACTION"),
            "STATUS",
            "ATTEMPT",
            "CREATED"
        );
        for r in runs {
            text.push_str(&format!(
                "\n{:<32} {}{:<10} {:>7}  {:<24} {}",
                r.run_id,
                action(&r.action),
                r.status.as_str(),
                r.attempt,
                time_text(r.created_at_ms),
                r.error.as_deref().unwrap_or("")
            ));
        }
        if let Some(hint) = more_hint(page.next_cursor.as_deref(), "runs") {
            text.push('\n');
            text.push_str(&hint);
        }
        text
    });
}

/// Bytes as text: UTF-8 as is, other bytes as hex.
fn bytes_text(bytes: &[u8]) -> String {
    super::output::value_text(bytes)
}

pub(super) fn run_json(r: &RunInfo) -> Value {
    json!({
        "run_id": r.run_id,
        "action": r.action,
        "action_version": r.action_version,
        "status": r.status.as_str(),
        "input": bytes_json(&r.input),
        "output": r.output.as_deref().map(bytes_json),
        "outcome": r.outcome,
        "error": r.error,
        "attempt": r.attempt,
        "priority": r.priority,
        "labels": r.labels.as_deref().map(bytes_json_str),
        "idempotency_key": r.idempotency_key,
        "dead_lettered": r.dead_lettered,
        "workflow_run_id": r.workflow_run_id,
        "created_at": time_text(r.created_at_ms),
        "updated_at": time_text(r.updated_at_ms),
        "available_at": time_text(r.available_at_ms),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
        "available_at_ms": r.available_at_ms,
    })
}

fn bytes_json_str(s: &str) -> Value {
    bytes_json(s.as_bytes())
}

fn run_text(r: &RunInfo) -> String {
    let mut lines = vec![
        format!("run id:   {}", r.run_id),
        format!("action:   {} (version {})", r.action, r.action_version),
        format!("status:   {}", r.status.as_str()),
        format!("attempt:  {}", r.attempt),
        format!("input:    {}", bytes_text(&r.input)),
    ];
    if let Some(output) = &r.output {
        lines.push(format!("output:   {}", bytes_text(output)));
    }
    if let Some(outcome) = &r.outcome {
        lines.push(format!("outcome:  {outcome}"));
    }
    if let Some(error) = &r.error {
        lines.push(format!("error:    {error}"));
    }
    if r.dead_lettered {
        lines.push("dead-lettered: yes".into());
    }
    lines.push(format!("created:  {}", time_text(r.created_at_ms)));
    lines.push(format!("updated:  {}", time_text(r.updated_at_ms)));
    lines.join("\n")
}

fn action_json(a: &ActionInfo) -> Value {
    json!({
        "name": a.name,
        "namespace": a.namespace,
        "type": a.kind.as_str(),
        "version": a.version,
        "enabled": a.enabled,
        "timeout_ms": a.timeout_ms,
        "max_retries": a.max_retries,
        "retry_delay_ms": a.retry_delay_ms,
        "description": a.description,
        "memory_limit_mb": a.memory_limit_mb,
        "wasm_bytes": a.wasm_bytes,
        "wasm_describe": a.wasm_describe,
        "wasm_entrypoint": a.wasm_entrypoint,
        "created_at": time_text(a.created_at_ms),
        "updated_at": time_text(a.updated_at_ms),
    })
}

fn action_text(a: &ActionInfo) -> String {
    let mut lines = vec![
        format!("name:        {}", a.name),
        format!("type:        {}", a.kind.as_str()),
        format!("version:     {}", a.version),
        format!("enabled:     {}", a.enabled),
        format!("timeout:     {} ms", a.timeout_ms),
        format!(
            "retries:     {} (base delay {} ms)",
            a.max_retries, a.retry_delay_ms
        ),
    ];
    if a.kind == ActionKind::Wasm {
        lines.push(format!("memory:      {} MiB", a.memory_limit_mb));
        lines.push(format!("module:      {} bytes", a.wasm_bytes.unwrap_or(0)));
        let entrypoint = a.wasm_entrypoint.as_deref().unwrap_or("handle");
        lines.push(format!("entrypoint:  {entrypoint}"));
    }
    if let Some(d) = &a.description {
        lines.push(format!("description: {d}"));
    }
    lines.join("\n")
}
