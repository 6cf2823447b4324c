//! Runtime-agnostic shard core: executes the operations routed to this shard against its
//! state. A mutation validates, builds records, appends them to the log and applies them;
//! the caller answers once the returned LSN is durable.

use crate::actions::{
    Queue, RunKey, Scheduler, action_info, idempotent_run_id, run_info, validate_action_name,
    validate_idempotency_key,
};
use crate::clock::Clock;
use crate::kv::{KvStore, validate_namespace};
use crate::record::Record;
use crate::state::ShardState;
use crate::ual::LogBuffer;
use crate::workers::{TaskReport, WorkerRegistry};
use flo_protocol::{
    ErrorValue, InvokeSpec, KV_LIST_LIMIT_DEFAULT, Op, RUN_LIST_LIMIT_DEFAULT, Reply, ShardInfo,
};
use std::rc::Rc;

/// Result of executing an operation on its shard.
pub struct Done {
    pub result: Result<Reply, ErrorValue>,
    /// The reply may be sent once this LSN is durable (0: at once).
    pub wait_lsn: u64,
}

impl Done {
    pub fn now(result: Result<Reply, ErrorValue>) -> Self {
        Done {
            result,
            wait_lsn: 0,
        }
    }
}

pub struct ShardCore {
    pub shard: u32,
    pub state: ShardState,
    pub log: LogBuffer,
    pub durable_lsn: u64,
    pub segments: u32,
    pub clock: Rc<dyn Clock>,
    pub scheduler: Scheduler,
    /// Workers whose id hashes to this shard (in memory; they register again after a
    /// restart).
    pub workers: WorkerRegistry,
}

/// The shard owning what a keyed operation touches (`None`: not keyed).
pub fn route_key(op: &Op) -> Option<(&str, String)> {
    Some(match op {
        Op::KvGet { namespace, key }
        | Op::KvPut { namespace, key, .. }
        | Op::KvDelete { namespace, key, .. } => (namespace, key.clone()),
        Op::RunStatus { namespace, run_id }
        | Op::RunWait {
            namespace, run_id, ..
        }
        | Op::RunCancel { namespace, run_id } => (namespace, run_id.clone()),
        Op::TaskComplete {
            namespace, task_id, ..
        }
        | Op::TaskFail {
            namespace, task_id, ..
        }
        | Op::TaskTouch {
            namespace, task_id, ..
        } => (namespace, task_id.clone()),
        Op::WorkerRegister(spec) => (&spec.namespace, spec.worker_id.clone()),
        Op::WorkflowStatus { namespace, run_id }
        | Op::WorkflowWait {
            namespace, run_id, ..
        }
        | Op::WorkflowHistory { namespace, run_id }
        | Op::WorkflowSignal {
            namespace, run_id, ..
        }
        | Op::WorkflowCancel {
            namespace, run_id, ..
        } => (namespace, run_id.clone()),
        Op::WorkflowStart(flo_protocol::WorkflowStartSpec {
            namespace,
            name,
            idempotency_key: Some(key),
            ..
        }) => (
            namespace,
            crate::workflows::idempotent_workflow_run_id(name, key),
        ),
        Op::WorkerHeartbeat {
            namespace,
            worker_id,
            ..
        }
        | Op::WorkerDrain {
            namespace,
            worker_id,
        }
        | Op::WorkerDeregister {
            namespace,
            worker_id,
        }
        | Op::WorkerGet {
            namespace,
            worker_id,
        }
        | Op::TaskAwait {
            namespace,
            worker_id,
            ..
        } => (namespace, worker_id.clone()),
        Op::ActionInvoke(InvokeSpec {
            namespace,
            action,
            idempotency_key: Some(key),
            ..
        }) => (namespace, idempotent_run_id(action, key)),
        _ => return None,
    })
}

impl ShardCore {
    pub fn new(
        shard: u32,
        state: ShardState,
        last_lsn: u64,
        segments: u32,
        clock: Rc<dyn Clock>,
    ) -> Self {
        let mut scheduler = Scheduler::default();
        scheduler.rebuild(&state.runs, &state.registry, clock.now_ms());
        ShardCore {
            shard,
            state,
            log: LogBuffer::new(last_lsn + 1),
            durable_lsn: last_lsn,
            segments,
            clock,
            scheduler,
            workers: WorkerRegistry::default(),
        }
    }

    /// Appends a record and applies it: the only way live state changes.
    pub fn commit(&mut self, record: Record) -> u64 {
        let lsn = self.log.append(&record);
        self.state.apply(lsn, record);
        lsn
    }

    pub fn execute(&mut self, op: Op) -> Done {
        let now = self.clock.now_ms();
        match op {
            Op::KvGet { namespace, key } => {
                if let Err(e) = KvStore::validate_get(&namespace, &key) {
                    return Done::now(Err(e));
                }
                let entry = self.state.kv.get(&namespace, &key, now);
                Done {
                    wait_lsn: entry.map_or(0, |e| e.lsn),
                    result: Ok(Reply::KvValue(entry.map(|e| e.to_wire(&key)))),
                }
            }
            Op::KvPut {
                namespace,
                key,
                value,
                ttl_ms,
                if_version,
            } => {
                match self
                    .state
                    .kv
                    .plan_put(namespace, key, value, ttl_ms, if_version, now)
                {
                    Ok(record) => {
                        let Record::KvPut { version, .. } = record else {
                            unreachable!()
                        };
                        let lsn = self.commit(record);
                        Done {
                            result: Ok(Reply::KvPut { version }),
                            wait_lsn: lsn,
                        }
                    }
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::KvDelete {
                namespace,
                key,
                if_version,
            } => match self.state.kv.plan_delete(&namespace, &key, if_version, now) {
                Ok(Some(record)) => {
                    let lsn = self.commit(record);
                    Done {
                        result: Ok(Reply::KvDeleted { deleted: true }),
                        wait_lsn: lsn,
                    }
                }
                Ok(None) => Done::now(Ok(Reply::KvDeleted { deleted: false })),
                Err(e) => Done::now(Err(e)),
            },
            Op::KvList {
                namespace,
                prefix,
                limit,
            } => {
                let limit = limit.unwrap_or(KV_LIST_LIMIT_DEFAULT);
                match self.state.kv.list(&namespace, &prefix, limit, now) {
                    Ok((items, truncated)) => Done {
                        wait_lsn: items.iter().map(|(_, e)| e.lsn).max().unwrap_or(0),
                        result: Ok(Reply::KvList {
                            entries: items.iter().map(|(k, e)| e.to_wire(k)).collect(),
                            truncated,
                        }),
                    },
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::Status => Done::now(Ok(Reply::ShardStatus(self.info()))),
            Op::ActionGet { namespace, name } => {
                let result = match self.state.registry.get(&namespace, &name) {
                    Some(def) => Ok(Reply::Action(action_info(&namespace, &name, def))),
                    None => Err(ErrorValue::not_found(format!(
                        "action {name:?} is not registered in namespace {namespace:?}"
                    ))),
                };
                Done::now(result)
            }
            Op::ActionList { namespace } => {
                let list = self.state.registry.list(&namespace);
                Done::now(Ok(Reply::Actions(
                    list.iter()
                        .map(|(n, d)| action_info(&namespace, n, d))
                        .collect(),
                )))
            }
            Op::ActionInvoke(spec) => self.invoke(spec, now),
            Op::RunStatus { namespace, run_id }
            | Op::RunWait {
                namespace, run_id, ..
            } => self.run_status(&namespace, &run_id),
            Op::RunList {
                namespace,
                action,
                status,
                dead_letter,
                limit,
            } => {
                let limit = limit.unwrap_or(RUN_LIST_LIMIT_DEFAULT);
                match self
                    .state
                    .runs
                    .list(&namespace, &action, status, dead_letter, limit)
                {
                    Ok((runs, truncated)) => Done {
                        wait_lsn: runs.iter().map(|(_, r)| r.lsn).max().unwrap_or(0),
                        result: Ok(Reply::Runs {
                            runs: runs
                                .iter()
                                .map(|(id, r)| {
                                    run_info(&namespace, id, r, self.is_executing(&namespace, id))
                                })
                                .collect(),
                            truncated,
                        }),
                    },
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::RunCancel { namespace, run_id } => {
                match self.state.runs.plan_cancel(&namespace, &run_id, now) {
                    Ok(record) => {
                        self.commit(record);
                        self.run_status(&namespace, &run_id)
                    }
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::ActionRegister(_) | Op::ActionDelete { .. } | Op::ActionSetEnabled { .. } => {
                Done::now(Err(ErrorValue::internal(
                    "registry change reached a shard directly",
                )))
            }
            Op::WorkerRegister(spec) => {
                Done::now(self.workers.register(spec, now).map(Reply::Worker))
            }
            Op::WorkerHeartbeat {
                namespace,
                worker_id,
                current_load,
            } => Done::now(
                self.workers
                    .heartbeat(&namespace, &worker_id, current_load, now)
                    .map(|status| Reply::WorkerStatus { status }),
            ),
            Op::WorkerGet {
                namespace,
                worker_id,
            } => Done::now(self.workers.info(&namespace, &worker_id).map(Reply::Worker)),
            Op::WorkerList { namespace } => {
                Done::now(Ok(Reply::Workers(self.workers.list(&namespace))))
            }
            Op::TaskTouch {
                namespace,
                worker_id,
                task_id,
                action,
                extend_ms,
            } => {
                let report = TaskReport {
                    namespace: &namespace,
                    worker_id: &worker_id,
                    task_id: &task_id,
                    action: &action,
                    attempt: None,
                };
                match self.touch_task(&report, extend_ms, now) {
                    Ok((expires_at_ms, lsn)) => Done {
                        result: Ok(Reply::Lease { expires_at_ms }),
                        wait_lsn: lsn,
                    },
                    Err(e) => Done::now(Err(e)),
                }
            }
            Op::WorkflowGet {
                namespace,
                name,
                version,
            } => Done::now(
                self.wf_info(&namespace, &name, version.as_deref())
                    .map(Reply::Workflow),
            ),
            Op::WorkflowList { namespace } => {
                Done::now(Ok(Reply::Workflows(self.wf_list(&namespace))))
            }
            Op::WorkflowStatus { namespace, run_id }
            | Op::WorkflowWait {
                namespace, run_id, ..
            } => self.wf_status(&namespace, &run_id),
            Op::WorkflowHistory { namespace, run_id } => self.wf_history(&namespace, &run_id),
            Op::WorkflowListRuns {
                namespace,
                name,
                status,
                limit,
            } => self.wf_list_runs(&namespace, &name, status, limit),
            Op::WorkflowCreate { .. }
            | Op::WorkflowSetEnabled { .. }
            | Op::WorkflowStart(_)
            | Op::WorkflowSignal { .. }
            | Op::WorkflowCancel { .. } => Done::now(Err(ErrorValue::internal(
                "workflow operation reached the engine directly",
            ))),
            Op::WorkerDrain { .. }
            | Op::WorkerDeregister { .. }
            | Op::TaskAwait { .. }
            | Op::TaskComplete { .. }
            | Op::TaskFail { .. } => Done::now(Err(ErrorValue::internal(
                "worker operation reached the engine directly",
            ))),
            Op::Hello { .. } | Op::ShardMap | Op::TestAdvanceClock { .. } => Done::now(Err(
                ErrorValue::internal("connection-level operation reached a shard"),
            )),
        }
    }

    fn is_executing(&self, namespace: &str, run_id: &str) -> bool {
        !self.scheduler.executing.is_empty()
            && self
                .scheduler
                .executing
                .contains(&(namespace.to_string(), run_id.to_string()))
    }

    pub fn run_status(&self, namespace: &str, run_id: &str) -> Done {
        match self.state.runs.require(namespace, run_id) {
            Ok(run) => Done {
                wait_lsn: run.lsn,
                result: Ok(Reply::Run(run_info(
                    namespace,
                    run_id,
                    run,
                    self.is_executing(namespace, run_id),
                ))),
            },
            Err(e) => Done::now(Err(e)),
        }
    }

    /// Creates a run on this shard (the caller routed it here).
    fn invoke(&mut self, spec: InvokeSpec, now: u64) -> Done {
        let plan = || -> Result<(String, bool), ErrorValue> {
            validate_namespace(&spec.namespace)?;
            validate_action_name(&spec.action)?;
            if let Some(key) = &spec.idempotency_key {
                validate_idempotency_key(key)?;
            }
            self.state
                .registry
                .invocable(&spec.namespace, &spec.action)?;
            Ok(match &spec.idempotency_key {
                Some(key) => (idempotent_run_id(&spec.action, key), true),
                None => {
                    let state = &self.state;
                    (
                        state.runs.next_run_id(&spec.namespace, &spec.action, |id| {
                            state.owns(&spec.namespace, id)
                        }),
                        false,
                    )
                }
            })
        };
        let (run_id, idempotent) = match plan() {
            Ok(v) => v,
            Err(e) => return Done::now(Err(e)),
        };
        if idempotent && let Some(run) = self.state.runs.get(&spec.namespace, &run_id) {
            return Done {
                wait_lsn: run.lsn,
                result: Ok(Reply::Invoked {
                    run_id,
                    created: false,
                }),
            };
        }
        let def = self
            .state
            .registry
            .get(&spec.namespace, &spec.action)
            .expect("checked above");
        let kind = def.kind;
        let namespace = spec.namespace.clone();
        let record = match self.state.runs.plan_create(spec, def, run_id.clone(), now) {
            Ok(r) => r,
            Err(e) => return Done::now(Err(e)),
        };
        let lsn = self.commit(record);
        let run = self
            .state
            .runs
            .get(&namespace, &run_id)
            .expect("just created");
        self.scheduler
            .schedule((namespace, run_id.clone()), run, Queue::of(kind), now);
        Done {
            wait_lsn: lsn,
            result: Ok(Reply::Invoked {
                run_id,
                created: true,
            }),
        }
    }

    /// Moves due timers to the ready queue.
    pub fn fire_timers(&mut self) -> usize {
        let now = self.clock.now_ms();
        self.scheduler.fire_due(now, &self.state.runs)
    }

    /// Next runnable WASM run that is still pending.
    pub fn next_runnable(&mut self) -> Option<RunKey> {
        while let Some(key) = self.scheduler.pop_ready() {
            let pending = self
                .state
                .runs
                .get(&key.0, &key.1)
                .is_some_and(|r| r.status == flo_protocol::RunStatus::Pending);
            if pending && !self.scheduler.executing.contains(&key) {
                return Some(key);
            }
        }
        None
    }

    pub fn info(&self) -> ShardInfo {
        ShardInfo {
            shard: self.shard,
            lsn: self.log.last_lsn(),
            durable_lsn: self.durable_lsn,
            segments: self.segments,
            kv_keys: self.state.kv.key_count(),
            runs: self.state.runs.len() as u64,
        }
    }

    /// Logs the deletion of up to `max` expired keys; returns how many.
    pub fn sweep_expired(&mut self, max: usize) -> usize {
        let records = self.state.kv.expired(self.clock.now_ms(), max);
        let n = records.len();
        for record in records {
            self.commit(record);
        }
        n
    }
}
