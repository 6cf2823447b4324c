//! A shard's fold at an LSN as bytes (a snapshot) and back. Recovery loads the newest valid
//! snapshot and replays only the log after it. What is derived is not written: the index
//! (`Index::rebuild`), the KV expiry order, module bytes and workflow definitions shared by
//! runs (`relink`).
//!
//! Layout (formats 4 and 5): the format as a MessagePack integer; one MessagePack value with every
//! store but KV (encoded on the shard while it pauses); the KV store (a copy-on-write view
//! whose values are shared with the live store, encoded on the writer's thread: the shard
//! pauses for the view, not the bytes); the run index as raw words
//! (`RunIndex::write_image`; from format 5 on its time marks carry floors: the earliest
//! record their runs' documents point at). Byte fields are MessagePack `bin`.
//!
//! Format 3 (one MessagePack array holding every store, KV fourth; byte fields as arrays
//! of integers) is still read: a data directory whose log below its snapshot is gone must
//! start after an upgrade.

use crate::fold::archive::{RunIndex, RunIndexError};
use crate::fold::events::RunEvents;
use crate::fold::kv::KvStore;
use crate::fold::registry::Registry;
use crate::fold::runs::Runs;
use crate::fold::schedules::Schedules;
use crate::fold::search::SearchIndex;
use crate::fold::state::{PendingForward, ShardState};
use crate::fold::streams::Streams;
use crate::fold::webhooks::Webhooks;
use crate::fold::workflows::Workflows;
use crate::hash::Partitioning;
use crate::image::{Encode, Image, Part};
use crate::tables::HashMap;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io;
use std::sync::Arc;

/// Bumped when the image changes incompatibly. Formats from `SNAPSHOT_FORMAT_READ_MIN` on
/// are read; any other is refused by recovery, which then will not start unless the log
/// still holds every record (see `shards/runtime/src/boot.rs`).
pub const SNAPSHOT_FORMAT: u32 = 5;
/// The oldest format this code reads.
pub const SNAPSHOT_FORMAT_READ_MIN: u32 = 3;
/// Bytes of image decoded between two calls of a restore's progress callback.
const PROGRESS_STEP_BYTES: u64 = 4 << 20;

/// Everything but the KV store and the run index (format 4), as `encode` writes it field
/// by field (the event feed on the writer's thread).
#[cfg(test)]
#[derive(Serialize)]
struct HeadRef<'a> {
    shard: u32,
    lsn: u64,
    registry: &'a Registry,
    runs: &'a Runs,
    forwards: &'a VecDeque<PendingForward>,
    remote_applied: &'a HashMap<u32, u64>,
    workflows: &'a Workflows,
    streams: &'a Streams,
    schedules: &'a Schedules,
    search: &'a SearchIndex,
    events: &'a RunEvents,
    webhooks: &'a Webhooks,
}

#[derive(Deserialize)]
struct Head {
    shard: u32,
    lsn: u64,
    registry: Registry,
    runs: Runs,
    forwards: VecDeque<PendingForward>,
    remote_applied: HashMap<u32, u64>,
    workflows: Workflows,
    streams: Streams,
    /// Absent from images written before schedules existed.
    #[serde(default)]
    schedules: Schedules,
    #[serde(default)]
    search: SearchIndex,
    /// Absent from images written before the event feed.
    #[serde(default)]
    events: RunEvents,
    /// Absent from images written before webhooks.
    #[serde(default)]
    webhooks: Webhooks,
}

/// Format 3: one value with every store.
#[derive(Deserialize)]
struct DecodedV3 {
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

/// The KV store's view is encoded on the writer's thread.
/// Fields of `Head`, the stores' array.
const HEAD_FIELDS: u32 = 12;

impl Encode for RunEvents {
    fn encode(&self, out: &mut dyn io::Write) -> io::Result<()> {
        self.serialize(&mut rmp_serde::Serializer::new(out))
            .map_err(io::Error::other)
    }
}

impl Encode for KvStore {
    fn encode(&self, out: &mut dyn io::Write) -> io::Result<()> {
        self.serialize(&mut rmp_serde::Serializer::new(out))
            .map_err(io::Error::other)
    }
}

fn encode_value(value: &impl Serialize, out: &mut Vec<u8>) {
    // Plain owned data into a Vec: cannot fail.
    value
        .serialize(&mut rmp_serde::Serializer::new(out))
        .expect("snapshot encodes");
}

/// The fold as an image (at `state.applied_lsn`). Costs the shard the encoding of every
/// store but KV, and a view of the KV store (its keys copied, its values shared).
pub fn encode(state: &ShardState) -> Image {
    let mut head = Vec::new();
    encode_value(&SNAPSHOT_FORMAT, &mut head);
    // The stores as the one array `Head` reads, written a field at a time so that the
    // event feed (65,536 events: ~7 ms to encode) is encoded on the writer's thread from
    // a clone sharing its full chunks; the same bytes as `HeadRef`'s.
    rmp::encode::write_array_len(&mut head, HEAD_FIELDS).expect("a Vec takes the bytes");
    encode_value(&state.shard, &mut head);
    encode_value(&state.applied_lsn, &mut head);
    encode_value(&state.registry, &mut head);
    encode_value(&state.runs, &mut head);
    encode_value(&state.forwards, &mut head);
    encode_value(&state.remote_applied, &mut head);
    encode_value(&state.workflows, &mut head);
    encode_value(&state.streams, &mut head);
    encode_value(&state.schedules, &mut head);
    encode_value(&state.search, &mut head);
    let mut image = Image::from(head);
    image.push(Part::later(Arc::new(state.events.clone())));
    let mut rest = Vec::new();
    encode_value(&state.webhooks, &mut rest);
    image.push(Part::Bytes(rest));
    image.push(Part::later(Arc::new(state.kv.view())));
    // The run index follows as raw words (shared).
    state.archive.write_image(&mut image);
    image
}

/// Why a snapshot image cannot be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the image does not decode: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    /// Not damaged: written by another version of flo. Never set aside as damaged.
    #[error(
        "snapshot format {found}, and this flo reads formats {SNAPSHOT_FORMAT_READ_MIN} to \
         {SNAPSHOT_FORMAT}"
    )]
    Format { found: u32 },
    #[error("a snapshot of shard {found}, not {expected}")]
    Shard { found: u32, expected: u32 },
    #[error("its run index: {0}")]
    RunIndex(#[from] RunIndexError),
}

/// The image's bytes as a reader that reports how far it got.
struct Progress<'a, 'p> {
    rest: &'a [u8],
    read: u64,
    reported: u64,
    report: &'p mut dyn FnMut(u64),
}

impl io::Read for Progress<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.rest.read(buf)?;
        self.read += n as u64;
        if self.read - self.reported >= PROGRESS_STEP_BYTES {
            self.reported = self.read;
            (self.report)(self.read);
        }
        Ok(n)
    }
}

/// The format of an image: its first value, or the first element of the one array of
/// format 3 and before.
fn format_of(bytes: &[u8]) -> Result<(u32, bool), SnapshotError> {
    let bad = |what: &str| {
        SnapshotError::Decode(rmp_serde::decode::Error::Syntax(format!(
            "the image does not start with its format ({what})"
        )))
    };
    let mut rd = bytes;
    match rmp::decode::read_marker(&mut rd).map_err(|_| bad("empty"))? {
        rmp::Marker::FixArray(_) | rmp::Marker::Array16 | rmp::Marker::Array32 => {
            let mut rd = bytes;
            rmp::decode::read_array_len(&mut rd).map_err(|_| bad("an array"))?;
            let found = rmp::decode::read_int(&mut rd).map_err(|_| bad("its first element"))?;
            Ok((found, true))
        }
        _ => {
            let mut rd = bytes;
            let found = rmp::decode::read_int(&mut rd).map_err(|_| bad("an integer"))?;
            Ok((found, false))
        }
    }
}

/// The fold `encode` wrote, for shard `shard`; `progress` hears the bytes decoded so far
/// every few MiB.
pub fn decode(
    bytes: &[u8],
    shard: u32,
    partitioning: Partitioning,
    progress: &mut dyn FnMut(u64),
) -> Result<ShardState, SnapshotError> {
    let (format, legacy) = format_of(bytes)?;
    if !(SNAPSHOT_FORMAT_READ_MIN..=SNAPSHOT_FORMAT).contains(&format) || legacy != (format < 4) {
        return Err(SnapshotError::Format { found: format });
    }
    let mut reader = Progress {
        rest: bytes,
        read: 0,
        reported: 0,
        report: progress,
    };
    let mut state = ShardState::new(shard, partitioning);
    let (found, lsn) = if legacy {
        let image: DecodedV3 = rmp_serde::from_read(&mut reader)?;
        debug_assert_eq!(image.format, format);
        state.kv = image.kv;
        state.registry = image.registry;
        state.runs = image.runs;
        state.forwards = image.forwards;
        state.remote_applied = image.remote_applied;
        state.workflows = image.workflows;
        state.streams = image.streams;
        (image.shard, image.lsn)
    } else {
        let _format: u32 = rmp_serde::from_read(&mut reader)?;
        let head: Head = rmp_serde::from_read(&mut reader)?;
        state.kv = rmp_serde::from_read(&mut reader)?;
        state.registry = head.registry;
        state.runs = head.runs;
        state.forwards = head.forwards;
        state.remote_applied = head.remote_applied;
        state.workflows = head.workflows;
        state.streams = head.streams;
        state.schedules = head.schedules;
        state.search = head.search;
        state.events = head.events;
        state.webhooks = head.webhooks;
        (head.shard, head.lsn)
    };
    if found != shard {
        return Err(SnapshotError::Shard {
            found,
            expected: shard,
        });
    }
    state.kv.relink();
    state.registry.relink();
    state.workflows.relink();
    state.streams.relink();
    state.search.relink();
    state.webhooks.rebuild(&state.workflows);
    state.archive = RunIndex::read_image(reader.rest, format >= 5)?;
    (reader.report)(bytes.len() as u64);
    state.applied_lsn = lsn;
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fold::kv::PutCondition;
    use crate::fold::record::Record;

    fn partitioning() -> Partitioning {
        Partitioning::new(crate::hash::PARTITIONS_DEFAULT, 1)
    }

    fn put(state: &mut ShardState, key: &str, value: Vec<u8>) {
        let record = state
            .kv
            .plan_put(
                "ns".into(),
                key.into(),
                value,
                None,
                PutCondition::default(),
                0,
            )
            .unwrap();
        state.apply(state.applied_lsn + 1, record);
    }

    /// 64 values of 64 KiB: 4 MiB of payload.
    fn state_with_values() -> (ShardState, u64) {
        let mut state = ShardState::default();
        let mut payload = 0;
        for i in 0..64u32 {
            let value: Vec<u8> = (0..64 << 10).map(|b: u32| (b ^ i) as u8).collect();
            payload += value.len() as u64;
            put(&mut state, &format!("key-{i:03}"), value);
        }
        (state, payload)
    }

    #[test]
    fn an_image_round_trips_and_reports_its_progress() {
        let (state, _) = state_with_values();
        let bytes = encode(&state).to_bytes();
        let mut heard = Vec::new();
        let back = decode(&bytes, 0, partitioning(), &mut |n| heard.push(n)).unwrap();
        assert_eq!(back.digest(), state.digest());
        assert_eq!(back.applied_lsn, state.applied_lsn);
        assert!(heard.len() > 1, "{heard:?}");
        assert_eq!(heard.last(), Some(&(bytes.len() as u64)));
        assert!(heard.windows(2).all(|w| w[0] <= w[1]), "{heard:?}");
    }

    #[test]
    fn an_image_of_byte_values_is_about_as_large_as_they_are() {
        let (state, payload) = state_with_values();
        let len = encode(&state).len();
        assert!(
            len >= payload && len < payload + payload / 100,
            "{len} for {payload}"
        );
    }

    #[test]
    fn an_image_taken_does_not_change_with_what_the_store_does_after() {
        let (mut state, _) = state_with_values();
        let image = encode(&state);
        let before = state.digest();
        put(&mut state, "key-000", b"changed".to_vec());
        state.apply(
            state.applied_lsn + 1,
            Record::KvDelete {
                namespace: "ns".into(),
                key: "key-001".into(),
            },
        );
        let back = decode(&image.to_bytes(), 0, partitioning(), &mut |_| {}).unwrap();
        assert_eq!(back.digest(), before);
    }

    /// `encode` writes the stores a field at a time (the event feed as a view encoded
    /// later): the same bytes as the one `HeadRef` value it replaced.
    #[test]
    fn the_stores_are_written_as_one_head_wrote_them() {
        let (mut state, _) = state_with_values();
        for n in 1..=(crate::fold::events::EVENTS_KEPT as u64 + 1000) {
            state.events.push_for_tests(crate::fold::events::RunEvent {
                pos: n << 3,
                kind: crate::fold::events::EventKind::StepFinished,
                at_ms: n,
                namespace: "ns".into(),
                run_id: format!("run-{n}").into(),
                workflow: "wf".into(),
                step: Some("charge".into()),
            });
        }
        let mut expected = Vec::new();
        encode_value(&SNAPSHOT_FORMAT, &mut expected);
        let stores = HeadRef {
            shard: state.shard,
            lsn: state.applied_lsn,
            registry: &state.registry,
            runs: &state.runs,
            forwards: &state.forwards,
            remote_applied: &state.remote_applied,
            workflows: &state.workflows,
            streams: &state.streams,
            schedules: &state.schedules,
            search: &state.search,
            events: &state.events,
            webhooks: &state.webhooks,
        };
        encode_value(&stores, &mut expected);
        let bytes = encode(&state).to_bytes();
        assert!(bytes.starts_with(&expected), "the stores' bytes changed");
        let back = decode(&bytes, 0, partitioning(), &mut |_| {}).unwrap();
        assert_eq!(back.events, state.events);
        assert_eq!(back.digest(), state.digest());
    }

    /// A snapshot file flo wrote in format 3 (see `testdata/snapshot-format-3/README.md`):
    /// header (magic, LSN, image length), image, marks, CRC.
    #[test]
    fn an_image_of_format_3_loads() {
        let file: &[u8] = include_bytes!(
            "../../../../testdata/snapshot-format-3/shard-000/snapshot-00000000000000000019.snap"
        );
        let len = u64::from_le_bytes(file[16..24].try_into().unwrap()) as usize;
        let image = &file[24..24 + len];
        assert_eq!(format_of(image).unwrap(), (3, true));
        let state = decode(image, 0, partitioning(), &mut |_| {}).unwrap();
        assert_eq!(state.applied_lsn, 19);
        let value = &state.kv.entry("default", "key-3").unwrap().value;
        assert_eq!(&value[..], b"value 3 from format 3");
        assert_eq!(state.kv.key_count(), 11);
        let digest = state.digest().join("\n");
        assert!(digest.contains("work-1"), "{digest}");
        assert!(digest.contains("wfrun-1"), "{digest}");
        // Written again, it is the current format and loads alike.
        let again = encode(&state).to_bytes();
        assert_eq!(format_of(&again).unwrap(), (SNAPSHOT_FORMAT, false));
        let back = decode(&again, 0, partitioning(), &mut |_| {}).unwrap();
        assert_eq!(back.digest(), state.digest());
    }

    #[test]
    fn an_image_of_another_format_is_refused_for_its_format() {
        let mut image = Vec::new();
        encode_value(&(SNAPSHOT_FORMAT + 1), &mut image);
        image.extend_from_slice(&[0x90; 16]);
        let Err(err) = decode(&image, 0, partitioning(), &mut |_| {}) else {
            panic!("loaded")
        };
        assert!(
            matches!(err, SnapshotError::Format { found } if found == SNAPSHOT_FORMAT + 1),
            "{err}"
        );
        assert!(err.to_string().contains("reads formats 3 to 5"), "{err}");
        // Format 2 (an array, like 3): refused for its format, not as damaged.
        let old = rmp_serde::to_vec(&(2u32, 0u32, 5u64)).unwrap();
        let Err(err) = decode(&old, 0, partitioning(), &mut |_| {}) else {
            panic!("loaded")
        };
        assert!(matches!(err, SnapshotError::Format { found: 2 }), "{err}");
    }
}
