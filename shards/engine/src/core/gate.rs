//! The durability gate: an effect or a task that depends on a record leaves only once
//! that record is durable. Held in LSN order, released by `set_durable`.

use super::agenda::{Agenda, Task};
use super::io::{Effect, ReplyResult};
use flo_protocol::ErrorCode;
use std::collections::VecDeque;

/// When a client's mutation is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// After its records are written and synced (the default).
    Sync,
    /// Before the sync; the flusher writes and syncs right behind (within ~1 ms).
    Async,
}

impl Durability {
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Sync => "sync",
            Durability::Async => "async",
        }
    }
}

enum Held {
    Effect(Effect),
    Task(Task),
}

pub struct Gate {
    durability: Durability,
    durable_lsn: u64,
    /// LSN of the last record that removed a key: a read that finds no key waits for it.
    absence_lsn: u64,
    /// LSN of the last `RunsForgotten`: an answer that finds no run (not found) waits for
    /// it, or a crash could bring back a run a client was told is gone.
    forgotten_lsn: u64,
    /// LSN of the last definition record: a read of definitions waits for it.
    definitions_lsn: u64,
    /// Effects and tasks waiting for their LSN to be durable, in LSN order.
    held: VecDeque<(u64, Held)>,
    /// Effects free to leave, in the order they were released.
    out: Vec<Effect>,
}

/// What a committed record means to the gate (noted by the commit path).
#[derive(Debug, Clone, Copy, Default)]
pub struct Marks {
    pub removes_keys: bool,
    pub definition: bool,
    pub forgets: bool,
}

impl Gate {
    pub fn new(durability: Durability) -> Gate {
        Gate {
            durability,
            durable_lsn: 0,
            absence_lsn: 0,
            forgotten_lsn: 0,
            definitions_lsn: 0,
            held: VecDeque::new(),
            out: Vec::new(),
        }
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The record at `lsn` was committed.
    pub fn note(&mut self, lsn: u64, marks: Marks) {
        if marks.removes_keys {
            self.absence_lsn = lsn;
        }
        if marks.definition {
            self.definitions_lsn = lsn;
        }
        if marks.forgets {
            self.forgotten_lsn = lsn;
        }
    }

    /// Recovery is done: everything up to `lsn` is durable.
    pub fn recovered(&mut self, lsn: u64) {
        self.durable_lsn = lsn;
    }

    pub fn durable_lsn(&self) -> u64 {
        self.durable_lsn
    }

    pub fn absence_lsn(&self) -> u64 {
        self.absence_lsn
    }

    pub fn definitions_lsn(&self) -> u64 {
        self.definitions_lsn
    }

    /// Everything up to `lsn` is on disk: release what waited for it, in LSN order.
    pub fn set_durable(&mut self, lsn: u64, agenda: &mut Agenda) {
        self.durable_lsn = self.durable_lsn.max(lsn);
        let mut released = 0;
        while self
            .held
            .front()
            .is_some_and(|(l, _)| *l <= self.durable_lsn)
        {
            let (l, held) = self.held.pop_front().expect("checked");
            debug_assert!(
                l >= released,
                "held effects out of LSN order: {l} after {released}"
            );
            released = l;
            self.release(held, agenda);
        }
    }

    fn release(&mut self, held: Held, agenda: &mut Agenda) {
        match held {
            Held::Effect(e) => self.out.push(e),
            Held::Task(t) => agenda.push(t),
        }
    }

    fn hold(&mut self, lsn: u64, held: Held, agenda: &mut Agenda) {
        if lsn <= self.durable_lsn {
            self.release(held, agenda);
            return;
        }
        // Mostly appended in LSN order; a read of an older record may wait for less.
        let at = self.held.partition_point(|(l, _)| *l <= lsn);
        if at == self.held.len() {
            self.held.push_back((lsn, held));
        } else {
            self.held.insert(at, (lsn, held));
        }
    }

    pub fn hold_effect(&mut self, lsn: u64, effect: Effect, agenda: &mut Agenda) {
        self.hold(lsn, Held::Effect(effect), agenda);
    }

    pub fn hold_task(&mut self, lsn: u64, task: Task, agenda: &mut Agenda) {
        self.hold(lsn, Held::Task(task), agenda);
    }

    /// An effect that depends on nothing durable.
    pub fn emit(&mut self, effect: Effect) {
        self.out.push(effect);
    }

    /// The LSN the answer to a client's operation waits for: `lsn`, and with a not-found
    /// answer the last forgetting too; nothing under async durability (the client chose
    /// to be answered before the sync).
    pub fn client_lsn(&self, lsn: u64, result: &ReplyResult) -> u64 {
        match self.durability {
            // What is not found may have been forgotten by a record not yet durable.
            Durability::Sync
                if result
                    .as_ref()
                    .is_err_and(|e| e.code == ErrorCode::NotFound) =>
            {
                lsn.max(self.forgotten_lsn)
            }
            Durability::Sync => lsn,
            Durability::Async => 0,
        }
    }

    pub fn take_effects(&mut self, into: &mut Vec<Effect>) {
        into.append(&mut self.out);
    }

    /// Effects and tasks still waiting for durability.
    pub fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Whether an effect or task waits for a record at `lsn` or after.
    pub fn waits_for(&self, lsn: u64) -> bool {
        self.held.back().is_some_and(|(l, _)| *l >= lsn)
    }
}
