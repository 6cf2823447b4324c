//! Blocking reads: a `KvGet` with `wait_ms` is parked on the shard owning its key until the
//! key holds a version newer than `after_version` (any version: it exists; with
//! `newer_than_current`, newer than the version it holds when the read arrives), then answered
//! with that entry once the record that wrote it is durable; at its deadline it is answered
//! empty. Parked reads are outside the fold (a restart drops them; their clients see the
//! connection close), bounded per shard, and dropped when their connection closes — also
//! when that connection is on another shard, which forwarded the read here and tells this
//! one (`KvWaitAbandon`).
//!
//! What wakes them: while any read is parked, `Core::commit` notes the keys each record
//! writes (`keys_written`); after every input `serve_waits` looks at those keys only.

use super::ops::{absence_lsn, get};
use crate::core::io::{ConnId, Done, PeerRequest, ReplyResult, ReplyTo};
use crate::core::{Core, Waiting};
use crate::shares::{Shares, share_of};
use crate::tables::HashMap;
use flo_protocol::{ErrorCode, ErrorValue, KV_WAIT_MS_MAX, Op, Reply};
use std::collections::BTreeMap;

/// Blocking reads parked on one shard at once; more are refused (`overloaded`).
pub const KV_WAITS_MAX: usize = 4096;
/// Of those, one namespace's at most: a tenant filling the pool leaves room for others.
pub const KV_WAITS_PER_NAMESPACE_MAX: usize = share_of(KV_WAITS_MAX);

/// (namespace, key).
type KeyRef = (String, String);

/// A read waiting for its key.
struct Parked {
    id: u64,
    after_version: u64,
    deadline_ms: u64,
    to: ReplyTo,
}

#[derive(Default)]
pub struct KvWaits {
    by_key: HashMap<KeyRef, Vec<Parked>>,
    /// (deadline, id) → key.
    deadlines: BTreeMap<(u64, u64), KeyRef>,
    /// Who waits where: a client of this shard by connection, another shard's call by
    /// (shard, tag); to drop them when they go away.
    by_conn: HashMap<ConnId, Vec<(u64, KeyRef)>>,
    by_peer: HashMap<(u32, u64), (u64, KeyRef)>,
    /// Reads of this shard's clients forwarded to the key's owner: connection → (owner,
    /// call tag).
    forwarded: HashMap<ConnId, Vec<(u32, u64)>>,
    parked: usize,
    /// Parked reads per namespace (each holds at most `KV_WAITS_PER_NAMESPACE_MAX`).
    shares: Shares,
    next_id: u64,
}

impl KvWaits {
    /// The earliest deadline (wall clock).
    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.keys().next().map(|(d, _)| *d)
    }

    /// Reads parked here.
    pub fn len(&self) -> usize {
        self.parked
    }

    pub fn is_empty(&self) -> bool {
        self.parked == 0
    }

    fn park(&mut self, key: KeyRef, parked: Parked) {
        self.deadlines
            .insert((parked.deadline_ms, parked.id), key.clone());
        match parked.to {
            ReplyTo::Client(c) => self
                .by_conn
                .entry(c.conn)
                .or_default()
                .push((parked.id, key.clone())),
            ReplyTo::Peer { shard, tag } => {
                self.by_peer.insert((shard, tag), (parked.id, key.clone()));
            }
        }
        self.shares.take(&key.0);
        self.by_key.entry(key).or_default().push(parked);
        self.parked += 1;
    }

    /// Removes parked read `id` of `key` from every index; returns it.
    fn unpark(&mut self, key: &KeyRef, id: u64) -> Option<Parked> {
        let list = self.by_key.get_mut(key)?;
        let at = list.iter().position(|p| p.id == id)?;
        let parked = list.swap_remove(at);
        if list.is_empty() {
            self.by_key.remove(key);
        }
        self.parked -= 1;
        self.shares.give_back(&key.0);
        self.deadlines.remove(&(parked.deadline_ms, parked.id));
        match parked.to {
            ReplyTo::Client(c) => {
                if let Some(list) = self.by_conn.get_mut(&c.conn) {
                    list.retain(|(i, _)| *i != id);
                    if list.is_empty() {
                        self.by_conn.remove(&c.conn);
                    }
                }
            }
            ReplyTo::Peer { shard, tag } => {
                self.by_peer.remove(&(shard, tag));
            }
        }
        Some(parked)
    }
}

/// Checks the parameters of a blocking read (before it is routed anywhere).
fn check_wait(wait_ms: u64) -> Result<(), ErrorValue> {
    if wait_ms > KV_WAIT_MS_MAX {
        return Err(ErrorValue::bad_request(format!(
            "a blocking read waits at most {KV_WAIT_MS_MAX} ms, got {wait_ms}; wait again \
             after it answers to wait longer"
        )));
    }
    Ok(())
}

/// Which versions of its key a read shows (and a blocking read waits for).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// Any version: the key exists (`kv get --wait`).
    Any,
    /// A version newer than this (`--after-version V`).
    Version(u64),
    /// A version newer than the one the key holds as the read arrives, any if it holds
    /// none: the next write (`kv get --block`).
    Current,
}

/// `KvGet` on the shard owning the key: the entry if it holds a version `after` accepts,
/// else parked for up to `wait_ms` (answered empty at once when that is 0).
pub fn get_or_wait(
    core: &mut Core,
    waits: &mut KvWaits,
    to: ReplyTo,
    namespace: String,
    key: String,
    wait_ms: Option<u64>,
    after: After,
) {
    let wait_ms = wait_ms.unwrap_or(0);
    if let Err(e) = check_wait(wait_ms) {
        core.reply_op(to, 0, Err(e));
        return;
    }
    let after_version = match after {
        After::Any => None,
        After::Version(v) => Some(v),
        // The version a read now shows (0, newer than none, when it shows none).
        After::Current => match get(core, &namespace, &key).result {
            Ok(Reply::KvValue(Some(entry))) => Some(entry.version),
            _ => Some(0),
        },
    };
    let done = read_newer(core, &namespace, &key, after_version);
    let found = matches!(done.result, Ok(Reply::KvValue(Some(_))) | Err(_));
    if found || wait_ms == 0 {
        core.reply_op(to, done.wait_lsn, done.result);
        return;
    }
    if waits.parked >= KV_WAITS_MAX {
        let e = ErrorValue::new(
            ErrorCode::Overloaded,
            format!(
                "{KV_WAITS_MAX} blocking reads are waiting on this shard already; retry \
                 later or read without waiting"
            ),
        );
        core.reply_op(to, 0, Err(e));
        return;
    }
    if waits.shares.held(&namespace) >= KV_WAITS_PER_NAMESPACE_MAX {
        let e = ErrorValue::new(
            ErrorCode::Overloaded,
            format!(
                "namespace {namespace:?} has {KV_WAITS_PER_NAMESPACE_MAX} blocking reads \
                 waiting on this shard already (its share of the shard's \
                 {KV_WAITS_MAX}); retry later or read without waiting"
            ),
        );
        core.reply_op(to, 0, Err(e));
        return;
    }
    waits.next_id += 1;
    let parked = Parked {
        id: waits.next_id,
        after_version: after_version.unwrap_or(0),
        // Deadlines on the real clock: a test clock moves data, not client patience.
        deadline_ms: core.wall_ms().saturating_add(wait_ms),
        to,
    };
    waits.park((namespace, key), parked);
    // From now on the commit path notes written keys for `serve_waits`.
    core.note_keys_written(Vec::new());
}

/// A read of `key` that shows only a version newer than `after_version`: the entry, or
/// none (waiting for the record that removed it, or the entry it passed over).
fn read_newer(core: &Core, namespace: &str, key: &str, after_version: Option<u64>) -> Done {
    let done = get(core, namespace, key);
    let Some(after) = after_version else {
        return done;
    };
    match done.result {
        Ok(Reply::KvValue(Some(entry))) if entry.version <= after => Done {
            result: Ok(Reply::KvValue(None)),
            wait_lsn: done.wait_lsn,
        },
        result => Done {
            result,
            wait_lsn: done.wait_lsn,
        },
    }
}

/// After an input: answers the reads parked on keys written since the last call, and
/// tells the commit path whether to keep noting written keys.
pub fn serve_waits(core: &mut Core, waits: &mut KvWaits) {
    let written = core.take_keys_written();
    if waits.is_empty() {
        return;
    }
    let now = core.now_ms();
    for key in &written {
        let Some(list) = waits.by_key.get(key) else {
            continue;
        };
        let Some(entry) = core.state().kv.get(&key.0, &key.1, now) else {
            continue;
        };
        let ready: Vec<u64> = list
            .iter()
            .filter(|p| entry.version > p.after_version)
            .map(|p| p.id)
            .collect();
        let (lsn, wire) = (entry.lsn, entry.to_wire(&key.1));
        for id in ready {
            if let Some(parked) = waits.unpark(key, id) {
                // The entry leaves once the record that wrote it is durable.
                core.reply_op(parked.to, lsn, Ok(Reply::KvValue(Some(wire.clone()))));
            }
        }
    }
    core.note_keys_written(written);
}

/// Answers the reads whose deadline passed: empty (nothing newer came in time).
pub fn expire_waits(core: &mut Core, waits: &mut KvWaits) {
    let now = core.wall_ms();
    while let Some(entry) = waits.deadlines.first_entry() {
        if entry.key().0 > now {
            break;
        }
        let ((_, id), key) = entry.remove_entry();
        let Some(parked) = waits.unpark(&key, id) else {
            continue;
        };
        let lsn = timed_out_lsn(core, &key);
        core.reply_op(parked.to, lsn, Ok(Reply::KvValue(None)));
    }
}

/// What an empty answer at the deadline waits for: the absence (or the older entry) it
/// reports must be durable.
fn timed_out_lsn(core: &Core, key: &KeyRef) -> u64 {
    let entry_lsn = core.state().kv.entry(&key.0, &key.1).map_or(0, |e| e.lsn);
    absence_lsn(core, &key.0, &key.1).max(entry_lsn)
}

/// A blocking read of a client of this shard goes to the key's owner: remembered by
/// connection, so that a closed connection releases it there.
pub fn forward_wait(core: &mut Core, waits: &mut KvWaits, owner: u32, to: ReplyTo, op: Op) {
    if let Op::KvGet {
        wait_ms: Some(wait_ms),
        ..
    } = &op
        && let Err(e) = check_wait(*wait_ms)
    {
        core.reply_op(to, 0, Err(e));
        return;
    }
    let tag = core.call(owner, 0, PeerRequest::Client(op), Waiting::KvWaitRelay(to));
    if let ReplyTo::Client(c) = to {
        waits
            .forwarded
            .entry(c.conn)
            .or_default()
            .push((owner, tag));
    }
}

/// The owner answered a forwarded blocking read.
pub fn on_wait_relayed(
    core: &mut Core,
    waits: &mut KvWaits,
    tag: u64,
    to: ReplyTo,
    result: ReplyResult,
) {
    if let ReplyTo::Client(c) = to
        && let Some(list) = waits.forwarded.get_mut(&c.conn)
    {
        list.retain(|(_, t)| *t != tag);
        if list.is_empty() {
            waits.forwarded.remove(&c.conn);
        }
    }
    core.reply_op(to, 0, result);
}

/// A client connection closed: its parked reads are dropped (nobody to answer), here and
/// on the shards its forwarded reads wait on.
pub fn conn_closed(core: &mut Core, waits: &mut KvWaits, conn: ConnId) {
    for (id, key) in waits.by_conn.remove(&conn).unwrap_or_default() {
        waits.unpark(&key, id);
    }
    for (owner, tag) in waits.forwarded.remove(&conn).unwrap_or_default() {
        // Forget the call: an answer already on its way finds nobody.
        core.take_call(tag);
        core.tell(owner, 0, PeerRequest::KvWaitAbandon { tag });
    }
}

/// Shard `from` says the client of its read `tag` is gone: drop the read unanswered.
pub fn abandon_wait(waits: &mut KvWaits, from: u32, tag: u64) {
    if let Some((id, key)) = waits.by_peer.get(&(from, tag)).cloned() {
        waits.unpark(&key, id);
    }
}
