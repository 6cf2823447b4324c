//! Messages from other shards: requests executed here, and answers to the calls this
//! shard made (`core::Waiting` says what each continues).

use super::Engine;
use super::fanout;
use crate::core::Waiting;
use crate::core::io::{Effect, LogLine, LogSource, PeerMsg, PeerRequest, ReplyResult, ReplyTo};
use crate::definitions;
use crate::kv;
use crate::streams;
use crate::workers;
use flo_protocol::Reply;

impl Engine {
    pub(super) fn peer(&mut self, from: u32, msg: Box<PeerMsg>) {
        match *msg {
            PeerMsg::Request { tag, req } => {
                let to = ReplyTo::Peer { shard: from, tag };
                // A guest's read is still answered while stopping (an error would read as
                // "absent" and the guest's result would be built on it).
                let read = matches!(req, PeerRequest::KvRead { .. });
                if !read && self.refuse_if_stopping(to) {
                    return;
                }
                self.peer_request(from, to, req);
            }
            PeerMsg::Reply { tag, result } => self.peer_reply(tag, result),
        }
    }

    fn peer_request(&mut self, from: u32, to: ReplyTo, req: PeerRequest) {
        let core = &mut self.core;
        match req {
            PeerRequest::Client(op) => self.execute(to, op),
            PeerRequest::Definition(record) => definitions::apply_change(core, to, record),
            PeerRequest::DefinitionSync {
                actions,
                workflows,
                streams,
            } => definitions::apply_sync(core, to, actions, workflows, streams),
            req @ (PeerRequest::StreamAppend { .. }
            | PeerRequest::StreamDeliver { .. }
            | PeerRequest::StreamSettle { .. }) => {
                let done = match self.log_refusal() {
                    Some(e) => crate::core::io::Done::now(Err(e)),
                    None => streams::do_part(&mut self.core, req),
                };
                self.core.reply(to, done.wait_lsn, done.result);
            }
            PeerRequest::Want(msg) => workers::on_want(core, &mut self.awaits, from, msg, to),
            PeerRequest::WantCancel { want_id, .. } => {
                workers::cancel_want(&mut self.awaits, from, want_id)
            }
            PeerRequest::TasksDelivered {
                namespace,
                worker_id,
                want_id,
                tasks,
            } => {
                let worker = (namespace, worker_id);
                workers::on_delivery(core, &mut self.awaits, &worker, want_id, from, tasks, false)
            }
            PeerRequest::ReleaseLeases {
                namespace,
                worker_id,
                run_ids,
            } => {
                workers::release_tasks(core, &namespace, &worker_id, run_ids);
            }
            PeerRequest::WorkerTaskDone {
                namespace,
                worker_id,
                action,
                ok,
                at_ms,
            } => self
                .workers
                .record_task(&namespace, &worker_id, &action, ok, at_ms),
            PeerRequest::AbandonAwait {
                namespace,
                worker_id,
                tag,
            } => workers::abandon_forwarded(
                core,
                &mut self.awaits,
                from,
                (namespace, worker_id),
                tag,
            ),
            PeerRequest::RemoteWrites {
                origin_lsn,
                namespace,
                writes,
            } => {
                let lsn = kv::on_remote_writes(core, from, origin_lsn, namespace, writes);
                core.reply(to, lsn, Ok(Reply::Done));
            }
            PeerRequest::KvWaitAbandon { tag } => kv::abandon_wait(&mut self.kv_waits, from, tag),
            PeerRequest::WatchAbandon { tag } => self.watches.abandon(from, tag),
            PeerRequest::KvRead { namespace, key } => {
                // The guest's result may depend on what it read: answered once durable.
                let done = kv::get(core, &namespace, &key);
                core.reply(to, done.wait_lsn, done.result);
            }
            PeerRequest::ClockMoved => {
                self.tick();
                self.core.reply(to, 0, Ok(Reply::Done));
            }
        }
    }

    pub(super) fn peer_reply(&mut self, tag: u64, result: ReplyResult) {
        let Some(waiting) = self.core.take_call(tag) else {
            return;
        };
        let core = &mut self.core;
        match waiting {
            Waiting::Relay(to) => core.reply_op(to, 0, result),
            Waiting::WatchRelay(to) => self.on_watch_relayed(tag, to, result),
            Waiting::KvWaitRelay(to) => {
                kv::on_wait_relayed(core, &mut self.kv_waits, tag, to, result)
            }
            Waiting::AwaitRelay { to, worker } => {
                workers::on_await_relayed(core, &mut self.awaits, tag, to, worker, result)
            }
            Waiting::FanOut(id) => fanout::on_part(core, &mut self.fanouts, id, result),
            Waiting::Definition(id) => {
                definitions::on_applied(core, &mut self.definitions, id, result)
            }
            Waiting::WantShare {
                worker,
                want_id,
                from,
            } => workers::on_want_share(core, &mut self.awaits, worker, want_id, from, result),
            Waiting::GuestRead { exec, read } => core.emit(Effect::GuestValue {
                exec,
                read,
                value: kv::guest_value(result),
            }),
            Waiting::Forward { origin_lsn } => {
                kv::on_forwarded(core, &mut self.forwarder, origin_lsn, result.is_ok())
            }
            Waiting::StreamPart { gather, part } => {
                streams::on_part(core, &mut self.streams, gather, part, result)
            }
            Waiting::TriggerStart(start) => self.on_trigger_started(*start, result),
            Waiting::SinkAppend { id, attempt } => {
                let result = result.map(|_| 200).map_err(|e| e.message);
                crate::webhooks::on_answer(core, &mut self.webhooks, id, attempt, result)
            }
            Waiting::Nothing => {
                if let Err(e) = result {
                    core.emit(LogLine::warn(
                        LogSource::Peer,
                        format!("a request to another shard failed: {e}"),
                    ));
                }
            }
        }
    }
}
