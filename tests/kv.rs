//! Key-value store through the SDK against a real server with two shards.

mod common;

use common::{TestServer, temp_dir, wait_until};
use flo::protocol::{ErrorCode, KV_KEY_BYTES_MAX, KV_VALUE_BYTES_MAX, Op, Reply};
use flo::{Client, Error, PutOptions};
use std::time::Duration;

fn put(c: &mut Client, key: &str, value: &[u8]) -> u64 {
    c.kv_put(key, value, PutOptions::default())
        .unwrap_or_else(|e| panic!("put {key:?}: {e}"))
}

/// The error code and message of a call that must fail with a server error.
fn server_error<T: std::fmt::Debug>(result: Result<T, Error>) -> (ErrorCode, String) {
    match result {
        Err(Error::Server(e)) => (e.code, e.message),
        other => panic!("expected a server error, got {other:?}"),
    }
}

/// Every run of digits in `text`, as numbers.
fn numbers_in(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// The message of a call that must fail with `bad_request`.
fn bad<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    let (code, msg) = server_error(result);
    assert_eq!(code, ErrorCode::BadRequest, "{msg}");
    assert!(!msg.is_empty());
    msg
}

fn kv_keys_per_shard(c: &mut Client) -> Vec<u64> {
    c.status()
        .unwrap()
        .shards
        .iter()
        .map(|s| s.kv_keys)
        .collect()
}

fn assert_connection_works(c: &mut Client) {
    let v = put(c, "still-alive", b"yes");
    assert!(v >= 1);
    assert_eq!(c.kv_get("still-alive").unwrap().unwrap().value, b"yes");
}

#[test]
fn put_get_delete_list_work_across_all_shards() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(c.shard_count(), 2);

    const N: usize = 200;
    for i in 0..N {
        assert_eq!(
            put(
                &mut c,
                &format!("k/{i:03}"),
                format!("value {i}").as_bytes()
            ),
            1
        );
    }
    for i in 0..N {
        let entry = c
            .kv_get(&format!("k/{i:03}"))
            .unwrap()
            .expect("key present");
        assert_eq!(entry.key, format!("k/{i:03}"));
        assert_eq!(entry.value, format!("value {i}").as_bytes());
        assert_eq!(entry.version, 1);
        assert_eq!(entry.expires_at_ms, None);
    }
    assert_eq!(c.kv_get("k/missing").unwrap(), None);

    // Keys landed on both shards, and every key is counted once.
    let status = c.status().unwrap();
    assert_eq!(status.shards.len(), 2);
    assert_eq!(
        status.shards.iter().map(|s| s.shard).collect::<Vec<_>>(),
        vec![0, 1]
    );
    for s in &status.shards {
        assert!(s.kv_keys > 0, "shard {} holds no key: {status:?}", s.shard);
        assert!(s.lsn >= s.kv_keys && s.durable_lsn == s.lsn, "{status:?}");
    }
    assert_eq!(
        status.shards.iter().map(|s| s.kv_keys).sum::<u64>(),
        N as u64
    );

    let (entries, truncated) = c.kv_list("k/", None).unwrap();
    assert!(!truncated);
    let keys: Vec<String> = entries.iter().map(|e| e.key.clone()).collect();
    let expected: Vec<String> = (0..N).map(|i| format!("k/{i:03}")).collect();
    assert_eq!(keys, expected);
    for (i, e) in entries.iter().enumerate() {
        assert_eq!(e.value, format!("value {i}").as_bytes());
    }

    // Delete every even key.
    for i in (0..N).step_by(2) {
        assert!(
            c.kv_delete(&format!("k/{i:03}"), None).unwrap(),
            "first delete of k/{i:03} reports it existed"
        );
    }
    for i in (0..N).step_by(2) {
        assert!(
            !c.kv_delete(&format!("k/{i:03}"), None).unwrap(),
            "second delete of k/{i:03} reports nothing"
        );
    }
    for i in 0..N {
        let got = c.kv_get(&format!("k/{i:03}")).unwrap();
        assert_eq!(got.is_some(), i % 2 == 1, "k/{i:03}");
    }
    let (entries, _) = c.kv_list("k/", None).unwrap();
    assert_eq!(entries.len(), N / 2);
    assert!(entries.iter().all(|e| numbers_in(&e.key)[0] % 2 == 1));
    assert_eq!(
        kv_keys_per_shard(&mut c).iter().sum::<u64>(),
        (N / 2) as u64
    );

    // A second connection sees the same data.
    let mut other = server.client();
    assert_eq!(other.kv_get("k/001").unwrap().unwrap().value, b"value 1");
    server.stop();
}

#[test]
fn versions_increment_on_every_put_and_restart_after_delete() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for expected in 1..=5 {
        assert_eq!(
            put(&mut c, "counter", format!("v{expected}").as_bytes()),
            expected
        );
    }
    let entry = c.kv_get("counter").unwrap().unwrap();
    assert_eq!((entry.version, entry.value.as_slice()), (5, &b"v5"[..]));
    // Versions are per key.
    assert_eq!(put(&mut c, "other", b"x"), 1);
    // Overwrites count one key each.
    assert_eq!(kv_keys_per_shard(&mut c).iter().sum::<u64>(), 2);
    // A deleted key starts over.
    assert!(c.kv_delete("counter", None).unwrap());
    assert_eq!(put(&mut c, "counter", b"again"), 1);
    server.stop();
}

#[test]
fn compare_and_set_applies_only_on_the_expected_version() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(put(&mut c, "cas", b"one"), 1);
    let v = c
        .kv_put(
            "cas",
            b"two",
            PutOptions {
                if_version: Some(1),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(v, 2);

    // A stale version conflicts; the message names the expected and the current version.
    let (code, msg) = server_error(c.kv_put(
        "cas",
        b"stale",
        PutOptions {
            if_version: Some(1),
            ..Default::default()
        },
    ));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    let nums = numbers_in(&msg);
    assert!(
        nums.contains(&1) && nums.contains(&2),
        "message should name versions 1 and 2: {msg}"
    );
    assert!(msg.contains("cas"), "message should name the key: {msg}");
    let (code, msg) = server_error(c.kv_put(
        "cas",
        b"future",
        PutOptions {
            if_version: Some(7),
            ..Default::default()
        },
    ));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert!(
        numbers_in(&msg).contains(&7) && numbers_in(&msg).contains(&2),
        "{msg}"
    );
    let entry = c.kv_get("cas").unwrap().unwrap();
    assert_eq!(
        (entry.version, entry.value.as_slice()),
        (2, &b"two"[..]),
        "a failed CAS changes nothing"
    );

    // Conditional delete.
    let (code, msg) = server_error(c.kv_delete("cas", Some(1)));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert!(c.kv_get("cas").unwrap().is_some());
    assert!(c.kv_delete("cas", Some(2)).unwrap());
    assert_eq!(c.kv_get("cas").unwrap(), None);
    // A conditional delete of an absent key expecting a version conflicts too.
    let (code, _) = server_error(c.kv_delete("cas", Some(2)));
    assert_eq!(code, ErrorCode::Conflict);
    server.stop();
}

#[test]
fn if_version_zero_means_only_if_absent() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let only_new = PutOptions {
        if_version: Some(0),
        ..Default::default()
    };
    assert_eq!(c.kv_put("lock", b"owner-a", only_new).unwrap(), 1);
    let (code, msg) = server_error(c.kv_put("lock", b"owner-b", only_new));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert!(
        numbers_in(&msg).contains(&0) && numbers_in(&msg).contains(&1),
        "{msg}"
    );
    assert_eq!(c.kv_get("lock").unwrap().unwrap().value, b"owner-a");
    // Delete "only if absent" of a present key conflicts.
    assert_eq!(
        server_error(c.kv_delete("lock", Some(0))).0,
        ErrorCode::Conflict
    );
    // Deleting an absent key with if_version 0 is consistent: nothing to delete.
    assert!(!c.kv_delete("never-there", Some(0)).unwrap());
    assert!(c.kv_delete("lock", None).unwrap());
    assert_eq!(c.kv_put("lock", b"owner-b", only_new).unwrap(), 1);
    assert_eq!(c.kv_get("lock").unwrap().unwrap().value, b"owner-b");
    server.stop();
}

#[test]
fn ttl_key_is_readable_at_once_and_gone_after_it_expires() {
    // The key expires when the test moves the server's clock past its TTL: however slow
    // the machine, it is read before.
    const TTL_MS: u64 = 60_000;
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert_eq!(
        c.kv_put(
            "ttl/short",
            b"brief",
            PutOptions {
                ttl_ms: Some(TTL_MS),
                ..Default::default()
            }
        )
        .unwrap(),
        1
    );
    put(&mut c, "ttl/forever", b"stays");
    put(&mut c, "ttl/zz", b"stays too");

    let entry = c.kv_get("ttl/short").unwrap().expect("readable at once");
    assert_eq!(entry.value, b"brief");
    let expires = entry.expires_at_ms.expect("a TTL'd key reports its expiry");
    assert!(
        expires >= before + TTL_MS && expires <= before + TTL_MS + 5_000,
        "expires_at_ms {expires}, put at ~{before}"
    );
    assert_eq!(c.kv_list("ttl/", None).unwrap().0.len(), 3);

    c.advance_clock(TTL_MS + 1_000).unwrap();
    assert_eq!(
        c.kv_get("ttl/short").unwrap(),
        None,
        "expired key must be gone"
    );
    let keys: Vec<String> = c
        .kv_list("ttl/", None)
        .unwrap()
        .0
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, vec!["ttl/forever", "ttl/zz"]);
    assert_eq!(c.kv_get("ttl/forever").unwrap().unwrap().value, b"stays");
    assert!(
        !c.kv_delete("ttl/short", None).unwrap(),
        "an expired key does not exist"
    );

    // The expiry sweep eventually removes it from the key count too.
    assert!(
        wait_until(Duration::from_secs(5), || kv_keys_per_shard(&mut c)
            .iter()
            .sum::<u64>()
            == 2),
        "kv_keys should drop to 2 once the expired key is swept: {:?}",
        kv_keys_per_shard(&mut c)
    );
    // The key is absent: "only if absent" succeeds, starting again at version 1.
    let only_new = PutOptions {
        if_version: Some(0),
        ..Default::default()
    };
    assert_eq!(c.kv_put("ttl/short", b"new", only_new).unwrap(), 1);
    assert_eq!(c.kv_get("ttl/short").unwrap().unwrap().expires_at_ms, None);
    server.stop();
}

#[test]
fn list_returns_prefix_matches_in_key_order_across_shards_and_limit_truncates() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    // Insert in a scrambled order.
    let mut ids: Vec<u32> = (0..60).collect();
    let mut rng = common::Rng::new(7);
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for id in &ids {
        put(
            &mut c,
            &format!("user/{id:02}"),
            format!("u{id}").as_bytes(),
        );
    }
    for key in ["users", "use", "user", "other/1", "a", "z"] {
        put(&mut c, key, key.as_bytes());
    }
    let sorted: Vec<String> = (0..60).map(|i| format!("user/{i:02}")).collect();

    let (entries, truncated) = c.kv_list("user/", None).unwrap();
    assert!(!truncated);
    assert_eq!(
        entries.iter().map(|e| e.key.clone()).collect::<Vec<_>>(),
        sorted
    );
    assert!(
        entries
            .iter()
            .all(|e| e.value == format!("u{}", numbers_in(&e.key)[0]).as_bytes())
    );

    // "user" matches itself, "user/..." and "users", in byte order.
    let (entries, _) = c.kv_list("user", None).unwrap();
    let keys: Vec<String> = entries.iter().map(|e| e.key.clone()).collect();
    let mut expected = vec!["user".to_string()];
    expected.extend(sorted.iter().cloned());
    expected.push("users".into());
    assert_eq!(keys, expected);

    // The empty prefix lists everything, in order.
    let (all, truncated) = c.kv_list("", None).unwrap();
    assert!(!truncated);
    assert_eq!(all.len(), 66);
    assert!(
        all.windows(2).all(|w| w[0].key < w[1].key),
        "not in key order"
    );
    assert_eq!((all[0].key.as_str(), all[65].key.as_str()), ("a", "z"));

    // Limits: the first N in order, flagged as truncated when more match.
    let (first, truncated) = c.kv_list("user/", Some(10)).unwrap();
    assert!(truncated);
    assert_eq!(
        first.iter().map(|e| e.key.clone()).collect::<Vec<_>>(),
        sorted[..10].to_vec()
    );
    let (one, truncated) = c.kv_list("user/", Some(1)).unwrap();
    assert!(truncated);
    assert_eq!(one[0].key, "user/00");
    let (exact, truncated) = c.kv_list("user/", Some(60)).unwrap();
    assert_eq!(
        (exact.len(), truncated),
        (60, false),
        "exactly `limit` matches is not truncated"
    );
    let (almost, truncated) = c.kv_list("user/", Some(59)).unwrap();
    assert_eq!((almost.len(), truncated), (59, true));

    // Pages with a cursor walk every key once, in order, whatever the page size.
    for limit in [1, 7, 59, 66, 1000] {
        let (mut keys, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let page = c.kv_list_page("", Some(limit), cursor.as_deref()).unwrap();
            assert!(page.items.len() <= limit as usize);
            keys.extend(page.items.into_iter().map(|e| e.key));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
            assert!(keys.len() <= 66, "the list does not end");
        }
        let all_keys: Vec<String> = all.iter().map(|e| e.key.clone()).collect();
        assert_eq!(keys, all_keys, "limit {limit}");
    }
    let page = c.kv_list_page("user/", Some(10), None).unwrap();
    let next = c
        .kv_list_page("user/", Some(10), page.next_cursor.as_deref())
        .unwrap();
    assert_eq!(next.items[0].key, sorted[10]);
    // The CLI prints the cursor and takes it back.
    let addr = server.addr.to_string();
    let out = common::cli_ok(&addr, &["kv", "list", "user/", "--limit", "30"]);
    assert!(
        out.trim_end()
            .ends_with("(more keys may follow: --cursor user/29)"),
        "{out}"
    );
    let doc = common::cli_json(
        &addr,
        &[
            "kv", "list", "user/", "--limit", "30", "--cursor", "user/29",
        ],
    );
    assert_eq!(doc["entries"].as_array().unwrap().len(), 30, "{doc}");
    assert_eq!(doc["next_cursor"], serde_json::Value::Null, "{doc}");

    let (none, truncated) = c.kv_list("nomatch/", None).unwrap();
    assert!(none.is_empty() && !truncated);

    // Out-of-range limits are refused.
    assert_eq!(
        server_error(c.kv_list("user/", Some(0))).0,
        ErrorCode::BadRequest
    );
    assert_eq!(
        server_error(c.kv_list("user/", Some(10_001))).0,
        ErrorCode::BadRequest
    );
    assert_connection_works(&mut c);
    server.stop();
}

#[test]
fn namespaces_are_isolated() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut alpha = server.client().with_namespace("alpha");
    let mut beta = server.client().with_namespace("beta");
    let mut default = server.client();

    assert_eq!(put(&mut alpha, "shared", b"from alpha"), 1);
    assert_eq!(put(&mut beta, "shared", b"from beta"), 1);
    assert_eq!(put(&mut alpha, "shared", b"from alpha 2"), 2);
    for i in 0..20 {
        put(&mut alpha, &format!("a-only/{i:02}"), b"a");
        put(&mut beta, &format!("b-only/{i:02}"), b"b");
    }

    let a = alpha.kv_get("shared").unwrap().unwrap();
    let b = beta.kv_get("shared").unwrap().unwrap();
    assert_eq!((a.value.as_slice(), a.version), (&b"from alpha 2"[..], 2));
    assert_eq!((b.value.as_slice(), b.version), (&b"from beta"[..], 1));
    assert_eq!(default.kv_get("shared").unwrap(), None);
    assert_eq!(alpha.kv_get("b-only/00").unwrap(), None);

    let alpha_keys: Vec<String> = alpha
        .kv_list("", None)
        .unwrap()
        .0
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(alpha_keys.len(), 21);
    assert!(
        alpha_keys
            .iter()
            .all(|k| k == "shared" || k.starts_with("a-only/")),
        "{alpha_keys:?}"
    );
    let beta_keys: Vec<String> = beta
        .kv_list("", None)
        .unwrap()
        .0
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(beta_keys.len(), 21);
    assert!(
        beta_keys
            .iter()
            .all(|k| k == "shared" || k.starts_with("b-only/")),
        "{beta_keys:?}"
    );
    assert!(default.kv_list("", None).unwrap().0.is_empty());

    // Deleting in one namespace leaves the other alone; CAS versions are per namespace.
    assert!(alpha.kv_delete("shared", Some(2)).unwrap());
    assert_eq!(beta.kv_get("shared").unwrap().unwrap().value, b"from beta");
    assert_eq!(
        server_error(beta.kv_delete("shared", Some(2))).0,
        ErrorCode::Conflict
    );
    server.stop();
}

#[test]
fn invalid_input_gets_bad_request_and_the_connection_keeps_working() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();

    // Empty key, for every keyed operation.
    let msg = bad(c.kv_put("", b"v", PutOptions::default()));
    assert!(msg.contains("key"), "{msg}");
    bad(c.kv_get(""));
    bad(c.kv_delete("", None));
    assert_connection_works(&mut c);

    // Key length: the maximum is accepted, one more byte is not.
    let longest = "k".repeat(KV_KEY_BYTES_MAX);
    assert_eq!(put(&mut c, &longest, b"long key"), 1);
    assert_eq!(c.kv_get(&longest).unwrap().unwrap().value, b"long key");
    let too_long = "k".repeat(KV_KEY_BYTES_MAX + 1);
    let msg = bad(c.kv_put(&too_long, b"v", PutOptions::default()));
    assert!(
        msg.contains("key") && numbers_in(&msg).contains(&(KV_KEY_BYTES_MAX as u64 + 1)),
        "{msg}"
    );
    bad(c.kv_get(&too_long));
    bad(c.kv_delete(&too_long, None));
    // Multi-byte characters count in bytes: 342 * 3 = 1026 bytes.
    bad(c.kv_put(&"€".repeat(342), b"v", PutOptions::default()));
    assert_connection_works(&mut c);

    // Value size: 1 MiB is accepted, one byte more is not.
    let biggest = vec![0xabu8; KV_VALUE_BYTES_MAX];
    assert_eq!(put(&mut c, "big", &biggest), 1);
    assert_eq!(
        c.kv_get("big").unwrap().unwrap().value.len(),
        KV_VALUE_BYTES_MAX
    );
    let msg = bad(c.kv_put(
        "big",
        &vec![1u8; KV_VALUE_BYTES_MAX + 1],
        PutOptions::default(),
    ));
    assert!(msg.contains("value"), "{msg}");
    // Over the frame limit, the client refuses it itself (nothing is sent) and says why.
    let too_large = c.kv_put(
        "big",
        &vec![1u8; flo::protocol::FRAME_BYTES_MAX + 1],
        PutOptions::default(),
    );
    let msg = match too_large {
        Err(Error::Protocol(msg)) => msg,
        other => panic!("{other:?}"),
    };
    assert!(
        msg.contains("limit of one request") && msg.contains("KV value"),
        "{msg}"
    );
    assert_eq!(
        c.kv_get("big").unwrap().unwrap().version,
        1,
        "a refused put changes nothing"
    );
    assert_connection_works(&mut c);

    // TTL of zero is refused.
    bad(c.kv_put(
        "ttl0",
        b"v",
        PutOptions {
            ttl_ms: Some(0),
            ..Default::default()
        },
    ));
    assert_eq!(c.kv_get("ttl0").unwrap(), None);

    // Empty and over-long namespaces, on the same connection.
    for namespace in [String::new(), "n".repeat(257)] {
        let op = Op::KvPut {
            namespace: namespace.clone(),
            key: "k".into(),
            value: b"v".to_vec(),
            ttl_ms: None,
            if_version: None,
            if_exists: false,
        };
        let msg = bad(c.call(op));
        assert!(msg.contains("namespace"), "{msg}");
        bad(c.call(Op::KvGet {
            namespace: namespace.clone(),
            key: "k".into(),
            wait_ms: None,
            after_version: None,
            newer_than_current: false,
        }));
        bad(c.call(Op::KvDelete {
            namespace: namespace.clone(),
            key: "k".into(),
            if_version: None,
        }));
        bad(c.call(Op::KvList {
            namespace: namespace.clone(),
            prefix: String::new(),
            limit: None,
            cursor: None,
        }));
        assert_connection_works(&mut c);
    }
    // The longest namespace is fine.
    let op = Op::KvPut {
        namespace: "n".repeat(256),
        key: "k".into(),
        value: b"v".to_vec(),
        ttl_ms: None,
        if_version: None,
        if_exists: false,
    };
    assert_eq!(c.call(op).unwrap(), Reply::KvPut { version: 1 });

    // Through the SDK's namespace setting too.
    let mut empty_ns = server.client().with_namespace("");
    bad(empty_ns.kv_put("k", b"v", PutOptions::default()));
    bad(empty_ns.kv_list("", None));
    assert!(empty_ns.status().is_ok(), "the connection keeps working");

    // Nothing invalid was stored.
    let total: u64 = kv_keys_per_shard(&mut c).iter().sum();
    assert_eq!(
        total, 4,
        "long key, big, still-alive, and the 256-byte namespace's key"
    );
    server.stop();
}

#[test]
fn concurrent_compare_and_set_increments_are_never_lost() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    assert_eq!(put(&mut c, "counter", b"0"), 1);
    const THREADS: usize = 4;
    const INCREMENTS: usize = 25;
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let mut c = server.client();
            std::thread::spawn(move || {
                let mut conflicts = 0;
                for _ in 0..INCREMENTS {
                    loop {
                        let entry = c.kv_get("counter").unwrap().unwrap();
                        let n: u64 = std::str::from_utf8(&entry.value).unwrap().parse().unwrap();
                        let opts = PutOptions {
                            if_version: Some(entry.version),
                            ..Default::default()
                        };
                        match c.kv_put("counter", (n + 1).to_string().as_bytes(), opts) {
                            Ok(version) => {
                                assert_eq!(version, entry.version + 1);
                                break;
                            }
                            Err(Error::Server(e)) if e.code == ErrorCode::Conflict => {
                                conflicts += 1
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                conflicts
            })
        })
        .collect();
    let conflicts: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
    let entry = c.kv_get("counter").unwrap().unwrap();
    let total = (THREADS * INCREMENTS) as u64;
    assert_eq!(
        entry.value,
        total.to_string().as_bytes(),
        "{conflicts} conflicts were retried"
    );
    assert_eq!(entry.version, total + 1);
    server.stop();
}

/// `kv get --block` (the reference's blocking get) waits for a version newer than the one
/// the key holds when the read arrives, so an existing key is not answered at once; `--wait`
/// still waits only for the key to exist. Keys on both shards: the read and the write are
/// pipelined on one connection, so the read reaches the key's shard first.
#[test]
fn block_waits_for_the_next_write_and_wait_for_existence() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut c = server.client();
    let mux = flo::MuxClient::connect(server.addr).unwrap();
    let get_next = |key: &str, wait_ms: u64, after_version: Option<u64>| Op::KvGet {
        namespace: "default".into(),
        key: key.into(),
        wait_ms: Some(wait_ms),
        after_version,
        newer_than_current: true,
    };
    let put_op = |key: &str, value: &str| Op::KvPut {
        namespace: "default".into(),
        key: key.into(),
        value: value.as_bytes().to_vec(),
        ttl_ms: None,
        if_version: None,
        if_exists: false,
    };
    for i in 0..4 {
        let key = format!("watched-{i}");
        assert_eq!(put(&mut c, &key, b"first"), 1);
        // Blocks although the key exists, until the write behind it.
        let next = mux.send(get_next(&key, 20_000, None)).unwrap();
        let written = mux.send(put_op(&key, "second")).unwrap().wait().unwrap();
        assert_eq!(written, Reply::KvPut { version: 2 });
        match next.wait().unwrap() {
            Reply::KvValue(Some(entry)) => {
                assert_eq!((entry.value.as_slice(), entry.version), (&b"second"[..], 2));
            }
            other => panic!("--block answered {other:?}"),
        }
        // A key that does not exist yet: its first version.
        let absent = format!("absent-{i}");
        let next = mux.send(get_next(&absent, 20_000, None)).unwrap();
        mux.send(put_op(&absent, "new")).unwrap().wait().unwrap();
        assert!(matches!(
            next.wait().unwrap(),
            Reply::KvValue(Some(e)) if e.version == 1
        ));
        // With an after-version, that version decides (already newer: at once).
        assert!(matches!(
            mux.call(get_next(&key, 20_000, Some(1))).unwrap(),
            Reply::KvValue(Some(e)) if e.version == 2
        ));
    }

    // The CLI: --wait answers an existing key at once, --block waits for a write.
    let doc = common::cli_json(&addr, &["kv", "get", "watched-0", "--wait", "20000"]);
    assert_eq!(doc["version"], 2, "{doc}");
    let err = common::cli_fails(&addr, &["kv", "get", "watched-0", "--block", "300"]);
    assert!(
        err.contains("no new version") && err.contains("timed out after 300 ms"),
        "{err}"
    );
    let doc = common::cli_json(
        &addr,
        &[
            "kv",
            "get",
            "watched-0",
            "--block",
            "300",
            "--after-version",
            "1",
        ],
    );
    assert_eq!(doc["version"], 2, "{doc}");
    let err = common::cli_usage_fails(
        &addr,
        &["kv", "get", "watched-0", "--wait", "10", "--block", "10"],
    );
    assert!(err.contains("--block") || err.contains("--wait"), "{err}");
    // The SDK's `kv_get_next` times out empty when nothing is written.
    assert_eq!(c.kv_get_next("watched-1", 200).unwrap(), None);
    assert_eq!(
        c.kv_get_wait("watched-1", 200, None)
            .unwrap()
            .unwrap()
            .version,
        2
    );
}

/// The CPUs each shard thread of server `pid` may run on (`Cpus_allowed_list`), by name.
fn shard_cpus(pid: i32) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        // The executor threads (`flo-shard-N-M`), not their blocking pools (same name).
        if !comm.starts_with("flo-shard-") {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        if let Some(cpus) = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        {
            found.push((comm.trim().to_string(), cpus.trim().to_string()));
        }
    }
    found
}

/// The handshake names the shard serving the connection: connections land on every shard,
/// and a key put through one is read through any other.
#[test]
fn the_handshake_names_the_shard_serving_the_connection() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut clients: Vec<Client> = (0..24).map(|_| server.client()).collect();
    let mut seen = [0usize; 2];
    for c in &clients {
        assert_eq!(c.shard_count(), 2);
        let shard = c.shard().expect("the server names its shard");
        seen[shard as usize] += 1;
    }
    assert!(
        seen.iter().all(|&n| n > 0),
        "24 connections, per shard: {seen:?}"
    );
    let on = |shard: u32, clients: &mut Vec<Client>| {
        let at = clients.iter().position(|c| c.shard() == Some(shard));
        clients.swap_remove(at.expect("a connection on that shard"))
    };
    let mut zero = on(0, &mut clients);
    let mut one = on(1, &mut clients);
    for i in 0..20 {
        let key = format!("k{i}");
        zero.kv_put(&key, b"v", PutOptions::default()).expect("put");
        assert_eq!(
            one.kv_get(&key).expect("get").map(|e| e.value),
            Some(b"v".to_vec())
        );
    }
    // The shard map places keys as the server does: keys it gives to shard 1 are kept there.
    let map = zero.shard_map().expect("shard map");
    assert_eq!(
        (map.shard_count, map.owners.len()),
        (2, map.partitions as usize)
    );
    let before = zero.status().expect("status");
    let mut put = 0;
    for i in 0..200 {
        let key = format!("routed-{i}");
        if map.shard_of(zero.namespace(), &key) == Some(1) {
            one.kv_put(&key, b"v", PutOptions::default()).expect("put");
            put += 1;
        }
    }
    assert!(put > 50, "{put} of 200 keys on shard 1");
    let after = zero.status().expect("status");
    let keys = |s: &flo::protocol::StatusInfo, shard: u32| {
        s.shards
            .iter()
            .find(|i| i.shard == shard)
            .map(|i| i.kv_keys)
    };
    assert_eq!(
        keys(&after, 0),
        keys(&before, 0),
        "no key of shard 1 went to shard 0"
    );
    assert_eq!(keys(&after, 1), keys(&before, 1).map(|n| n + put));
}

/// `Client::connect_on_shard` lands on the shard asked for (connecting again as needed);
/// a shard the server does not have is refused.
#[test]
fn a_client_connects_to_the_shard_it_asks_for() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    for round in 0..5 {
        for shard in 0..2 {
            let mut c = Client::connect_on_shard(server.addr, None, shard).expect("connect");
            assert_eq!(c.shard(), Some(shard), "round {round}");
            let key = format!("on-{shard}-{round}");
            c.kv_put(&key, b"v", PutOptions::default()).expect("put");
        }
    }
    match Client::connect_on_shard(server.addr, None, 2) {
        Err(e) => assert!(e.to_string().contains("no shard 2"), "{e}"),
        Ok(_) => panic!("a client on shard 2 of a 2-shard server"),
    }
}

/// A `ShardedClient` holds a connection on each shard: each key's operations go through
/// the connection on its owner (the new key shows on that shard and no other), and `in_turn`
/// takes the shards in turn.
#[test]
fn a_sharded_client_sends_each_key_through_its_owners_connection() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut client = flo::ShardedClient::connect(server.addr, None)
        .expect("connect")
        .with_namespace("routed");
    assert_eq!(client.shard_count(), 2);
    let mut check = server.client();
    let mut owners = [0u32; 2];
    for i in 0..20 {
        let key = format!("routed-{i}");
        let owner = client.shard_of(&key);
        assert_eq!(client.for_key(&key).shard(), Some(owner), "{key}");
        assert_eq!(client.for_key(&key).namespace(), "routed");
        let before = kv_keys_per_shard(&mut check);
        client
            .kv_put(&key, key.as_bytes(), PutOptions::default())
            .expect("put");
        let after = kv_keys_per_shard(&mut check);
        let grew: Vec<usize> = (0..2).filter(|&s| after[s] > before[s]).collect();
        assert_eq!(grew, vec![owner as usize], "{key}: {before:?} -> {after:?}");
        owners[owner as usize] += 1;
        let entry = client.kv_get(&key).expect("get").expect("the key");
        assert_eq!(entry.value, key.as_bytes());
    }
    assert!(
        owners.iter().all(|&n| n > 0),
        "keys on both shards: {owners:?}"
    );
    assert!(client.kv_delete("routed-0", None).expect("delete"));
    assert_eq!(client.kv_get("routed-0").expect("get"), None);
    let turns: Vec<Option<u32>> = (0..4).map(|_| client.in_turn().shard()).collect();
    assert_eq!(turns, vec![Some(0), Some(1), Some(0), Some(1)]);
}

/// By default the kernel places the shards' threads; `--pin-shards` gives each one CPU.
/// Either way every shard serves.
#[test]
fn shards_run_where_the_kernel_puts_them_unless_pinned() {
    let all_cpus = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Cpus_allowed_list:")
                .map(|c| c.trim().to_string())
        })
        .unwrap();
    for pinned in [false, true] {
        let dir = temp_dir();
        let args: &[&str] = if pinned { &["--pin-shards"] } else { &[] };
        let server = TestServer::start(dir.path(), args);
        let mut c = server.client();
        for i in 0..40 {
            put(&mut c, &format!("pin/{i}"), b"v");
        }
        assert!(
            kv_keys_per_shard(&mut c).iter().all(|&n| n > 0),
            "every shard holds keys"
        );
        let threads = shard_cpus(server.pid());
        assert!(!threads.is_empty(), "no shard thread found");
        for (name, cpus) in &threads {
            // A pinned executor may run on one CPU (a blocking-pool thread of the same
            // name keeps the process's CPUs).
            if !pinned {
                assert_eq!(cpus, &all_cpus, "{name} unpinned: {threads:?}");
            }
        }
        if pinned {
            assert!(
                threads
                    .iter()
                    .any(|(_, cpus)| !cpus.contains(',') && !cpus.contains('-')),
                "a pinned shard runs on one CPU: {threads:?}"
            );
        }
    }
}
