//! Replies as the console's JSON: byte fields (inputs, outputs, payloads) as the JSON they
//! hold, else their text; lists carry what a table shows, details the whole object.

use flo_protocol::{
    ActionInfo, GroupInfo, HistoryEvent, RunInfo, RunSummary, ScheduleInfo, StreamInfo, WorkerInfo,
    WorkflowInfo, WorkflowRunInfo,
};
use serde_json::{Value, json};

/// Bytes as a JSON value: the JSON they hold, else their text (lossy for bytes that are not
/// UTF-8).
pub(crate) fn bytes_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

fn opt_bytes_json(bytes: Option<&[u8]>) -> Value {
    bytes.map_or(Value::Null, bytes_json)
}

/// A text field that holds JSON (labels, metadata), as that JSON.
fn json_text(text: Option<&str>) -> Value {
    text.map_or(Value::Null, |t| bytes_json(t.as_bytes()))
}

/// An action run as a list shows it.
pub(crate) fn action_run_row(r: &RunInfo) -> Value {
    json!({
        "kind": "action",
        "run_id": r.run_id,
        "name": r.action,
        "status": r.status.as_str(),
        "attempt": r.attempt,
        "dead_lettered": r.dead_lettered,
        "workflow_run_id": r.workflow_run_id,
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
    })
}

/// An action run whole.
pub(crate) fn action_run(r: &RunInfo) -> Value {
    json!({
        "kind": "action",
        "run_id": r.run_id,
        "namespace": r.namespace,
        "name": r.action,
        "action_version": r.action_version,
        "status": r.status.as_str(),
        "input": bytes_json(&r.input),
        "output": opt_bytes_json(r.output.as_deref()),
        "outcome": r.outcome,
        "error": r.error,
        "error_code": r.error_code,
        "attempt": r.attempt,
        "priority": r.priority,
        "labels": json_text(r.labels.as_deref()),
        "idempotency_key": r.idempotency_key,
        "dead_lettered": r.dead_lettered,
        "workflow_run_id": r.workflow_run_id,
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
        "available_at_ms": r.available_at_ms,
    })
}

/// A workflow run as a list shows it.
pub(crate) fn workflow_run_row(r: &WorkflowRunInfo) -> Value {
    json!({
        "kind": "workflow",
        "run_id": r.run_id,
        "name": r.workflow,
        "version": r.version,
        "status": r.status.as_str(),
        "step": r.current_step.as_deref().or(r.terminal.as_deref()),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
    })
}

/// A workflow run whole: its steps (attempts per step) included.
pub(crate) fn workflow_run(r: &WorkflowRunInfo) -> Value {
    let steps: Vec<Value> = r
        .steps
        .iter()
        .map(|s| {
            json!({
                "name": s.name,
                "outcome": s.outcome,
                "output": opt_bytes_json(s.output.as_deref()),
                "executions": s.executions,
            })
        })
        .collect();
    let branches: Vec<Value> = r
        .branches
        .iter()
        .map(|b| {
            json!({
                "step": b.step,
                "status": b.status.as_str(),
                "waiting_for": b.waiting_for,
                "since_ms": b.since_ms,
            })
        })
        .collect();
    json!({
        "kind": "workflow",
        "run_id": r.run_id,
        "namespace": r.namespace,
        "name": r.workflow,
        "version": r.version,
        "status": r.status.as_str(),
        "final": r.status.is_final(),
        "current_step": r.current_step,
        "waiting_for": r.waiting_for,
        "input": bytes_json(&r.input),
        "output": opt_bytes_json(r.output.as_deref()),
        "steps": steps,
        "terminal": r.terminal,
        "error": r.error,
        "idempotency_key": r.idempotency_key,
        "parent_run_id": r.parent_run_id,
        "search_attributes": opt_bytes_json(r.search_attributes.as_deref()),
        "state": opt_bytes_json(r.state.as_deref()),
        "branches": branches,
        "step_since_ms": r.step_since_ms,
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
    })
}

/// A run a workflow query found (what the query index holds).
pub(crate) fn summary_row(r: &RunSummary) -> Value {
    json!({
        "kind": "workflow",
        "run_id": r.run_id,
        "name": r.workflow,
        "status": r.status.as_str(),
        "search_attributes": bytes_json(&r.search_attributes),
        "created_at_ms": r.created_at_ms,
        "updated_at_ms": r.updated_at_ms,
    })
}

pub(crate) fn event(e: &HistoryEvent) -> Value {
    json!({
        "seq": e.seq,
        "type": e.event_type.as_str(),
        "step": e.step,
        "detail": e.detail,
        "at_ms": e.at_ms,
    })
}

/// A definition as the list shows it (without its YAML).
pub(crate) fn workflow_row(w: &WorkflowInfo) -> Value {
    json!({
        "name": w.name,
        "version": w.version,
        "versions": w.versions,
        "enabled": w.enabled,
        "created_at_ms": w.created_at_ms,
        "updated_at_ms": w.updated_at_ms,
    })
}

pub(crate) fn action(a: &ActionInfo) -> Value {
    json!({
        "name": a.name,
        "kind": a.kind.as_str(),
        "version": a.version,
        "enabled": a.enabled,
        "timeout_ms": a.timeout_ms,
        "max_retries": a.max_retries,
        "retry_delay_ms": a.retry_delay_ms,
        "description": a.description,
        "memory_limit_mb": a.memory_limit_mb,
        "wasm_bytes": a.wasm_bytes,
        "created_at_ms": a.created_at_ms,
        "updated_at_ms": a.updated_at_ms,
    })
}

pub(crate) fn worker(w: &WorkerInfo) -> Value {
    let processes: Vec<Value> = w
        .processes
        .iter()
        .map(|p| {
            json!({
                "name": p.name,
                "kind": p.kind,
                "run_count": p.run_count,
                "fail_count": p.fail_count,
                "last_run_at_ms": p.last_run_at_ms,
            })
        })
        .collect();
    json!({
        "worker_id": w.worker_id,
        "type": w.worker_type.as_str(),
        "status": w.status.as_str(),
        "max_concurrency": w.max_concurrency,
        "current_load": w.current_load,
        "tasks_completed": w.tasks_completed,
        "tasks_failed": w.tasks_failed,
        "registered_at_ms": w.registered_at_ms,
        "last_heartbeat_ms": w.last_heartbeat_ms,
        "machine_id": w.machine_id,
        "labels": json_text(w.labels.as_deref()),
        "processes": processes,
    })
}

pub(crate) fn stream(s: &StreamInfo) -> Value {
    json!({
        "name": s.name,
        "partitions": s.partitions,
        "retention_ms": s.retention_ms,
        "max_len": s.max_len,
        "max_bytes": s.max_bytes,
        "length": s.length,
        "bytes": s.bytes,
        "appended": s.appended,
        "first_id": s.first_id.map(|id| id.to_string()),
        "last_id": s.last_id.map(|id| id.to_string()),
        "created_at_ms": s.created_at_ms,
    })
}

pub(crate) fn group(g: &GroupInfo) -> Value {
    json!({
        "stream": g.stream,
        "group": g.group,
        "mode": g.mode,
        "max_deliveries": g.max_deliveries,
        "message_timeout_ms": g.message_timeout_ms,
        "pending": g.pending,
        "lag": g.lag,
        "delivered": g.delivered,
        "acked": g.acked,
        "dead_lettered": g.dead_lettered,
        "consumers": g.consumers,
        "created_at_ms": g.created_at_ms,
    })
}

pub(crate) fn schedule(s: &ScheduleInfo) -> Value {
    json!({
        "workflow": s.workflow,
        "version": s.version,
        "every": s.every,
        "max_concurrent": s.max_concurrent,
        "catchup": s.catchup,
        "paused": s.paused,
        "next_fire_ms": s.next_fire_ms,
        "last_tick_ms": s.last_tick_ms,
        "running": s.running,
        "fired": s.fired,
        "skipped": s.skipped,
        "last_skip": s.last_skip,
        "shard": s.shard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_show_as_the_json_they_hold_else_as_text() {
        assert_eq!(bytes_json(br#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(bytes_json(b"plain"), json!("plain"));
        assert_eq!(bytes_json(&[0xff, b'a']), json!("\u{fffd}a"));
        assert_eq!(
            json_text(Some(r#"{"region":"eu"}"#)),
            json!({"region": "eu"})
        );
    }
}
