//! Which role may send which operation, in which namespaces: one exhaustive match over
//! `Op` (no catch-all, so a new operation must be placed here before it compiles).
//!
//! | operations | admin | client | worker |
//! |---|---|---|---|
//! | hello, status, shard_map | yes | yes | yes |
//! | kv_get, kv_list | ns | ns | ns |
//! | kv_put, kv_delete | ns | ns | no |
//! | action_register, action_delete, action_set_enabled, workflow_create, workflow_set_enabled | ns | no | no |
//! | action_get, action_list, workflow_get, workflow_list | ns | ns | no |
//! | action_invoke, run_status, run_wait, run_list, run_cancel | ns | ns | no |
//! | workflow_start, workflow_status, workflow_wait, workflow_history, workflow_signal, workflow_cancel, workflow_list_runs | ns | ns | no |
//! | worker_get, worker_list | ns | ns | ns |
//! | worker_register, worker_heartbeat, worker_drain, worker_deregister | ns | no | ns |
//! | task_await, task_complete, task_fail, task_touch | ns | no | ns |
//! | test_advance_clock (server-wide) | `*` | no | no |
//!
//! "ns": only in the token's namespaces; `*` grants every one.

use super::file::{Namespaces, Principal, Role};
use flo_protocol::Op;

/// Where an operation acts, for the namespace check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope<'a> {
    /// The connection or the server's public facts: any valid token.
    Connection,
    /// Every namespace at once: an admin whose token grants `*`.
    Server,
    Namespace(&'a str),
}

/// Which roles besides `admin` may send an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Roles {
    AdminOnly,
    Client,
    Worker,
    ClientAndWorker,
}

struct Rule<'a> {
    name: &'static str,
    scope: Scope<'a>,
    roles: Roles,
}

fn rule(op: &Op) -> Rule<'_> {
    use Roles::*;
    use Scope::Namespace as Ns;
    let (name, scope, roles) = match op {
        Op::Hello { .. } => ("hello", Scope::Connection, ClientAndWorker),
        Op::Status => ("status", Scope::Connection, ClientAndWorker),
        Op::ShardMap => ("shard_map", Scope::Connection, ClientAndWorker),
        Op::KvGet { namespace, .. } => ("kv_get", Ns(namespace), ClientAndWorker),
        Op::KvList { namespace, .. } => ("kv_list", Ns(namespace), ClientAndWorker),
        Op::KvPut { namespace, .. } => ("kv_put", Ns(namespace), Client),
        Op::KvDelete { namespace, .. } => ("kv_delete", Ns(namespace), Client),
        Op::ActionRegister(spec) => ("action_register", Ns(&spec.namespace), AdminOnly),
        Op::ActionDelete { namespace, .. } => ("action_delete", Ns(namespace), AdminOnly),
        Op::ActionSetEnabled { namespace, .. } => ("action_set_enabled", Ns(namespace), AdminOnly),
        Op::ActionGet { namespace, .. } => ("action_get", Ns(namespace), Client),
        Op::ActionList { namespace } => ("action_list", Ns(namespace), Client),
        Op::ActionInvoke(spec) => ("action_invoke", Ns(&spec.namespace), Client),
        Op::RunStatus { namespace, .. } => ("run_status", Ns(namespace), Client),
        Op::RunWait { namespace, .. } => ("run_wait", Ns(namespace), Client),
        Op::RunList { namespace, .. } => ("run_list", Ns(namespace), Client),
        Op::RunCancel { namespace, .. } => ("run_cancel", Ns(namespace), Client),
        Op::RunRedrive { namespace, .. } => ("run_redrive", Ns(namespace), Client),
        Op::WorkerRegister(spec) => ("worker_register", Ns(&spec.namespace), Worker),
        Op::WorkerHeartbeat { namespace, .. } => ("worker_heartbeat", Ns(namespace), Worker),
        Op::WorkerDrain { namespace, .. } => ("worker_drain", Ns(namespace), Worker),
        Op::WorkerDeregister { namespace, .. } => ("worker_deregister", Ns(namespace), Worker),
        Op::WorkerGet { namespace, .. } => ("worker_get", Ns(namespace), ClientAndWorker),
        Op::WorkerList { namespace } => ("worker_list", Ns(namespace), ClientAndWorker),
        Op::TaskAwait { namespace, .. } => ("task_await", Ns(namespace), Worker),
        Op::TaskComplete { namespace, .. } => ("task_complete", Ns(namespace), Worker),
        Op::TaskFail { namespace, .. } => ("task_fail", Ns(namespace), Worker),
        Op::TaskTouch { namespace, .. } => ("task_touch", Ns(namespace), Worker),
        Op::WorkflowCreate { namespace, .. } => ("workflow_create", Ns(namespace), AdminOnly),
        Op::WorkflowSetEnabled { namespace, .. } => {
            ("workflow_set_enabled", Ns(namespace), AdminOnly)
        }
        Op::WorkflowGet { namespace, .. } => ("workflow_get", Ns(namespace), Client),
        Op::WorkflowList { namespace } => ("workflow_list", Ns(namespace), Client),
        Op::WorkflowStart(spec) => ("workflow_start", Ns(&spec.namespace), Client),
        Op::WorkflowStatus { namespace, .. } => ("workflow_status", Ns(namespace), Client),
        Op::WorkflowWait { namespace, .. } => ("workflow_wait", Ns(namespace), Client),
        Op::WorkflowHistory { namespace, .. } => ("workflow_history", Ns(namespace), Client),
        Op::WorkflowSignal { namespace, .. } => ("workflow_signal", Ns(namespace), Client),
        Op::WorkflowCancel { namespace, .. } => ("workflow_cancel", Ns(namespace), Client),
        Op::WorkflowControl { namespace, .. } => ("workflow_control", Ns(namespace), Client),
        Op::WorkflowEvents { namespace, .. } => ("workflow_events", Ns(namespace), Client),
        Op::WebhookDeliveries { namespace, .. } => ("webhook_deliveries", Ns(namespace), Client),
        Op::WebhookRedeliver { namespace, .. } => ("webhook_redeliver", Ns(namespace), Client),
        Op::WorkflowUpdateState { namespace, .. } => {
            ("workflow_update_state", Ns(namespace), Client)
        }
        Op::WorkflowListRuns { namespace, .. } => ("workflow_list_runs", Ns(namespace), Client),
        Op::StreamCreate { namespace, .. } => ("stream_create", Ns(namespace), Client),
        Op::StreamDelete { namespace, .. } => ("stream_delete", Ns(namespace), Client),
        Op::StreamAppend { namespace, .. } => ("stream_append", Ns(namespace), ClientAndWorker),
        Op::StreamRead(spec) => ("stream_read", Ns(&spec.namespace), ClientAndWorker),
        Op::StreamGet { namespace, .. } => ("stream_get", Ns(namespace), ClientAndWorker),
        Op::StreamList { namespace } => ("stream_list", Ns(namespace), ClientAndWorker),
        Op::StreamTrim { namespace, .. } => ("stream_trim", Ns(namespace), Client),
        Op::StreamGroupCreate { namespace, .. } => ("stream_group_create", Ns(namespace), Client),
        Op::StreamGroupDelete { namespace, .. } => ("stream_group_delete", Ns(namespace), Client),
        Op::StreamGroupRead(spec) => ("stream_group_read", Ns(&spec.namespace), ClientAndWorker),
        Op::StreamGroupAck { namespace, .. } => {
            ("stream_group_ack", Ns(namespace), ClientAndWorker)
        }
        Op::StreamGroupNack { namespace, .. } => {
            ("stream_group_nack", Ns(namespace), ClientAndWorker)
        }
        Op::StreamGroupPending { namespace, .. } => {
            ("stream_group_pending", Ns(namespace), ClientAndWorker)
        }
        Op::StreamGroupInfo { namespace, .. } => {
            ("stream_group_info", Ns(namespace), ClientAndWorker)
        }
        Op::TestAdvanceClock { .. } => ("test_advance_clock", Scope::Server, AdminOnly),
        Op::ScheduleList { namespace } => ("schedule_list", Ns(namespace), Client),
        Op::WorkflowQuery { namespace, .. } => ("workflow_query", Ns(namespace), Client),
        Op::SchedulePause { namespace, .. } => ("schedule_pause", Ns(namespace), AdminOnly),
        Op::ScheduleTrigger { namespace, .. } => ("schedule_trigger", Ns(namespace), Client),
        Op::PlanStatus { namespace, .. } => ("plan_status", Ns(namespace), Client),
        Op::PlanInvalidate { namespace, .. } => ("plan_invalidate", Ns(namespace), Client),
    };
    Rule { name, scope, roles }
}

/// The operation's name on the wire (`kv_put`), for messages and log lines.
pub fn op_name(op: &Op) -> &'static str {
    rule(op).name
}

/// Why a request was refused: a sentence for the client and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub message: String,
}

fn role_allows(role: Role, roles: Roles) -> bool {
    match (role, roles) {
        (Role::Admin, _) => true,
        (Role::Client, Roles::Client | Roles::ClientAndWorker) => true,
        (Role::Worker, Roles::Worker | Roles::ClientAndWorker) => true,
        (Role::Client | Role::Worker, _) => false,
    }
}

/// The worker an operation acts as, if it acts as one (reads of workers do not).
fn acting_worker(op: &Op) -> Option<&str> {
    match op {
        Op::WorkerRegister(spec) => Some(&spec.worker_id),
        Op::WorkerHeartbeat { worker_id, .. }
        | Op::WorkerDrain { worker_id, .. }
        | Op::WorkerDeregister { worker_id, .. }
        | Op::TaskAwait { worker_id, .. }
        | Op::TaskComplete { worker_id, .. }
        | Op::TaskFail { worker_id, .. }
        | Op::TaskTouch { worker_id, .. } => Some(worker_id),
        _ => None,
    }
}

/// Whether `principal` may send `op`.
pub fn authorize(principal: &Principal, op: &Op) -> Result<(), Denied> {
    let rule = rule(op);
    let role = principal.role;
    if !role_allows(role, rule.roles) {
        return Err(Denied {
            message: format!("a {} token may not send {}", role.as_str(), rule.name),
        });
    }
    if let Some(worker) = acting_worker(op)
        && !principal.may_act_as(worker)
    {
        return Err(Denied {
            message: format!(
                "this token may not act as worker {worker:?} (its workers: {})",
                principal.workers.as_deref().unwrap_or_default().join(", ")
            ),
        });
    }
    match rule.scope {
        Scope::Connection => Ok(()),
        Scope::Server if principal.namespaces == Namespaces::All => Ok(()),
        Scope::Server => Err(Denied {
            message: format!(
                "{} acts on every namespace: it needs a token granting namespace \"*\"",
                rule.name
            ),
        }),
        Scope::Namespace(ns) if principal.namespaces.allows(ns) => Ok(()),
        Scope::Namespace(ns) => Err(Denied {
            message: format!("this token does not grant namespace \"{ns}\""),
        }),
    }
}

/// The namespace an operation names, if any (for log lines).
pub(super) fn namespace_of(op: &Op) -> Option<&str> {
    match rule(op).scope {
        Scope::Namespace(ns) => Some(ns),
        Scope::Connection | Scope::Server => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flo_protocol::{
        ActionKind, ActionSpec, InvokeSpec, WorkerSpec, WorkerType, WorkflowStartSpec,
    };

    fn principal(role: Role, namespaces: &[&str]) -> Principal {
        let namespaces = if namespaces == ["*"] {
            Namespaces::All
        } else {
            Namespaces::Only(namespaces.iter().map(|s| s.to_string()).collect())
        };
        Principal {
            name: "t".into(),
            role,
            namespaces,
            workers: None,
        }
    }

    #[test]
    fn a_token_with_workers_acts_only_as_those_workers() {
        let mut worker = principal(Role::Worker, &["payments"]);
        worker.workers = Some(vec!["gpu-*".into(), "cpu-1".into()]);
        let report = |id: &str| Op::TaskComplete {
            namespace: "payments".into(),
            worker_id: id.into(),
            task_id: "t".into(),
            action: "a".into(),
            attempt: None,
            result: Vec::new(),
            outcome: None,
            state: None,
        };
        assert!(authorize(&worker, &report("gpu-7")).is_ok());
        assert!(authorize(&worker, &report("cpu-1")).is_ok());
        let denied = authorize(&worker, &report("cpu-2")).unwrap_err();
        assert!(denied.message.contains("\"cpu-2\""), "{}", denied.message);
        // Reading other workers is not acting as them.
        let get = Op::WorkerGet {
            namespace: "payments".into(),
            worker_id: "cpu-2".into(),
        };
        assert!(authorize(&worker, &get).is_ok());
        // Without a list, any worker id.
        let any = principal(Role::Worker, &["payments"]);
        assert!(authorize(&any, &report("cpu-2")).is_ok());
    }

    /// One operation of each kind, in namespace `ns`.
    fn every_op(ns: &str) -> Vec<Op> {
        let n = || ns.to_string();
        let s = || "x".to_string();
        vec![
            Op::Hello {
                protocol_version: 1,
                client: s(),
                token: None,
            },
            Op::Status,
            Op::ShardMap,
            Op::KvGet {
                namespace: n(),
                key: s(),
                wait_ms: None,
                after_version: None,
                newer_than_current: false,
            },
            Op::KvPut {
                namespace: n(),
                key: s(),
                value: vec![],
                ttl_ms: None,
                if_version: None,
                if_exists: false,
            },
            Op::KvDelete {
                namespace: n(),
                key: s(),
                if_version: None,
            },
            Op::KvList {
                namespace: n(),
                prefix: s(),
                limit: None,
                cursor: None,
            },
            Op::ActionRegister(ActionSpec {
                namespace: n(),
                name: s(),
                kind: ActionKind::User,
                wasm: None,
                timeout_ms: None,
                max_retries: None,
                retry_delay_ms: None,
                description: None,
                memory_limit_mb: None,
                wasm_entrypoint: None,
            }),
            Op::ActionGet {
                namespace: n(),
                name: s(),
            },
            Op::ActionList { namespace: n() },
            Op::ActionDelete {
                namespace: n(),
                name: s(),
            },
            Op::ActionSetEnabled {
                namespace: n(),
                name: s(),
                enabled: true,
            },
            Op::ActionInvoke(InvokeSpec {
                namespace: n(),
                action: s(),
                input: vec![],
                priority: None,
                delay_ms: None,
                idempotency_key: None,
                labels: None,
                wait_ms: None,
            }),
            Op::RunStatus {
                namespace: n(),
                run_id: s(),
            },
            Op::RunWait {
                namespace: n(),
                run_id: s(),
                timeout_ms: 0,
            },
            Op::RunList {
                namespace: n(),
                action: s(),
                status: None,
                dead_letter: false,
                limit: None,
                cursor: None,
                query: None,
            },
            Op::RunCancel {
                namespace: n(),
                run_id: s(),
            },
            Op::WorkerRegister(WorkerSpec {
                namespace: n(),
                worker_id: s(),
                worker_type: WorkerType::Action,
                max_concurrency: None,
                processes: vec![],
                metadata: None,
                machine_id: None,
                labels: None,
            }),
            Op::WorkerHeartbeat {
                namespace: n(),
                worker_id: s(),
                current_load: 0,
            },
            Op::WorkerDrain {
                namespace: n(),
                worker_id: s(),
            },
            Op::WorkerDeregister {
                namespace: n(),
                worker_id: s(),
            },
            Op::WorkerGet {
                namespace: n(),
                worker_id: s(),
            },
            Op::WorkerList { namespace: n() },
            Op::TaskAwait {
                namespace: n(),
                worker_id: s(),
                actions: vec![],
                max_tasks: 1,
                block_ms: 0,
                home_only: false,
            },
            Op::TaskComplete {
                namespace: n(),
                worker_id: s(),
                task_id: s(),
                action: s(),
                attempt: None,
                result: vec![],
                outcome: None,
                state: None,
            },
            Op::TaskFail {
                namespace: n(),
                worker_id: s(),
                task_id: s(),
                action: s(),
                attempt: None,
                error: s(),
                retry: false,
                non_retryable: false,
                error_code: None,
            },
            Op::TaskTouch {
                namespace: n(),
                worker_id: s(),
                task_id: s(),
                action: s(),
                extend_ms: 1,
            },
            Op::WorkflowCreate {
                namespace: n(),
                yaml: s(),
            },
            Op::WorkflowGet {
                namespace: n(),
                name: s(),
                version: None,
            },
            Op::WorkflowList { namespace: n() },
            Op::WorkflowSetEnabled {
                namespace: n(),
                name: s(),
                enabled: true,
            },
            Op::WorkflowStart(WorkflowStartSpec {
                namespace: n(),
                name: s(),
                version: None,
                input: vec![],
                idempotency_key: None,
                wait_ms: None,
                run_id: None,
                group: None,
                webhook: None,
            }),
            Op::WorkflowStatus {
                namespace: n(),
                run_id: s(),
            },
            Op::WorkflowWait {
                namespace: n(),
                run_id: s(),
                timeout_ms: 0,
            },
            Op::WorkflowHistory {
                namespace: n(),
                run_id: s(),
                limit: None,
                after: None,
            },
            Op::WorkflowSignal {
                namespace: n(),
                run_id: s(),
                signal_type: s(),
                payload: vec![],
            },
            Op::WorkflowCancel {
                namespace: n(),
                run_id: s(),
                reason: None,
            },
            Op::WorkflowControl {
                namespace: n(),
                run_id: s(),
                control: flo_protocol::WorkflowControl::Pause,
            },
            Op::WorkflowEvents {
                namespace: n(),
                workflow: None,
                cursor: None,
                limit: None,
            },
            Op::WorkflowUpdateState {
                namespace: n(),
                run_id: s(),
                state: b"{}".to_vec(),
                replace: false,
                continue_run: false,
            },
            Op::WebhookDeliveries {
                namespace: n(),
                failed: true,
                workflow: None,
                limit: None,
            },
            Op::WebhookRedeliver {
                namespace: n(),
                id: s(),
            },
            Op::WorkflowListRuns {
                namespace: n(),
                name: s(),
                status: None,
                limit: None,
                cursor: None,
                timed_out: None,
            },
            Op::TestAdvanceClock { ms: 1 },
        ]
    }

    fn allowed(p: &Principal, ns: &str) -> Vec<&'static str> {
        every_op(ns)
            .iter()
            .filter(|op| authorize(p, op).is_ok())
            .map(op_name)
            .collect()
    }

    #[test]
    fn op_names_are_the_wire_names() {
        for op in every_op("a") {
            let wire = serde_json::to_value(&op).unwrap();
            let wire_name = match &wire {
                serde_json::Value::String(s) => s.clone(),
                serde_json::Value::Object(m) => m.keys().next().unwrap().clone(),
                other => panic!("{other}"),
            };
            assert_eq!(op_name(&op), wire_name);
        }
    }

    #[test]
    fn an_admin_of_every_namespace_may_do_everything() {
        let admin = principal(Role::Admin, &["*"]);
        assert_eq!(allowed(&admin, "any").len(), every_op("any").len());
    }

    #[test]
    fn an_admin_of_some_namespaces_may_not_act_server_wide_or_elsewhere() {
        let admin = principal(Role::Admin, &["payments"]);
        let mine = allowed(&admin, "payments");
        assert_eq!(mine.len(), every_op("x").len() - 1);
        assert!(!mine.contains(&"test_advance_clock"));
        assert_eq!(allowed(&admin, "other"), ["hello", "status", "shard_map"]);
    }

    #[test]
    fn a_client_uses_its_namespaces_but_not_definitions_or_worker_operations() {
        let client = principal(Role::Client, &["payments", "billing"]);
        let expected = [
            "hello",
            "status",
            "shard_map",
            "kv_get",
            "kv_put",
            "kv_delete",
            "kv_list",
            "action_get",
            "action_list",
            "action_invoke",
            "run_status",
            "run_wait",
            "run_list",
            "run_cancel",
            "worker_get",
            "worker_list",
            "workflow_get",
            "workflow_list",
            "workflow_start",
            "workflow_status",
            "workflow_wait",
            "workflow_history",
            "workflow_signal",
            "workflow_cancel",
            "workflow_control",
            "workflow_events",
            "workflow_update_state",
            "webhook_deliveries",
            "webhook_redeliver",
            "workflow_list_runs",
        ];
        assert_eq!(allowed(&client, "payments"), expected);
        assert_eq!(allowed(&client, "billing"), expected);
        assert_eq!(
            allowed(&client, "default"),
            ["hello", "status", "shard_map"]
        );
    }

    #[test]
    fn a_worker_takes_tasks_and_reads_kv_in_its_namespaces() {
        let worker = principal(Role::Worker, &["payments"]);
        let expected = [
            "hello",
            "status",
            "shard_map",
            "kv_get",
            "kv_list",
            "worker_register",
            "worker_heartbeat",
            "worker_drain",
            "worker_deregister",
            "worker_get",
            "worker_list",
            "task_await",
            "task_complete",
            "task_fail",
            "task_touch",
        ];
        assert_eq!(allowed(&worker, "payments"), expected);
        assert_eq!(
            allowed(&worker, "default"),
            ["hello", "status", "shard_map"]
        );
    }

    #[test]
    fn denials_say_which_rule_refused() {
        let client = principal(Role::Client, &["payments"]);
        let op = &every_op("payments")[7]; // action_register
        let e = authorize(&client, op).unwrap_err();
        assert_eq!(e.message, "a client token may not send action_register");
        let op = &every_op("default")[3]; // kv_get
        let e = authorize(&client, op).unwrap_err();
        assert_eq!(e.message, "this token does not grant namespace \"default\"");
        let admin = principal(Role::Admin, &["payments"]);
        let e = authorize(&admin, &Op::TestAdvanceClock { ms: 1 }).unwrap_err();
        assert!(e.message.contains("namespace \"*\""), "{}", e.message);
    }
}
