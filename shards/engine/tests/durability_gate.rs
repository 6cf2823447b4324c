//! Regressions of the old server's shape, proved on the engine alone: an effect that
//! depends on a record never leaves the shard before that record is durable — the guest KV
//! writes forwarded to another shard, a definition change fanned out by the coordinator, and
//! a read or delete that observes an absence.

use flo_engine::clock::ManualClock;
use flo_engine::hash::{PARTITIONS_DEFAULT, Partitioning};
use flo_engine::testing::PeerRequest;
use flo_engine::{ClientRef, Durability, Effect, Engine, EngineConfig, ExecResult, Input, PeerMsg};
use flo_protocol::{ActionKind, ActionSpec, InvokeSpec, Op, Reply};

const NS: &str = "default";

struct Cluster {
    engines: Vec<Engine>,
    next_request: u64,
    clock: ManualClock,
}

impl Cluster {
    fn new(shards: u32) -> Cluster {
        let clock = ManualClock::new(1_000_000);
        let partitioning = Partitioning::new(PARTITIONS_DEFAULT, shards);
        let engines = (0..shards)
            .map(|shard| {
                let config = EngineConfig {
                    shard,
                    partitioning,
                    durability: Durability::Sync,
                    retention_ms: flo_engine::testing::RETENTION_MS_DEFAULT,
                    peer_timeout_ms: u64::MAX,
                    quotas: Default::default(),
                    limits: Default::default(),
                };
                let mut e = Engine::new(config, Box::new(clock.clone()), Box::new(clock.clone()));
                e.recovered(0, 1);
                e
            })
            .collect();
        let mut cluster = Cluster {
            engines,
            next_request: 0,
            clock,
        };
        for s in 0..shards {
            cluster.step(s, Input::Started);
        }
        cluster
    }

    fn step(&mut self, shard: u32, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        self.engines[shard as usize].step(input, &mut out);
        out
    }

    /// Everything appended on `shard` is now durable.
    fn sync(&mut self, shard: u32) -> Vec<Effect> {
        let lsn = self.engines[shard as usize].last_lsn();
        let _ = self.engines[shard as usize].take_batch(Vec::new());
        self.step(shard, Input::Durable { lsn, segments: 1 })
    }

    fn client(&mut self, shard: u32, op: Op) -> (ClientRef, Vec<Effect>) {
        self.next_request += 1;
        let from = ClientRef {
            conn: 1,
            request: self.next_request,
        };
        (from, self.step(shard, Input::Client { from, op }))
    }

    /// Delivers every message among `effects` (and what they cause) until none is left;
    /// syncing each shard's log as it goes. Returns the client replies seen.
    fn settle(&mut self, from: u32, effects: Vec<Effect>) -> Vec<(ClientRef, Reply)> {
        let mut queue: Vec<(u32, Effect)> = effects.into_iter().map(|e| (from, e)).collect();
        let mut replies = Vec::new();
        for _ in 0..10_000 {
            if queue.is_empty() {
                for s in 0..self.engines.len() as u32 {
                    if self.engines[s as usize].durable_lsn() < self.engines[s as usize].last_lsn()
                    {
                        queue.extend(self.sync(s).into_iter().map(|e| (s, e)));
                    }
                }
                if queue.is_empty() {
                    return replies;
                }
            }
            let (at, effect) = queue.remove(0);
            match effect {
                Effect::Send { shard, msg } => {
                    let out = self.step(shard, Input::Peer { from: at, msg });
                    queue.extend(out.into_iter().map(|e| (shard, e)));
                }
                Effect::Reply { to, result } => {
                    replies.push((to, result.expect("the operation succeeds")));
                }
                Effect::Compile { job, .. } => {
                    let out = self.step(
                        at,
                        Input::Compiled {
                            job,
                            result: Ok(None),
                        },
                    );
                    queue.extend(out.into_iter().map(|e| (at, e)));
                }
                _ => {}
            }
        }
        panic!("the cluster did not settle");
    }
}

fn wasm_action(name: &str) -> Op {
    Op::ActionRegister(ActionSpec {
        namespace: NS.into(),
        name: name.into(),
        kind: ActionKind::Wasm,
        wasm: Some(b"(module)".to_vec()),
        timeout_ms: None,
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
}

fn sends(effects: &[Effect]) -> Vec<&PeerRequest> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Send { msg, .. } => match &**msg {
                PeerMsg::Request { req, .. } => Some(req),
                PeerMsg::Reply { .. } => None,
            },
            _ => None,
        })
        .collect()
}

fn reply_to(effects: &[Effect], to: ClientRef) -> Option<&Reply> {
    effects.iter().find_map(|e| match e {
        Effect::Reply { to: t, result } if *t == to => result.as_ref().as_ref().ok(),
        _ => None,
    })
}

/// A key of namespace `NS` that `shard` owns.
fn key_on(cluster: &Cluster, shard: u32) -> String {
    let p = cluster.engines[0].partitioning();
    (0..)
        .map(|i| format!("key-{i}"))
        .find(|k| p.shard_of(NS, k) == shard)
        .expect("some key hashes to every shard")
}

#[test]
fn a_definition_reaches_other_shards_only_once_durable_on_the_coordinator() {
    let mut c = Cluster::new(2);
    let (to, out) = c.client(0, wasm_action("a"));
    let job = out
        .iter()
        .find_map(|e| match e {
            Effect::Compile { job, .. } => Some(*job),
            _ => None,
        })
        .expect("the module is compiled first");
    let out = c.step(
        0,
        Input::Compiled {
            job,
            result: Ok(None),
        },
    );
    assert!(
        sends(&out).is_empty(),
        "the definition left before it was durable on the coordinator: {out:?}"
    );
    assert!(reply_to(&out, to).is_none());
    let out = c.sync(0);
    assert!(
        matches!(sends(&out)[..], [PeerRequest::Definition(_)]),
        "once durable the change goes to the other shard: {out:?}"
    );
    let replies = c.settle(0, out);
    assert!(
        matches!(&replies[..], [(t, Reply::Action(info))] if *t == to && info.name == "a"),
        "{replies:?}"
    );
    assert!(c.engines[1].state().registry.get(NS, "a").is_some());
}

#[test]
fn guest_writes_to_another_shards_key_leave_only_once_the_completion_is_durable() {
    let mut c = Cluster::new(2);
    let (_, out) = c.client(0, wasm_action("writer"));
    c.settle(0, out);
    let remote_key = key_on(&c, 1);
    let invoke = Op::ActionInvoke(InvokeSpec {
        namespace: NS.into(),
        action: "writer".into(),
        input: b"{}".to_vec(),
        priority: None,
        delay_ms: None,
        idempotency_key: None,
        labels: None,
        wait_ms: None,
    });
    let (_, out) = c.client(0, invoke);
    let exec = out
        .iter()
        .find_map(|e| match e {
            Effect::Execute(x) => Some(x.exec),
            _ => None,
        })
        .expect("the run executes");
    c.sync(0);
    let result = ExecResult {
        output: Ok(b"{}".to_vec()),
        outcome: None,
        kv_writes: vec![(remote_key.clone(), Some(b"v".to_vec()))],
        logs: Vec::new(),
        state_patch: None,
    };
    let out = c.step(0, Input::Executed { exec, result });
    assert!(
        sends(&out).is_empty(),
        "the guest's write left before its completion was durable: {out:?}"
    );
    let out = c.sync(0);
    assert!(
        matches!(sends(&out)[..], [PeerRequest::RemoteWrites { .. }]),
        "{out:?}"
    );
    c.settle(0, out);
    let entry = c.engines[1].state().kv.get(NS, &remote_key, u64::MAX / 2);
    assert_eq!(entry.map(|e| e.value.to_vec()), Some(b"v".to_vec()));
}

#[test]
fn a_read_or_delete_that_finds_no_key_waits_for_the_delete_that_removed_it() {
    let mut c = Cluster::new(1);
    let put = Op::KvPut {
        namespace: NS.into(),
        key: "k".into(),
        value: b"v".to_vec(),
        ttl_ms: None,
        if_version: None,
        if_exists: false,
    };
    let (_, out) = c.client(0, put);
    c.settle(0, out);
    let delete = || Op::KvDelete {
        namespace: NS.into(),
        key: "k".into(),
        if_version: None,
    };
    let (deleted, out) = c.client(0, delete());
    assert!(
        reply_to(&out, deleted).is_none(),
        "the delete is not durable yet"
    );
    let get = Op::KvGet {
        namespace: NS.into(),
        key: "k".into(),
        wait_ms: None,
        after_version: None,
        newer_than_current: false,
    };
    let (read, out) = c.client(0, get);
    assert!(
        reply_to(&out, read).is_none(),
        "the read saw an absence that a crash could undo: {out:?}"
    );
    let (again, out) = c.client(0, delete());
    assert!(
        reply_to(&out, again).is_none(),
        "the second delete saw an absence that a crash could undo: {out:?}"
    );
    let out = c.sync(0);
    assert!(matches!(reply_to(&out, read), Some(Reply::KvValue(None))));
    assert!(matches!(
        reply_to(&out, again),
        Some(Reply::KvDeleted { deleted: false })
    ));
    assert!(matches!(
        reply_to(&out, deleted),
        Some(Reply::KvDeleted { deleted: true })
    ));
}

fn put(key: &str, value: &[u8], ttl_ms: Option<u64>) -> Op {
    Op::KvPut {
        namespace: NS.into(),
        key: key.into(),
        value: value.to_vec(),
        ttl_ms,
        if_version: None,
        if_exists: false,
    }
}

#[test]
fn a_read_past_the_expiry_of_a_put_not_yet_durable_waits_for_it() {
    let mut c = Cluster::new(1);
    let (_, out) = c.client(0, put("k", b"old", None));
    c.settle(0, out);
    // A put with a TTL that expires before it is durable: a crash would bring "old" back,
    // so "absent" may be answered only once the put is durable.
    c.client(0, put("k", b"new", Some(10)));
    c.clock.set(1_000_000 + 20);
    let get = Op::KvGet {
        namespace: NS.into(),
        key: "k".into(),
        wait_ms: None,
        after_version: None,
        newer_than_current: false,
    };
    let (read, out) = c.client(0, get);
    assert!(reply_to(&out, read).is_none(), "{out:?}");
    let out = c.sync(0);
    assert!(matches!(reply_to(&out, read), Some(Reply::KvValue(None))));
}

#[test]
fn a_guests_read_of_another_shards_key_is_answered_once_the_value_is_durable() {
    let mut c = Cluster::new(2);
    let key = key_on(&c, 1);
    c.client(1, put(&key, b"v", None));
    let read = PeerMsg::Request {
        tag: 7,
        req: PeerRequest::KvRead {
            namespace: NS.into(),
            key,
        },
    };
    let out = c.step(
        1,
        Input::Peer {
            from: 0,
            msg: Box::new(read),
        },
    );
    let answered = |effects: &[Effect]| {
        effects.iter().any(|e| {
            matches!(e, Effect::Send { shard: 0, msg }
                if matches!(**msg, PeerMsg::Reply { tag: 7, .. }))
        })
    };
    assert!(
        !answered(&out),
        "the guest read a value a crash could undo: {out:?}"
    );
    let out = c.sync(1);
    assert!(answered(&out), "{out:?}");
}

#[test]
fn a_definition_read_on_the_coordinator_waits_for_the_change_to_be_durable() {
    let mut c = Cluster::new(1);
    let register = Op::ActionRegister(ActionSpec {
        namespace: NS.into(),
        name: "job".into(),
        kind: ActionKind::User,
        wasm: None,
        timeout_ms: None,
        max_retries: None,
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    });
    let (registered, out) = c.client(0, register);
    assert!(reply_to(&out, registered).is_none(), "not durable yet");
    let get = Op::ActionGet {
        namespace: NS.into(),
        name: "job".into(),
    };
    let (read, out) = c.client(0, get);
    assert!(
        reply_to(&out, read).is_none(),
        "the read showed a definition a crash could undo: {out:?}"
    );
    let out = c.sync(0);
    assert!(matches!(reply_to(&out, read), Some(Reply::Action(_))));
    assert!(matches!(reply_to(&out, registered), Some(Reply::Action(_))));
}
