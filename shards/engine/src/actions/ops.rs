//! Client operations on action runs, on the shard owning the run.

use super::attempts::Executions;
use crate::archive;
use crate::core::io::Done;
use crate::core::{Core, Task};
use crate::fold::archive::RunKind;
use crate::fold::registry::action_info;
use crate::fold::runs::{idempotent_run_id, run_info};
use flo_protocol::{ErrorValue, InvokeSpec, Reply, RunStatus};
use flo_protocol::{check_action_name, check_idempotency_key, check_namespace};

/// Definition reads wait for the last definition change (on the coordinator it is applied
/// before it is durable).
pub fn action_get(core: &Core, namespace: &str, name: &str) -> Done {
    Done {
        wait_lsn: core.definitions_lsn(),
        result: match core.state().registry.get(namespace, name) {
            Some(def) => Ok(Reply::Action(action_info(namespace, name, def))),
            None => Err(ErrorValue::not_found(format!(
                "action {name:?} is not registered in namespace {namespace:?}"
            ))),
        },
    }
}

pub fn action_list(core: &Core, namespace: &str) -> Done {
    let list = core.state().registry.list(namespace);
    Done {
        wait_lsn: core.definitions_lsn(),
        result: Ok(Reply::Actions(
            list.iter()
                .map(|(n, d)| action_info(namespace, n, d))
                .collect(),
        )),
    }
}

pub fn run_status(core: &Core, execs: &Executions, namespace: &str, run_id: &str) -> Done {
    match core.state().runs.require(namespace, run_id) {
        Ok(run) => Done {
            wait_lsn: run.lsn,
            result: Ok(Reply::Run(run_info(
                namespace,
                run_id,
                run,
                execs.is_executing(namespace, run_id),
            ))),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// Creates a run on this shard (the caller routed it here: its id is owned here).
pub fn invoke(core: &mut Core, spec: InvokeSpec) -> Done {
    let now = core.now_ms();
    let planned = (|| -> Result<(String, bool), ErrorValue> {
        check_namespace(&spec.namespace)?;
        check_action_name(&spec.action)?;
        if let Some(key) = &spec.idempotency_key {
            check_idempotency_key(key)?;
        }
        core.state()
            .registry
            .invocable(&spec.namespace, &spec.action)?;
        Ok(match &spec.idempotency_key {
            Some(key) => (idempotent_run_id(&spec.action, key), true),
            None => {
                let state = core.state();
                let id = state.runs.next_run_id(&spec.namespace, &spec.action, |id| {
                    state.owns(&spec.namespace, id)
                        && state.run_id_free(RunKind::Action, &spec.namespace, id)
                });
                (id, false)
            }
        })
    })();
    let (run_id, idempotent) = match planned {
        Ok(v) => v,
        Err(e) => return Done::now(Err(e)),
    };
    // A fresh id exists nowhere: only a key's id is looked up (live, then archived).
    let existing = idempotent
        .then(|| match core.state().runs.get(&spec.namespace, &run_id) {
            Some(run) => Some(run.lsn),
            None => core
                .state()
                .archived(RunKind::Action, &spec.namespace, &run_id)
                .map(|e| e.lsn),
        })
        .flatten();
    if let Some(lsn) = existing {
        return Done {
            wait_lsn: lsn,
            result: Ok(Reply::Invoked {
                run_id,
                created: false,
            }),
        };
    }
    if let Err(e) = core.check_live_runs(&spec.namespace) {
        return Done::now(Err(e));
    }
    let Some(def) = core.state().registry.get(&spec.namespace, &spec.action) else {
        return Done::now(Err(ErrorValue::internal(
            "the action vanished while invoked",
        )));
    };
    match core
        .state()
        .runs
        .plan_create(spec, def, run_id.clone(), now)
    {
        Ok(record) => Done {
            wait_lsn: core.commit(record),
            result: Ok(Reply::Invoked {
                run_id,
                created: true,
            }),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// The in-flight runs of an action `query` asks for on this shard, newest first (a
/// fan-out part; `status` is the query's status filter).
pub fn run_list(
    core: &Core,
    execs: &Executions,
    query: &archive::ListQuery,
    status: Option<RunStatus>,
) -> Done {
    let namespace = query.namespace.as_str();
    let (action, dead_letter, limit) = (&query.name, query.dead_letter, query.limit);
    match core.state().runs.list(
        namespace,
        action,
        status,
        dead_letter,
        query.filter.as_deref(),
        limit,
        &query.from,
    ) {
        Ok((runs, truncated)) => Done {
            wait_lsn: runs.iter().map(|(_, r)| r.lsn).max().unwrap_or(0),
            result: Ok(Reply::Runs {
                runs: runs
                    .iter()
                    .map(|(id, r)| run_info(namespace, id, r, execs.is_executing(namespace, id)))
                    .collect(),
                truncated,
                next_cursor: None,
            }),
        },
        Err(e) => Done::now(Err(e)),
    }
}

/// Cancels a pending or running run; the workflow step it executes (if any) moves on.
pub fn cancel(core: &mut Core, execs: &Executions, namespace: &str, run_id: &str) -> Done {
    let now = core.now_ms();
    if let Some(e) = core.state().archived(RunKind::Action, namespace, run_id) {
        return Done {
            result: Err(ErrorValue::conflict(format!(
                "run {run_id:?} is already {}; only pending or running runs can be cancelled",
                crate::fold::archived::action_status(e.status).as_str()
            ))),
            wait_lsn: e.lsn,
        };
    }
    match core.state().runs.plan_cancel(namespace, run_id, now) {
        Ok(record) => {
            core.commit(record);
            core.schedule(Task::ActionFinal((
                namespace.to_string(),
                run_id.to_string(),
            )));
            run_status(core, execs, namespace, run_id)
        }
        Err(e) => Done::now(Err(e)),
    }
}
