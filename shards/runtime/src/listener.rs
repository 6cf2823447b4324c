//! Client connections: the accept loop, and per connection a reader that decodes frames
//! into inputs for the shard loop and a writer that sends replies as they come (in any
//! order, many per syscall).
//!
//! What one connection may hold is bounded where it is taken, not where it is produced: a
//! request reserves room for its reply before it is admitted (`reply_reserve_bytes`), the
//! read buffer grows with the bytes that arrive (never with a length a header declares)
//! and shrinks back after a large frame, replies are encoded one after another into
//! buffers of about `WRITE_BUFFER_BYTES` (`Outbox`) that the writer writes whole and gives
//! back.

use crate::inbox::{Inbox, Signal};
use crate::metrics::{ShardMetrics, result_index};
use ahash::AHashMap as HashMap;
use flo_engine::auth::{Gate, Session, op_name};
use flo_engine::clock::{Clock, SystemClock};
use flo_engine::{ClientRef, ConnId, Input, ReplyResult};
use flo_protocol::{
    ErrorCode, ErrorValue, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FrameError, KV_KEY_BYTES_MAX,
    KV_VALUE_BYTES_MAX, Op, Request, RequestId, Response, decode_payload, encode_frame,
    split_frame,
};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Requests of one connection being processed at once; the reader pauses beyond it.
pub(crate) const INFLIGHT_REQUESTS_MAX: usize = 4096;
/// Bytes of replies of one connection waiting to be sent, or reserved by the requests it
/// has in flight; the reader admits no request whose reservation would go beyond it (a
/// client that does not read its replies stops being read).
pub(crate) const REPLY_BYTES_QUEUED_MAX: usize = 32 << 20;
/// The operation name requests that could not be decoded are counted under.
const UNDECODABLE_OP: &str = "undecodable";
/// What a request with a small reply reserves.
const RESERVE_SMALL: Reserve = Reserve {
    bytes: REPLY_RESERVE_SMALL_BYTES,
    waits: false,
};
/// Reply bytes the waits of one connection (a wait on a run or a key, a task await, a
/// blocking stream read, a start or an invoke with a wait) may reserve at once, beside
/// `REPLY_BYTES_QUEUED_MAX`. A wait may last minutes, so one that does not fit does not
/// pause the reader (the requests behind it may be what it waits for): it is held, in
/// order, until an earlier wait is answered.
pub(crate) const WAIT_REPLY_BYTES_RESERVED_MAX: usize = 32 << 20;
/// Bytes of requests (waits) a connection may have held for lack of room; beyond, the
/// reader pauses.
pub(crate) const WAITS_HELD_BYTES_MAX: usize = 32 << 20;
/// What a wait reserves, whatever it waits for (a reply larger than this is counted
/// when it comes, and then holds the reader). A guess, not a bound: most waits answer a
/// run's status with a small output, and reserving a whole value for each let only 31
/// waits of a connection in at once, which cut pipelined invoke-and-wait throughput by
/// about 30% (measured); with this, 256 fit. The cost: a client that pipelines 256 waits on
/// runs whose outputs are large and never reads its replies holds them all.
pub(crate) const REPLY_RESERVE_WAIT_BYTES: usize = 128 << 10;
/// What a request whose reply has a small, fixed shape reserves (a version, `done`, an id,
/// an error).
pub(crate) const REPLY_RESERVE_SMALL_BYTES: usize = 4 << 10;
/// What a request answered with at most one KV value (or as much) reserves.
pub(crate) const REPLY_RESERVE_VALUE_BYTES: usize =
    KV_VALUE_BYTES_MAX + KV_KEY_BYTES_MAX + REPLY_RESERVE_SMALL_BYTES;
/// Inputs waiting for the shard loop, or messages waiting to go to one other shard, beyond
/// which no connection of the shard is read: a shard that falls behind stops taking new
/// requests instead of queueing without bound (work already taken goes on).
pub(crate) const SHARD_BACKLOG_MAX: usize = 100_000;
/// After telling an idle client it is closed, how long its connection still takes (and
/// drops) what the client sends, so that the close does not reset the goodbye away.
const GOODBYE_DRAIN_MS: u64 = 2000;
/// A new connection's read buffer; it doubles while reads fill it, up to
/// `READ_CHUNK_BYTES`, and beyond only for a frame larger than that, as its bytes arrive.
const READ_BUFFER_START_BYTES: usize = 4 << 10;
/// The read buffer a busy connection keeps; one grown for a large frame shrinks back to it
/// once that frame is taken.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// On a server with an auth file, the largest frame taken before a `Hello` authenticated
/// the connection (a handshake is a few hundred bytes).
pub(crate) const UNAUTHENTICATED_FRAME_BYTES_MAX: usize = 8 << 10;
/// How long a frame may take to arrive once its first bytes did; then the connection is
/// closed (a peer that sends a header and trickles, or nothing, holds no buffer for long).
pub const FRAME_DEADLINE_MS_DEFAULT: u64 = 30_000;
/// Replies are encoded one after another into a buffer until it holds this much (one
/// syscall writes them all); the next begins another.
const WRITE_BUFFER_BYTES: usize = 64 << 10;
/// A connection's first reply buffer; it grows (doubling) with what it is given.
const WRITE_BUFFER_START_BYTES: usize = 4 << 10;
/// After its client closed, how long a connection still waits to deliver owed replies.
const LINGER_MS: u64 = 30_000;
/// Connections a shard is refusing at once (each holds its socket until the client takes
/// the answer, at most `REFUSAL_LINGER_MS`); beyond, a refusal is written and closed at
/// once.
pub(crate) const REFUSING_CONNECTIONS_MAX: usize = 32;
const REFUSAL_LINGER_MS: u64 = 2000;
/// How often a shard reports that accepting connections fails (with a count of failures
/// since the last report).
const ACCEPT_WARNING_EVERY_MS: u64 = 10_000;
/// For this long after accepting failed, refusals do not linger (their descriptors are
/// wanted).
const ACCEPT_FAILED_RECENTLY_MS: u64 = 5_000;
/// Accepting again after a failure (out of file descriptors, say) waits this long.
const ACCEPT_RETRY_MS: u64 = 10;
/// Memory freed by a connection that held large buffers is given back to the system at
/// most this often per shard (the allocator keeps freed memory otherwise).
const RELEASE_MEMORY_EVERY_MS: u64 = 1000;

pub(crate) struct Conn {
    ready: RefCell<Outbox>,
    signal: Signal,
    inflight: Cell<usize>,
    /// Bytes of the replies in `ready` and being written.
    queued_bytes: Cell<usize>,
    /// Reply bytes reserved by the requests admitted and not answered yet.
    reserved_bytes: Cell<usize>,
    /// Of `reserved_bytes`, what waits reserved.
    waits_reserved_bytes: Cell<usize>,
    /// Waits taken and not yet admitted for lack of room in the waits' budget, in order,
    /// and their frames' bytes.
    held_waits: RefCell<std::collections::VecDeque<HeldWait>>,
    held_waits_bytes: Cell<usize>,
    id: ConnId,
    inbox: Rc<Inbox>,
    /// By request id: the bytes reserved, how many requests reserved them (a client may
    /// give two requests one id) and how many of those are waits.
    reservations: RefCell<HashMap<u64, Reserved>>,
    room: Signal,
    reader_done: Cell<bool>,
    /// When the reader last took a whole request (server clock, ms): bytes of a frame not
    /// yet whole do not keep a connection from being idle.
    last_read_ms: Cell<u64>,
    /// The idle sweep asks the reader to close.
    close: Signal,
    /// Who the handshake authenticated (servers with an auth file).
    session: Cell<Session>,
    /// Whether it may see what adds up every namespace (a server status's counts): always
    /// without an auth file, else as its token grants (`Gate::sees_all`).
    sees_all: Cell<bool>,
    /// It held a read buffer or wrote a reply larger than its usual buffers.
    held_large: Cell<bool>,
    /// The shard's counters: requests answered, by operation and result, and their time.
    metrics: Arc<ShardMetrics>,
}

/// A wait taken (its gate passed) and not yet admitted.
struct HeldWait {
    from: ClientRef,
    op: Op,
    reserve: Reserve,
    frame_bytes: usize,
}

/// What the requests of one id reserved; the first one's operation and when it was
/// admitted (for the metrics; None when the shard does not count).
struct Reserved {
    bytes: usize,
    requests: u32,
    waits: u32,
    op: &'static str,
    since: Option<Instant>,
}

/// The reply room a request takes: its bytes, and whether it waits (parked until what
/// it waits for comes, or its time is up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reserve {
    pub bytes: usize,
    pub waits: bool,
}

/// What every connection of a shard is served with.
pub(crate) struct ConnSettings {
    /// The shard's gate on client requests: None without an auth file.
    pub gate: Option<Rc<Gate>>,
    /// Nothing owed and no request for this long: the connection is closed (`u64::MAX`:
    /// never).
    pub idle_ms: u64,
    /// How long a frame may take to arrive once its first bytes did.
    pub frame_deadline_ms: u64,
    /// Gives this thread's freed memory back to the system.
    pub release_memory: fn(),
    /// When `release_memory` was last called (server clock, ms).
    pub released_at_ms: Cell<u64>,
    /// The shard's counters.
    pub metrics: Arc<ShardMetrics>,
}

impl ConnSettings {
    /// Gives freed memory back, unless that was done less than `RELEASE_MEMORY_EVERY_MS`
    /// ago.
    fn release_memory(&self) {
        let now = SystemClock.now_ms();
        if now >= self.released_at_ms.get() + RELEASE_MEMORY_EVERY_MS {
            self.released_at_ms.set(now);
            (self.release_memory)();
        }
    }
}

/// What says whether the shard takes more requests: its inbox and its queues to the
/// other shards.
pub(crate) struct Admission {
    pub inbox: Rc<Inbox>,
    pub peers: Vec<Rc<crate::mesh::PeerOut>>,
}

impl Admission {
    fn backlogged(&self) -> bool {
        self.inbox.len() >= SHARD_BACKLOG_MAX
            || self.peers.iter().any(|p| p.len() >= SHARD_BACKLOG_MAX)
    }

    /// Waits until `conn` may take a request reserving `reserve` for its reply: room on
    /// the connection, and a shard not backlogged (looked at again every millisecond
    /// while it is). Returns whether it had to wait.
    async fn room(&self, conn: &Conn, reserve: Reserve) -> bool {
        let mut waited = false;
        loop {
            if !conn.has_room_for(reserve) {
                conn.room.wait().await;
            } else if self.backlogged() {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            } else {
                return waited;
            }
            waited = true;
        }
    }
}

/// The open connections of a shard, by id.
pub(crate) type Conns = Rc<RefCell<HashMap<ConnId, Rc<Conn>>>>;

/// Replies encoded and not yet taken by the writer, in order: one after another in chunks
/// of about `WRITE_BUFFER_BYTES`, each written whole with one syscall. The writer gives a
/// written chunk's buffer back: a busy connection encodes its replies into no new buffer.
#[derive(Default)]
struct Outbox {
    chunks: Vec<Chunk>,
    /// A written chunk's buffer, emptied, for the next chunk.
    spare: Option<Vec<u8>>,
}

struct Chunk {
    bytes: Vec<u8>,
    /// Replies in `bytes`.
    frames: usize,
}

impl Outbox {
    /// Appends the reply to `id`; the bytes it took (0: it could not be encoded at all).
    fn encode(&mut self, id: u64, result: ReplyResult) -> usize {
        let room = match self.chunks.last() {
            Some(last) => last.bytes.len() < WRITE_BUFFER_BYTES,
            None => false,
        };
        if !room {
            let bytes = self
                .spare
                .take()
                .unwrap_or_else(|| Vec::with_capacity(WRITE_BUFFER_START_BYTES));
            self.chunks.push(Chunk { bytes, frames: 0 });
        }
        let chunk = self.chunks.last_mut().expect("a chunk was just made");
        let start = chunk.bytes.len();
        encode_response(id, result, &mut chunk.bytes);
        let taken = chunk.bytes.len() - start;
        if taken > 0 {
            chunk.frames += 1;
        }
        taken
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// A written chunk's buffer, kept for the next chunk unless one is kept already or it
    /// grew past twice the usual size (a large reply: freed). Whether it was freed large.
    fn give_back(&mut self, mut bytes: Vec<u8>) -> bool {
        if bytes.capacity() > 2 * WRITE_BUFFER_BYTES {
            return true;
        }
        if self.spare.is_none() {
            bytes.clear();
            self.spare = Some(bytes);
        }
        false
    }
}

/// Appends the frame of the reply to `id` to `out`; a reply that cannot be sent as it is
/// (over the frame limit) is replaced by an error saying why; nothing is appended only
/// when not even that can be encoded.
pub(crate) fn encode_response(id: u64, result: ReplyResult, out: &mut Vec<u8>) {
    let start = out.len();
    let response = Response { id, result };
    if let Err(e) = encode_frame(&response, out) {
        out.truncate(start);
        let result = Err(match e {
            // Stored data too large for one reply: the client can ask for less.
            FrameError::TooLarge { len, max } => ErrorValue::bad_request(format!(
                "the reply is {len} bytes, over the {max}-byte frame limit: ask for less \
                 (a smaller --limit; histories page with --limit and --after)"
            )),
            e => ErrorValue::internal(format!("cannot send the reply: {e}")),
        });
        if encode_frame(&Response { id, result }, out).is_err() {
            out.truncate(start);
        }
    }
}

/// The reply room a request reserves before it is admitted: as much as its reply can
/// take. Requests answered with a version, `done`, an id or a count reserve little; one
/// answered with at most one KV value (or as much) a value; any other (a run with its
/// input and output, a listing, stream records, a history) a whole frame. A wait reserves
/// `REPLY_RESERVE_WAIT_BYTES` from the connection's waits' own budget.
pub(crate) fn reply_reserve(op: &Op) -> Reserve {
    let waits = match op {
        Op::RunWait { timeout_ms, .. } | Op::WorkflowWait { timeout_ms, .. } => *timeout_ms > 0,
        Op::ActionInvoke(spec) => spec.wait_ms.unwrap_or(0) > 0,
        Op::WorkflowStart(spec) => spec.wait_ms.unwrap_or(0) > 0,
        Op::KvGet { wait_ms, .. } => wait_ms.unwrap_or(0) > 0,
        Op::TaskAwait { block_ms, .. } => *block_ms > 0,
        Op::StreamRead(spec) => spec.block_ms.unwrap_or(0) > 0,
        Op::StreamGroupRead(spec) => spec.block_ms.unwrap_or(0) > 0,
        _ => false,
    };
    if waits {
        return Reserve {
            bytes: REPLY_RESERVE_WAIT_BYTES,
            waits,
        };
    }
    Reserve {
        bytes: reply_reserve_bytes(op),
        waits,
    }
}

fn reply_reserve_bytes(op: &Op) -> usize {
    match op {
        Op::Hello { .. }
        | Op::ShardMap
        | Op::KvPut { .. }
        | Op::KvDelete { .. }
        | Op::ActionDelete { .. }
        | Op::ActionSetEnabled { .. }
        | Op::RunCancel { .. }
        | Op::WorkerHeartbeat { .. }
        | Op::WorkerDrain { .. }
        | Op::WorkerDeregister { .. }
        | Op::TaskComplete { .. }
        | Op::TaskFail { .. }
        | Op::TaskTouch { .. }
        | Op::WorkflowSetEnabled { .. }
        | Op::WorkflowSignal { .. }
        | Op::WorkflowCancel { .. }
        | Op::WorkflowControl { .. }
        | Op::WorkflowUpdateState { .. }
        | Op::StreamCreate { .. }
        | Op::StreamDelete { .. }
        | Op::StreamTrim { .. }
        | Op::StreamGroupCreate { .. }
        | Op::StreamGroupDelete { .. }
        | Op::StreamGroupAck { .. }
        | Op::StreamGroupNack { .. }
        | Op::SchedulePause { .. }
        | Op::ScheduleTrigger { .. }
        | Op::PlanInvalidate { .. }
        | Op::WebhookRedeliver { .. }
        | Op::TestAdvanceClock { .. } => REPLY_RESERVE_SMALL_BYTES,
        Op::ActionInvoke(spec) if spec.wait_ms.unwrap_or(0) == 0 => REPLY_RESERVE_SMALL_BYTES,
        Op::WorkflowStart(spec) if spec.wait_ms.unwrap_or(0) == 0 => REPLY_RESERVE_SMALL_BYTES,
        Op::KvGet { .. }
        | Op::StreamAppend { .. }
        | Op::WorkerRegister(_)
        | Op::WorkerGet { .. } => REPLY_RESERVE_VALUE_BYTES,
        Op::Status
        | Op::KvList { .. }
        | Op::ActionRegister(_)
        | Op::ActionGet { .. }
        | Op::ActionList { .. }
        | Op::ActionInvoke(_)
        | Op::RunStatus { .. }
        | Op::RunWait { .. }
        | Op::RunRedrive { .. }
        | Op::RunList { .. }
        | Op::WorkerList { .. }
        | Op::TaskAwait { .. }
        | Op::WorkflowCreate { .. }
        | Op::WorkflowGet { .. }
        | Op::WorkflowList { .. }
        | Op::WorkflowStart(_)
        | Op::WorkflowStatus { .. }
        | Op::WorkflowWait { .. }
        | Op::WorkflowHistory { .. }
        | Op::WorkflowListRuns { .. }
        | Op::StreamRead(_)
        | Op::StreamGet { .. }
        | Op::StreamList { .. }
        | Op::StreamGroupRead(_)
        | Op::StreamGroupPending { .. }
        | Op::StreamGroupInfo { .. }
        | Op::ScheduleList { .. }
        | Op::WorkflowQuery { .. }
        | Op::WorkflowEvents { .. }
        | Op::WebhookDeliveries { .. }
        | Op::PlanStatus { .. } => FRAME_BYTES_MAX,
    }
}

impl Conn {
    fn new(id: ConnId, inbox: Rc<Inbox>, metrics: Arc<ShardMetrics>) -> Conn {
        Conn {
            held_waits: RefCell::default(),
            held_waits_bytes: Cell::new(0),
            id,
            inbox,
            ready: RefCell::default(),
            signal: Signal::default(),
            inflight: Cell::new(0),
            queued_bytes: Cell::new(0),
            reserved_bytes: Cell::new(0),
            waits_reserved_bytes: Cell::new(0),
            reservations: RefCell::new(HashMap::new()),
            room: Signal::default(),
            reader_done: Cell::new(false),
            last_read_ms: Cell::new(SystemClock.now_ms()),
            close: Signal::default(),
            session: Cell::new(Session::Anonymous),
            sees_all: Cell::new(true),
            held_large: Cell::new(false),
            metrics,
        }
    }

    /// Queues a reply for sending; what its request reserved is released.
    pub fn send(&self, request: u64, result: ReplyResult) {
        self.send_at(request, result, None);
    }

    /// `send`, with the time now if the caller read it already (one clock read for the
    /// replies it sends at once; counted only when the shard counts).
    pub fn send_at(&self, request: u64, mut result: ReplyResult, now: Option<Instant>) {
        self.count(request, &result, now);
        self.release(request);
        self.admit_held_waits();
        if !self.sees_all.get()
            && let Ok(reply) = &mut result
        {
            flo_engine::auth::hide_counts(reply);
        }
        let bytes = self.ready.borrow_mut().encode(request, result);
        // What the release freed may let the reader admit more.
        self.room.notify();
        if bytes == 0 {
            self.inflight.set(self.inflight.get().saturating_sub(1));
            return;
        }
        self.queued_bytes.set(self.queued_bytes.get() + bytes);
        self.signal.notify();
    }

    /// Counts the answer to `request` in the shard's metrics (a request that reserved
    /// nothing, a goodbye as request 0, is not one the client sent).
    fn count(&self, request: u64, result: &ReplyResult, now: Option<Instant>) {
        let reservations = self.reservations.borrow();
        let Some(Reserved {
            op,
            since: Some(since),
            ..
        }) = reservations.get(&request)
        else {
            return;
        };
        let code = result.as_ref().err().map(|e| e.code);
        let now = now.unwrap_or_else(Instant::now);
        let elapsed_ns = now.saturating_duration_since(*since).as_nanos() as u64;
        self.metrics.request(op, result_index(code), elapsed_ns);
    }

    /// When a request admitted now was admitted, for the metrics: `read_at` when the caller
    /// read the clock already (the frames of one socket read share it), else now; None
    /// when the shard does not count.
    fn admitted_at(&self, read_at: Option<Instant>) -> Option<Instant> {
        self.metrics
            .counting()
            .then(|| read_at.unwrap_or_else(Instant::now))
    }

    /// Reserves room for the reply to `request`, an `op`; `since`: when it was admitted
    /// (`admitted_at`).
    fn reserve(&self, request: u64, reserve: Reserve, op: &'static str, since: Option<Instant>) {
        let mut reservations = self.reservations.borrow_mut();
        let entry = reservations.entry(request).or_insert_with(|| Reserved {
            bytes: 0,
            requests: 0,
            waits: 0,
            op,
            since,
        });
        entry.bytes += reserve.bytes;
        entry.requests += 1;
        self.reserved_bytes
            .set(self.reserved_bytes.get() + reserve.bytes);
        if reserve.waits {
            entry.waits += 1;
            self.waits_reserved_bytes
                .set(self.waits_reserved_bytes.get() + reserve.bytes);
        }
    }

    /// Releases what a request answered now reserved. Of several requests with its id,
    /// one answered before the last releases the least any request reserves (and counts
    /// as a wait only when nothing else is left): the rest stays counted until the last
    /// is answered (too high for a while, never too low).
    fn release(&self, request: u64) {
        let mut reservations = self.reservations.borrow_mut();
        let Some(entry) = reservations.get_mut(&request) else {
            return;
        };
        let (bytes, wait) = if entry.requests <= 1 {
            let released = (entry.bytes, entry.waits > 0);
            reservations.remove(&request);
            released
        } else {
            let wait = entry.waits == entry.requests;
            let bytes = entry.bytes.min(if wait {
                REPLY_RESERVE_WAIT_BYTES
            } else {
                REPLY_RESERVE_SMALL_BYTES
            });
            entry.requests -= 1;
            entry.waits -= u32::from(wait);
            entry.bytes -= bytes;
            (bytes, wait)
        };
        self.reserved_bytes
            .set(self.reserved_bytes.get().saturating_sub(bytes));
        if wait {
            self.waits_reserved_bytes
                .set(self.waits_reserved_bytes.get().saturating_sub(bytes));
        }
    }

    /// Whether a wait reserving `bytes` fits beside the connection's other waits.
    fn wait_fits(&self, bytes: usize) -> bool {
        self.waits_reserved_bytes.get() + bytes <= WAIT_REPLY_BYTES_RESERVED_MAX
    }

    /// Admits `request`: its reply's room reserved, into the inbox; a wait that does not
    /// fit (or comes behind one held) is held.
    fn admit(
        &self,
        request: Request,
        reserve: Reserve,
        frame_bytes: usize,
        read_at: Option<Instant>,
    ) {
        let from = ClientRef {
            conn: self.id,
            request: request.id,
        };
        let mut held = self.held_waits.borrow_mut();
        if reserve.waits && (!held.is_empty() || !self.wait_fits(reserve.bytes)) {
            held.push_back(HeldWait {
                from,
                op: request.op,
                reserve,
                frame_bytes,
            });
            self.held_waits_bytes
                .set(self.held_waits_bytes.get() + frame_bytes);
            return;
        }
        drop(held);
        let since = self.admitted_at(read_at);
        self.reserve(request.id, reserve, op_name(&request.op), since);
        self.inbox.push(Input::Client {
            from,
            op: request.op,
        });
    }

    /// Admits the waits held, in order, while they fit (not once the connection is done).
    fn admit_held_waits(&self) {
        while !self.reader_done.get() {
            let mut held = self.held_waits.borrow_mut();
            let Some(next) = held.front() else {
                return;
            };
            if !self.wait_fits(next.reserve.bytes) {
                return;
            }
            let Some(next) = held.pop_front() else {
                return;
            };
            drop(held);
            self.held_waits_bytes
                .set(self.held_waits_bytes.get() - next.frame_bytes);
            let since = self.admitted_at(None);
            self.reserve(next.from.request, next.reserve, op_name(&next.op), since);
            self.inbox.push(Input::Client {
                from: next.from,
                op: next.op,
            });
            self.room.notify();
        }
    }

    /// The connection is done: the waits held are dropped (no request of theirs reached
    /// the shard).
    fn drop_held_waits(&self) {
        let dropped = std::mem::take(&mut *self.held_waits.borrow_mut());
        self.held_waits_bytes.set(0);
        self.inflight
            .set(self.inflight.get().saturating_sub(dropped.len()));
    }

    /// Bytes of replies waiting and reserved.
    fn owed_bytes(&self) -> usize {
        self.queued_bytes.get() + self.reserved_bytes.get()
    }

    /// Whether a request reserving `reserve` may be taken now: waits are bounded by their
    /// own budget (held when it is spent, `admit`), the rest by the bytes owed beside the
    /// waits' (one always may when nothing else is owed, whatever it reserves); and no
    /// more is taken while the waits held are many.
    fn has_room_for(&self, reserve: Reserve) -> bool {
        let owed = self.owed_bytes() - self.waits_reserved_bytes.get();
        let fits = reserve.waits || owed == 0 || owed + reserve.bytes <= REPLY_BYTES_QUEUED_MAX;
        self.inflight.get() < INFLIGHT_REQUESTS_MAX
            && self.held_waits_bytes.get() < WAITS_HELD_BYTES_MAX
            && fits
    }

    /// `frames` replies of `bytes` were written.
    fn written(&self, frames: usize, bytes: usize) {
        self.inflight
            .set(self.inflight.get().saturating_sub(frames));
        self.queued_bytes
            .set(self.queued_bytes.get().saturating_sub(bytes));
        self.room.notify();
    }

    /// Nothing owed and nothing read for `idle_ms`.
    fn idle(&self, now_ms: u64, idle_ms: u64) -> bool {
        self.inflight.get() == 0 && now_ms.saturating_sub(self.last_read_ms.get()) >= idle_ms
    }

    /// The largest frame the connection takes now: small until a handshake authenticated
    /// it, on a server with an auth file.
    fn frame_bytes_max(&self, gate: Option<&Gate>) -> usize {
        match (gate, self.session.get()) {
            (Some(_), Session::Anonymous) => UNAUTHENTICATED_FRAME_BYTES_MAX,
            _ => FRAME_BYTES_MAX,
        }
    }
}

/// What an idle client is told as its connection closes (`IDLE_CLOSED_PREFIX` lets a
/// client know no request of its was taken, and connect again).
fn goodbye(idle_ms: u64) -> ErrorValue {
    ErrorValue::unavailable(format!(
        "{} {} s without requests (--idle-timeout); no request was taken: connect again",
        flo_protocol::IDLE_CLOSED_PREFIX,
        idle_ms / 1000
    ))
}

/// Every `idle_ms / 4` (at most 10 s), asks connections idle for `idle_ms` to close.
pub(crate) async fn idle_sweep(conns: Conns, idle_ms: u64) {
    let every = Duration::from_millis((idle_ms / 4).clamp(10, 10_000));
    loop {
        glommio::timer::sleep(every).await;
        let now = SystemClock.now_ms();
        for conn in conns.borrow().values() {
            if conn.idle(now, idle_ms) {
                conn.close.notify();
            }
        }
    }
}
/// A listening socket on `addr` for one shard: every shard listens on the same address
/// (`SO_REUSEPORT`: the kernel spreads connections), and with `SO_REUSEADDR` so that a
/// restart binds at once even while the connections a previous server closed sit in
/// TIME_WAIT (they inherit the flag from this listener).
pub(crate) fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = bound(addr, true)?;
    socket.listen(LISTEN_BACKLOG)?;
    let fd = std::os::fd::OwnedFd::from(socket);
    // SAFETY: `fd` is a listening TCP socket this function just made and owns; ownership
    // passes to the listener.
    Ok(unsafe {
        <TcpListener as std::os::fd::FromRawFd>::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(
            fd,
        ))
    })
}

/// Whether another live listener holds `addr`: a bind with `SO_REUSEADDR` only (not
/// `SO_REUSEPORT`, which would share a live server's port silently) fails on a listening
/// socket and succeeds past TIME_WAIT ones. Returns the address bound (the port, when 0
/// was asked for).
///
/// A server that just exited (killed, or stopped by a panic) can hold its listening
/// sockets a little longer: the kernel releases the files of its io_uring requests (an
/// accept in flight) after the process is gone. So the address must stay taken for
/// `PROBE_PATIENCE` before it is refused.
pub(crate) fn probe(addr: std::net::SocketAddr) -> std::io::Result<std::net::SocketAddr> {
    let started = std::time::Instant::now();
    loop {
        match bound(addr, false) {
            Ok(socket) => {
                return socket
                    .local_addr()?
                    .as_socket()
                    .ok_or_else(|| std::io::Error::other("not an IP address"));
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && started.elapsed() < PROBE_PATIENCE =>
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => return Err(e),
        }
    }
}

const PROBE_PATIENCE: Duration = Duration::from_secs(3);
const LISTEN_BACKLOG: i32 = 1024;

fn bound(addr: std::net::SocketAddr, shared: bool) -> std::io::Result<socket2::Socket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if shared {
        socket.set_reuse_port(true)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// The bound on client connections, shared by the shards.
pub(crate) struct ConnLimit {
    pub open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    pub max: usize,
}

/// Failures to accept a connection, reported at most once per `ACCEPT_WARNING_EVERY_MS`
/// with how many there were (out of file descriptors, a shard would otherwise write a
/// line every `ACCEPT_RETRY_MS`).
#[derive(Default)]
struct AcceptFailures {
    reported_at_ms: Option<u64>,
    unreported: u64,
    /// When the last failure was (server clock, ms).
    last_ms: Option<u64>,
}

impl AcceptFailures {
    /// Whether accepting failed within `ACCEPT_FAILED_RECENTLY_MS` of `now_ms`:
    /// descriptors are scarce, refusals should not hold theirs.
    fn recent(&self, now_ms: u64) -> bool {
        self.last_ms
            .is_some_and(|at| now_ms < at + ACCEPT_FAILED_RECENTLY_MS)
    }

    /// Notes a failure at `now_ms`; the line to report, if one is due.
    fn note(&mut self, error: &dyn std::fmt::Display, now_ms: u64) -> Option<String> {
        self.unreported += 1;
        self.last_ms = Some(now_ms);
        if self
            .reported_at_ms
            .is_some_and(|at| now_ms < at + ACCEPT_WARNING_EVERY_MS)
        {
            return None;
        }
        self.reported_at_ms = Some(now_ms);
        let count = std::mem::take(&mut self.unreported);
        let every_s = ACCEPT_WARNING_EVERY_MS / 1000;
        Some(match count {
            1 => format!(
                "accepting a connection failed: {error} (reported at most once every \
                 {every_s} s)"
            ),
            n => format!(
                "accepting a connection failed {n} times since the last report, last: {error} \
                 (reported at most once every {every_s} s)"
            ),
        })
    }
}

/// Out of file descriptors (the process's or the system's).
fn out_of_fds(error: &glommio::GlommioError<()>) -> bool {
    matches!(error.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// A descriptor kept in reserve: out of descriptors, closing it lets the shard accept the
/// waiting connection and tell it so, instead of leaving it to hang.
fn spare_fd() -> Option<std::fs::File> {
    std::fs::File::open("/dev/null").ok()
}

fn overloaded_connections(max: usize) -> ErrorValue {
    ErrorValue::new(
        ErrorCode::Overloaded,
        format!(
            "the server has {max} connections open, the most it takes (--max-connections, \
             or the open-file limit); retry later"
        ),
    )
}

fn out_of_fds_error() -> ErrorValue {
    ErrorValue::new(
        ErrorCode::Overloaded,
        "the server is out of file descriptors (its open-file limit, ulimit -n); retry later",
    )
}

pub(crate) async fn accept_loop(
    shard: u32,
    listener: TcpListener,
    conns: Conns,
    admission: Rc<Admission>,
    limit: ConnLimit,
    settings: Rc<ConnSettings>,
) {
    let limit = Rc::new(limit);
    let refusing = Rc::new(Cell::new(0usize));
    let mut failures = AcceptFailures::default();
    let mut spare = spare_fd();
    // Connection ids: unique per shard for its lifetime.
    let mut next_id: ConnId = 0;
    loop {
        let stream = match listener.accept().await {
            Ok(stream) => stream,
            Err(e) => {
                if let Some(line) = failures.note(&e, SystemClock.now_ms()) {
                    tracing::warn!(target: "flo::net", shard, "{line}");
                }
                if spare.is_none() {
                    // Taken back as soon as any descriptor is free.
                    spare = spare_fd();
                }
                if out_of_fds(&e)
                    && let Some(fd) = spare.take()
                {
                    drop(fd);
                    if let Ok(stream) = listener.accept().await {
                        refuse(stream, out_of_fds_error(), false).await;
                    }
                    spare = spare_fd();
                }
                glommio::timer::sleep(Duration::from_millis(ACCEPT_RETRY_MS)).await;
                continue;
            }
        };
        if limit.open.fetch_add(1, Ordering::Relaxed) >= limit.max {
            limit.open.fetch_sub(1, Ordering::Relaxed);
            let linger =
                refusing.get() < REFUSING_CONNECTIONS_MAX && !failures.recent(SystemClock.now_ms());
            let error = overloaded_connections(limit.max);
            if !linger {
                refuse(stream, error, false).await;
                continue;
            }
            refusing.set(refusing.get() + 1);
            let refusing = refusing.clone();
            glommio::spawn_local(async move {
                refuse(stream, error, true).await;
                refusing.set(refusing.get() - 1);
            })
            .detach();
            continue;
        }
        next_id += 1;
        settings
            .metrics
            .connections_accepted
            .fetch_add(1, Ordering::Relaxed);
        let task = serve(
            next_id,
            stream,
            conns.clone(),
            admission.clone(),
            settings.clone(),
        );
        let limit = limit.clone();
        glommio::spawn_local(async move {
            task.await;
            limit.open.fetch_sub(1, Ordering::Relaxed);
        })
        .detach();
    }
}

/// A connection the server does not take: told why (as the answer to its first request),
/// closed. With `linger`, what the client sends is taken until it closes (at most
/// `REFUSAL_LINGER_MS`): a close with unread bytes would reset the connection and could
/// lose the answer.
async fn refuse(mut stream: TcpStream, error: ErrorValue, linger: bool) {
    let mut frame = Vec::new();
    encode_response(0, Err(error), &mut frame);
    let _ = futures_lite::future::or(
        async {
            let _ = stream.write_all(&frame).await;
            let _ = stream.shutdown(std::net::Shutdown::Write).await;
            if !linger {
                return;
            }
            let mut sink = [0u8; 4096];
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        },
        async {
            glommio::timer::sleep(Duration::from_millis(REFUSAL_LINGER_MS)).await;
        },
    )
    .await;
}

async fn serve(
    id: ConnId,
    stream: TcpStream,
    conns: Conns,
    admission: Rc<Admission>,
    settings: Rc<ConnSettings>,
) {
    let _ = stream.set_nodelay(true);
    let conn = Rc::new(Conn::new(
        id,
        admission.inbox.clone(),
        settings.metrics.clone(),
    ));
    conns.borrow_mut().insert(id, conn.clone());
    let (reader, writer) = futures_lite::io::split(stream);
    let writing = glommio::spawn_local(write_loop(conn.clone(), writer));
    read_loop(&conn, reader, &admission, &settings).await;
    conn.reader_done.set(true);
    conn.drop_held_waits();
    conn.signal.notify();
    admission.inbox.push(Input::ConnClosed { conn: id });
    writing.await;
    conns.borrow_mut().remove(&id);
    let held_large = conn.held_large.get();
    drop(conn);
    if held_large {
        settings.release_memory();
    }
}

async fn write_loop(conn: Rc<Conn>, mut writer: futures_lite::io::WriteHalf<TcpStream>) {
    let mut taken: Vec<Chunk> = Vec::new();
    let mut closed_at: Option<u64> = None;
    loop {
        if conn.ready.borrow().is_empty() {
            if conn.reader_done.get() {
                let now = SystemClock.now_ms();
                let since = *closed_at.get_or_insert(now);
                if conn.inflight.get() == 0 || now >= since + LINGER_MS {
                    break;
                }
                futures_lite::future::or(
                    conn.signal.wait(),
                    glommio::timer::sleep(Duration::from_millis(LINGER_MS)),
                )
                .await;
                continue;
            }
            conn.signal.wait().await;
            continue;
        }
        std::mem::swap(&mut taken, &mut conn.ready.borrow_mut().chunks);
        if write_chunks(&conn, &mut writer, &mut taken).await.is_err() {
            // The peer is gone: drop what is left, let the reader finish.
            conn.reader_done.set(true);
            break;
        }
    }
    let _ = writer.close().await;
}

/// Writes `chunks` in order, each with one syscall (as many as it takes when the socket
/// takes part), and gives each buffer back to the outbox once written; `chunks` is left
/// empty (its room kept for the next turn).
async fn write_chunks(
    conn: &Conn,
    writer: &mut futures_lite::io::WriteHalf<TcpStream>,
    chunks: &mut Vec<Chunk>,
) -> std::io::Result<()> {
    for chunk in chunks.drain(..) {
        writer.write_all(&chunk.bytes).await?;
        conn.written(chunk.frames, chunk.bytes.len());
        if conn.ready.borrow_mut().give_back(chunk.bytes) {
            conn.held_large.set(true);
        }
    }
    Ok(())
}

/// What ended the reader's wait.
enum Woken {
    Read(std::io::Result<usize>),
    /// The idle sweep asked it to close.
    Idle,
    /// A frame begun did not arrive whole in time.
    FrameLate,
}

async fn read_loop(
    conn: &Rc<Conn>,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
    admission: &Admission,
    settings: &ConnSettings,
) {
    let gate = settings.gate.as_deref();
    let mut buf = vec![0u8; READ_BUFFER_START_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    // When the first bytes of the frame not yet whole arrived (server clock, ms).
    let mut partial_since: Option<u64> = None;
    loop {
        if admission.room(conn, RESERVE_SMALL).await && partial_since.is_some() {
            // The server did not read meanwhile: the frame's time starts again.
            partial_since = Some(SystemClock.now_ms());
        }
        if end == buf.len() {
            make_room(&mut buf, &mut start, &mut end, conn.frame_bytes_max(gate));
        }
        let space = buf.len() - end;
        let late_at = partial_since.map(|at| at.saturating_add(settings.frame_deadline_ms));
        let woken = futures_lite::future::or(
            async { Woken::Read(reader.read(&mut buf[end..]).await) },
            futures_lite::future::or(
                async {
                    conn.close.wait().await;
                    Woken::Idle
                },
                async {
                    let Some(at) = late_at else {
                        return std::future::pending().await;
                    };
                    let wait_ms = at.saturating_sub(SystemClock.now_ms());
                    glommio::timer::sleep(Duration::from_millis(wait_ms)).await;
                    Woken::FrameLate
                },
            ),
        )
        .await;
        let n = match woken {
            Woken::Read(Ok(0) | Err(_)) => return,
            Woken::Read(Ok(n)) => n,
            // The sweep saw it idle; still idle now (nothing owed, no request since):
            // say so and close. Bytes of a partial frame were not a request taken.
            Woken::Idle if conn.idle(SystemClock.now_ms(), settings.idle_ms) => {
                conn.inflight.set(conn.inflight.get() + 1);
                conn.send(0, Err(goodbye(settings.idle_ms)));
                drain(&mut reader).await;
                return;
            }
            Woken::Idle => continue,
            Woken::FrameLate => {
                conn.inflight.set(conn.inflight.get() + 1);
                let message = format!(
                    "a frame did not arrive whole within {} ms of its first bytes; closing \
                     the connection (send each request whole)",
                    settings.frame_deadline_ms
                );
                conn.send(0, Err(ErrorValue::bad_request(message)));
                return;
            }
        };
        end += n;
        let mut took = false;
        let mut read_at = None;
        loop {
            // One read may bring many requests: each waits for room as the first did.
            let frame_max = conn.frame_bytes_max(gate);
            let (decoded, used) = match split_frame(&buf[start..end], frame_max) {
                Ok(Some((payload, used))) => (decode_request(payload), used),
                Ok(None) => break,
                Err(e) => {
                    // The stream cannot be resynchronised: answer, then close.
                    conn.inflight.set(conn.inflight.get() + 1);
                    conn.send(0, Err(frame_refused(e, frame_max)));
                    return;
                }
            };
            let reserve = decoded
                .as_ref()
                .map_or(RESERVE_SMALL, |r| reply_reserve(&r.op));
            start += used;
            took = true;
            // The frames of one read share one clock read (a wait for room reads it anew).
            if admission.room(conn, reserve).await || read_at.is_none() {
                read_at = conn.admitted_at(None);
            }
            take_request(conn, decoded, reserve, used, gate, read_at);
        }
        let now = SystemClock.now_ms();
        if took {
            conn.last_read_ms.set(now);
        }
        if start == end {
            (start, end, partial_since) = (0, 0, None);
            if buf.len() > READ_CHUNK_BYTES {
                // A large frame was taken: give its buffer back.
                conn.held_large.set(true);
                buf.truncate(READ_CHUNK_BYTES);
                buf.shrink_to_fit();
            }
        } else if took || partial_since.is_none() {
            partial_since = Some(now);
        }
        if n == space && buf.len() < READ_CHUNK_BYTES.min(conn.frame_bytes_max(gate)) {
            // Reads fill the buffer: more is coming than it holds.
            let grown = (buf.len() * 2).min(READ_CHUNK_BYTES);
            buf.resize(grown, 0);
        }
    }
}

/// The buffer is full: drops the bytes taken, and when a frame larger than the buffer
/// fills it, grows it as its bytes arrive (to twice its size, at most to the frame's).
fn make_room(buf: &mut Vec<u8>, start: &mut usize, end: &mut usize, frame_max: usize) {
    buf.copy_within(*start..*end, 0);
    *end -= *start;
    *start = 0;
    if *end < buf.len() {
        return;
    }
    let frame = frame_len(&buf[..*end], frame_max).unwrap_or(0);
    let grown = (buf.len() * 2).min(frame);
    if grown > buf.len() {
        buf.resize(grown, 0);
    }
}

/// The answer to a frame the connection cannot take, before it closes.
fn frame_refused(error: FrameError, frame_max: usize) -> ErrorValue {
    match error {
        FrameError::TooLarge { len, .. } if frame_max < FRAME_BYTES_MAX => ErrorValue::new(
            ErrorCode::Unauthorized,
            format!(
                "a frame of {len} bytes before the handshake: until a Hello presents a valid \
                 token, frames of at most {frame_max} bytes are taken; closing the connection"
            ),
        ),
        e @ FrameError::TooLarge { .. } => {
            ErrorValue::bad_request(format!("{e}; closing the connection"))
        }
        e => ErrorValue::bad_request(e.to_string()),
    }
}

/// Takes and drops what the client still sends, until it closes or for
/// `GOODBYE_DRAIN_MS` (a close with unread bytes would reset the connection, and the
/// client could lose the goodbye).
async fn drain(reader: &mut futures_lite::io::ReadHalf<TcpStream>) {
    let mut sink = [0u8; 4096];
    futures_lite::future::or(
        async {
            while let Ok(n) = reader.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        },
        glommio::timer::sleep(Duration::from_millis(GOODBYE_DRAIN_MS)),
    )
    .await;
}

/// Total bytes of the frame starting `buf`, once its header is there (a declared length
/// over `frame_max` counts as `frame_max`).
fn frame_len(buf: &[u8], frame_max: usize) -> Option<usize> {
    let head: [u8; FRAME_HEADER_BYTES] = buf.get(..FRAME_HEADER_BYTES)?.try_into().ok()?;
    Some(FRAME_HEADER_BYTES + (u32::from_be_bytes(head) as usize).min(frame_max))
}

/// A frame's request, or the id to answer its decoding error to (0 when none is found).
fn decode_request(payload: &[u8]) -> Result<Request, (u64, ErrorValue)> {
    decode_payload::<Request>(payload).map_err(|e| {
        let request = decode_payload::<RequestId>(payload).map_or(0, |r| r.id);
        (request, ErrorValue::bad_request(format!("{e}")))
    })
}

/// Takes a request (a frame of `frame_bytes`): admitted with its reply's `reserve`, or
/// answered here (undecodable, refused by the gate).
fn take_request(
    conn: &Conn,
    decoded: Result<Request, (u64, ErrorValue)>,
    reserve: Reserve,
    frame_bytes: usize,
    gate: Option<&Gate>,
    read_at: Option<Instant>,
) {
    conn.inflight.set(conn.inflight.get() + 1);
    let request = match decoded {
        Ok(request) => request,
        Err((request, e)) => {
            conn.reserve(request, RESERVE_SMALL, UNDECODABLE_OP, read_at);
            conn.send(request, Err(e));
            return;
        }
    };
    if let Some(gate) = gate
        && let Err(e) = admitted(gate, conn, &request.op)
    {
        conn.reserve(request.id, RESERVE_SMALL, op_name(&request.op), read_at);
        conn.send(request.id, Err(e));
        return;
    }
    conn.admit(request, reserve, frame_bytes, read_at);
}

/// Asks the gate whether the request may enter the shard; if not, the error to answer
/// (`unauthorized`), the denial logged (within the gate's rate limit).
fn admitted(gate: &Gate, conn: &Conn, op: &Op) -> Result<(), ErrorValue> {
    let mut session = conn.session.get();
    let verdict = gate.check(&mut session, op, SystemClock.now_ms());
    conn.session.set(session);
    conn.sees_all.set(gate.sees_all(session));
    let Err(refusal) = verdict else {
        return Ok(());
    };
    conn.metrics.auth_denials.fetch_add(1, Ordering::Relaxed);
    if let Some(line) = refusal.log_line {
        tracing::warn!(target: "flo::auth", shard = conn.metrics.shard, "{line}");
    }
    Err(refusal.error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::PeerOut;
    use flo_engine::PeerMsg;

    fn test_metrics() -> Arc<ShardMetrics> {
        Arc::new(ShardMetrics::new(0, true))
    }

    fn kv_get() -> Op {
        Op::KvGet {
            namespace: "ns".into(),
            key: "k".into(),
            wait_ms: None,
            after_version: None,
            newer_than_current: false,
        }
    }

    /// Replies go one after another into a chunk until it holds `WRITE_BUFFER_BYTES`; a
    /// written chunk's buffer is reused unless a large reply grew it; every reply decodes
    /// back in order.
    #[test]
    fn the_outbox_packs_replies_into_reused_chunks() {
        let mut outbox = Outbox::default();
        let small = |i: u64| (i, Ok(flo_protocol::Reply::Done));
        for i in 1..=3 {
            let (id, result) = small(i);
            assert!(outbox.encode(id, result) > 0);
        }
        assert_eq!(outbox.chunks.len(), 1);
        assert_eq!(outbox.chunks[0].frames, 3);
        // A large reply joins the chunk (it had room); the next begins another chunk.
        let large = ErrorValue::bad_request("x".repeat(2 * WRITE_BUFFER_BYTES));
        let taken = outbox.encode(4, Err(large));
        assert!(taken > 2 * WRITE_BUFFER_BYTES);
        let (id, result) = small(5);
        outbox.encode(id, result);
        assert_eq!(
            outbox.chunks.iter().map(|c| c.frames).collect::<Vec<_>>(),
            [4, 1]
        );
        let mut ids = Vec::new();
        let chunks = std::mem::take(&mut outbox.chunks);
        let mut freed_large = Vec::new();
        for chunk in chunks {
            let mut at = 0;
            while let Some((response, used)) =
                flo_protocol::decode_frame::<Response>(&chunk.bytes[at..]).expect("decodes")
            {
                ids.push(response.id);
                at += used;
            }
            assert_eq!(at, chunk.bytes.len());
            freed_large.push(outbox.give_back(chunk.bytes));
        }
        assert_eq!(ids, [1, 2, 3, 4, 5]);
        // The grown buffer is freed, the small one kept and used for the next chunk.
        assert_eq!(freed_large, [true, false]);
        let kept = outbox.spare.as_ref().expect("kept").as_ptr();
        let (id, result) = small(6);
        outbox.encode(id, result);
        assert_eq!(outbox.chunks[0].bytes.as_ptr(), kept);
        assert!(outbox.spare.is_none());
    }

    fn run_wait() -> Op {
        Op::RunWait {
            namespace: "ns".into(),
            run_id: "r".into(),
            timeout_ms: 60_000,
        }
    }

    #[test]
    fn a_request_reserves_its_replys_room_until_it_is_answered() {
        let conn = Conn::new(1, Rc::new(Inbox::default()), test_metrics());
        let get = reply_reserve(&kv_get());
        assert_eq!(get.bytes, REPLY_RESERVE_VALUE_BYTES);
        let mut taken = 0;
        while conn.has_room_for(get) {
            conn.inflight.set(conn.inflight.get() + 1);
            conn.admit(
                Request {
                    id: taken,
                    op: kv_get(),
                },
                get,
                40,
                None,
            );
            taken += 1;
        }
        // Reservations alone fill the reply bound: one more read waits.
        assert_eq!(
            taken as usize,
            REPLY_BYTES_QUEUED_MAX / REPLY_RESERVE_VALUE_BYTES
        );
        assert!(!conn.has_room_for(get));
        // A small reply takes the place of a large reservation: room again.
        conn.send(0, Ok(flo_protocol::Reply::Done));
        assert!(conn.has_room_for(get));
        assert_eq!(
            conn.owed_bytes(),
            (taken as usize - 1) * REPLY_RESERVE_VALUE_BYTES + conn.queued_bytes.get()
        );
        for id in 1..taken {
            conn.send(id, Ok(flo_protocol::Reply::Done));
        }
        assert_eq!(conn.reserved_bytes.get(), 0);
        assert!(conn.reservations.borrow().is_empty());
    }

    #[test]
    fn requests_sharing_an_id_release_what_they_reserved_in_full() {
        let conn = Conn::new(1, Rc::new(Inbox::default()), test_metrics());
        conn.reserve(5, reply_reserve(&kv_get()), "kv_get", None);
        conn.reserve(5, RESERVE_SMALL, "kv_get", None);
        conn.release(5);
        // Counted high, never low, until the last is answered.
        assert_eq!(conn.reserved_bytes.get(), REPLY_RESERVE_VALUE_BYTES);
        conn.release(5);
        assert_eq!(conn.reserved_bytes.get(), 0);
    }

    #[test]
    fn waits_beyond_their_budget_are_held_in_order_without_pausing_the_reader() {
        let inbox = Rc::new(Inbox::default());
        let conn = Conn::new(1, inbox.clone(), test_metrics());
        let wait = reply_reserve(&run_wait());
        assert!(wait.waits);
        let fit = (WAIT_REPLY_BYTES_RESERVED_MAX / wait.bytes) as u64;
        for id in 0..fit + 3 {
            assert!(conn.has_room_for(wait), "wait {id}");
            conn.inflight.set(conn.inflight.get() + 1);
            conn.admit(Request { id, op: run_wait() }, wait, 50, None);
        }
        assert_eq!(inbox.len() as u64, fit);
        assert_eq!(conn.held_waits.borrow().len(), 3);
        // Other requests are still taken.
        assert!(conn.has_room_for(reply_reserve(&kv_get())));
        // An answered wait lets the first held one in.
        conn.send(0, Ok(flo_protocol::Reply::Done));
        assert_eq!(inbox.len() as u64, fit + 1);
        assert_eq!(
            conn.held_waits.borrow().front().unwrap().from.request,
            fit + 1
        );
        // A closed connection admits none of them.
        conn.reader_done.set(true);
        conn.send(1, Ok(flo_protocol::Reply::Done));
        conn.drop_held_waits();
        assert_eq!(inbox.len() as u64, fit + 1);
        assert_eq!(conn.held_waits_bytes.get(), 0);
    }

    #[test]
    fn a_read_buffer_grows_with_the_bytes_of_a_large_frame_not_its_header() {
        let mut buf = vec![0u8; READ_BUFFER_START_BYTES];
        buf[..4].copy_from_slice(&(FRAME_BYTES_MAX as u32 - 4).to_be_bytes());
        let (mut start, mut end) = (0, buf.len());
        make_room(&mut buf, &mut start, &mut end, FRAME_BYTES_MAX);
        assert_eq!(buf.len(), 2 * READ_BUFFER_START_BYTES);
        // Before a handshake, a frame is at most a few KiB: the buffer never grows past.
        let mut buf = vec![0u8; UNAUTHENTICATED_FRAME_BYTES_MAX];
        buf[..4].copy_from_slice(&(FRAME_BYTES_MAX as u32).to_be_bytes());
        let (mut start, mut end) = (0, buf.len());
        make_room(
            &mut buf,
            &mut start,
            &mut end,
            UNAUTHENTICATED_FRAME_BYTES_MAX,
        );
        assert_eq!(
            buf.len(),
            FRAME_HEADER_BYTES + UNAUTHENTICATED_FRAME_BYTES_MAX
        );
    }

    #[test]
    fn accept_failures_are_reported_once_per_period_with_a_count() {
        let mut failures = AcceptFailures::default();
        let e = "too many open files";
        let first = failures.note(&e, 1_000).expect("the first is reported");
        assert!(
            first.contains("accepting a connection failed: too many"),
            "{first}"
        );
        for ms in 1_001..1_300 {
            assert_eq!(failures.note(&e, ms), None);
        }
        let next = failures
            .note(&e, 1_000 + ACCEPT_WARNING_EVERY_MS)
            .expect("reported again after the period");
        assert!(next.contains("failed 300 times"), "{next}");
    }

    #[test]
    fn a_shard_behind_on_its_inbox_or_a_peer_queue_takes_no_more_requests() {
        let inbox = Rc::new(Inbox::default());
        let peer = Rc::new(PeerOut::default());
        let admission = Admission {
            inbox: inbox.clone(),
            peers: vec![peer.clone()],
        };
        assert!(!admission.backlogged());
        for conn in 0..SHARD_BACKLOG_MAX as u64 {
            inbox.push(Input::ConnClosed { conn });
        }
        assert!(admission.backlogged());
        let mut taken = std::collections::VecDeque::new();
        inbox.take_all(&mut taken);
        assert!(!admission.backlogged());
        for _ in 0..SHARD_BACKLOG_MAX {
            peer.push(Box::new(PeerMsg::Reply {
                tag: 0,
                result: Ok(flo_protocol::Reply::Done),
            }));
        }
        assert!(admission.backlogged());
    }
}
