//! Clients waiting for a run to become final (`RunWait`, `WorkflowWait`, invoke/start with
//! wait): answered when it does, or with its current status at their deadline; dropped
//! unanswered when their connection closes. Bounded per connection and per shard.

use crate::core::io::{ConnId, ReplyTo};
use crate::ids::RunKey;
use crate::tables::HashMap;
use std::collections::{BTreeMap, BTreeSet};

/// Waits one client connection may hold on runs at once (here, and relayed to the shards
/// that own the runs); one more answers `overloaded`.
pub const WATCHES_PER_CONN_MAX: usize = 1024;
/// Waits a shard holds at once, for all clients; one more answers `overloaded`.
pub const WATCHES_PER_SHARD_MAX: usize = 65_536;

/// A watched run and whether it is a workflow run.
pub type Watched = (RunKey, bool);

/// A wait's place in `deadlines`: (deadline, seq).
type WaitId = (u64, u64);

#[derive(Default)]
pub struct Watches {
    /// Each run's waiters: (deadline, seq, who).
    by_run: HashMap<Watched, Vec<(u64, u64, ReplyTo)>>,
    /// (deadline, seq) → run; an answered wait leaves it at once (a run answered long
    /// before its waiters' deadlines would otherwise keep them: millions under load).
    deadlines: BTreeMap<WaitId, Watched>,
    /// The waits of this shard's clients, by connection.
    by_conn: HashMap<ConnId, BTreeSet<WaitId>>,
    /// The waits of other shards' clients, by (shard, call tag).
    by_peer: HashMap<(u32, u64), WaitId>,
    /// Waits this shard's clients sent to the runs' owners, by connection: (owner, tag).
    relayed: HashMap<ConnId, Vec<(u32, u64)>>,
    relayed_len: usize,
    next_seq: u64,
}

impl Watches {
    /// Whether `to` may wait on one more run; why not, if not.
    pub fn room_for(&self, to: &ReplyTo) -> Result<(), String> {
        if self.deadlines.len() >= WATCHES_PER_SHARD_MAX {
            return Err(format!(
                "this shard holds {WATCHES_PER_SHARD_MAX} waits on runs, the most it takes; \
                 retry later, or wait with fewer clients"
            ));
        }
        if let ReplyTo::Client(c) = to
            && self.conn_len(c.conn) >= WATCHES_PER_CONN_MAX
        {
            return Err(format!(
                "this connection waits on {WATCHES_PER_CONN_MAX} runs, the most one connection \
                 may; wait for fewer at once, or over more connections"
            ));
        }
        Ok(())
    }

    fn conn_len(&self, conn: ConnId) -> usize {
        self.by_conn.get(&conn).map_or(0, BTreeSet::len)
            + self.relayed.get(&conn).map_or(0, Vec::len)
    }

    pub fn watch(&mut self, run: Watched, deadline_ms: u64, to: ReplyTo) {
        self.next_seq += 1;
        let wait = (deadline_ms, self.next_seq);
        self.deadlines.insert(wait, run.clone());
        self.by_run
            .entry(run)
            .or_default()
            .push((wait.0, wait.1, to));
        match to {
            ReplyTo::Client(c) => {
                self.by_conn.entry(c.conn).or_default().insert(wait);
            }
            ReplyTo::Peer { shard, tag } => {
                self.by_peer.insert((shard, tag), wait);
            }
        }
    }

    /// Forgets who waits `wait` (answered, expired or dropped).
    fn forget_waiter(&mut self, wait: WaitId, to: &ReplyTo) {
        match to {
            ReplyTo::Client(c) => {
                if let Some(set) = self.by_conn.get_mut(&c.conn) {
                    set.remove(&wait);
                    if set.is_empty() {
                        self.by_conn.remove(&c.conn);
                    }
                }
            }
            ReplyTo::Peer { shard, tag } => {
                self.by_peer.remove(&(*shard, *tag));
            }
        }
    }

    /// Everyone waiting on `run` (it became final).
    pub fn take(&mut self, run: &Watched) -> Vec<ReplyTo> {
        if self.by_run.is_empty() {
            return Vec::new();
        }
        let Some(list) = self.by_run.remove(run) else {
            return Vec::new();
        };
        list.into_iter()
            .map(|(deadline, seq, to)| {
                self.deadlines.remove(&(deadline, seq));
                self.forget_waiter((deadline, seq), &to);
                to
            })
            .collect()
    }

    /// Waits whose deadline passed at `now_ms`.
    pub fn expire(&mut self, now_ms: u64) -> Vec<(Watched, ReplyTo)> {
        let mut out = Vec::new();
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now_ms {
                break;
            }
            let run = entry.remove();
            let Some(list) = self.by_run.get_mut(&run) else {
                continue;
            };
            let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(list)
                .into_iter()
                .partition(|(d, _, _)| *d <= now_ms);
            *list = kept;
            if list.is_empty() {
                self.by_run.remove(&run);
            }
            for (deadline, seq, to) in gone {
                self.deadlines.remove(&(deadline, seq));
                self.forget_waiter((deadline, seq), &to);
                out.push((run.clone(), to));
            }
        }
        out
    }

    /// Drops wait `wait` unanswered (its client is gone).
    fn drop_wait(&mut self, wait: WaitId) {
        let Some(run) = self.deadlines.remove(&wait) else {
            return;
        };
        let Some(list) = self.by_run.get_mut(&run) else {
            return;
        };
        let to = list
            .iter()
            .position(|(d, s, _)| (*d, *s) == wait)
            .map(|i| list.swap_remove(i).2);
        if list.is_empty() {
            self.by_run.remove(&run);
        }
        if let Some(to) = to {
            self.forget_waiter(wait, &to);
        }
    }

    /// Connection `conn` closed: its waits here are dropped unanswered; returns the waits
    /// it sent to other shards, (owner, tag), for them to drop theirs.
    pub fn conn_closed(&mut self, conn: ConnId) -> Vec<(u32, u64)> {
        for wait in self.by_conn.remove(&conn).unwrap_or_default() {
            self.drop_wait(wait);
        }
        let relayed = self.relayed.remove(&conn).unwrap_or_default();
        self.relayed_len -= relayed.len();
        relayed
    }

    /// Shard `from` says the client of its call `tag` is gone.
    pub fn abandon(&mut self, from: u32, tag: u64) {
        if let Some(wait) = self.by_peer.remove(&(from, tag)) {
            self.drop_wait(wait);
        }
    }

    /// A wait of client connection `conn` went to shard `owner` as call `tag`.
    pub fn relayed(&mut self, conn: ConnId, owner: u32, tag: u64) {
        self.relayed.entry(conn).or_default().push((owner, tag));
        self.relayed_len += 1;
    }

    /// The answer to relayed wait `tag` of `conn` came (or its call was given up).
    pub fn relay_answered(&mut self, conn: ConnId, tag: u64) {
        let Some(list) = self.relayed.get_mut(&conn) else {
            return;
        };
        let before = list.len();
        list.retain(|(_, t)| *t != tag);
        self.relayed_len -= before - list.len();
        if list.is_empty() {
            self.relayed.remove(&conn);
        }
    }

    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.keys().next().map(|(d, _)| *d)
    }

    /// Deadlines held (as many as waits: none is left behind by an answer).
    #[cfg(test)]
    pub fn deadlines_len(&self) -> usize {
        self.deadlines.len()
    }

    /// Waits held here (for this shard's clients and other shards').
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Waits this shard's clients sent to other shards, not answered yet.
    pub fn relayed_len(&self) -> usize {
        self.relayed_len
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::io::ClientRef;

    fn to(conn: ConnId, request: u64) -> ReplyTo {
        ReplyTo::Client(ClientRef { conn, request })
    }

    fn run(i: u64) -> Watched {
        (("ns".to_string(), format!("r{i}")), false)
    }

    #[test]
    fn an_answered_wait_leaves_no_deadline_behind() {
        let mut w = Watches::default();
        for i in 0..100u64 {
            w.watch(run(i), 60_000 + i, to(1, i));
            assert_eq!(w.take(&run(i)).len(), 1);
        }
        assert_eq!((w.len(), w.deadlines_len()), (0, 0));
        assert_eq!(w.next_deadline(), None);
        assert!(w.by_conn.is_empty());
    }

    #[test]
    fn a_closed_connection_leaves_no_wait_behind() {
        let mut w = Watches::default();
        for i in 0..10u64 {
            w.watch(run(i % 3), 60_000 + i, to(1 + i % 2, i));
        }
        w.watch(run(0), 1, ReplyTo::Peer { shard: 1, tag: 9 });
        w.relayed(1, 1, 77);
        assert_eq!(w.conn_closed(1), vec![(1, 77)]);
        assert_eq!((w.len(), w.relayed_len()), (6, 0));
        assert_eq!(w.conn_closed(2), vec![]);
        w.abandon(1, 9);
        assert_eq!((w.len(), w.deadlines_len()), (0, 0));
        assert!(w.by_run.is_empty() && w.by_conn.is_empty() && w.by_peer.is_empty());
    }

    #[test]
    fn a_connection_waits_on_at_most_so_many_runs() {
        let mut w = Watches::default();
        for i in 0..WATCHES_PER_CONN_MAX as u64 {
            assert!(w.room_for(&to(1, i)).is_ok());
            w.watch(run(i), 60_000, to(1, i));
        }
        assert!(w.room_for(&to(1, 0)).is_err());
        assert!(w.room_for(&to(2, 0)).is_ok());
        assert_eq!(w.expire(60_000).len(), WATCHES_PER_CONN_MAX);
        assert!(w.room_for(&to(1, 0)).is_ok());
        assert!(w.by_conn.is_empty());
    }
}
