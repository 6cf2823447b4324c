//! The shard loop: owns the `Engine`, feeds it every input from the inbox and performs the
//! effects it returns — replies to connections, messages to peers, executions, alarms,
//! webhook deliveries — and hands the log writer whatever the engine appended while the
//! last batch was written.

use crate::console::CONSOLE_CONN;
use crate::inbox::Inbox;
use crate::listener::Conns;
use crate::log_writer::LogSlot;
use crate::mesh::PeerOut;
use crate::timers::Alarm;
use crate::wasm_pool::WasmPool;
use flo_engine::{Effect, Engine, Input};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Inputs handled before the loop lets other tasks (connections, mesh, writer) run.
const INPUTS_PER_YIELD: usize = 256;
/// The engine's numbers are published for the metrics this often (the housekeeping tick
/// makes the loop turn at least once a second).
const PUBLISH_EVERY: Duration = Duration::from_secs(1);
/// Records nothing waits for yet (no reply, no message to another shard: a workflow run's
/// start while its first step executes) wait at most this long, or until something does,
/// to be written with the records that follow them: a run answered once it finished is
/// then synced once, not once for its start and again for its end.
const UNWAITED_WRITE_WITHIN: Duration = Duration::from_millis(1);
/// ... or until this many bytes wait.
const UNWAITED_WRITE_BYTES: usize = 256 * 1024;

pub(crate) struct ShardLoop {
    pub engine: Engine,
    pub inbox: Rc<Inbox>,
    pub conns: Conns,
    /// Indexed by shard id; `None` for this shard.
    pub peers: Vec<Option<Rc<PeerOut>>>,
    pub log: Rc<LogSlot>,
    pub log_map: Rc<crate::log_reader::LogMap>,
    pub snapshots: Rc<crate::snapshots::Snapshotter>,
    pub wasm: Rc<WasmPool>,
    pub alarm: Rc<Alarm>,
    pub metrics: Arc<crate::metrics::ShardMetrics>,
    /// The web console's calls waiting for their replies.
    pub console: Rc<crate::console::ConsoleCalls>,
    /// Where webhook deliveries go (the delivery thread).
    pub webhooks: crate::webhooks::WebhookOut,
    /// Since when records that nothing waits for are held back (`flush_log`).
    pub unwaited_since: Option<Instant>,
}

impl ShardLoop {
    /// Runs until `stopped` reports true after a stop was asked and everything appended is
    /// durable.
    pub async fn run(mut self, stop: impl Fn() -> bool) {
        let mut batch = VecDeque::new();
        let mut effects = Vec::new();
        let mut stopping = false;
        let mut published_at = Instant::now();
        self.publish();
        loop {
            match self.unwaited_since {
                // Records wait for company: write them by their time even if no input comes.
                Some(since) => {
                    let left = UNWAITED_WRITE_WITHIN.saturating_sub(since.elapsed());
                    futures_lite::future::or(self.inbox.wait(), glommio::timer::sleep(left)).await
                }
                None => self.inbox.wait().await,
            }
            self.inbox.take_all(&mut batch);
            let mut handled = 0;
            loop {
                // A finished log write first: it releases replies and frees the writer.
                if let Some(durable) = self.log.take_durable() {
                    self.engine.step(durable, &mut effects);
                    self.perform(&mut effects);
                    self.flush_log();
                    continue;
                }
                // Other shards' messages next, then the batch of ordinary inputs.
                let Some(input) = self.inbox.pop_urgent().or_else(|| batch.pop_front()) else {
                    break;
                };
                self.engine.step(input, &mut effects);
                self.perform(&mut effects);
                handled += 1;
                if handled % INPUTS_PER_YIELD == 0 {
                    self.flush_log();
                    glommio::yield_if_needed().await;
                }
            }
            // Once per batch, even under a load that never empties the inbox.
            self.engine.step(Input::Idle, &mut effects);
            self.perform(&mut effects);
            self.flush_log();
            if published_at.elapsed() >= PUBLISH_EVERY {
                published_at = Instant::now();
                self.publish();
            }
            if self.snapshots.due(self.engine.read_only()) {
                self.snapshot().detach();
            }
            if !stopping && stop() {
                stopping = true;
                self.engine.step(Input::Stop, &mut effects);
                self.perform(&mut effects);
            }
            if stopping {
                self.write_log();
            }
            if stopping && self.log.stuck() {
                // What the writer holds was never acknowledged (but under --durability
                // async): stop without it, and without a final snapshot (no room for it).
                tracing::warn!(
                    target: "flo::storage",
                    shard = self.engine.shard(),
                    "stopping with log records {} to {} unwritten for lack of disk space \
                     (never acknowledged, unless under --durability async)",
                    self.log.written_lsn() + 1,
                    self.engine.last_lsn()
                );
                return;
            }
            if stopping
                && !self.log.busy()
                && self.engine.pending_log_bytes() == 0
                && self.engine.durable_lsn() >= self.engine.last_lsn()
            {
                // A snapshot of the final state: the next start replays nothing.
                while self.snapshots.busy() {
                    glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
                }
                if self.snapshots.last_lsn() < self.engine.last_lsn() {
                    self.snapshot().await;
                }
                return;
            }
        }
    }

    /// Publishes the engine's numbers for the metrics (a copy of a few counters; the
    /// workers, the consumer groups and the runs by status are counted), when an HTTP port
    /// reads them.
    fn publish(&self) {
        if !self.metrics.counting() {
            return;
        }
        let engine = &self.engine;
        self.metrics
            .publish(engine.gauges(), engine.runs_ended(), engine.counts());
    }

    /// Hands the engine's appended records to the writer if it is idle and something waits
    /// for them, or they waited long enough (`UNWAITED_WRITE_WITHIN`) or are many.
    fn flush_log(&mut self) {
        let pending = self.engine.pending_log_bytes();
        if self.log.busy() || pending == 0 {
            return;
        }
        if !self.engine.wants_durable() && pending < UNWAITED_WRITE_BYTES {
            let since = *self.unwaited_since.get_or_insert_with(Instant::now);
            if since.elapsed() < UNWAITED_WRITE_WITHIN {
                return;
            }
        }
        self.write_log();
    }

    /// Hands the engine's appended records to the writer if it is idle.
    fn write_log(&mut self) {
        if self.log.busy() || self.engine.pending_log_bytes() == 0 {
            return;
        }
        self.unwaited_since = None;
        if let Some(batch) = self.engine.take_batch(self.log.take_spare()) {
            self.snapshots
                .logged(flo_ual::align_up(batch.bytes.len() as u64) as usize);
            self.log.hand_over(batch);
        }
    }

    /// Takes the engine's image now (the shard pauses for it) and writes it in the
    /// background.
    fn snapshot(&mut self) -> glommio::Task<()> {
        let started = std::time::Instant::now();
        let (lsn, image) = self.engine.snapshot();
        // The image is written on another thread; its buffer is freed there.
        let pause_ms = started.elapsed().as_millis() as u64;
        let marks = self.log_map.marks_before(lsn);
        let retained_from = self.engine.retained_from_lsn();
        self.snapshots.start(
            lsn,
            image,
            marks,
            pause_ms,
            retained_from,
            self.log.clone(),
            self.log_map.clone(),
            self.inbox.clone(),
        )
    }

    fn perform(&mut self, effects: &mut Vec<Effect>) {
        // One clock read for the replies sent here (their time, in the metrics), if any.
        let mut now = None;
        for effect in effects.drain(..) {
            match effect {
                Effect::Reply { to, result } if to.conn == CONSOLE_CONN => {
                    self.console.answer(to.request, *result, &self.metrics);
                }
                Effect::Reply { to, result } => {
                    let conn = self.conns.borrow().get(&to.conn).cloned();
                    if let Some(conn) = conn {
                        if now.is_none() && self.metrics.counting() {
                            now = Some(Instant::now());
                        }
                        conn.send_at(to.request, *result, now);
                    }
                }
                Effect::Send { shard, msg } => {
                    if let Some(Some(out)) = self.peers.get(shard as usize) {
                        out.push(msg);
                    }
                }
                Effect::Execute(x) => self.wasm.execute(*x),
                Effect::StopExecution { exec } => self.wasm.stop(exec),
                Effect::Compile {
                    job,
                    wasm,
                    entrypoint,
                } => self.wasm.compile_job(job, wasm, entrypoint),
                Effect::GuestValue { exec, read, value } => {
                    self.wasm.guest_value(exec, read, value)
                }
                Effect::WakeAt { wall_ms } => self.alarm.set(wall_ms),
                Effect::Continue => self.inbox.push(Input::Continue),
                Effect::Log(line) => crate::stderr::engine_line(self.engine.shard(), line),
                Effect::ReadLog { token, lsn } => {
                    crate::log_reader::read(self.log_map.clone(), self.inbox.clone(), token, lsn)
                }
                Effect::Deliver(call) => self.webhooks.send(call, &self.inbox, &self.metrics),
            }
        }
    }
}
