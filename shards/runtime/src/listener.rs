//! Client connections: the accept loop, and per connection a reader that decodes frames
//! into inputs for the shard loop and a writer that sends replies as they come (in any
//! order, many per syscall).

use crate::inbox::{Inbox, Signal};
use ahash::AHashMap as HashMap;
use flo_engine::auth::{Gate, Session};
use flo_engine::clock::{Clock, SystemClock};
use flo_engine::{ClientRef, ConnId, Input, ReplyResult};
use flo_protocol::{
    ErrorValue, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FrameError, Request, RequestId, Response,
    decode_payload, encode_frame, split_frame,
};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// Requests of one connection being processed at once; the reader pauses beyond it.
pub(crate) const INFLIGHT_REQUESTS_MAX: usize = 4096;
/// Bytes of replies of one connection waiting to be sent; the reader pauses beyond it
/// (a client that does not read its replies stops being read).
pub(crate) const REPLY_BYTES_QUEUED_MAX: usize = 32 << 20;
/// Inputs waiting for the shard loop, or messages waiting to go to one other shard, beyond
/// which no connection of the shard is read: a shard that falls behind stops taking new
/// requests instead of queueing without bound (work already taken goes on).
pub(crate) const SHARD_BACKLOG_MAX: usize = 100_000;
/// After telling an idle client it is closed, how long its connection still takes (and
/// drops) what the client sends, so that the close does not reset the goodbye away.
const GOODBYE_DRAIN_MS: u64 = 2000;
const READ_CHUNK_BYTES: usize = 64 << 10;
/// After its client closed, how long a connection still waits to deliver owed replies.
const LINGER_MS: u64 = 30_000;

pub(crate) struct Conn {
    ready: RefCell<Vec<Vec<u8>>>,
    signal: Signal,
    inflight: Cell<usize>,
    /// Bytes of the replies in `ready` and being written.
    queued_bytes: Cell<usize>,
    room: Signal,
    reader_done: Cell<bool>,
    /// When the reader last took bytes (server clock, ms).
    last_read_ms: Cell<u64>,
    /// The idle sweep asks the reader to close.
    close: Signal,
    /// Who the handshake authenticated (servers with an auth file).
    session: Cell<Session>,
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

    /// Waits until `conn` may take another request: room on the connection, and a shard
    /// not backlogged (looked at again every millisecond while it is).
    async fn room(&self, conn: &Conn) {
        loop {
            if conn.full() {
                conn.room.wait().await;
            } else if self.backlogged() {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            } else {
                return;
            }
        }
    }
}

/// The open connections of a shard, by id.
pub(crate) type Conns = Rc<RefCell<HashMap<ConnId, Rc<Conn>>>>;

pub(crate) fn encode_response(id: u64, result: ReplyResult) -> Vec<u8> {
    let mut out = Vec::new();
    let response = Response { id, result };
    if let Err(e) = encode_frame(&response, &mut out) {
        out.clear();
        let result = Err(match e {
            // Stored data too large for one reply: the client can ask for less.
            FrameError::TooLarge { len, max } => ErrorValue::bad_request(format!(
                "the reply is {len} bytes, over the {max}-byte frame limit: ask for less \
                 (a smaller --limit; histories page with --limit and --after)"
            )),
            e => ErrorValue::internal(format!("cannot send the reply: {e}")),
        });
        if encode_frame(&Response { id, result }, &mut out).is_err() {
            out.clear();
        }
    }
    out
}

impl Conn {
    /// Queues a reply for sending.
    pub fn send(&self, request: u64, result: ReplyResult) {
        let frame = encode_response(request, result);
        if frame.is_empty() {
            return;
        }
        self.queued_bytes.set(self.queued_bytes.get() + frame.len());
        self.ready.borrow_mut().push(frame);
        self.signal.notify();
    }

    /// Whether the reader must wait for the writer before taking more requests.
    fn full(&self) -> bool {
        self.inflight.get() >= INFLIGHT_REQUESTS_MAX
            || self.queued_bytes.get() >= REPLY_BYTES_QUEUED_MAX
    }

    /// Nothing owed and nothing read for `idle_ms`.
    fn idle(&self, now_ms: u64, idle_ms: u64) -> bool {
        self.inflight.get() == 0 && now_ms.saturating_sub(self.last_read_ms.get()) >= idle_ms
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

/// A shard's gate on client requests: None without an auth file.
type GateRef = Option<Rc<Gate>>;

pub(crate) async fn accept_loop(
    shard: u32,
    listener: TcpListener,
    conns: Conns,
    admission: Rc<Admission>,
    limit: ConnLimit,
    gate: GateRef,
    idle_ms: u64,
) {
    use std::sync::atomic::Ordering;
    let limit = Rc::new(limit);
    // Connection ids: unique per shard for its lifetime.
    let mut next_id: ConnId = 0;
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if limit.open.fetch_add(1, Ordering::Relaxed) >= limit.max {
                    limit.open.fetch_sub(1, Ordering::Relaxed);
                    glommio::spawn_local(refuse(stream, limit.max)).detach();
                    continue;
                }
                next_id += 1;
                let task = serve(
                    next_id,
                    stream,
                    conns.clone(),
                    admission.clone(),
                    gate.clone(),
                    idle_ms,
                );
                let limit = limit.clone();
                glommio::spawn_local(async move {
                    task.await;
                    limit.open.fetch_sub(1, Ordering::Relaxed);
                })
                .detach();
            }
            Err(e) => {
                crate::stderr::say!("warning: shard {shard}: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// A connection over the bound: told why (as the answer to its first request), closed.
async fn refuse(mut stream: TcpStream, max: usize) {
    let e = ErrorValue::new(
        flo_protocol::ErrorCode::Overloaded,
        format!(
            "the server has {max} connections open, the most it takes (--max-connections); retry later"
        ),
    );
    let frame = encode_response(0, Err(e));
    let _ = futures_lite::future::or(
        async {
            let _ = stream.write_all(&frame).await;
            let _ = stream.shutdown(std::net::Shutdown::Write).await;
            // Take what the client sends (its handshake) until it closes: a close with
            // unread bytes would reset the connection and could lose the answer.
            let mut sink = [0u8; 4096];
            while let Ok(n) = stream.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        },
        async {
            glommio::timer::sleep(Duration::from_millis(2000)).await;
        },
    )
    .await;
}

async fn serve(
    id: ConnId,
    stream: TcpStream,
    conns: Conns,
    admission: Rc<Admission>,
    gate: GateRef,
    idle_ms: u64,
) {
    let _ = stream.set_nodelay(true);
    let conn = Rc::new(Conn {
        ready: RefCell::new(Vec::new()),
        signal: Signal::default(),
        inflight: Cell::new(0),
        queued_bytes: Cell::new(0),
        room: Signal::default(),
        reader_done: Cell::new(false),
        last_read_ms: Cell::new(SystemClock.now_ms()),
        close: Signal::default(),
        session: Cell::new(Session::Anonymous),
    });
    conns.borrow_mut().insert(id, conn.clone());
    let (reader, writer) = futures_lite::io::split(stream);
    let writing = glommio::spawn_local(write_loop(conn.clone(), writer));
    read_loop(id, &conn, reader, &admission, gate.as_deref(), idle_ms).await;
    conn.reader_done.set(true);
    conn.signal.notify();
    admission.inbox.push(Input::ConnClosed { conn: id });
    writing.await;
    conns.borrow_mut().remove(&id);
}

async fn write_loop(conn: Rc<Conn>, mut writer: futures_lite::io::WriteHalf<TcpStream>) {
    let mut out = Vec::with_capacity(READ_CHUNK_BYTES);
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
        let frames = std::mem::take(&mut *conn.ready.borrow_mut());
        out.clear();
        for frame in &frames {
            out.extend_from_slice(frame);
        }
        if writer.write_all(&out).await.is_err() {
            // The peer is gone: drop what is left, let the reader finish.
            conn.reader_done.set(true);
            break;
        }
        conn.inflight
            .set(conn.inflight.get().saturating_sub(frames.len()));
        conn.queued_bytes
            .set(conn.queued_bytes.get().saturating_sub(out.len()));
        conn.room.notify();
    }
    let _ = writer.close().await;
}

async fn read_loop(
    id: ConnId,
    conn: &Rc<Conn>,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
    admission: &Admission,
    gate: Option<&Gate>,
    idle_ms: u64,
) {
    let inbox = &*admission.inbox;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    loop {
        admission.room(conn).await;
        if end == buf.len() {
            // Make room: drop consumed bytes, grow for a frame larger than the buffer.
            buf.copy_within(start..end, 0);
            end -= start;
            start = 0;
            let need = frame_len(&buf[..end])
                .unwrap_or(0)
                .max(end + READ_CHUNK_BYTES / 2);
            if need > buf.len() {
                buf.resize(need, 0);
            }
        }
        let read =
            futures_lite::future::or(async { Some(reader.read(&mut buf[end..]).await) }, async {
                conn.close.wait().await;
                None
            })
            .await;
        let n = match read {
            Some(Ok(0) | Err(_)) => return,
            Some(Ok(n)) => n,
            // The sweep saw it idle; still idle now (nothing owed, nothing read since):
            // say so and close. Bytes of a partial frame were not a request taken.
            None if conn.idle(SystemClock.now_ms(), idle_ms) => {
                conn.inflight.set(conn.inflight.get() + 1);
                conn.send(0, Err(goodbye(idle_ms)));
                drain(&mut reader).await;
                return;
            }
            None => continue,
        };
        conn.last_read_ms.set(SystemClock.now_ms());
        end += n;
        loop {
            // One read may bring many requests: each waits for room as the first did.
            admission.room(conn).await;
            match split_frame(&buf[start..end], FRAME_BYTES_MAX) {
                Ok(Some((payload, used))) => {
                    handle_frame(id, conn, payload, inbox, gate);
                    start += used;
                }
                Ok(None) => break,
                Err(e @ FrameError::TooLarge { .. }) => {
                    // The stream cannot be resynchronised: answer, then close.
                    conn.inflight.set(conn.inflight.get() + 1);
                    let message = format!("{e}; closing the connection");
                    conn.send(0, Err(ErrorValue::bad_request(message)));
                    return;
                }
                Err(e) => {
                    conn.inflight.set(conn.inflight.get() + 1);
                    conn.send(0, Err(ErrorValue::bad_request(e.to_string())));
                    return;
                }
            }
        }
        if start == end {
            (start, end) = (0, 0);
        }
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

/// Total bytes of the frame starting `buf`, once its header is there.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let head: [u8; FRAME_HEADER_BYTES] = buf.get(..FRAME_HEADER_BYTES)?.try_into().ok()?;
    Some(FRAME_HEADER_BYTES + (u32::from_be_bytes(head) as usize).min(FRAME_BYTES_MAX))
}

fn handle_frame(id: ConnId, conn: &Conn, payload: &[u8], inbox: &Inbox, gate: Option<&Gate>) {
    conn.inflight.set(conn.inflight.get() + 1);
    match decode_payload::<Request>(payload) {
        Ok(Request { id: request, op }) => {
            if let Some(gate) = gate
                && !admitted(gate, conn, request, &op)
            {
                return;
            }
            inbox.push(Input::Client {
                from: ClientRef { conn: id, request },
                op,
            })
        }
        Err(e) => {
            let request = decode_payload::<RequestId>(payload).map_or(0, |r| r.id);
            conn.send(request, Err(ErrorValue::bad_request(format!("{e}"))));
        }
    }
}

/// Asks the gate whether the request may enter the shard; if not, answers it
/// `unauthorized` and logs the denial (within the gate's rate limit).
fn admitted(gate: &Gate, conn: &Conn, request: u64, op: &flo_protocol::Op) -> bool {
    let mut session = conn.session.get();
    let verdict = gate.check(&mut session, op, SystemClock.now_ms());
    conn.session.set(session);
    let Err(refusal) = verdict else {
        return true;
    };
    if let Some(line) = refusal.log_line {
        crate::stderr::queued(line);
    }
    conn.send(request, Err(refusal.error));
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::PeerOut;
    use flo_engine::PeerMsg;

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
