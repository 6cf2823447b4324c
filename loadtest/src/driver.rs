//! Drives a workload: one thread per connection, each keeping `pipeline` requests in flight.
//!
//! A connection thread loops: block in `recv` for one response, drain every response
//! already buffered, record their latencies, then queue as many new requests and flush
//! them with one write. Operation numbers are claimed from a shared counter, a batch at a
//! time, so fast connections take more of the work.

use crate::workload::Generator;
use flo::protocol::{Op, PROTOCOL_VERSION, Reply, Request, Response};
use flo::{Connection, Error};
use hdrhistogram::Histogram;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Barrier, Mutex, mpsc};
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
/// Latencies are recorded in microseconds, up to this (larger ones count as this).
const LATENCY_US_MAX: u64 = 100_000_000;

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
}

pub struct Outcome {
    /// Latency of every answered request, in microseconds.
    pub latency_us: Histogram<u64>,
    /// Requests answered (successfully or not).
    pub ops: u64,
    /// Error replies (and unexpected replies).
    pub errors: u64,
    pub first_error: Option<String>,
    /// One message per failed connection.
    pub failures: Vec<String>,
    /// From the moment every connection was ready to the last response.
    pub elapsed: Duration,
    /// Whether the `max_duration` limit stopped the run early.
    pub hit_time_limit: bool,
    /// Shard count the server announced in its handshake.
    pub server_shards: Option<u32>,
}

impl Outcome {
    /// Nothing done yet.
    pub fn empty() -> Self {
        Outcome {
            latency_us: new_histogram(),
            ops: 0,
            errors: 0,
            first_error: None,
            failures: Vec::new(),
            elapsed: Duration::ZERO,
            hit_time_limit: false,
            server_shards: None,
        }
    }
}

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid histogram bounds")
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
        first_error: Mutex::new(None),
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
        let start = Instant::now();
        let (stop_progress, stopped) = mpsc::channel::<()>();
        let completed = &shared.completed;
        let reporter = cfg
            .progress
            .then(|| scope.spawn(move || report_progress(start, completed, stopped)));

        let mut outcome = Outcome::empty();
        for (index, handle) in handles.into_iter().enumerate() {
            match handle.join() {
                Ok(done) => {
                    outcome
                        .latency_us
                        .add(&done.latency_us)
                        .expect("histograms share bounds");
                    outcome.ops += done.ops;
                    outcome.errors += done.errors;
                    outcome.hit_time_limit |= done.hit_time_limit;
                    outcome.server_shards = outcome.server_shards.or(done.server_shards);
                    outcome.failures.extend(done.failure);
                }
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
    first_error: Mutex<Option<String>>,
}

impl Shared {
    /// Claims up to `want` operation numbers; empty once all are claimed.
    fn claim(&self, want: u64) -> Range<u64> {
        let start = self.next.fetch_add(want, Relaxed);
        start.min(self.total)..start.saturating_add(want).min(self.total)
    }

    fn note_error(&self, message: String) {
        let mut first = self.first_error.lock().unwrap();
        if first.is_none() {
            eprintln!("flo-loadtest: first error reply: {message}");
            *first = Some(message);
        }
    }
}

/// What one connection thread did.
struct ThreadOutcome {
    latency_us: Histogram<u64>,
    ops: u64,
    errors: u64,
    failure: Option<String>,
    hit_time_limit: bool,
    server_shards: Option<u32>,
}

fn connection_thread<G: Generator>(
    index: usize,
    cfg: &Config,
    shared: &Shared,
    barrier: &Barrier,
    generator: G,
) -> ThreadOutcome {
    let opened = open(&cfg.addr, cfg.token.as_deref());
    barrier.wait();
    let deadline = Instant::now() + cfg.max_duration;
    let mut worker = Worker::new(shared, generator, cfg.pipeline);
    let mut outcome = ThreadOutcome {
        latency_us: new_histogram(),
        ops: 0,
        errors: 0,
        failure: None,
        hit_time_limit: false,
        server_shards: None,
    };
    let result = opened.and_then(|(mut conn, shards)| {
        outcome.server_shards = Some(shards);
        worker.drive(&mut conn, deadline)
    });
    match result {
        Ok(hit_time_limit) => outcome.hit_time_limit = hit_time_limit,
        Err(message) => {
            let message = format!("connection {index}: {message}");
            eprintln!("flo-loadtest: {message}");
            outcome.failure = Some(message);
        }
    }
    outcome.latency_us = worker.latency_us;
    outcome.ops = worker.ops;
    outcome.errors = worker.errors;
    outcome
}

/// Connects and shakes hands; returns the server's shard count.
pub fn open(addr: &str, token: Option<&str>) -> Result<(Connection, u32), String> {
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
        Ok(Reply::Hello { shard_count, .. }) if response.id == HELLO_ID => Ok((conn, shard_count)),
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
    sent: Instant,
}

struct Worker<'a, G> {
    shared: &'a Shared,
    generator: G,
    /// Reused for every request: the generator updates its op in place.
    request: Request,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Slots of the batch being queued.
    batch: Vec<u32>,
    sequence: u64,
    latency_us: Histogram<u64>,
    ops: u64,
    errors: u64,
    /// Operations the server answered `overloaded` (it asks to retry later): sent again.
    retry: Vec<u64>,
}

/// Before an operation answered `overloaded` is sent again.
const OVERLOADED_BACKOFF: Duration = Duration::from_millis(20);

impl<'a, G: Generator> Worker<'a, G> {
    fn new(shared: &'a Shared, generator: G, pipeline: usize) -> Self {
        let now = Instant::now();
        Worker {
            shared,
            generator,
            request: Request {
                id: 0,
                op: Op::Status,
            },
            slots: vec![
                Slot {
                    id: 0,
                    n: 0,
                    sent: now
                };
                pipeline
            ],
            retry: Vec::new(),
            free: (0..pipeline as u32).rev().collect(),
            batch: Vec::with_capacity(pipeline),
            sequence: 0,
            latency_us: new_histogram(),
            ops: 0,
            errors: 0,
        }
    }

    /// Runs until every claimed operation is answered; `Ok(true)` if the deadline stopped it.
    fn drive(&mut self, conn: &mut Connection, deadline: Instant) -> Result<bool, String> {
        let mut claiming = true;
        let mut hit_deadline = false;
        loop {
            if !self.retry.is_empty() && !self.free.is_empty() {
                std::thread::sleep(OVERLOADED_BACKOFF);
                let n = self.retry.len().min(self.free.len());
                let again: Vec<u64> = self.retry.drain(..n).collect();
                self.send(conn, again)?;
            }
            if claiming && !self.free.is_empty() {
                claiming = self.send_batch(conn)?;
            }
            if self.free.len() == self.slots.len() && self.retry.is_empty() {
                return Ok(hit_deadline);
            }
            if self.free.len() == self.slots.len() {
                continue;
            }
            let response = conn.recv().map_err(describe)?;
            let now = Instant::now();
            let mut answered = self.complete(response, now)?;
            while let Some(response) = conn.recv_buffered().map_err(describe)? {
                answered += self.complete(response, now)?;
            }
            self.shared.completed.fetch_add(answered, Relaxed);
            if claiming && now >= deadline {
                claiming = false;
                hit_deadline = true;
            }
        }
    }

    /// Queues one request per free slot (as far as operations remain) and flushes them.
    /// `Ok(false)` when no operation is left.
    fn send_batch(&mut self, conn: &mut Connection) -> Result<bool, String> {
        let numbers = self.shared.claim(self.free.len() as u64);
        if numbers.is_empty() {
            return Ok(false);
        }
        self.send(conn, numbers)?;
        Ok(true)
    }

    /// Queues operations `numbers` (no more than the free slots) and flushes them.
    fn send(
        &mut self,
        conn: &mut Connection,
        numbers: impl IntoIterator<Item = u64>,
    ) -> Result<(), String> {
        for n in numbers {
            let slot = self
                .free
                .pop()
                .expect("claimed no more than the free slots");
            self.sequence += 1;
            let id = (self.sequence << SLOT_BITS) | u64::from(slot);
            self.generator.fill(n, &mut self.request.op);
            self.request.id = id;
            conn.queue(&self.request).map_err(describe)?;
            self.slots[slot as usize].id = id;
            self.slots[slot as usize].n = n;
            self.batch.push(slot);
        }
        let now = Instant::now();
        for &slot in &self.batch {
            self.slots[slot as usize].sent = now;
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
        if let Err(e) = &response.result
            && e.code == flo::protocol::ErrorCode::Overloaded
        {
            self.retry.push(slot.n);
            self.free.push(index as u32);
            return Ok(0);
        }
        let latency = now.saturating_duration_since(slot.sent).as_micros();
        self.latency_us
            .saturating_record(u64::try_from(latency).unwrap_or(u64::MAX));
        self.free.push(index as u32);
        self.ops += 1;
        let verdict = match response.result {
            Ok(reply) => self.generator.check(&reply),
            Err(e) => Err(e.to_string()),
        };
        if let Err(message) = verdict {
            self.errors += 1;
            self.shared.note_error(message);
        }
        Ok(1)
    }
}

/// Prints `[  3s] 812345 ops  271234 ops/s` on stderr every second until `stop` closes.
fn report_progress(start: Instant, completed: &AtomicU64, stop: mpsc::Receiver<()>) {
    let mut last = 0;
    for second in 1u64.. {
        let at = start + Duration::from_secs(second);
        match stop.recv_timeout(at.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let done = completed.load(Relaxed);
        eprintln!("[{second:>3}s] {done} ops  {} ops/s", done - last);
        last = done;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_stop_at_the_total() {
        let shared = Shared {
            total: 10,
            next: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            first_error: Mutex::new(None),
        };
        assert_eq!(shared.claim(4), 0..4);
        assert_eq!(shared.claim(4), 4..8);
        assert_eq!(shared.claim(4), 8..10);
        assert!(shared.claim(4).is_empty());
    }
}
