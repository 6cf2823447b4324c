//! Clients waiting for a run to become final (`RunWait`, `WorkflowWait`, a start or an
//! invoke with `wait_ms`): answered when it is, or at their deadline.

use super::Engine;
use super::watches::Watched;
use crate::actions::{self};
use crate::archive::Want;
use crate::core::io::{Done, ReplyTo};
use crate::fold::archive::RunKind;
use crate::workflows;
use flo_protocol::{RUN_WAIT_MS_MAX, Reply};

impl Engine {
    fn status_of(&self, run: &Watched) -> Done {
        let ((namespace, run_id), workflow) = run;
        if *workflow {
            workflows::status(&self.core, namespace, run_id)
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
}
