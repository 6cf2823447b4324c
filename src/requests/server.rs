//! The handshake and the operations on the server as a whole.

use super::request::{TypedRequest, unexpected};
use crate::client::Error;
use flo_protocol::{Op, PROTOCOL_VERSION, Reply, ShardMap, StatusInfo, Token};

/// The handshake of this SDK, presenting `token` when there is one.
pub(crate) struct Hello<'a> {
    pub token: Option<&'a str>,
}

/// What the server tells of itself in the handshake.
pub(crate) struct ServerHello {
    pub shard_count: u32,
    pub server_version: String,
    /// The shard serving the connection (None: a server that does not say).
    pub shard: Option<u32>,
}

impl TypedRequest for Hello<'_> {
    type Output = ServerHello;

    fn op(self, _namespace: &str) -> Op {
        Op::Hello {
            protocol_version: PROTOCOL_VERSION,
            client: format!("flo-rust/{}", env!("CARGO_PKG_VERSION")),
            token: self.token.map(Token::new),
        }
    }

    fn output(reply: Reply) -> Result<ServerHello, Error> {
        match reply {
            Reply::Hello {
                shard_count,
                server_version,
                shard,
                ..
            } => Ok(ServerHello {
                shard_count,
                server_version,
                shard,
            }),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::status`.
pub(crate) struct Status;

impl TypedRequest for Status {
    type Output = StatusInfo;

    fn op(self, _namespace: &str) -> Op {
        Op::Status
    }

    fn output(reply: Reply) -> Result<StatusInfo, Error> {
        match reply {
            Reply::Status(info) => Ok(info),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::shard_map`.
pub(crate) struct GetShardMap;

impl TypedRequest for GetShardMap {
    type Output = ShardMap;

    fn op(self, _namespace: &str) -> Op {
        Op::ShardMap
    }

    fn output(reply: Reply) -> Result<ShardMap, Error> {
        match reply {
            Reply::ShardMap(map) => Ok(map),
            other => Err(unexpected(other)),
        }
    }
}

/// `Client::advance_clock`.
pub(crate) struct AdvanceClock {
    pub ms: u64,
}

impl TypedRequest for AdvanceClock {
    type Output = ();

    fn op(self, _namespace: &str) -> Op {
        Op::TestAdvanceClock { ms: self.ms }
    }

    fn output(reply: Reply) -> Result<(), Error> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}
