//! `ShardState::apply`, the fold's one entry: each record goes to the part of the state it
//! changes. Live records (right after they are appended) and replayed ones alike.

use crate::fold::record::{GuestKvWrite, Record, RunControl};
use crate::fold::runs::{Lease, Run};
use crate::fold::state::{PendingForward, ShardState};
use flo_protocol::RunStatus;

impl ShardState {
    /// Applies the record at `lsn` (the next one: LSNs have no gaps). Never reads the clock
    /// or validates anything: the record says what happened.
    pub fn apply(&mut self, lsn: u64, record: Record) {
        debug_assert!(
            self.applied_lsn == 0 || lsn == self.applied_lsn + 1,
            "record {lsn} applied after {}",
            self.applied_lsn
        );
        self.applied_lsn = lsn;
        let events = self.events.note(lsn, &record, &self.workflows);
        match &record {
            Record::WfRunStarted {
                webhook: Some(_), ..
            } => self.webhooks.arm(),
            Record::WorkflowDefined { def: Some(d), .. }
                if d.webhook.is_some() || d.event_stream.is_some() =>
            {
                self.webhooks.arm()
            }
            _ => {}
        }
        match record {
            Record::KvPut { .. }
            | Record::KvDelete { .. }
            | Record::KvForwarded { .. }
            | Record::KvRemoteWrites { .. } => self.apply_kv(lsn, record),
            Record::ActionDefined { .. }
            | Record::ActionRemoved { .. }
            | Record::ActionEnabled { .. } => self.apply_registry(lsn, record),
            Record::RunCreated { .. }
            | Record::AttemptFailed { .. }
            | Record::RunCompleted { .. }
            | Record::RunCancelled { .. }
            | Record::RunRedriven { .. } => self.apply_run(lsn, record),
            Record::TasksLeased { .. }
            | Record::LeaseExtended { .. }
            | Record::LeasesReleased { .. } => self.apply_lease(lsn, record),
            Record::WorkflowDefined { .. }
            | Record::WorkflowEnabled { .. }
            | Record::WfRunStarted { .. }
            | Record::WfStepStarted { .. }
            | Record::WfStepFinished { .. }
            | Record::WfSignalReceived { .. }
            | Record::WfRunCancelled { .. }
            | Record::WfPlanEvent { .. }
            | Record::WfRunControl { .. } => self.apply_workflow(lsn, record),
            Record::RunArchived { .. } | Record::RunsForgotten { .. } => {
                self.apply_archive(lsn, record)
            }
            Record::StreamCreated { .. }
            | Record::StreamDeleted { .. }
            | Record::StreamAppended { .. }
            | Record::StreamTrimmed { .. }
            | Record::StreamGroupCreated { .. }
            | Record::StreamGroupDeleted { .. }
            | Record::StreamDelivered { .. }
            | Record::StreamAcked { .. }
            | Record::StreamNacked { .. }
            | Record::StreamDeadLettered { .. } => self.apply_stream(lsn, record),
            Record::ScheduleSkipped {
                namespace,
                workflow,
                ticks,
                last_tick_ms,
                reason,
                at_ms: _,
            } => self
                .schedules
                .apply_skipped(namespace, workflow, ticks, last_tick_ms, reason),
            Record::SchedulePaused {
                namespace,
                workflow,
                paused,
                at_ms,
            } => self
                .schedules
                .apply_paused(namespace, workflow, paused, at_ms),
            Record::WebhookAttempted {
                id,
                attempt,
                at_ms,
                error,
                retry_at_ms,
            } => {
                if !self
                    .webhooks
                    .apply_attempted(id, attempt, at_ms, error, retry_at_ms)
                {
                    impossible(lsn, format_args!("webhook delivery {id} is not pending"));
                }
            }
            Record::WebhookRedelivered { id, at_ms } => {
                if !self.webhooks.apply_redelivered(id, at_ms) {
                    impossible(lsn, format_args!("webhook delivery {id} has not failed"));
                }
            }
        }
        if events > 0 && self.webhooks.armed() {
            self.webhooks
                .note(self.shard, self.events.newest(events), &self.workflows);
        }
    }

    /// A workflow run may have become final: it no longer counts against its schedule.
    fn note_if_final(&mut self, namespace: &str, run_id: &str) {
        if self.schedules.is_empty() && self.search.spaces.is_empty() {
            return;
        }
        if let Some(run) = self.workflows.run(namespace, run_id)
            && run.status().is_final()
        {
            let (status, at_ms) = (run.status(), run.updated_at_ms);
            let workflow = run.workflow.clone();
            self.schedules.run_final(namespace, &workflow, run_id);
            self.search.finished(namespace, run_id, status, at_ms);
        }
    }

    /// Stream records: definitions (every shard) and the records of partitions held here.
    fn apply_stream(&mut self, lsn: u64, record: Record) {
        match record {
            Record::StreamCreated {
                namespace,
                name,
                partitions,
                retention_ms,
                max_len,
                max_bytes,
                at_ms,
            } => {
                let def = crate::fold::streams::StreamDef {
                    partitions,
                    retention_ms,
                    max_len,
                    max_bytes,
                    created_at_ms: at_ms,
                    groups: Default::default(),
                };
                self.streams.apply_created(namespace, name, def);
            }
            Record::StreamDeleted { namespace, name } => {
                if !self.streams.apply_deleted(&namespace, &name) {
                    impossible(lsn, format_args!("stream {namespace}/{name} deleted twice"));
                }
            }
            Record::StreamAppended {
                namespace,
                stream,
                partition,
                entries,
            } => {
                let what = format!("{namespace}/{stream}");
                if !self
                    .streams
                    .apply_appended(namespace, stream, partition, entries, lsn)
                {
                    impossible(lsn, format_args!("append to missing stream {what}"));
                }
            }
            Record::StreamTrimmed {
                namespace,
                stream,
                partition,
                before,
            } => self
                .streams
                .apply_trimmed(namespace, stream, partition, before, lsn),
            Record::StreamGroupCreated {
                namespace,
                stream,
                group,
                def,
            } => {
                if !self
                    .streams
                    .apply_group_created(&namespace, &stream, group, def)
                {
                    impossible(lsn, format_args!("a group of missing stream {stream}"));
                }
            }
            Record::StreamGroupDeleted {
                namespace,
                stream,
                group,
            } => {
                if !self
                    .streams
                    .apply_group_deleted(&namespace, &stream, &group)
                {
                    impossible(lsn, format_args!("missing group {stream}/{group} deleted"));
                }
            }
            Record::StreamDelivered {
                namespace,
                stream,
                partition,
                group,
                consumer,
                ids,
                at_ms,
            } => {
                let at = group_at(&namespace, &stream, partition, &group);
                if !self
                    .streams
                    .apply_delivered(at, &consumer, &ids, at_ms, lsn)
                {
                    impossible(
                        lsn,
                        format_args!("delivery by missing group {stream}/{group}"),
                    );
                }
            }
            Record::StreamAcked {
                namespace,
                stream,
                partition,
                group,
                ids,
            } => {
                let at = group_at(&namespace, &stream, partition, &group);
                if !self.streams.apply_settled(at, &ids, None, lsn) {
                    impossible(lsn, format_args!("ack in missing group {stream}/{group}"));
                }
            }
            Record::StreamNacked {
                namespace,
                stream,
                partition,
                group,
                ids,
                due_at_ms,
            } => {
                let at = group_at(&namespace, &stream, partition, &group);
                if !self.streams.apply_settled(at, &ids, Some(due_at_ms), lsn) {
                    impossible(lsn, format_args!("nack in missing group {stream}/{group}"));
                }
            }
            Record::StreamDeadLettered {
                namespace,
                stream,
                partition,
                group,
                ids,
                dlq_ids,
            } => {
                let at = group_at(&namespace, &stream, partition, &group);
                if !self.streams.apply_dead_lettered(at, &ids, &dlq_ids, lsn) {
                    impossible(
                        lsn,
                        format_args!("dead letters of missing group {stream}/{group}"),
                    );
                }
            }
            other => wrong_domain(lsn, &other, "stream"),
        }
    }

    /// KV records: puts, deletes, and guest writes forwarded between shards.
    fn apply_kv(&mut self, lsn: u64, record: Record) {
        match record {
            Record::KvPut {
                namespace,
                key,
                value,
                version,
                expires_at_ms,
            } => self
                .kv
                .apply_put(namespace, key, value, version, expires_at_ms, lsn),
            Record::KvDelete { namespace, key } => self.kv.apply_delete(&namespace, &key),
            Record::KvForwarded { up_to_lsn } => {
                while self.forwards.front().is_some_and(|f| f.lsn <= up_to_lsn) {
                    self.forwards.pop_front();
                }
            }
            Record::KvRemoteWrites {
                origin_shard,
                origin_lsn,
                namespace,
                writes,
                at_ms,
            } => {
                let seen = self.remote_applied.entry(origin_shard).or_insert(0);
                if origin_lsn <= *seen {
                    return;
                }
                *seen = origin_lsn;
                for w in writes {
                    self.kv.apply_guest_write(&namespace, w, at_ms, lsn);
                }
            }
            other => wrong_domain(lsn, &other, "kv"),
        }
    }

    /// Action definitions (on every shard).
    fn apply_registry(&mut self, lsn: u64, record: Record) {
        match record {
            Record::ActionDefined {
                namespace,
                name,
                def,
            } => self.registry.apply_defined(namespace, name, def),
            Record::ActionRemoved {
                namespace,
                name,
                at_ms,
            } => self.registry.apply_removed(&namespace, &name, at_ms),
            Record::ActionEnabled {
                namespace,
                name,
                enabled,
                at_ms,
            } => self
                .registry
                .apply_enabled(&namespace, &name, enabled, at_ms),
            other => wrong_domain(lsn, &other, "registry"),
        }
    }

    /// Action runs: created (a workflow step's starts its step), attempted, leased, finished.
    fn apply_run(&mut self, lsn: u64, record: Record) {
        match record {
            record @ Record::RunCreated { .. } => self.apply_run_created(lsn, record),
            Record::AttemptFailed {
                namespace,
                run_id,
                attempt,
                action_version,
                error,
                timed_out,
                retry_at_ms,
                at_ms,
                dead_letter,
                error_code,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.lease = None;
                run.action_version = action_version;
                run.error = Some(error);
                run.error_code = error_code;
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
                match retry_at_ms {
                    Some(at) => {
                        run.attempt = attempt + 1;
                        run.available_at_ms = at;
                        run.status = RunStatus::Pending;
                    }
                    None => {
                        run.attempt = attempt;
                        run.status = if timed_out {
                            RunStatus::TimedOut
                        } else {
                            RunStatus::Failed
                        };
                        run.dead_lettered = dead_letter;
                    }
                }
            }
            Record::RunCompleted {
                namespace,
                run_id,
                attempt,
                action_version,
                output,
                outcome,
                kv_writes,
                at_ms,
                state_patch,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.state_patch = state_patch.map(Vec::into_boxed_slice);
                run.status = RunStatus::Completed;
                run.lease = None;
                run.action_version = action_version;
                run.attempt = attempt;
                run.output = Some(output);
                run.output_lsn = lsn;
                run.outcome = outcome;
                run.error = None;
                run.error_code = None;
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
                self.apply_guest_writes(namespace, kv_writes, at_ms, lsn);
            }
            Record::RunCancelled {
                namespace,
                run_id,
                at_ms,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                run.status = RunStatus::Cancelled;
                run.lease = None;
                run.updated_at_ms = at_ms;
                run.lsn = lsn;
            }
            Record::RunRedriven {
                namespace,
                run_id,
                attempt,
                at_ms,
                archived,
            } => self.apply_redriven(lsn, namespace, run_id, attempt, at_ms, archived),
            other => wrong_domain(lsn, &other, "run"),
        }
    }

    /// A dead-lettered run is pending again at `attempt`: the run in memory, or the one its
    /// archived document describes, back in memory (its archive entry is then shadowed,
    /// and replaced when it is archived again).
    fn apply_redriven(
        &mut self,
        lsn: u64,
        namespace: String,
        run_id: String,
        attempt: u32,
        at_ms: u64,
        archived: Option<Box<flo_protocol::RunInfo>>,
    ) {
        if let Some(info) = archived {
            let run = Run {
                action: info.action,
                action_version: info.action_version,
                status: RunStatus::Pending,
                input: info.input,
                output: None,
                outcome: None,
                error_code: info.error_code,
                error: info.error,
                attempt,
                priority: info.priority,
                labels: info.labels,
                idempotency_key: info.idempotency_key,
                dead_lettered: false,
                created_at_ms: info.created_at_ms,
                updated_at_ms: at_ms,
                available_at_ms: at_ms,
                seq: self.runs.next_seq(),
                lsn,
                lease: None,
                step: None,
                state_patch: None,
                created_lsn: 0,
                output_lsn: 0,
            };
            self.runs.apply_created(namespace, run_id, run);
            return;
        }
        let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
            return impossible(lsn, format_args!("run {run_id:?} does not exist"));
        };
        debug_assert!(
            run.dead_lettered && run.status.is_final(),
            "record {lsn}: redrives run {run_id:?}, {:?}",
            run.status
        );
        run.status = RunStatus::Pending;
        run.attempt = attempt;
        run.dead_lettered = false;
        run.output = None;
        run.output_lsn = 0;
        run.outcome = None;
        run.lease = None;
        run.available_at_ms = at_ms;
        run.updated_at_ms = at_ms;
        run.lsn = lsn;
    }

    /// A guest's KV writes: those to keys this shard owns applied now, the others kept
    /// until they reach their owners (`KvForwarded`).
    fn apply_guest_writes(
        &mut self,
        namespace: String,
        writes: Vec<GuestKvWrite>,
        at_ms: u64,
        lsn: u64,
    ) {
        if writes.is_empty() {
            return;
        }
        let (local, remote): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .partition(|w| self.partitioning.shard_of(&namespace, &w.key) == self.shard);
        for w in local {
            self.kv.apply_guest_write(&namespace, w, at_ms, lsn);
        }
        if !remote.is_empty() {
            self.forwards.push_back(PendingForward {
                lsn,
                namespace,
                writes: remote,
            });
        }
    }

    /// The output of the completed action run `step` of workflow run `run_id` waits on, as
    /// the step's own record would hold it (JSON), and the LSN of the run's `RunCompleted`
    /// (0 when not known: the run came from a snapshot).
    fn step_run_output(
        &self,
        lsn: u64,
        namespace: &str,
        run_id: &str,
        step: &str,
    ) -> (Option<Vec<u8>>, u64) {
        let action_run = match self
            .workflows
            .run(namespace, run_id)
            .and_then(|r| r.wait_at(step))
        {
            Some(crate::fold::record::StepWait::ActionRun { run_id, .. }) => run_id,
            _ => {
                impossible(
                    lsn,
                    format_args!("step {step:?} of {run_id:?} waits on no action run"),
                );
                return (None, 0);
            }
        };
        match self.runs.get(namespace, action_run) {
            Some(run) => (
                run.output
                    .as_deref()
                    .map(crate::fold::workflows::step_output_json),
                run.output_lsn,
            ),
            None => {
                impossible(
                    lsn,
                    format_args!("action run {action_run:?} does not exist"),
                );
                (None, 0)
            }
        }
    }

    /// A run is created; a workflow step's run starts its step in the same record.
    fn apply_run_created(&mut self, lsn: u64, record: Record) {
        let Record::RunCreated {
            namespace,
            run_id,
            action,
            action_version,
            input,
            priority,
            labels,
            idempotency_key,
            created_at_ms,
            available_at_ms,
            step,
        } = record
        else {
            return impossible(
                lsn,
                format_args!("type {} is not RunCreated", record.type_code()),
            );
        };
        // A workflow step's action run: the step starts with it (one record).
        let step_started = step.as_ref().map(|sr| {
            let worker = self
                .registry
                .get(&namespace, &action)
                .is_some_and(|d| d.kind == flo_protocol::ActionKind::User);
            (
                sr.clone(),
                crate::fold::record::StepWait::ActionRun {
                    run_id: run_id.clone(),
                    worker,
                },
            )
        });
        let run = Run {
            action,
            action_version,
            status: RunStatus::Pending,
            input,
            output: None,
            outcome: None,
            error: None,
            attempt: 1,
            priority,
            labels,
            idempotency_key,
            dead_lettered: false,
            created_at_ms,
            updated_at_ms: created_at_ms,
            available_at_ms,
            seq: self.runs.next_seq(),
            lsn,
            lease: None,
            step,
            error_code: None,
            state_patch: None,
            created_lsn: lsn,
            output_lsn: 0,
        };
        if let Some((sr, wait)) = step_started {
            self.workflows.apply_step_started(
                &namespace,
                &sr.run_id,
                sr.step,
                wait,
                created_at_ms,
                lsn,
            );
        }
        self.runs.apply_created(namespace, run_id, run);
    }

    /// Leases of user-hosted tasks: taken by a worker, extended, handed back.
    fn apply_lease(&mut self, lsn: u64, record: Record) {
        match record {
            Record::TasksLeased {
                namespace,
                worker_id,
                tasks,
                at_ms,
            } => {
                for task in tasks {
                    let Some(run) = self.runs.get_mut(&namespace, &task.run_id) else {
                        impossible(
                            lsn,
                            format_args!("leased run {:?} does not exist", task.run_id),
                        );
                        continue;
                    };
                    run.status = RunStatus::Running;
                    run.attempt = task.attempt;
                    run.lease = Some(Lease {
                        worker_id: worker_id.clone(),
                        expires_at_ms: task.expires_at_ms,
                    });
                    run.updated_at_ms = at_ms;
                    run.lsn = lsn;
                }
            }
            Record::LeaseExtended {
                namespace,
                run_id,
                expires_at_ms,
            } => {
                let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                    return impossible(lsn, format_args!("run {run_id:?} does not exist"));
                };
                if let Some(lease) = &mut run.lease {
                    lease.expires_at_ms = lease.expires_at_ms.max(expires_at_ms);
                    run.lsn = lsn;
                }
            }
            Record::LeasesReleased {
                namespace,
                run_ids,
                at_ms,
            } => {
                for run_id in run_ids {
                    let Some(run) = self.runs.get_mut(&namespace, &run_id) else {
                        continue;
                    };
                    if run.status == RunStatus::Running {
                        run.status = RunStatus::Pending;
                        run.lease = None;
                        run.updated_at_ms = at_ms;
                        run.lsn = lsn;
                    }
                }
            }
            other => wrong_domain(lsn, &other, "lease"),
        }
    }

    /// Workflow definitions and runs.
    fn apply_workflow(&mut self, lsn: u64, record: Record) {
        match record {
            Record::WorkflowDefined {
                namespace,
                name,
                version,
                yaml,
                at_ms,
                def,
            } => self
                .workflows
                .defs
                .apply_defined(namespace, name, version, yaml, at_ms, def),
            Record::WorkflowEnabled {
                namespace,
                name,
                enabled,
                at_ms,
            } => self
                .workflows
                .defs
                .apply_enabled(&namespace, &name, enabled, at_ms),
            Record::WfRunStarted {
                namespace,
                run_id,
                workflow,
                version,
                input,
                idempotency_key,
                parent,
                at_ms,
                schedule,
                group,
                webhook,
            } => {
                let key = (group.is_some() || webhook.is_some())
                    .then(|| (namespace.clone(), run_id.clone()));
                if let Some(by) = schedule {
                    self.schedules.apply_fired(
                        namespace.clone(),
                        workflow.clone(),
                        run_id.clone(),
                        by,
                    );
                }
                self.workflows.apply_started(
                    namespace,
                    run_id,
                    workflow,
                    version,
                    input,
                    idempotency_key,
                    parent,
                    at_ms,
                    lsn,
                    &mut self.search,
                );
                if let Some((ns, id)) = key
                    && let Some(run) = self.workflows.run_mut(&ns, &id)
                {
                    run.group = group;
                    run.webhook_url = webhook;
                }
            }
            Record::WfStepStarted {
                namespace,
                run_id,
                step,
                wait,
                at_ms,
            } => self
                .workflows
                .apply_step_started(&namespace, &run_id, step, wait, at_ms, lsn),
            Record::WfPlanEvent {
                namespace,
                run_id,
                step,
                event,
                at_ms,
            } => self
                .workflows
                .apply_plan_event(&namespace, &run_id, &step, event, at_ms, lsn),
            Record::WfRunControl {
                namespace,
                run_id,
                step,
                control,
                at_ms,
            } => {
                let state_changed = matches!(control, RunControl::State { .. });
                self.workflows
                    .apply_run_control(&namespace, &run_id, step, control, at_ms, lsn);
                // Attributes read from the state follow it.
                if state_changed
                    && self.search.doc(&namespace, &run_id).is_some()
                    && let Some(run) = self.workflows.run(&namespace, &run_id)
                {
                    let attrs = run.search_attrs();
                    self.search.set_attrs(&namespace, &run_id, attrs);
                }
            }
            Record::WfStepFinished {
                namespace,
                run_id,
                step,
                outcome,
                output,
                error,
                consumed_signal,
                next,
                at_ms,
                state_patch,
                ran,
                output_of_run,
            } => {
                let indexed = self.search.doc(&namespace, &run_id).is_some();
                let started_ms = ran.as_ref().map(|r| at_ms.saturating_sub(r.ran_ms));
                // The output the step's action run gave, from the run (and where it was
                // logged: the archive points there).
                let (output, output_lsn) = match output_of_run {
                    true => self.step_run_output(lsn, &namespace, &run_id, &step),
                    false => (output, lsn),
                };
                self.workflows.apply_step_finished(
                    &namespace,
                    &run_id,
                    step,
                    (outcome, output, error, state_patch),
                    consumed_signal,
                    next,
                    (started_ms, at_ms),
                    (lsn, output_lsn),
                );
                if let Some(ran) = ran {
                    self.apply_guest_writes(namespace.clone(), ran.kv_writes, at_ms, lsn);
                }
                if indexed && let Some(run) = self.workflows.run(&namespace, &run_id) {
                    let attrs = run.search_attrs();
                    self.search.set_attrs(&namespace, &run_id, attrs);
                }
                self.note_if_final(&namespace, &run_id);
            }
            Record::WfSignalReceived {
                namespace,
                run_id,
                signal_type,
                payload,
                at_ms,
            } => self
                .workflows
                .apply_signal(&namespace, &run_id, signal_type, payload, at_ms, lsn),
            Record::WfRunCancelled {
                namespace,
                run_id,
                reason,
                at_ms,
            } => {
                self.workflows
                    .apply_cancelled(&namespace, &run_id, reason, at_ms, lsn);
                self.note_if_final(&namespace, &run_id);
            }
            other => wrong_domain(lsn, &other, "workflow"),
        }
    }

    /// Finished runs archived into the run index, and forgotten after retention.
    fn apply_archive(&mut self, lsn: u64, record: Record) {
        match record {
            Record::RunArchived {
                namespace,
                run_id,
                run,
            } => {
                let gone = match run.kind() {
                    crate::fold::archive::RunKind::Action => {
                        self.runs.remove(&namespace, &run_id).is_some()
                    }
                    crate::fold::archive::RunKind::Workflow => {
                        self.search.archived(&namespace, &run_id, lsn);
                        self.workflows.remove(&namespace, &run_id).is_some()
                    }
                };
                if !gone {
                    impossible(lsn, format_args!("archived run {run_id:?} does not exist"));
                }
                let (key, entry) = run.entry(lsn);
                let floor = run.refs().and_then(|r| r.floor());
                self.archive.insert(key, entry, run.finished_at_ms(), floor);
            }
            Record::RunsForgotten { before_lsn } => {
                self.archive.forget(before_lsn);
                self.search.forget(before_lsn);
            }
            other => wrong_domain(lsn, &other, "archive"),
        }
    }
}

/// A record handed to the wrong domain's `apply_*`: a bug in `apply`'s dispatch.
fn group_at<'a>(
    namespace: &'a str,
    stream: &'a str,
    partition: u32,
    group: &'a str,
) -> crate::fold::stream_group_ops::GroupAt<'a> {
    crate::fold::stream_group_ops::GroupAt {
        namespace,
        stream,
        partition,
        group,
    }
}

fn wrong_domain(lsn: u64, record: &Record, domain: &str) {
    impossible(
        lsn,
        format_args!("type {} is not a {domain} record", record.type_code()),
    );
}

/// A record that cannot follow the records before it: a bug, not bad input (records are
/// planned against this same state). Debug builds stop; release builds skip the record.
fn impossible(lsn: u64, what: std::fmt::Arguments) {
    debug_assert!(false, "record {lsn}: {what}");
}
