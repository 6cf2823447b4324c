use flo_protocol::{
    ErrorValue, FRAME_BYTES_MAX, FrameError, KvEntry, Op, PROTOCOL_VERSION, Reply, Request,
    Response, StatusInfo, decode_payload, encode_frame, split_frame,
};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach the server: {0}")]
    Io(#[from] io::Error),
    #[error("{}", .0.message)]
    Server(ErrorValue),
    #[error("protocol error: {0}")]
    Protocol(String),
}

impl From<FrameError> for Error {
    fn from(e: FrameError) -> Self {
        Error::Protocol(e.to_string())
    }
}

/// A raw connection: send requests, receive responses, pipelined (many in flight).
pub struct Connection {
    stream: TcpStream,
    out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Connection {
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Connection { stream, out: Vec::new(), buf: vec![0; 64 << 10], start: 0, end: 0 })
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), Error> {
        Ok(self.stream.set_read_timeout(timeout)?)
    }

    /// Queues a request; `flush` sends everything queued.
    pub fn queue(&mut self, request: &Request) -> Result<(), Error> {
        Ok(encode_frame(request, &mut self.out)?)
    }

    pub fn flush(&mut self) -> Result<(), Error> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// The next response already received, without reading the socket.
    pub fn recv_buffered(&mut self) -> Result<Option<Response>, Error> {
        let Some((payload, used)) = split_frame(&self.buf[self.start..self.end], FRAME_BYTES_MAX)? else {
            return Ok(None);
        };
        let response = decode_payload(payload);
        self.start += used;
        Ok(Some(response?))
    }

    /// Receives the next response (whichever request it answers).
    pub fn recv(&mut self) -> Result<Response, Error> {
        loop {
            if let Some(response) = self.recv_buffered()? {
                return Ok(response);
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.end == self.buf.len() {
                let grown = self.buf.len() * 2;
                self.buf.resize(grown.min(FRAME_BYTES_MAX + 8), 0);
            }
            let n = self.stream.read(&mut self.buf[self.end..])?;
            if n == 0 {
                return Err(Error::Io(io::Error::new(io::ErrorKind::UnexpectedEof, "server closed the connection")));
            }
            self.end += n;
        }
    }

    /// A handle for writing from another thread while this one reads.
    pub fn try_clone_stream(&self) -> Result<TcpStream, Error> {
        Ok(self.stream.try_clone()?)
    }
}

/// Options of a KV put.
#[derive(Debug, Clone, Copy, Default)]
pub struct PutOptions {
    pub ttl_ms: Option<u64>,
    pub if_version: Option<u64>,
}

/// A blocking client: one request at a time over one connection, in one namespace.
pub struct Client {
    conn: Connection,
    next_id: u64,
    namespace: String,
    shard_count: u32,
    server_version: String,
}

impl Client {
    /// Connects and performs the handshake.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Self, Error> {
        let conn = Connection::connect(addr)?;
        let mut client =
            Client { conn, next_id: 1, namespace: "default".into(), shard_count: 0, server_version: String::new() };
        let hello = Op::Hello { protocol_version: PROTOCOL_VERSION, client: format!("flo-rust/{}", env!("CARGO_PKG_VERSION")) };
        match client.call(hello)? {
            Reply::Hello { shard_count, server_version, .. } => {
                client.shard_count = shard_count;
                client.server_version = server_version;
            }
            other => return Err(unexpected(other)),
        }
        Ok(client)
    }

    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    pub fn server_version(&self) -> &str {
        &self.server_version
    }

    /// Sends one operation and waits for its reply.
    pub fn call(&mut self, op: Op) -> Result<Reply, Error> {
        let id = self.next_id;
        self.next_id += 1;
        self.conn.queue(&Request { id, op })?;
        self.conn.flush()?;
        loop {
            let response = self.conn.recv()?;
            if response.id == id || response.id == 0 {
                return response.result.map_err(Error::Server);
            }
        }
    }

    pub fn status(&mut self) -> Result<StatusInfo, Error> {
        match self.call(Op::Status)? {
            Reply::Status(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }

    /// Stores `value` under `key`; returns the key's new version.
    pub fn kv_put(&mut self, key: &str, value: &[u8], opts: PutOptions) -> Result<u64, Error> {
        let op = Op::KvPut {
            namespace: self.namespace.clone(),
            key: key.into(),
            value: value.to_vec(),
            ttl_ms: opts.ttl_ms,
            if_version: opts.if_version,
        };
        match self.call(op)? {
            Reply::KvPut { version } => Ok(version),
            other => Err(unexpected(other)),
        }
    }

    pub fn kv_get(&mut self, key: &str) -> Result<Option<KvEntry>, Error> {
        match self.call(Op::KvGet { namespace: self.namespace.clone(), key: key.into() })? {
            Reply::KvValue(entry) => Ok(entry),
            other => Err(unexpected(other)),
        }
    }

    /// Deletes `key`; returns whether it existed.
    pub fn kv_delete(&mut self, key: &str, if_version: Option<u64>) -> Result<bool, Error> {
        match self.call(Op::KvDelete { namespace: self.namespace.clone(), key: key.into(), if_version })? {
            Reply::KvDeleted { deleted } => Ok(deleted),
            other => Err(unexpected(other)),
        }
    }

    /// Entries whose key starts with `prefix`, in key order; the flag says more matched.
    pub fn kv_list(&mut self, prefix: &str, limit: Option<u32>) -> Result<(Vec<KvEntry>, bool), Error> {
        match self.call(Op::KvList { namespace: self.namespace.clone(), prefix: prefix.into(), limit })? {
            Reply::KvList { entries, truncated } => Ok((entries, truncated)),
            other => Err(unexpected(other)),
        }
    }
}

fn unexpected(reply: Reply) -> Error {
    Error::Protocol(format!("unexpected reply: {reply:?}"))
}
