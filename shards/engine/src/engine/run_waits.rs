//! Clients waiting for a run to become final (`RunWait`, `WorkflowWait`, a start or an
//! invoke with `wait_ms`): answered when it is, or at their deadline.

use super::Engine;
use super::watches::Watched;
use crate::actions::{self};
use crate::archive::Want;
use crate::core::Waiting;
use crate::core::io::PeerRequest;
use crate::core::io::{ConnId, Done, ReplyResult, ReplyTo};
use crate::fold::archive::RunKind;
use crate::workflows;
use flo_protocol::{ErrorCode, ErrorValue, Op, RUN_WAIT_MS_MAX, Reply};

/// Why a client waits for a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Asked {
    /// `RunWait`, `WorkflowWait`: refused `overloaded` when no more waits fit.
    Wait,
    /// An invoke or a start with `wait_ms`: the run exists already, so when no more waits
    /// fit it is answered as it is now (like a wait whose time is up).
    Start,
}

impl Engine {
    fn status_of(&self, run: &Watched) -> Done {
        let ((namespace, run_id), workflow) = run;
        if *workflow {
            workflows::status(&self.core, &self.executions, namespace, run_id)
        } else {
            actions::run_status(&self.core, &self.executions, namespace, run_id)
        }
    }

    /// Answers with the run once it is final, or after `timeout_ms` with its status.
    pub(super) fn wait_for(
        &mut self,
        run: (String, String),
        workflow: bool,
        timeout_ms: u64,
        to: ReplyTo,
        asked: Asked,
    ) {
        let run = (run, workflow);
        // Archived: final.
        if self.read_archived_status(&run, to) {
            return;
        }
        let status = self.status_of(&run);
        let is_final = match &status.result {
            Ok(Reply::Run(info)) => info.status.is_final(),
            Ok(Reply::WorkflowRun(info)) => info.status.is_final(),
            _ => true,
        };
        if is_final || timeout_ms == 0 {
            self.core.reply_op(to, status.wait_lsn, status.result);
            return;
        }
        if let Err(reason) = self.watches.room_for(&to) {
            match asked {
                Asked::Start => self.core.reply_op(to, status.wait_lsn, status.result),
                Asked::Wait => {
                    let e = ErrorValue::new(ErrorCode::Overloaded, reason);
                    self.core.reply_op(to, 0, Err(e));
                }
            }
            return;
        }
        // Deadlines on the real clock: a test clock moves runs, not client patience.
        let deadline = self.core.wall_ms() + timeout_ms.min(RUN_WAIT_MS_MAX);
        self.watches.watch(run, deadline, to);
    }

    /// Starts the read of a watched run's status when it is archived.
    fn read_archived_status(&mut self, run: &Watched, to: ReplyTo) -> bool {
        let ((namespace, run_id), workflow) = run;
        let (kind, want) = match workflow {
            true => (RunKind::Workflow, Want::WfStatus),
            false => (RunKind::Action, Want::RunStatus),
        };
        self.read_archived(kind, want, namespace, run_id, to)
    }

    pub(super) fn answer_watch(&mut self, run: &Watched, to: ReplyTo) {
        if self.read_archived_status(run, to) {
            return;
        }
        let status = self.status_of(run);
        self.core.reply_op(to, status.wait_lsn, status.result);
    }

    pub(super) fn answer_watchers(&mut self, run: &Watched) {
        for to in self.watches.take(run) {
            self.answer_watch(run, to);
        }
    }

    /// A wait of a client of this shard on a run another shard owns: sent there, and
    /// remembered by connection, so that a closed connection drops it there too.
    pub(super) fn forward_watch(&mut self, owner: u32, to: ReplyTo, op: Op) {
        if let Err(reason) = self.watches.room_for(&to) {
            let e = ErrorValue::new(ErrorCode::Overloaded, reason);
            self.core.reply_op(to, 0, Err(e));
            return;
        }
        let tag = self
            .core
            .call(owner, 0, PeerRequest::Client(op), Waiting::WatchRelay(to));
        if let ReplyTo::Client(c) = to {
            self.watches.relayed(c.conn, owner, tag);
        }
    }

    /// The owner answered a forwarded wait (or the call was given up).
    pub(super) fn on_watch_relayed(&mut self, tag: u64, to: ReplyTo, result: ReplyResult) {
        if let ReplyTo::Client(c) = to {
            self.watches.relay_answered(c.conn, tag);
        }
        self.core.reply_op(to, 0, result);
    }

    /// A client connection closed: its waits are dropped, here and on the shards its
    /// forwarded waits wait on.
    pub(super) fn watches_conn_closed(&mut self, conn: ConnId) {
        for (owner, tag) in self.watches.conn_closed(conn) {
            // Forget the call: an answer already on its way finds nobody.
            self.core.take_call(tag);
            self.core.tell(owner, 0, PeerRequest::WatchAbandon { tag });
        }
    }
}
