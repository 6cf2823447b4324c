//! The one coordinator protocol for definitions (actions and workflows), which every shard
//! holds. Shard 0 orders changes one at a time: validate (compiling a module if need be),
//! commit the record on itself, then — once that record is durable, so no shard can hold a
//! definition the coordinator could lose — have every other shard log and apply it, and
//! answer the client once all have. At start-up the coordinator brings every shard's
//! definitions to its own (a crash mid-change may have reached some shards only).

use crate::core::io::{Effect, PeerRequest, ReplyResult, ReplyTo};
use crate::core::{Core, Waiting};
use crate::fold::record::Record;
use crate::fold::registry::{ENTRYPOINT_DEFAULT, action_info, check_entrypoint};
use crate::fold::state::ShardState;
use crate::fold::streams::{StreamDef, StreamKey, StreamSync};
use crate::workflows;
use flo_protocol::{ActionSpec, ErrorValue, Op, Reply};
use std::collections::VecDeque;
use std::sync::Arc;

/// The shard that orders definition changes.
pub const COORDINATOR: u32 = 0;
/// Changes waiting for their turn.
const QUEUED_CHANGES_MAX: usize = 1024;

/// What to answer once every shard applied the change.
enum After {
    /// The action's definition (`ActionGet`).
    Action { namespace: String, name: String },
    /// The latest version of the workflow (`WorkflowGet`).
    Workflow { namespace: String, name: String },
    /// A fixed reply.
    Reply(Box<Reply>),
}

enum Stage {
    /// A module being compiled by the runtime (`Effect::Compile`).
    Compiling { job: u64, spec: Box<ActionSpec> },
    /// The record is committed here; other shards are applying it.
    Applying {
        lsn: u64,
        remaining: u32,
        error: Option<ErrorValue>,
        after: After,
    },
}

struct Change {
    id: u64,
    to: ReplyTo,
    stage: Stage,
}

#[derive(Default)]
pub struct Definitions {
    queue: VecDeque<(ReplyTo, Op)>,
    current: Option<Change>,
    next_id: u64,
}

impl Definitions {
    pub fn busy(&self) -> bool {
        self.current.is_some() || !self.queue.is_empty()
    }
}

/// A definition change reached the coordinator: it is ordered after those before it.
pub fn submit(core: &mut Core, defs: &mut Definitions, to: ReplyTo, op: Op) {
    if defs.queue.len() >= QUEUED_CHANGES_MAX {
        let e = ErrorValue::new(
            flo_protocol::ErrorCode::Overloaded,
            format!("{QUEUED_CHANGES_MAX} definition changes are waiting; retry shortly"),
        );
        core.reply_op(to, 0, Err(e));
        return;
    }
    defs.queue.push_back((to, op));
    next(core, defs);
}

/// Starts the next change while none is in progress.
fn next(core: &mut Core, defs: &mut Definitions) {
    while defs.current.is_none() {
        let Some((to, op)) = defs.queue.pop_front() else {
            return;
        };
        defs.next_id += 1;
        let id = defs.next_id;
        if let Op::ActionRegister(spec) = &op
            && let Some(wasm) = &spec.wasm
        {
            // A bad entrypoint name is refused before compiling for it.
            let entrypoint = match check_entrypoint(spec.kind, spec.wasm_entrypoint.clone()) {
                Ok(name) => name.unwrap_or_else(|| ENTRYPOINT_DEFAULT.to_string()),
                Err(e) => {
                    core.reply_op(to, 0, Err(e));
                    continue;
                }
            };
            let wasm: Arc<[u8]> = Arc::from(wasm.as_slice());
            let Op::ActionRegister(spec) = op else {
                unreachable!("matched above")
            };
            core.emit(Effect::Compile {
                job: id,
                wasm,
                entrypoint,
            });
            defs.current = Some(Change {
                id,
                to,
                stage: Stage::Compiling {
                    job: id,
                    spec: Box::new(spec),
                },
            });
            return;
        }
        let namespace = match &op {
            Op::WorkflowCreate { namespace, .. } | Op::StreamCreate { namespace, .. } => {
                Some(namespace.clone())
            }
            Op::StreamGroupCreate {
                namespace, stream, ..
            } => Some(format!("{namespace}\u{0}{stream}")),
            _ => None,
        };
        match plan(core, op, None) {
            Ok((Some(record), after)) => commit(core, defs, id, to, record, after),
            Ok((None, after)) => confirm(core, defs, id, to, namespace, after),
            Err(e) => core.reply_op(to, 0, Err(e)),
        }
    }
}

/// Validates a change and builds its record (`None`: nothing to change) and its answer.
fn plan(
    core: &Core,
    op: Op,
    describe: Option<String>,
) -> Result<(Option<Record>, After), ErrorValue> {
    let now = core.now_ms();
    let registry = &core.state().registry;
    Ok(match op {
        Op::ActionRegister(spec) => {
            let after = After::Action {
                namespace: spec.namespace.clone(),
                name: spec.name.clone(),
            };
            (Some(registry.plan_register(spec, describe, now)?), after)
        }
        Op::ActionDelete { namespace, name } => (
            Some(registry.plan_delete(&namespace, &name, now)?),
            After::Reply(Box::new(Reply::ActionDeleted { deleted: true })),
        ),
        Op::ActionSetEnabled {
            namespace,
            name,
            enabled,
        } => {
            let record = registry.plan_set_enabled(&namespace, &name, enabled, now)?;
            (Some(record), After::Action { namespace, name })
        }
        Op::WorkflowCreate { namespace, yaml } => {
            let (record, name, version, warnings) =
                workflows::plan_create(core, &namespace, &yaml, now)?;
            let reply = Reply::WorkflowCreated {
                name,
                version,
                created: record.is_some(),
                warnings,
            };
            (record, After::Reply(Box::new(reply)))
        }
        Op::WorkflowSetEnabled {
            namespace,
            name,
            enabled,
        } => {
            let record = workflows::plan_set_enabled(core, &namespace, &name, enabled, now)?;
            (Some(record), After::Workflow { namespace, name })
        }
        Op::StreamCreate {
            namespace,
            name,
            config,
        } => {
            let shards = core.partitioning().shards;
            let streams = &core.state().streams;
            let record = streams.plan_create(&namespace, &name, &config, shards, now)?;
            let reply = Reply::StreamCreated {
                name,
                partitions: config.partitions.unwrap_or(shards),
                created: record.is_some(),
            };
            (record, After::Reply(Box::new(reply)))
        }
        Op::StreamGroupCreate {
            namespace,
            stream,
            group,
            config,
        } => {
            let streams = &core.state().streams;
            let record = streams.plan_group_create(&namespace, &stream, &group, &config, now)?;
            let reply = Reply::GroupCreated {
                group,
                created: record.is_some(),
            };
            (record, After::Reply(Box::new(reply)))
        }
        Op::StreamGroupDelete {
            namespace,
            stream,
            group,
        } => (
            Some(
                core.state()
                    .streams
                    .plan_group_delete(&namespace, &stream, &group)?,
            ),
            After::Reply(Box::new(Reply::GroupDeleted { deleted: true })),
        ),
        Op::StreamDelete { namespace, name } => (
            Some(core.state().streams.plan_delete(&namespace, &name)?),
            After::Reply(Box::new(Reply::StreamDeleted { deleted: true })),
        ),
        _ => return Err(ErrorValue::internal("not a definition change")),
    })
}

/// Commits the change here and has every other shard apply it once it is durable here.
fn commit(
    core: &mut Core,
    defs: &mut Definitions,
    id: u64,
    to: ReplyTo,
    record: Record,
    after: After,
) {
    let lsn = core.commit(record.clone());
    fan_out(
        core,
        defs,
        id,
        to,
        lsn,
        PeerRequest::Definition(record),
        after,
    );
}

/// The coordinator has the definition already (a repeat): a crash may have cut the fan-out
/// of the change that made it, so every shard is brought to the coordinator's definitions
/// of that workflow before the answer.
fn confirm(
    core: &mut Core,
    defs: &mut Definitions,
    id: u64,
    to: ReplyTo,
    namespace: Option<String>,
    after: After,
) {
    let state = core.state();
    let req = match (&after, namespace) {
        (After::Reply(reply), Some(ns)) => match &**reply {
            Reply::WorkflowCreated { name, .. } => {
                state.workflows.defs.sync_entry(&ns, name).map(|entry| {
                    PeerRequest::DefinitionSync {
                        actions: None,
                        workflows: vec![entry],
                        streams: StreamSync::One(stream_entries(state, Some((&ns, name)))),
                    }
                })
            }
            Reply::StreamCreated { name, .. } => Some(PeerRequest::DefinitionSync {
                actions: None,
                workflows: Vec::new(),
                streams: StreamSync::One(stream_entries(state, Some((&ns, name)))),
            }),
            // `ns` carries the stream too (`next`).
            Reply::GroupCreated { .. } => {
                ns.split_once('\u{0}')
                    .map(|(ns, stream)| PeerRequest::DefinitionSync {
                        actions: None,
                        workflows: Vec::new(),
                        streams: StreamSync::One(stream_entries(state, Some((ns, stream)))),
                    })
            }
            _ => None,
        },
        _ => None,
    };
    let Some(req) = req else {
        core.reply_op(to, 0, Err(ErrorValue::internal("nothing to change")));
        return;
    };
    let lsn = core.last_lsn();
    fan_out(core, defs, id, to, lsn, req, after);
}

/// Sends `req` to every other shard once `lsn` is durable here; answers once all applied it.
fn fan_out(
    core: &mut Core,
    defs: &mut Definitions,
    id: u64,
    to: ReplyTo,
    lsn: u64,
    req: PeerRequest,
    after: After,
) {
    let others: Vec<u32> = (0..core.partitioning().shards)
        .filter(|&s| s != core.shard())
        .collect();
    for &s in &others {
        core.call(s, lsn, req.clone(), Waiting::Definition(id));
    }
    let stage = Stage::Applying {
        lsn,
        remaining: others.len() as u32,
        error: None,
        after,
    };
    defs.current = Some(Change { id, to, stage });
    finish_if_done(core, defs);
}

/// The runtime compiled (or refused) the module of the registration in progress.
pub fn on_compiled(
    core: &mut Core,
    defs: &mut Definitions,
    job: u64,
    result: Result<Option<String>, String>,
) {
    let Some(Change {
        id,
        to,
        stage: Stage::Compiling { job: j, .. },
    }) = &defs.current
    else {
        return;
    };
    if *j != job {
        return;
    }
    let (id, to) = (*id, *to);
    let Some(Change {
        stage: Stage::Compiling { spec, .. },
        ..
    }) = defs.current.take()
    else {
        return;
    };
    let planned = result
        .map_err(|e| ErrorValue::bad_request(format!("invalid wasm module: {e}")))
        .and_then(|describe| plan(core, Op::ActionRegister(*spec), describe));
    match planned {
        Ok((Some(record), after)) => commit(core, defs, id, to, record, after),
        Ok((None, _)) => core.reply_op(to, 0, Err(ErrorValue::internal("nothing to change"))),
        Err(e) => core.reply_op(to, 0, Err(e)),
    }
    next(core, defs);
}

/// A shard applied (or failed to apply) change `id`.
pub fn on_applied(core: &mut Core, defs: &mut Definitions, id: u64, result: ReplyResult) {
    let Some(Change {
        id: current,
        stage: Stage::Applying {
            remaining, error, ..
        },
        ..
    }) = &mut defs.current
    else {
        return;
    };
    if *current != id {
        return;
    }
    *remaining = remaining.saturating_sub(1);
    if let Err(e) = result {
        error.get_or_insert(e);
    }
    finish_if_done(core, defs);
    next(core, defs);
}

fn finish_if_done(core: &mut Core, defs: &mut Definitions) {
    let done = matches!(
        &defs.current,
        Some(Change {
            stage: Stage::Applying { remaining: 0, .. },
            ..
        })
    );
    if !done {
        return;
    }
    let Some(Change {
        to,
        stage: Stage::Applying {
            lsn, error, after, ..
        },
        ..
    }) = defs.current.take()
    else {
        return;
    };
    let result = match error {
        Some(e) => Err(e),
        None => answer(core, after),
    };
    core.reply_op(to, lsn, result);
}

fn answer(core: &Core, after: After) -> ReplyResult {
    match after {
        After::Reply(reply) => Ok(*reply),
        After::Action { namespace, name } => match core.state().registry.get(&namespace, &name) {
            Some(def) => Ok(Reply::Action(action_info(&namespace, &name, def))),
            None => Err(ErrorValue::not_found(format!(
                "action {name:?} is not registered in namespace {namespace:?}"
            ))),
        },
        After::Workflow { namespace, name } => {
            workflows::info(core, &namespace, &name, None).map(Reply::Workflow)
        }
    }
}

/// On another shard: log and apply a change the coordinator ordered; answer once durable.
pub fn apply_change(core: &mut Core, to: ReplyTo, record: Record) {
    let lsn = core.commit(record);
    core.reply(to, lsn, Ok(Reply::Done));
}

/// At start-up, on the coordinator: send every shard this shard's definitions.
pub fn sync_all(core: &mut Core) {
    if core.shard() != COORDINATOR {
        return;
    }
    let actions: Vec<_> = core
        .state()
        .registry
        .all()
        .map(|(ns, name, def)| (ns.to_string(), name.to_string(), def.clone()))
        .collect();
    let workflows = core.state().workflows.defs.sync_entries();
    let streams = stream_entries(core.state(), None);
    let me = core.shard();
    for s in (0..core.partitioning().shards).filter(|&s| s != me) {
        let req = PeerRequest::DefinitionSync {
            actions: Some(actions.clone()),
            workflows: workflows.clone(),
            streams: StreamSync::All(streams.clone()),
        };
        core.call(s, 0, req, Waiting::Nothing);
    }
}

/// The coordinator's stream definitions: one (`only`) or all.
fn stream_entries(state: &ShardState, only: Option<(&str, &str)>) -> Vec<(StreamKey, StreamDef)> {
    match only {
        Some((ns, name)) => state
            .streams
            .def(ns, name)
            .map(|d| ((ns.to_string(), name.to_string()), d.clone()))
            .into_iter()
            .collect(),
        None => state
            .streams
            .all_defs()
            .map(|(k, d)| (k.clone(), d.clone()))
            .collect(),
    }
}

/// On another shard: log what makes its definitions equal to the coordinator's.
pub fn apply_sync(
    core: &mut Core,
    to: ReplyTo,
    actions: Option<Vec<(String, String, crate::fold::registry::ActionDef)>>,
    workflows: Vec<crate::fold::workflow_defs::WfSyncEntry>,
    streams: StreamSync,
) {
    let now = core.now_ms();
    let mut records = match actions {
        Some(actions) => core.state().registry.plan_sync(actions, now),
        None => Vec::new(),
    };
    records.extend(core.state().workflows.defs.plan_sync(&workflows));
    records.extend(core.state().streams.plan_sync(streams));
    for record in records {
        core.commit(record);
    }
    // Nothing to log may still mean "logged, not yet durable" (by an earlier sync).
    let lsn = core.last_lsn();
    core.reply(to, lsn, Ok(Reply::Done));
}
