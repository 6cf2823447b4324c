//! One client connection: a reader that decodes frames and dispatches requests, and a
//! writer that sends replies as they become ready (in any order), many per syscall.

use super::dispatch;
use super::outbox::{Outbox, Signal};
use super::shard::{ReplyResult, ReplyTo, Shard, ShardOp, Target};
use crate::hash::HASH_NAME;
use flo_protocol::{
    ErrorValue, FRAME_BYTES_MAX, FRAME_HEADER_BYTES, FrameError, Op, PROTOCOL_VERSION, Reply,
    Request, RequestId, Response, ShardMap, decode_payload, encode_frame, split_frame,
};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use std::cell::Cell;
use std::rc::Rc;

/// Requests of one connection being processed at once; the reader pauses beyond it.
pub(crate) const INFLIGHT_REQUESTS_MAX: usize = 4096;
const READ_CHUNK_BYTES: usize = 64 << 10;

pub(crate) const SERVER_VERSION: &str = env!("CARGO_PKG_VERSION");

pub(crate) struct Conn {
    pub outbox: Rc<Outbox<Vec<u8>>>,
    inflight: Cell<usize>,
    room: Signal,
    reader_done: Cell<bool>,
}

fn encode_response(id: u64, result: ReplyResult) -> Vec<u8> {
    let mut out = Vec::new();
    let response = Response { id, result };
    if let Err(e) = encode_frame(&response, &mut out) {
        let result = Err(ErrorValue::internal(format!("cannot send the reply: {e}")));
        encode_frame(&Response { id, result }, &mut out).expect("error reply encodes");
    }
    out
}

impl Conn {
    /// Queues a reply that may be sent at once.
    pub fn send_now(&self, id: u64, result: ReplyResult) {
        self.outbox.push_ready(encode_response(id, result));
    }

    /// The client closed its side: replies can no longer reach it.
    pub fn is_closed(&self) -> bool {
        self.reader_done.get()
    }

    pub fn send_when_durable(&self, shard: &Shard, id: u64, lsn: u64, result: ReplyResult) {
        shard.deliver(&self.outbox, lsn, encode_response(id, result));
    }
}

pub(crate) async fn serve(shard: Rc<Shard>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let conn = Rc::new(Conn {
        outbox: Rc::new(Outbox::new(Rc::new(Signal::default()))),
        inflight: Cell::new(0),
        room: Signal::default(),
        reader_done: Cell::new(false),
    });
    let (reader, writer) = futures_lite::io::split(stream);
    let writing = glommio::spawn_local(write_loop(conn.clone(), writer));
    read_loop(&shard, &conn, reader).await;
    conn.reader_done.set(true);
    conn.outbox.signal.notify();
    writing.await;
}

async fn write_loop(conn: Rc<Conn>, mut writer: futures_lite::io::WriteHalf<TcpStream>) {
    let mut out = Vec::with_capacity(READ_CHUNK_BYTES);
    loop {
        if !conn.outbox.has_ready() {
            if conn.reader_done.get() && conn.inflight.get() == 0 {
                break;
            }
            conn.outbox.signal.wait().await;
            continue;
        }
        let frames = conn.outbox.take_ready();
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
        conn.room.notify();
    }
    let _ = writer.close().await;
}

async fn read_loop(
    shard: &Rc<Shard>,
    conn: &Rc<Conn>,
    mut reader: futures_lite::io::ReadHalf<TcpStream>,
) {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    loop {
        while conn.inflight.get() >= INFLIGHT_REQUESTS_MAX {
            conn.room.wait().await;
        }
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
        let n = match reader.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        end += n;
        loop {
            match split_frame(&buf[start..end], FRAME_BYTES_MAX) {
                Ok(Some((payload, used))) => {
                    handle_frame(shard, conn, payload);
                    start += used;
                }
                Ok(None) => break,
                Err(e @ FrameError::TooLarge { .. }) => {
                    // The stream cannot be resynchronised: answer, then close.
                    conn.inflight.set(conn.inflight.get() + 1);
                    conn.send_now(
                        0,
                        Err(ErrorValue::bad_request(format!(
                            "{e}; closing the connection"
                        ))),
                    );
                    return;
                }
                Err(e) => unreachable!("split_frame only reports sizes: {e}"),
            }
        }
        if start == end {
            (start, end) = (0, 0);
        }
    }
}

/// Total bytes of the frame starting `buf`, once its header is there.
fn frame_len(buf: &[u8]) -> Option<usize> {
    let head: [u8; FRAME_HEADER_BYTES] = buf.get(..FRAME_HEADER_BYTES)?.try_into().ok()?;
    Some(FRAME_HEADER_BYTES + (u32::from_be_bytes(head) as usize).min(FRAME_BYTES_MAX))
}

fn handle_frame(shard: &Rc<Shard>, conn: &Rc<Conn>, payload: &[u8]) {
    conn.inflight.set(conn.inflight.get() + 1);
    match decode_payload::<Request>(payload) {
        Ok(request) => dispatch(shard, conn, request),
        Err(e) => {
            let id = decode_payload::<RequestId>(payload).map_or(0, |r| r.id);
            conn.send_now(id, Err(ErrorValue::bad_request(format!("{e}"))));
        }
    }
}

fn dispatch(shard: &Rc<Shard>, conn: &Rc<Conn>, Request { id, op }: Request) {
    let to = ReplyTo::Conn {
        conn: conn.clone(),
        id,
    };
    match shard.target(&op) {
        Target::Shard(target) if target == shard.id => {
            dispatch::handle(shard, ShardOp::Client(op), to)
        }
        Target::Shard(target) => match op {
            Op::TaskAwait { .. } => forward_await(shard, conn, id, target, op),
            op => shard.forward(target, ShardOp::Client(op), to),
        },
        Target::All => {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                let result = dispatch::fan_out(&shard, op).await;
                shard.reply(to, 0, result);
            })
            .detach();
        }
        Target::Here => {
            let result = match op {
                Op::Hello {
                    protocol_version, ..
                } => hello(shard, protocol_version),
                _ => Ok(Reply::ShardMap(ShardMap {
                    hash: HASH_NAME.to_string(),
                    partitions: shard.partitioning.partitions,
                    shard_count: shard.partitioning.shards,
                    owners: shard.partitioning.owners(),
                })),
            };
            conn.send_now(id, result);
        }
    }
}

/// Sends a worker's await to its home shard; tasks that come back after this connection
/// closed are handed back at once instead of waiting for their leases to expire.
fn forward_await(shard: &Rc<Shard>, conn: &Rc<Conn>, id: u64, target: u32, op: Op) {
    let Op::TaskAwait {
        namespace,
        worker_id,
        ..
    } = &op
    else {
        return;
    };
    let (namespace, worker_id) = (namespace.clone(), worker_id.clone());
    let (tx, rx) = futures_channel::oneshot::channel();
    shard.forward(target, ShardOp::Client(op), ReplyTo::Oneshot(tx));
    let (shard, conn) = (shard.clone(), conn.clone());
    glommio::spawn_local(async move {
        let result = rx
            .await
            .unwrap_or_else(|_| Err(ErrorValue::unavailable("shard stopped before replying")));
        match result {
            Ok(Reply::Tasks(tasks)) if conn.is_closed() => {
                super::worker_host::release_assignments(&shard, &namespace, &worker_id, tasks);
            }
            result => conn.send_now(id, result),
        }
    })
    .detach();
}

fn hello(shard: &Shard, protocol_version: u32) -> ReplyResult {
    if protocol_version != PROTOCOL_VERSION {
        return Err(ErrorValue::bad_request(format!(
            "protocol version {protocol_version} is not supported; this server speaks version {PROTOCOL_VERSION}"
        )));
    }
    Ok(Reply::Hello {
        protocol_version: PROTOCOL_VERSION,
        server_version: SERVER_VERSION.to_string(),
        shard_count: shard.partitioning.shards,
        partitions: shard.partitioning.partitions,
    })
}
