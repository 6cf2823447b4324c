//! Drives a workload: one thread per connection, each keeping up to `pipeline` requests in
//! flight.
//!
//! A connection thread loops: send what it may, block in `recv` for one response, drain
//! every response already buffered, record their latencies, then queue as many new requests
//! and flush them with one write. Operation numbers are claimed from a shared counter, a
//! batch at a time, so fast connections take more of the work.
//!
//! Two bounds can hold a connection back besides its free slots: `--max-outstanding`
//! permits (`Limiter`), shared by every connection, and in open-loop mode (`--rate`) the
//! schedule (`Pace`), which releases operation `n` only at its intended time. In open-loop
//! mode a connection waits for a response no longer than until its next operation is due,
//! and each latency counts from the operation's intended time.
//!
//! Memory does not grow with `--ops`: per connection, `pipeline` slots and a fixed set of
//! histograms (one per kind of operation, one of send lag).

use crate::limiter::Limiter;
pub use crate::outcome::{KindOutcome, Outcome, Sending, new_histogram};
use crate::pacing::{LATE_MS, Pace, latency_us};
use crate::progress;
use crate::workload::Generator;
use flo::protocol::{Op, PROTOCOL_VERSION, Reply, Request, Response, ShardMap};
use flo::{Connection, Error};
use hdrhistogram::Histogram;
use std::io;
use std::net::TcpStream;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Barrier, Mutex, OnceLock, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// A request id is `(sequence << SLOT_BITS) | slot`: the slot holds its send time.
const SLOT_BITS: u32 = 16;
const SLOT_MASK: u64 = (1 << SLOT_BITS) - 1;
const _: () = assert!(crate::args::PIPELINE_MAX as u64 <= 1 << SLOT_BITS);
/// Id of the handshake; request ids are at least `1 << SLOT_BITS`.
const HELLO_ID: u64 = 1;
/// A connection fails when the server sends nothing for this long while requests wait.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a connection with nothing in flight sleeps before it looks again for work (a
/// due operation, a free permit) and at the deadline.
const IDLE_WAIT_MAX: Duration = Duration::from_millis(10);
/// How often a connection waiting for a response looks for a free permit when every one
/// is taken in open-loop mode (workers give them back, not its own responses).
const PERMIT_POLL: Duration = Duration::from_millis(1);
/// Open-loop mode: a connection waiting for its next operation's time wakes no sooner than
/// this after it last sent, and then sends every operation due. Waking at each operation's
/// time (every connection at once, one of them claiming it) cost the generator a context
/// switch per operation and 19 µs of CPU per workflow run at 25,000 runs/s, CPU the server
/// on the same cores lacked: p99.9 28–31 ms, against 12–18 ms with this quantum and 10 µs
/// per run (measured). An operation sent up to this late still counts from its intended time.
const SEND_QUANTUM: Duration = Duration::from_micros(500);

pub struct Config {
    pub addr: String,
    /// Presented in each connection's handshake.
    pub token: Option<String>,
    pub connections: usize,
    pub pipeline: usize,
    pub ops: u64,
    pub max_duration: Duration,
    /// Print a progress line on stderr every second.
    pub progress: bool,
    /// `--max-outstanding`: a permit per operation in flight, over every connection.
    pub limiter: Option<Arc<Limiter>>,
    /// `--rate`: the open-loop schedule; None sends each operation as soon as a slot is free.
    pub pace: Option<Pace>,
    /// Spread the connections evenly over the shards (`open_spread`); false: where the
    /// kernel puts them.
    pub spread: bool,
}

#[cfg(test)]
impl Config {
    /// A closed-loop run of `ops` operations, unbounded but by the pipeline.
    pub fn closed(addr: &str, connections: usize, pipeline: usize, ops: u64) -> Config {
        Config {
            addr: addr.to_string(),
            token: None,
            connections,
            pipeline,
            ops,
            max_duration: Duration::from_secs(600),
            progress: false,
            limiter: None,
            pace: None,
            spread: true,
        }
    }
}

/// Runs `cfg.ops` operations made by the generators `make` returns (one per connection).
pub fn run<G, F>(cfg: &Config, make: F) -> Outcome
where
    G: Generator,
    F: Fn() -> G + Sync,
{
    let shared = Shared {
        total: cfg.ops,
        next: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        window_us: Mutex::new(new_histogram()),
        first_error: Mutex::new(None),
        start: OnceLock::new(),
        placed: Mutex::new(Vec::new()),
    };
    let barrier = Barrier::new(cfg.connections + 1);
    thread::scope(|scope| {
        let handles: Vec<_> = (0..cfg.connections)
            .map(|index| {
                let (shared, barrier, make) = (&shared, &barrier, &make);
                thread::Builder::new()
                    .name(format!("conn-{index}"))
                    .spawn_scoped(scope, move || {
                        connection_thread(index, cfg, shared, barrier, make())
                    })
                    .expect("cannot start a connection thread")
            })
            .collect();
        barrier.wait();
        let start = *shared.start.get_or_init(Instant::now);
        let (stop_progress, stopped) = mpsc::channel::<()>();
        let watched = progress::Watched {
            unit: "ops",
            total: Some(cfg.ops),
            done: &shared.completed,
            window_us: Some(&shared.window_us),
        };
        let reporter = cfg
            .progress
            .then(|| scope.spawn(move || progress::report(start, watched, stopped)));

        let mut outcome = Outcome::empty();
        for (index, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(done) => add_thread(&mut outcome, done),
                Err(_) => outcome
                    .failures
                    .push(format!("connection {index}: thread panicked")),
            }
        }
        outcome.elapsed = start.elapsed();
        drop(stop_progress);
        if let Some(reporter) = reporter {
            let _ = reporter.join();
        }
        outcome.first_error = shared.first_error.lock().unwrap().take();
        outcome
    })
}

struct Shared {
    total: u64,
    next: AtomicU64,
    /// Responses received, for the progress line.
    completed: AtomicU64,
    /// Latencies (µs) the connections recorded since the progress reporter last looked
    /// (each adds its own every `WINDOW_ADD_EVERY`): the live p99.
    window_us: Mutex<Histogram<u64>>,
    first_error: Mutex<Option<String>>,
    /// When every connection was ready: the clock of the open-loop schedule. Set by the
    /// first thread past the barrier.
    start: OnceLock<Instant>,
    /// Connections opened so far on each shard (`open_spread`).
    placed: Mutex<Vec<usize>>,
}

impl Shared {
    /// Operations not yet claimed among the first `due`.
    fn ready(&self, due: u64) -> u64 {
        due.min(self.total).saturating_sub(self.next.load(Relaxed))
    }

    /// Claims up to `want` operation numbers below `due` (and the total); empty when none
    /// is left to claim there.
    fn claim(&self, want: u64, due: u64) -> Range<u64> {
        let limit = due.min(self.total);
        let mut first = self.next.load(Relaxed);
        loop {
            if first >= limit {
                return first..first;
            }
            let end = first.saturating_add(want).min(limit);
            match self
                .next
                .compare_exchange_weak(first, end, Relaxed, Relaxed)
            {
                Ok(_) => return first..end,
                Err(actual) => first = actual,
            }
        }
    }

    /// The lowest operation number not yet claimed.
    fn next_unclaimed(&self) -> u64 {
        self.next.load(Relaxed)
    }

    fn all_claimed(&self) -> bool {
        self.next.load(Relaxed) >= self.total
    }

    fn note_error(&self, message: String) {
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            progress::note(&format!("flo-loadtest: first error reply: {message}"));
            *first = Some(message);
        }
    }
}

/// What one connection thread did.
struct ThreadOutcome {
    tally: Tally,
    failure: Option<String>,
    hit_time_limit: bool,
    server_shards: Option<u32>,
}

/// Adds what one connection did to the run's outcome.
fn add_thread(outcome: &mut Outcome, done: ThreadOutcome) {
    let tally = done.tally;
    outcome
        .latency_us
        .add(&tally.latency_us)
        .expect("histograms share bounds");
    outcome.ops += tally.ops;
    outcome.errors += tally.errors;
    if outcome.kinds.is_empty() {
        outcome.kinds = tally
            .kinds
            .iter()
            .map(|k| KindOutcome::new(k.name))
            .collect();
    }
    for (mine, theirs) in outcome.kinds.iter_mut().zip(&tally.kinds) {
        mine.merge(theirs);
    }
    outcome.sending.merge(&tally.sending);
    outcome.hit_time_limit |= done.hit_time_limit;
    outcome.server_shards = outcome.server_shards.or(done.server_shards);
    outcome.failures.extend(done.failure);
}

/// A connection's counts; merged into the run's `Outcome` at the end.
struct Tally {
    latency_us: Histogram<u64>,
    ops: u64,
    errors: u64,
    kinds: Vec<KindOutcome>,
    sending: Sending,
}

fn connection_thread<G: Generator>(
    index: usize,
    cfg: &Config,
    shared: &Shared,
    barrier: &Barrier,
    mut generator: G,
) -> ThreadOutcome {
    let opened = if cfg.spread {
        open_spread(
            &cfg.addr,
            cfg.token.as_deref(),
            cfg.connections,
            &shared.placed,
        )
    } else {
        open_on(&cfg.addr, cfg.token.as_deref())
    };
    let opened = opened.and_then(|(mut conn, shards, shard)| {
        if let (true, Some(shard)) = (generator.routes_keys(), shard) {
            generator.route(shard, shard_map(&mut conn)?);
        }
        Ok((conn, shards))
    });
    barrier.wait();
    let start = *shared.start.get_or_init(Instant::now);
    let deadline = start + cfg.max_duration;
    let mut worker = Worker::new(cfg, shared, generator, start);
    let mut server_shards = None;
    let result = opened.and_then(|(mut conn, shards)| {
        server_shards = Some(shards);
        // Open-loop mode polls the socket with a timeout; a clone shares it.
        let watched = match cfg.pace {
            Some(_) => Some(conn.try_clone_stream().map_err(describe)?),
            None => None,
        };
        worker.drive(&mut conn, watched.as_ref(), deadline)
    });
    let (hit_time_limit, failure) = match result {
        Ok(hit_time_limit) => (hit_time_limit, None),
        Err(message) => {
            let message = format!("connection {index}: {message}");
            progress::note(&format!("flo-loadtest: {message}"));
            (false, Some(message))
        }
    };
    ThreadOutcome {
        tally: worker.tally,
        failure,
        hit_time_limit,
        server_shards,
    }
}

/// Connects and shakes hands; returns the server's shard count.
pub fn open(addr: &str, token: Option<&str>) -> Result<(Connection, u32), String> {
    open_on(addr, token).map(|(conn, shards, _)| (conn, shards))
}

/// Tries this many connections at most for one that lands on a shard with room.
const SPREAD_ATTEMPTS: usize = 64;

/// [`open`], spreading `connections` over the shards: the kernel gives each connection to
/// one shard (they all listen on the port), at random, so 4 connections to 2 shards land
/// 3:1 or 4:0 as often as 2:2 — and one shard then serves most of the runs they start.
/// A connection that lands on a shard holding its share already (`placed`: connections per
/// shard so far) is closed and another one opened.
pub fn open_spread(
    addr: &str,
    token: Option<&str>,
    connections: usize,
    placed: &Mutex<Vec<usize>>,
) -> Result<(Connection, u32, Option<u32>), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let (conn, shards, shard) = open_on(addr, token)?;
        let Some(shard) = shard else {
            return Ok((conn, shards, None));
        };
        let share = connections.div_ceil(shards.max(1) as usize);
        let mut placed = placed.lock().unwrap_or_else(|e| e.into_inner());
        if placed.len() < shards as usize {
            placed.resize(shards as usize, 0);
        }
        let Some(count) = placed.get_mut(shard as usize) else {
            return Ok((conn, shards, Some(shard)));
        };
        if *count < share || attempt >= SPREAD_ATTEMPTS {
            *count += 1;
            return Ok((conn, shards, Some(shard)));
        }
    }
}

/// Asks the server how keys map to shards (on a connection just opened, nothing in flight).
pub fn shard_map(conn: &mut Connection) -> Result<ShardMap, String> {
    conn.queue(&Request {
        id: HELLO_ID + 1,
        op: Op::ShardMap,
    })
    .map_err(describe)?;
    conn.flush().map_err(describe)?;
    match conn.recv().map_err(describe)?.result {
        Ok(Reply::ShardMap(map)) => Ok(map),
        Ok(other) => Err(format!(
            "unexpected reply to the shard map request: {other:?}"
        )),
        Err(e) => Err(format!("shard map refused: {e}")),
    }
}

/// [`open`], with the shard serving the connection (if the server says).
fn open_on(addr: &str, token: Option<&str>) -> Result<(Connection, u32, Option<u32>), String> {
    let mut conn =
        Connection::connect(addr).map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    conn.set_read_timeout(Some(RESPONSE_TIMEOUT))
        .map_err(describe)?;
    let hello = Op::Hello {
        protocol_version: PROTOCOL_VERSION,
        client: "flo-loadtest".into(),
        token: token.map(flo_protocol::Token::new),
    };
    conn.queue(&Request {
        id: HELLO_ID,
        op: hello,
    })
    .map_err(describe)?;
    conn.flush().map_err(describe)?;
    let response = conn.recv().map_err(describe)?;
    match response.result {
        Ok(Reply::Hello {
            shard_count, shard, ..
        }) if response.id == HELLO_ID => Ok((conn, shard_count, shard)),
        Ok(other) => Err(format!("unexpected reply to the handshake: {other:?}")),
        Err(e) => Err(format!("handshake refused: {e}")),
    }
}

/// A connection error as a message (a read timeout says how long nothing came).
pub fn describe(e: Error) -> String {
    match e {
        Error::Io(io)
            if matches!(
                io.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            format!(
                "no response from the server within {} s",
                RESPONSE_TIMEOUT.as_secs()
            )
        }
        other => other.to_string(),
    }
}

#[derive(Clone, Copy)]
struct Slot {
    /// Id of the request in flight in this slot; 0 when free.
    id: u64,
    /// The operation's number (sent again if the server answers `overloaded`).
    n: u64,
    /// What its latency counts from: its intended send time in open-loop mode, the moment
    /// it was sent otherwise.
    since: Instant,
}

struct Worker<'a, G> {
    shared: &'a Shared,
    limiter: Option<&'a Limiter>,
    pace: Option<Pace>,
    /// The start of the run: the clock of the schedule.
    start: Instant,
    generator: G,
    /// Reused for every request: the generator updates its op in place.
    request: Request,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots of the batch being queued.
    batch: Vec<u32>,
    sequence: u64,
    tally: Tally,
    /// Operations the server answered `overloaded` (it asks to retry later): sent again.
    retry: Vec<u64>,
    /// Permits of answered operations, given back once the buffered responses are drained.
    permits_done: u64,
    /// With progress: the latencies recorded since they were last added to the shared
    /// window, and when that was.
    window: Option<(Histogram<u64>, Instant)>,
    /// When it last sent (open-loop mode: see `SEND_QUANTUM`).
    sent_at: Instant,
}

/// Whether a request is an operation's first, or one sent again after `overloaded`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attempt {
    First,
    Again,
}

/// How often a connection adds its latencies to the progress reporter's window.
const WINDOW_ADD_EVERY: Duration = Duration::from_millis(100);

/// Before an operation answered `overloaded` is sent again.
const OVERLOADED_BACKOFF: Duration = Duration::from_millis(20);

impl<'a, G: Generator> Worker<'a, G> {
    fn new(cfg: &'a Config, shared: &'a Shared, generator: G, start: Instant) -> Self {
        let kinds = generator
            .kind_names()
            .iter()
            .map(|name| KindOutcome::new(name))
            .collect();
        Worker {
            shared,
            limiter: cfg.limiter.as_deref(),
            pace: cfg.pace,
            start,
            generator,
            request: Request {
                id: 0,
                op: Op::Status,
            },
            slots: vec![
                Slot {
                    id: 0,
                    n: 0,
                    since: start
                };
                cfg.pipeline
            ],
            retry: Vec::new(),
            free: (0..cfg.pipeline as u32).rev().collect(),
            batch: Vec::with_capacity(cfg.pipeline),
            sequence: 0,
            tally: Tally {
                latency_us: new_histogram(),
                ops: 0,
                errors: 0,
                kinds,
                sending: Sending::empty(),
            },
            permits_done: 0,
            window: cfg.progress.then(|| (new_histogram(), start)),
            // As if it last sent a quantum before the start: the first operations go at once.
            sent_at: start.checked_sub(SEND_QUANTUM).unwrap_or(start),
        }
    }

    /// Runs until every claimed operation is answered; `Ok(true)` if the deadline stopped it.
    /// `watched` (open-loop mode) is the connection's socket, polled so that a wait for a
    /// response ends when the next operation is due.
    fn drive(
        &mut self,
        conn: &mut Connection,
        watched: Option<&TcpStream>,
        deadline: Instant,
    ) -> Result<bool, String> {
        let mut claiming = true;
        let mut hit_deadline = false;
        loop {
            if !self.retry.is_empty() && !self.free.is_empty() {
                std::thread::sleep(OVERLOADED_BACKOFF);
                let n = self.retry.len().min(self.free.len());
                let again: Vec<u64> = self.retry.drain(..n).collect();
                self.send(conn, again, Attempt::Again)?;
            }
            if claiming && !self.free.is_empty() {
                claiming = self.send_due(conn)?;
            }
            let in_flight = self.free.len() < self.slots.len();
            if !in_flight && self.retry.is_empty() && !claiming {
                return Ok(hit_deadline);
            }
            if claiming && Instant::now() >= deadline {
                claiming = false;
                hit_deadline = true;
                continue;
            }
            if !in_flight {
                if claiming {
                    self.wait_for_work(deadline);
                }
                continue;
            }
            if let (Some(socket), Some(wait)) = (watched, self.open_loop_wait(claiming))
                && !readable(socket, wait).map_err(|e| describe(Error::Io(e)))?
            {
                continue;
            }
            self.receive(conn)?;
        }
    }

    /// Blocks for one response, then takes every response already buffered.
    fn receive(&mut self, conn: &mut Connection) -> Result<(), String> {
        let response = conn.recv().map_err(describe)?;
        let now = Instant::now();
        let mut answered = self.complete(response, now)?;
        while let Some(response) = conn.recv_buffered().map_err(describe)? {
            answered += self.complete(response, now)?;
        }
        if let Some(limiter) = self.limiter {
            limiter.release(std::mem::take(&mut self.permits_done));
        }
        self.shared.completed.fetch_add(answered, Relaxed);
        if let Some((window, added_at)) = &mut self.window
            && now.duration_since(*added_at) >= WINDOW_ADD_EVERY
        {
            let _ = self.shared.window_us.lock().unwrap().add(&*window);
            window.reset();
            *added_at = now;
        }
        Ok(())
    }

    /// Sends the operations due now, as many as the free slots and permits allow.
    /// `Ok(false)` once every operation is claimed.
    fn send_due(&mut self, conn: &mut Connection) -> Result<bool, String> {
        let due = match self.pace {
            Some(pace) => pace.due(nanos_since(self.start)),
            None => u64::MAX,
        };
        let want = self.shared.ready(due).min(self.free.len() as u64);
        let granted = match (want, self.limiter) {
            (0, _) => 0,
            (_, Some(limiter)) => limiter.try_acquire(want),
            (_, None) => want,
        };
        if granted > 0 {
            let numbers = self.shared.claim(granted, due);
            if let Some(limiter) = self.limiter {
                limiter.release(granted - (numbers.end - numbers.start));
            }
            if !numbers.is_empty() {
                self.send(conn, numbers, Attempt::First)?;
            }
        }
        Ok(!self.shared.all_claimed())
    }

    /// With nothing in flight and nothing sent: waits for a permit to come back (when all
    /// are taken) or for the next operation's time (open-loop mode), no later than
    /// `deadline` and no longer than `IDLE_WAIT_MAX`.
    fn wait_for_work(&self, deadline: Instant) {
        let now = Instant::now();
        let mut until = deadline.min(now + IDLE_WAIT_MAX);
        if let Some(limiter) = self.limiter
            && limiter.is_full()
        {
            limiter.wait_for_room(until.saturating_duration_since(now));
            return;
        }
        if self.pace.is_some() {
            until = until.min(self.next_send_time());
        }
        std::thread::sleep(until.saturating_duration_since(now));
    }

    /// Open-loop mode, with requests in flight: how long to wait for a response before
    /// looking again for operations to send. None: wait for a response however long.
    fn open_loop_wait(&self, claiming: bool) -> Option<Duration> {
        self.pace?;
        if !claiming || self.free.is_empty() {
            return None;
        }
        if self.limiter.is_some_and(Limiter::is_full) {
            return Some(PERMIT_POLL);
        }
        Some(
            self.next_send_time()
                .saturating_duration_since(Instant::now()),
        )
    }

    /// Open-loop mode: when to look again for operations to send — the next one's
    /// intended time, but not sooner than `SEND_QUANTUM` after the last send.
    fn next_send_time(&self) -> Instant {
        let next = self.pace.map_or(self.start, |pace| {
            pace.intended(self.start, self.shared.next_unclaimed())
        });
        next.max(self.sent_at + SEND_QUANTUM)
    }

    /// Queues operations `numbers` (no more than the free slots) and flushes them. Only a
    /// first attempt counts as sent (and, in open-loop mode, as on time or late).
    fn send(
        &mut self,
        conn: &mut Connection,
        numbers: impl IntoIterator<Item = u64>,
        attempt: Attempt,
    ) -> Result<(), String> {
        for n in numbers {
            let slot = self
                .free
                .pop()
                .expect("claimed no more than the free slots");
            self.sequence += 1;
            let id = (self.sequence << SLOT_BITS) | u64::from(slot);
            let intended = self.pace.map(|pace| pace.intended(self.start, n));
            self.generator.fill(n, intended, &mut self.request.op);
            self.request.id = id;
            conn.queue(&self.request).map_err(describe)?;
            self.slots[slot as usize].id = id;
            self.slots[slot as usize].n = n;
            self.batch.push(slot);
        }
        let now = Instant::now();
        self.sent_at = now;
        let sending = &mut self.tally.sending;
        let first = attempt == Attempt::First;
        for &slot in &self.batch {
            let slot = &mut self.slots[slot as usize];
            slot.since = match self.pace {
                Some(pace) => {
                    let intended = pace.intended(self.start, slot.n);
                    if first {
                        let lag_us = latency_us(intended, now);
                        sending.lag_us.saturating_record(lag_us);
                        sending.late += u64::from(lag_us > LATE_MS * 1000);
                    }
                    intended
                }
                None => now,
            };
        }
        if first {
            sending.sent += self.batch.len() as u64;
            sending.span = now.saturating_duration_since(self.start);
        }
        self.batch.clear();
        conn.flush().map_err(describe)
    }

    /// Takes a response; returns how many operations it completed (0: to be sent again).
    fn complete(&mut self, response: Response, now: Instant) -> Result<u64, String> {
        let index = (response.id & SLOT_MASK) as usize;
        let slot = match self.slots.get_mut(index) {
            Some(slot) if slot.id == response.id && slot.id != 0 => slot,
            _ => {
                return Err(match response.result {
                    Err(e) => format!("server error not tied to a request: {e}"),
                    Ok(reply) => {
                        format!("response to unknown request id {}: {reply:?}", response.id)
                    }
                });
            }
        };
        slot.id = 0;
        let (n, since) = (slot.n, slot.since);
        self.free.push(index as u32);
        if let Err(e) = &response.result
            && e.code == flo::protocol::ErrorCode::Overloaded
        {
            // It keeps its permit: it is still outstanding.
            self.retry.push(n);
            return Ok(0);
        }
        let latency = latency_us(since, now);
        let verdict = match response.result {
            Ok(reply) => self.generator.check(n, &reply),
            Err(e) => Err(e.to_string()),
        };
        let failed = verdict.is_err();
        // A task a successful invoke created is outstanding until a worker completes it.
        if failed || !self.generator.completed_by_worker(n) {
            self.permits_done += 1;
        }
        if let Err(message) = verdict {
            self.shared.note_error(message);
        }
        self.tally.record(self.generator.kind(n), latency, failed);
        if let Some((window, _)) = &mut self.window {
            window.saturating_record(latency);
        }
        Ok(1)
    }
}

impl Tally {
    fn record(&mut self, kind: usize, latency_us: u64, failed: bool) {
        self.latency_us.saturating_record(latency_us);
        self.ops += 1;
        self.errors += u64::from(failed);
        if let Some(kind) = self.kinds.get_mut(kind) {
            kind.latency_us.saturating_record(latency_us);
            kind.ops += 1;
            kind.errors += u64::from(failed);
        }
    }
}

fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Whether `socket` has bytes to read (or an error to report) within `timeout`.
fn readable(socket: &TcpStream, timeout: Duration) -> io::Result<bool> {
    let mut fd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask; nothing is kept.
    let ready = unsafe { libc::ppoll(&mut fd, 1, &timeout, std::ptr::null()) };
    match ready {
        0 => Ok(false),
        n if n > 0 => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            e => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_server::FakeServer;
    use flo::protocol::InvokeSpec;

    /// Invokes answered at once (the fake server queues their tasks and replies).
    struct Invoke;

    impl Generator for Invoke {
        fn fill(&mut self, _n: u64, _intended: Option<Instant>, op: &mut Op) {
            *op = Op::ActionInvoke(InvokeSpec {
                namespace: "ns".into(),
                action: "a".into(),
                input: Vec::new(),
                priority: None,
                delay_ms: None,
                idempotency_key: None,
                labels: None,
                wait_ms: None,
            });
        }

        fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
            match reply {
                Reply::Invoked { .. } => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    }

    #[test]
    fn max_outstanding_caps_requests_in_flight_over_all_connections() {
        let (_fake, addr) = FakeServer::start();
        let limiter = Arc::new(Limiter::new(3));
        let mut cfg = Config::closed(&addr, 4, 16, 500);
        cfg.limiter = Some(limiter.clone());
        let outcome = run(&cfg, || Invoke);
        assert_eq!(
            (outcome.ops, outcome.errors),
            (500, 0),
            "{:?}",
            outcome.failures
        );
        assert!(limiter.peak() <= 3, "peak {}", limiter.peak());
        assert_eq!(limiter.held(), 0, "every reply gave its permit back");
    }

    #[test]
    fn open_loop_sends_every_scheduled_operation_once() {
        let (_fake, addr) = FakeServer::start();
        let pace = Pace::new(20_000);
        let mut cfg = Config::closed(&addr, 2, 4, pace.ops_in(Duration::from_millis(20)));
        cfg.pace = Some(pace);
        let outcome = run(&cfg, || Invoke);
        assert_eq!(
            (outcome.ops, outcome.errors),
            (400, 0),
            "{:?}",
            outcome.failures
        );
        assert_eq!(outcome.sending.sent, 400);
        assert_eq!(
            outcome.sending.lag_us.len(),
            400,
            "one send lag per operation"
        );
        assert_eq!(outcome.latency_us.len(), 400);
    }

    #[test]
    fn an_open_loop_connection_wakes_to_send_no_sooner_than_a_quantum_after_its_last_send() {
        let mut cfg = Config::closed("127.0.0.1:1", 1, 4, 10_000);
        cfg.pace = Some(Pace::new(100_000));
        let shared = shared_of(10_000);
        let start = Instant::now();
        let mut worker = Worker::new(&cfg, &shared, Invoke, start);
        let ms = Duration::from_millis;
        assert!(
            worker.next_send_time() <= start,
            "the first operation waits for nothing"
        );
        // Sent at 10 ms; operation 1000 is due at 10 ms, 1001 at 10.01 ms: they wait for
        // the quantum and go together.
        worker.sent_at = start + ms(10);
        assert_eq!(shared.claim(1000, u64::MAX), 0..1000);
        assert_eq!(worker.next_send_time(), start + ms(10) + SEND_QUANTUM);
        // The next operation due later than the quantum: woken at its time.
        assert_eq!(shared.claim(1000, u64::MAX), 1000..2000);
        assert_eq!(worker.next_send_time(), start + ms(20));
    }

    #[test]
    fn claims_stop_at_the_total() {
        let shared = shared_of(10);
        assert_eq!(shared.claim(4, u64::MAX), 0..4);
        assert_eq!(shared.claim(4, u64::MAX), 4..8);
        assert_eq!(shared.claim(4, u64::MAX), 8..10);
        assert!(shared.claim(4, u64::MAX).is_empty());
        assert!(shared.all_claimed());
    }

    fn shared_of(total: u64) -> Shared {
        Shared {
            total,
            next: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            window_us: Mutex::new(new_histogram()),
            first_error: Mutex::new(None),
            start: OnceLock::new(),
            placed: Mutex::new(Vec::new()),
        }
    }

    #[test]
    fn open_loop_claims_stop_at_the_operations_due() {
        let shared = shared_of(100);
        let pace = Pace::new(1000);
        // 2.5 ms in: operations 0, 1 and 2 are due (at 0, 1 and 2 ms).
        let due = pace.due(2_500_000);
        assert_eq!(shared.ready(due), 3);
        assert_eq!(shared.claim(8, due), 0..3);
        assert!(shared.claim(8, due).is_empty(), "nothing more is due yet");
        assert_eq!(shared.ready(due), 0);
        assert!(!shared.all_claimed());
        assert_eq!(shared.claim(8, pace.due(10_000_000)), 3..11);
    }
}
