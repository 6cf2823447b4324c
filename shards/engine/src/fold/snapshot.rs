//! A shard's fold at an LSN as bytes (a snapshot) and back. Recovery loads the newest valid
//! snapshot and replays only the log after it. What is derived is not written: the index
//! (`Index::rebuild`), the KV expiry order, module bytes and workflow definitions shared by
//! runs (`relink`). Layout: one MessagePack value (everything but the run index), then the
//! run index as raw words (`RunIndex::write_image`).

use crate::fold::archive::{RunIndex, RunIndexError};
use crate::fold::kv::KvStore;
use crate::fold::registry::Registry;
use crate::fold::runs::Runs;
use crate::fold::state::{PendingForward, ShardState};
use crate::fold::streams::Streams;
use crate::fold::workflows::Workflows;
use crate::hash::Partitioning;
use crate::image::Image;
use crate::tables::HashMap;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Bumped when the image changes incompatibly: an older image is then refused (recovery
/// falls back to replaying the log).
pub const SNAPSHOT_FORMAT: u32 = 3;

#[derive(Serialize)]
struct ImageRef<'a> {
    format: u32,
    shard: u32,
    lsn: u64,
    kv: &'a KvStore,
    registry: &'a Registry,
    runs: &'a Runs,
    forwards: &'a VecDeque<PendingForward>,
    remote_applied: &'a HashMap<u32, u64>,
    workflows: &'a Workflows,
    streams: &'a Streams,
}

#[derive(Deserialize)]
struct Decoded {
    format: u32,
    shard: u32,
    lsn: u64,
    kv: KvStore,
    registry: Registry,
    runs: Runs,
    forwards: VecDeque<PendingForward>,
    remote_applied: HashMap<u32, u64>,
    workflows: Workflows,
    /// Absent from images written before streams existed.
    #[serde(default)]
    streams: Streams,
}

/// The fold as an image (at `state.applied_lsn`).
pub fn encode(state: &ShardState) -> Image {
    let image = ImageRef {
        format: SNAPSHOT_FORMAT,
        shard: state.shard,
        lsn: state.applied_lsn,
        kv: &state.kv,
        registry: &state.registry,
        runs: &state.runs,
        forwards: &state.forwards,
        remote_applied: &state.remote_applied,
        workflows: &state.workflows,
        streams: &state.streams,
    };
    let mut out = Vec::new();
    // Plain owned data into a Vec: cannot fail.
    image
        .serialize(&mut rmp_serde::Serializer::new(&mut out))
        .expect("snapshot encodes");
    let mut image = Image::from(out);
    // The run index follows as raw words (the bulk of a large image, shared).
    state.archive.write_image(&mut image);
    image
}

/// Why a snapshot image cannot be loaded (recovery then tries the one before it).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the image does not decode: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("snapshot format {found} is not {SNAPSHOT_FORMAT}")]
    Format { found: u32 },
    #[error("a snapshot of shard {found}, not {expected}")]
    Shard { found: u32, expected: u32 },
    #[error("its run index: {0}")]
    RunIndex(#[from] RunIndexError),
}

/// The fold `encode` wrote, for shard `shard`.
pub fn decode(
    bytes: &[u8],
    shard: u32,
    partitioning: Partitioning,
) -> Result<ShardState, SnapshotError> {
    let mut rest = bytes;
    let image: Decoded = rmp_serde::from_read(&mut rest)?;
    if image.format != SNAPSHOT_FORMAT {
        return Err(SnapshotError::Format {
            found: image.format,
        });
    }
    if image.shard != shard {
        return Err(SnapshotError::Shard {
            found: image.shard,
            expected: shard,
        });
    }
    let mut state = ShardState::new(shard, partitioning);
    state.kv = image.kv;
    state.kv.relink();
    state.registry = image.registry;
    state.registry.relink();
    state.runs = image.runs;
    state.forwards = image.forwards;
    state.remote_applied = image.remote_applied;
    state.workflows = image.workflows;
    state.workflows.relink();
    state.streams = image.streams;
    state.streams.relink();
    state.archive = RunIndex::read_image(rest)?;
    state.applied_lsn = image.lsn;
    Ok(state)
}
