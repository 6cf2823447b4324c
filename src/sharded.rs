//! `ShardedClient`: a blocking connection on each shard of a server, and its shard map, so
//! that an operation on a key goes through the connection on the key's owner (no hop
//! between shards) and new runs are spread evenly over the shards.

use crate::client::{Client, Error, PutOptions};
use flo_protocol::{KvEntry, ShardMap};
use std::net::{SocketAddr, ToSocketAddrs};

/// One [`Client`] on each shard of a server (each made with
/// [`Client::connect_on_shard`]) and the server's [`ShardMap`].
///
/// - [`for_key`](Self::for_key) is the connection on the shard that owns a key in this
///   client's namespace: a KV operation (or anything else named by that key) sent through
///   it is served there without a hop to another shard. The `kv_*` methods route so.
/// - [`in_turn`](Self::in_turn) takes the connections in turn: a run belongs to the shard of the
///   connection that started it, so starting runs through `in_turn` spreads them evenly.
///
/// ```no_run
/// use flo::{PutOptions, ShardedClient};
///
/// let mut client = ShardedClient::connect("127.0.0.1:9000", None)?.with_namespace("myapp");
/// client.kv_put("user:42", b"{\"name\":\"Ada\"}", PutOptions::default())?;
/// let entry = client.kv_get("user:42")?;
/// let run = client.in_turn().invoke("send-email", b"{}", Default::default())?;
/// # let _ = (entry, run);
/// # Ok::<(), flo::Error>(())
/// ```
pub struct ShardedClient {
    /// By shard: `clients[s]` is on shard `s`.
    clients: Vec<Client>,
    map: ShardMap,
    namespace: String,
    turn: usize,
}

impl ShardedClient {
    /// Connects to every shard of the server at `addr`, presenting `token` when there is
    /// one, and asks for its shard map. Fails as [`Client::connect_on_shard`] does (a
    /// server that does not name its shards, or a shard no connection landed on).
    pub fn connect(addr: impl ToSocketAddrs, token: Option<&str>) -> Result<Self, Error> {
        let addr: SocketAddr = addr.to_socket_addrs()?.next().ok_or_else(|| {
            Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the address resolves to nothing",
            ))
        })?;
        let mut first = Client::connect_as(addr, token)?;
        let map = first.shard_map()?;
        let Some(landed) = first.shard() else {
            return Err(Error::Protocol(
                "the server does not say which shard serves a connection".into(),
            ));
        };
        let shards = first.shard_count().max(1);
        let mut slots: Vec<Option<Client>> = (0..shards).map(|_| None).collect();
        if let Some(slot) = slots.get_mut(landed as usize) {
            *slot = Some(first);
        }
        let mut clients = Vec::with_capacity(slots.len());
        for (shard, slot) in slots.into_iter().enumerate() {
            clients.push(match slot {
                Some(client) => client,
                None => Client::connect_on_shard(addr, token, shard as u32)?,
            });
        }
        Ok(ShardedClient {
            clients,
            map,
            namespace: "default".into(),
            turn: 0,
        })
    }

    /// Sets the namespace of every connection's typed calls (and of the keys routed).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        let namespace = &self.namespace;
        self.clients = std::mem::take(&mut self.clients)
            .into_iter()
            .map(|c| c.with_namespace(namespace.clone()))
            .collect();
        self
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn shard_count(&self) -> u32 {
        self.clients.len() as u32
    }

    /// The server's shard map, as it was when this client connected.
    pub fn shard_map(&self) -> &ShardMap {
        &self.map
    }

    /// The shard that owns `key` in this client's namespace.
    pub fn shard_of(&self, key: &str) -> u32 {
        self.map.shard_of(&self.namespace, key).unwrap_or(0) % self.shard_count()
    }

    /// The connection on the shard that owns `key` in this client's namespace.
    pub fn for_key(&mut self, key: &str) -> &mut Client {
        let shard = self.shard_of(key) as usize;
        &mut self.clients[shard]
    }

    /// The connection on `shard`, if the server has it.
    pub fn on_shard(&mut self, shard: u32) -> Option<&mut Client> {
        self.clients.get_mut(shard as usize)
    }

    /// The connections in turn, one shard after the other: for starting runs (a run belongs
    /// to the shard it was started on) and for anything not named by a key.
    pub fn in_turn(&mut self) -> &mut Client {
        let shard = self.turn % self.clients.len();
        self.turn = self.turn.wrapping_add(1);
        &mut self.clients[shard]
    }

    /// [`Client::kv_put`] through the key's owner.
    pub fn kv_put(&mut self, key: &str, value: &[u8], opts: PutOptions) -> Result<u64, Error> {
        self.for_key(key).kv_put(key, value, opts)
    }

    /// [`Client::kv_get`] through the key's owner.
    pub fn kv_get(&mut self, key: &str) -> Result<Option<KvEntry>, Error> {
        self.for_key(key).kv_get(key)
    }

    /// [`Client::kv_delete`] through the key's owner.
    pub fn kv_delete(&mut self, key: &str, if_version: Option<u64>) -> Result<bool, Error> {
        self.for_key(key).kv_delete(key, if_version)
    }
}
