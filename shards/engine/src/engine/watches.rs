//! Clients waiting for a run to become final (`RunWait`, `WorkflowWait`, invoke/start with
//! wait): answered when it does, or with its current status at their deadline.

use crate::core::io::ReplyTo;
use crate::ids::RunKey;
use crate::tables::HashMap;
use std::collections::BTreeMap;

/// A watched run and whether it is a workflow run.
pub type Watched = (RunKey, bool);

#[derive(Default)]
pub struct Watches {
    /// Each run's waiters: (deadline, seq, who).
    by_run: HashMap<Watched, Vec<(u64, u64, ReplyTo)>>,
    /// (deadline, seq) → run; an answered wait leaves it at once (a run answered long
    /// before its waiters' deadlines would otherwise keep them: millions under load).
    deadlines: BTreeMap<(u64, u64), Watched>,
    next_seq: u64,
}

impl Watches {
    pub fn watch(&mut self, run: Watched, deadline_ms: u64, to: ReplyTo) {
        self.next_seq += 1;
        self.deadlines
            .insert((deadline_ms, self.next_seq), run.clone());
        self.by_run
            .entry(run)
            .or_default()
            .push((deadline_ms, self.next_seq, to));
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
            out.extend(gone.into_iter().map(|(_, _, to)| (run.clone(), to)));
        }
        out
    }

    pub fn next_deadline(&self) -> Option<u64> {
        self.deadlines.keys().next().map(|(d, _)| *d)
    }

    /// Deadlines held (as many as waits: none is left behind by an answer).
    #[cfg(test)]
    pub fn deadlines_len(&self) -> usize {
        self.deadlines.len()
    }

    pub fn len(&self) -> usize {
        self.by_run.values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::io::ClientRef;

    #[test]
    fn an_answered_wait_leaves_no_deadline_behind() {
        let mut w = Watches::default();
        let to = |request| ReplyTo::Client(ClientRef { conn: 1, request });
        for i in 0..100u64 {
            let run = (("ns".to_string(), format!("r{i}")), false);
            w.watch(run.clone(), 60_000 + i, to(i));
            assert_eq!(w.take(&run).len(), 1);
        }
        assert_eq!((w.len(), w.deadlines_len()), (0, 0));
        assert_eq!(w.next_deadline(), None);
    }
}
