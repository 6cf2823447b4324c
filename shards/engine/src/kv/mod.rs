//! The namespaced key-value store's operations: client reads and writes, blocking reads
//! parked until a key is written, and the delivery of guest writes to the shards owning
//! their keys. The store itself is `fold::kv`.

mod forward;
mod ops;
mod waits;

pub use forward::{Forwarder, on_forwarded, on_remote_writes, start_forwards};
pub use ops::{get, guest_read, guest_value, kv_delete, kv_list, kv_put, sweep_expired};
#[cfg(feature = "test-support")]
pub use waits::KV_WAITS_MAX;
pub use waits::{
    After, KvWaits, abandon_wait, conn_closed, expire_waits, forward_wait, get_or_wait,
    on_wait_relayed, serve_waits,
};
