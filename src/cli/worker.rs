use super::CliError;
use super::action::run_json;
use super::arg_value::ArgText;
use super::args::WorkerCommand;
use super::output::{Output, bytes_json, time_text, value_text};
use flo::protocol::{RunInfo, RunStatus, TaskAssignment, WorkerInfo, WorkerSpec, WorkerType};
use flo::{Client, FailMode, TaskRef};
use serde_json::{Value, json};

/// Validates what can be judged without the server (JSON arguments), so a mistake is
/// reported before connecting.
pub fn check(cmd: &WorkerCommand) -> Result<(), CliError> {
    match cmd {
        WorkerCommand::Register {
            labels, metadata, ..
        } => {
            if let Some(labels) = labels {
                let value = parse_json("--labels", labels)?;
                if !value.is_object() {
                    return Err(CliError::Usage(format!(
                        "--labels must be a JSON object such as '{{\"gpu\":true}}', got {labels}"
                    )));
                }
            }
            if let Some(metadata) = metadata {
                parse_json("--metadata", metadata)?;
            }
        }
        WorkerCommand::Complete {
            result: Some(result),
            ..
        } => {
            parse_json("--result", result)?;
        }
        _ => {}
    }
    Ok(())
}

fn parse_json(flag: &str, text: &str) -> Result<Value, CliError> {
    serde_json::from_str(text).map_err(|e| {
        CliError::Usage(format!(
            "{flag} is not valid JSON ({e}): pass JSON text, e.g. '{{\"status\":\"done\"}}' or '\"a string\"'"
        ))
    })
}

pub fn run(client: &mut Client, cmd: &WorkerCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        WorkerCommand::Register {
            worker_id,
            actions,
            max_concurrency,
            labels,
            metadata,
            machine_id,
        } => {
            let spec = WorkerSpec {
                namespace: String::new(),
                worker_id: worker_id.clone(),
                worker_type: WorkerType::Action,
                max_concurrency: *max_concurrency,
                processes: actions.clone(),
                metadata: metadata.clone().map(ArgText::into_string),
                machine_id: machine_id.clone(),
                labels: labels.clone().map(ArgText::into_string),
            };
            let info = client.register_worker(spec)?;
            out.print(worker_json(&info), || {
                format!(
                    "registered worker {} ({})\nprocesses: {}",
                    info.worker_id,
                    info.status.as_str(),
                    process_names(&info)
                )
            });
        }
        WorkerCommand::Await {
            actions,
            worker_id,
            block_ms,
            max_tasks,
            home_only,
        } => {
            let actions: Vec<&str> = actions.iter().map(String::as_str).collect();
            let tasks = match home_only {
                true => client.await_home_tasks(worker_id, &actions, *max_tasks, *block_ms)?,
                false => client.await_tasks(worker_id, &actions, *max_tasks, *block_ms)?,
            };
            let doc = if *max_tasks == 1 {
                tasks.first().map_or(Value::Null, task_json)
            } else {
                Value::Array(tasks.iter().map(task_json).collect())
            };
            out.print(doc, || {
                if tasks.is_empty() {
                    return "no task".to_string();
                }
                let texts: Vec<String> = tasks.iter().map(task_text).collect();
                texts.join("\n\n")
            });
        }
        WorkerCommand::Complete {
            task_id,
            worker_id,
            action,
            result,
            outcome,
            attempt,
            state,
        } => {
            let task = TaskRef {
                task_id,
                action,
                attempt: *attempt,
            };
            let result = result.as_deref().unwrap_or_default().as_bytes();
            let state = state.as_deref().map(str::as_bytes);
            client.complete_task_with_state(worker_id, &task, result, outcome.as_deref(), state)?;
            let doc = json!({
                "task_id": task_id,
                "action": action,
                "status": RunStatus::Completed.as_str(),
                "outcome": outcome,
            });
            out.print(doc, || match outcome {
                Some(outcome) => format!("completed task {task_id} (outcome {outcome})"),
                None => format!("completed task {task_id}"),
            });
        }
        WorkerCommand::Fail {
            task_id,
            worker_id,
            action,
            error,
            retry,
            non_retryable,
            error_code,
            attempt,
        } => {
            let task = TaskRef {
                task_id,
                action,
                attempt: *attempt,
            };
            let mode = match (*retry, *non_retryable) {
                (true, _) => FailMode::Retry,
                (false, true) => FailMode::NonRetryable,
                (false, false) => FailMode::NoRetry,
            };
            let run =
                client.fail_task_coded(worker_id, &task, error, error_code.as_deref(), mode)?;
            out.print(run_json(&run), || fail_text(&run));
        }
        WorkerCommand::Touch {
            task_id,
            worker_id,
            action,
            extend_ms,
        } => {
            let task = TaskRef {
                task_id,
                action,
                attempt: None,
            };
            let expires_at_ms = client.touch_task(worker_id, &task, *extend_ms)?;
            let doc = json!({
                "task_id": task_id,
                "lease_expires_at": time_text(expires_at_ms),
                "lease_expires_at_ms": expires_at_ms,
            });
            out.print(doc, || {
                format!(
                    "lease of task {task_id} extended to {}",
                    time_text(expires_at_ms)
                )
            });
        }
        WorkerCommand::Heartbeat { worker_id, load } => {
            let status = client.heartbeat(worker_id, *load)?;
            let doc = json!({ "worker_id": worker_id, "status": status.as_str() });
            out.print(doc, || format!("worker {worker_id}: {}", status.as_str()));
        }
        WorkerCommand::Drain { worker_id } => {
            let info = client.drain_worker(worker_id)?;
            out.print(worker_json(&info), || {
                format!(
                    "worker {} {} ({} task(s) in flight)",
                    info.worker_id,
                    info.status.as_str(),
                    info.current_load
                )
            });
        }
        WorkerCommand::Deregister { worker_id } => {
            client.deregister_worker(worker_id)?;
            let doc = json!({ "worker_id": worker_id, "deregistered": true });
            out.print(doc, || format!("deregistered worker {worker_id}"));
        }
        WorkerCommand::List => {
            let mut list = client.list_workers()?;
            list.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
            let doc = Value::Array(list.iter().map(worker_json).collect());
            out.print(doc, || workers_table(&list));
        }
        WorkerCommand::Info { worker_id } => {
            let info = client.worker(worker_id)?;
            out.print(worker_json(&info), || worker_text(&info));
        }
    }
    Ok(())
}

fn process_names(w: &WorkerInfo) -> String {
    let names: Vec<&str> = w.processes.iter().map(|p| p.name.as_str()).collect();
    names.join(", ")
}

/// A JSON text field (labels, metadata) as the JSON it holds.
fn json_text_field(text: Option<&str>) -> Value {
    text.map_or(Value::Null, |t| bytes_json(t.as_bytes()))
}

fn task_json(t: &TaskAssignment) -> Value {
    json!({
        "task_id": t.task_id,
        "action": t.action,
        "namespace": t.namespace,
        "payload": bytes_json(&t.payload),
        "attempt": t.attempt,
        "priority": t.priority,
        "created_at": time_text(t.created_at_ms),
        "lease_expires_at": time_text(t.lease_expires_at_ms),
        "created_at_ms": t.created_at_ms,
        "lease_expires_at_ms": t.lease_expires_at_ms,
    })
}

fn task_text(t: &TaskAssignment) -> String {
    [
        format!("task id:  {}", t.task_id),
        format!("action:   {}", t.action),
        format!("attempt:  {}", t.attempt),
        format!("payload:  {}", value_text(&t.payload)),
        format!("created:  {}", time_text(t.created_at_ms)),
        format!("lease:    until {}", time_text(t.lease_expires_at_ms)),
    ]
    .join("\n")
}

fn fail_text(r: &RunInfo) -> String {
    match r.status {
        RunStatus::Pending => format!(
            "task {} pending: attempt {} available at {}",
            r.run_id,
            r.attempt,
            time_text(r.available_at_ms)
        ),
        status => format!(
            "task {} {}: {}{}",
            r.run_id,
            status.as_str(),
            r.error.as_deref().unwrap_or("no error recorded"),
            if r.dead_lettered {
                " (dead-lettered)"
            } else {
                ""
            }
        ),
    }
}

fn worker_json(w: &WorkerInfo) -> Value {
    let processes: Vec<Value> = w
        .processes
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "kind": p.kind,
                "run_count": p.run_count,
                "fail_count": p.fail_count,
                "last_run_at": p.last_run_at_ms.map(time_text),
                "last_run_at_ms": p.last_run_at_ms,
            })
        })
        .collect();
    json!({
        "worker_id": w.worker_id,
        "namespace": w.namespace,
        "worker_type": w.worker_type.as_str(),
        "status": w.status.as_str(),
        "max_concurrency": w.max_concurrency,
        "current_load": w.current_load,
        "tasks_completed": w.tasks_completed,
        "tasks_failed": w.tasks_failed,
        "machine_id": w.machine_id,
        "metadata": json_text_field(w.metadata.as_deref()),
        "labels": json_text_field(w.labels.as_deref()),
        "processes": processes,
        "registered_at": time_text(w.registered_at_ms),
        "last_heartbeat": time_text(w.last_heartbeat_ms),
        "registered_at_ms": w.registered_at_ms,
        "last_heartbeat_ms": w.last_heartbeat_ms,
    })
}

fn workers_table(list: &[WorkerInfo]) -> String {
    let mut text = format!(
        "{:<32} {:<9} {:>9} {:>9} {:>7}  PROCESSES",
        "WORKER ID", "STATUS", "LOAD", "COMPLETED", "FAILED"
    );
    for w in list {
        text.push_str(&format!(
            "\n{:<32} {:<9} {:>9} {:>9} {:>7}  {}",
            w.worker_id,
            w.status.as_str(),
            format!("{}/{}", w.current_load, w.max_concurrency),
            w.tasks_completed,
            w.tasks_failed,
            process_names(w)
        ));
    }
    text
}

fn worker_text(w: &WorkerInfo) -> String {
    let mut lines = vec![
        format!("worker id:      {}", w.worker_id),
        format!("type:           {}", w.worker_type.as_str()),
        format!("status:         {}", w.status.as_str()),
        format!("load:           {}/{}", w.current_load, w.max_concurrency),
        format!("completed:      {}", w.tasks_completed),
        format!("failed:         {}", w.tasks_failed),
    ];
    if let Some(machine_id) = &w.machine_id {
        lines.push(format!("machine:        {machine_id}"));
    }
    if let Some(labels) = &w.labels {
        lines.push(format!("labels:         {labels}"));
    }
    if let Some(metadata) = &w.metadata {
        lines.push(format!("metadata:       {metadata}"));
    }
    lines.push(format!("registered:     {}", time_text(w.registered_at_ms)));
    lines.push(format!(
        "last heartbeat: {}",
        time_text(w.last_heartbeat_ms)
    ));
    lines.push(format!(
        "\n{:<32} {:<8} {:>9} {:>7}  LAST RUN",
        "PROCESS", "KIND", "RUNS", "FAILS"
    ));
    for p in &w.processes {
        lines.push(format!(
            "{:<32} {:<8} {:>9} {:>7}  {}",
            p.name,
            p.kind,
            p.run_count,
            p.fail_count,
            p.last_run_at_ms.map_or("-".to_string(), time_text)
        ));
    }
    lines.join("\n")
}
