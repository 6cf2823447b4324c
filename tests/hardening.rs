//! Attacks a client could make on the server's engine (issue 21): a definition that expands
//! through YAML aliases, run ids that collide with the server's own, a start that claims
//! another run as its repeat. Each is answered with a clear error and loses nothing.

mod common;

use common::{TestServer, temp_dir};
use flo::protocol::{ActionKind, ActionSpec, ErrorCode, WorkflowRunStatus};
use flo::{Client, Error, StartOptions};
use flo_testkit::guests::fixed_guest;

fn code(e: Error) -> ErrorCode {
    match e {
        Error::Server(v) => v.code,
        other => panic!("expected a server error, got {other}"),
    }
}

fn wasm_action(c: &mut Client, name: &str) {
    c.register_action(ActionSpec {
        namespace: String::new(),
        name: name.into(),
        kind: ActionKind::Wasm,
        wasm: Some(fixed_guest(r#"{"ok":true}"#).into_bytes()),
        timeout_ms: None,
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
    .unwrap();
}

/// An auth file with one admin token for every namespace (`admin-token-1`).
const ADMIN_TOKEN_YAML: &str =
    "tokens:\n  - token: \"admin-token-1\"\n    role: admin\n    namespaces: [\"*\"]\n";

/// A client of the `ADMIN_TOKEN_YAML` token in `namespace`.
fn admin(server: &TestServer, namespace: &str) -> Client {
    Client::connect_with_token(server.addr, "admin-token-1")
        .unwrap()
        .with_namespace(namespace)
}

/// A server with the auth file `text` (in `dir`), and the file's path.
fn auth_server(
    dir: &std::path::Path,
    text: &str,
    args: &[&str],
) -> (TestServer, std::path::PathBuf) {
    let auth = dir.join("auth.yaml");
    std::fs::write(&auth, text).unwrap();
    let mut all = vec!["--auth-file", auth.to_str().unwrap()];
    all.extend_from_slice(args);
    (TestServer::start(&dir.join("data"), &all), auth)
}

fn one_step(name: &str, extra: &str) -> String {
    format!(
        "kind: Workflow\nname: {name}\nversion: \"1\"\n{extra}start:\n  run: \"@actions/a\"\n  \
         transitions:\n    success: flo.Completed\n    failure: flo.Failed\n"
    )
}

/// Item 3: a 95 KB text whose aliases repeat a 64 KiB scalar used to expand into a 655 MB
/// definition record and stop the whole server (exit 101). Now it is refused (by `flo
/// workflow validate` too) and the server goes on serving.
#[test]
fn a_definition_expanding_through_yaml_aliases_is_refused_and_the_server_goes_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    wasm_action(&mut c, "a");
    let mut yaml = format!(
        "kind: Workflow\nname: bomb\nversion: \"1\"\ndescription: &s \"{}\"\nstart:\n  run: \
         \"@actions/a\"\n  inputMapping:\n",
        "x".repeat(64 << 10)
    );
    for i in 0..10_000 {
        yaml.push_str(&format!("    k{i}: *s\n"));
        if yaml.len() > 95_000 {
            break;
        }
    }
    yaml.push_str("  transitions:\n    success: flo.Completed\n");
    let e = c.create_workflow(&yaml).unwrap_err();
    let message = e.to_string();
    assert!(message.contains("aliases"), "{message}");
    assert_eq!(code(e), ErrorCode::BadRequest);
    let file = dir.path().join("bomb.yaml");
    std::fs::write(&file, &yaml).unwrap();
    let out = common::cli_command()
        .args(["validate", "workflow", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success(), "validate accepted the bomb");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("aliases")
            || String::from_utf8_lossy(&out.stderr).contains("aliases"),
        "{out:?}"
    );
    // The server is up and takes the same workflow without the repetition.
    c.create_workflow(&one_step("bomb", "")).unwrap();
    let run = c
        .start_workflow_and_wait("bomb", b"{}", StartOptions::default(), 20_000)
        .unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    server.stop();
}

/// Item 6: `--run-id wfrun-18446744073709551615` wrapped the shard's id counter, and every
/// later start without an id was answered `wfrun-1`, replacing the run of that id. The ids
/// the server hands out are now refused to callers, and a generated id is always free.
#[test]
fn callers_cannot_choose_the_ids_the_server_hands_out() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    wasm_action(&mut c, "a");
    c.create_workflow(&one_step("w", "")).unwrap();
    let first = c
        .start_workflow_and_wait("w", b"{}", StartOptions::default(), 20_000)
        .unwrap();
    for id in ["wfrun-18446744073709551615", "wfrun-1", "wfrun-99"] {
        let opts = StartOptions {
            run_id: Some(id.into()),
            ..StartOptions::default()
        };
        let e = c.start_workflow("w", b"{}", opts).unwrap_err();
        assert!(e.to_string().contains("handed out by the server"), "{e}");
        assert_eq!(code(e), ErrorCode::BadRequest, "{id}");
    }
    // Ids that only look alike are the caller's to choose.
    for id in ["wfrun-x1", "wfrun-", "my-wfrun-1"] {
        let opts = StartOptions {
            run_id: Some(id.into()),
            ..StartOptions::default()
        };
        assert_eq!(c.start_workflow("w", b"{}", opts).unwrap(), id);
    }
    let second = c
        .start_workflow("w", b"{}", StartOptions::default())
        .unwrap();
    assert_ne!(second, first.run_id);
    assert_eq!(
        c.workflow_run(&first.run_id).unwrap().status,
        WorkflowRunStatus::Completed,
        "the first run is still there"
    );
    server.stop();
}

/// Item 7: a start naming an archived run's id with *any* idempotency key (even one of
/// another workflow) was answered as that run's repeat. Now the workflow and the key are
/// compared with what the archived run was started with.
#[test]
fn a_start_is_the_repeat_of_an_archived_run_only_with_its_workflow_and_key() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    wasm_action(&mut c, "a");
    let keyed = "idempotency: optional\n";
    c.create_workflow(&one_step("pay", keyed)).unwrap();
    c.create_workflow(&one_step("ship", keyed)).unwrap();
    let opts = |key: &str| StartOptions {
        run_id: Some("order-7".into()),
        idempotency_key: Some(key.into()),
        ..StartOptions::default()
    };
    let run = c
        .start_workflow_and_wait("pay", b"{}", opts("k-7"), 20_000)
        .unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed);
    // Finished runs leave memory for the run index.
    assert!(
        common::wait_until(std::time::Duration::from_secs(10), || {
            let s = c.status().unwrap();
            s.shards.iter().map(|s| s.workflow_runs).sum::<u64>() == 0
        }),
        "the run was not archived"
    );
    let check = |c: &mut Client, when: &str| {
        assert_eq!(
            c.start_workflow("pay", b"{}", opts("k-7")).unwrap(),
            "order-7",
            "the repeat ({when})"
        );
        let e = c.start_workflow("pay", b"{}", opts("k-8")).unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "another key ({when})");
        let e = c.start_workflow("ship", b"{}", opts("k-7")).unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "another workflow ({when})");
        let plain = StartOptions {
            run_id: Some("order-7".into()),
            ..StartOptions::default()
        };
        let e = c.start_workflow("pay", b"{}", plain).unwrap_err();
        assert_eq!(code(e), ErrorCode::Conflict, "no key ({when})");
    };
    check(&mut c, "live");
    drop(c);
    server.stop();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    check(&mut server.client(), "after a restart");
    server.stop();
}

/// Item 14: a namespace holding a line break (sent without a valid token) put a forged
/// `fatal: shard 0 panicked` line on the server's stderr. Names with control characters
/// are refused, and every line input can cause is written with its control characters
/// escaped.
#[test]
fn control_characters_in_names_are_refused_and_never_forge_a_log_line() {
    let dir = temp_dir();
    let (server, _) = auth_server(dir.path(), ADMIN_TOKEN_YAML, &[]);
    let addr = server.addr_string();
    let forged = "x\nfatal: shard 0 panicked: forged";
    for token in ["admin-token-1", "not-a-token"] {
        let (status, _, stderr) = common::run_cli(
            &addr,
            &[
                "--token",
                token,
                "--namespace",
                forged,
                "kv",
                "put",
                "k",
                "v",
            ],
        );
        assert!(!status.success(), "{token}: accepted");
        assert!(
            stderr.contains("control characters") || stderr.contains("not authorized"),
            "{token}: {stderr}"
        );
    }
    let mut c = Client::connect_with_token(server.addr, "admin-token-1").unwrap();
    c.kv_put("after", b"v", flo::PutOptions::default()).unwrap();
    let log = server.stderr();
    assert!(
        !log.lines()
            .any(|l| l.contains("panicked") && !l.contains("x\\n")),
        "a forged line:\n{log}"
    );
    // Every line is one of the server's own: it starts with its time.
    assert!(
        log.lines()
            .all(|l| l.starts_with(|c: char| c.is_ascii_digit())),
        "a line that is not a log event:\n{log}"
    );
    server.stop();
}

/// Item 8: lists gathered up to 10,000 full documents (values, inputs, outputs), merged
/// and encoded them, and only then refused the 4 MiB frame (200 archived runs with 1 MiB
/// inputs: a 210 MB reply built). A page now stops at a byte budget with a cursor, and
/// paging gives every item once.
#[test]
fn lists_of_large_items_stop_at_a_byte_budget_and_page_through_everything() {
    use flo::protocol::RunStatus;
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    const BIG: usize = 400 << 10;
    const N: usize = 24;
    for i in 0..N {
        let value = vec![b'a' + (i % 26) as u8; BIG];
        c.kv_put(&format!("big/{i:02}"), &value, flo::PutOptions::default())
            .unwrap();
    }
    let mut keys = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = c
            .kv_list_page("big/", Some(10_000), cursor.as_deref())
            .unwrap();
        let bytes: usize = page.items.iter().map(|e| e.value.len()).sum();
        assert!(bytes <= 3 << 20, "a page of {bytes} bytes");
        assert!(!page.items.is_empty());
        keys.extend(page.items.into_iter().map(|e| e.key));
        pages += 1;
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert!(pages >= 4, "{pages} pages");
    let expected: Vec<String> = (0..N).map(|i| format!("big/{i:02}")).collect();
    assert_eq!(keys, expected);

    // Action runs with large inputs, finished and archived, then listed.
    c.register_action(ActionSpec {
        namespace: String::new(),
        name: "echo".into(),
        kind: ActionKind::Wasm,
        wasm: Some(flo_testkit::guests::echo_guest().into_bytes()),
        timeout_ms: None,
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
    .unwrap();
    // The test guest has one page of memory: inputs of 48 KiB, echoed (96 KiB a run).
    let mut ids = Vec::new();
    for i in 0..100 {
        let input = format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(48 << 10));
        ids.push(
            c.invoke("echo", input.as_bytes(), Default::default())
                .unwrap(),
        );
    }
    for id in &ids {
        let run = c.wait_run(id, 20_000).unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{:?}", run.error);
    }
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    let mut run_pages = 0;
    loop {
        run_pages += 1;
        let page = c
            .list_runs_page("echo", None, false, Some(10_000), cursor.as_deref())
            .unwrap();
        let bytes: usize = page
            .items
            .iter()
            .map(|r| r.input.len() + r.output.as_ref().map_or(0, Vec::len))
            .sum();
        assert!(bytes <= 3 << 20, "a page of {bytes} bytes");
        listed.extend(page.items.into_iter().map(|r| r.run_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    assert!(run_pages >= 3, "{run_pages} pages");
    listed.sort();
    ids.sort();
    assert_eq!(listed, ids, "every run once");
    server.stop();
}

/// Item 10: quotas per namespace in the auth file. `live_runs` bounds the runs in flight
/// of a namespace (each shard its share); beyond, a start answers `overloaded` with the
/// reason, other namespaces go on, and finished runs make room again.
#[test]
fn a_namespace_over_its_live_runs_quota_is_refused_and_others_go_on() {
    let dir = temp_dir();
    let quotas = format!("{ADMIN_TOKEN_YAML}quotas:\n  tenant-a: {{live_runs: 4}}\n");
    let (server, _) = auth_server(dir.path(), &quotas, &["--shards", "1"]);
    let mut a = admin(&server, "tenant-a");
    let mut b = admin(&server, "tenant-b");
    for c in [&mut a, &mut b] {
        common::user_action(c, "slow", 60_000, 0, 1000);
    }
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(a.invoke("slow", b"{}", Default::default()).unwrap());
    }
    let e = a.invoke("slow", b"{}", Default::default()).unwrap_err();
    assert!(e.to_string().contains("live_runs quota"), "{e}");
    assert_eq!(code(e), ErrorCode::Overloaded);
    for _ in 0..6 {
        b.invoke("slow", b"{}", Default::default()).unwrap();
    }
    // A finished run makes room.
    a.cancel_run(&ids[0]).unwrap();
    assert!(
        common::wait_until(std::time::Duration::from_secs(10), || {
            a.invoke("slow", b"{}", Default::default()).is_ok()
        }),
        "no room after a run finished"
    );
    server.stop();
}

/// Item 10: `kv_bytes` bounds a namespace's keys and values; a put beyond answers
/// `overloaded` with the reason, a delete makes room, other namespaces go on.
#[test]
fn a_namespace_over_its_kv_bytes_quota_is_refused_and_a_delete_makes_room() {
    let dir = temp_dir();
    let quotas = format!("{ADMIN_TOKEN_YAML}quotas:\n  \"*\": {{kv_bytes: 100000}}\n");
    let (server, auth) = auth_server(dir.path(), &quotas, &["--shards", "1"]);
    let (mut a, mut b) = (admin(&server, "tenant-a"), admin(&server, "tenant-b"));
    let value = vec![b'x'; 30_000];
    for i in 0..3 {
        a.kv_put(&format!("k{i}"), &value, flo::PutOptions::default())
            .unwrap();
    }
    let e = a
        .kv_put("k3", &value, flo::PutOptions::default())
        .unwrap_err();
    assert!(e.to_string().contains("kv_bytes quota"), "{e}");
    assert_eq!(code(e), ErrorCode::Overloaded);
    // Replacing a value with one of the same size fits; another namespace has its own.
    a.kv_put("k0", &value, flo::PutOptions::default()).unwrap();
    b.kv_put("k3", &value, flo::PutOptions::default()).unwrap();
    a.kv_delete("k1", None).unwrap();
    a.kv_put("k3", &value, flo::PutOptions::default()).unwrap();
    // After a restart the bytes are counted again from the data.
    drop((a, b));
    server.stop();
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--shards", "1", "--auth-file", auth.to_str().unwrap()],
    );
    let mut a = admin(&server, "tenant-a");
    let e = a
        .kv_put("k9", &value, flo::PutOptions::default())
        .unwrap_err();
    assert_eq!(code(e), ErrorCode::Overloaded);
    server.stop();
}

/// Item 16: `status` showed every namespace's counts to any token. Only a token for every
/// namespace sees them now; others see the server's health.
#[test]
fn status_counts_are_shown_only_to_a_token_for_every_namespace() {
    let dir = temp_dir();
    let tokens = format!(
        "{ADMIN_TOKEN_YAML}  - token: \"client-token-1\"\n    role: client\n    namespaces: \
         [\"payments\"]\n"
    );
    let (server, _) = auth_server(dir.path(), &tokens, &[]);
    let mut admin = Client::connect_with_token(server.addr, "admin-token-1")
        .unwrap()
        .with_namespace("billing");
    for i in 0..5 {
        admin
            .kv_put(&format!("k{i}"), b"v", flo::PutOptions::default())
            .unwrap();
    }
    let status = admin.status().unwrap();
    assert!(!status.counts_hidden);
    assert_eq!(status.shards.iter().map(|s| s.kv_keys).sum::<u64>(), 5);
    let mut client = Client::connect_with_token(server.addr, "client-token-1")
        .unwrap()
        .with_namespace("payments");
    let status = client.status().unwrap();
    assert!(status.counts_hidden);
    assert_eq!(status.shards.iter().map(|s| s.kv_keys).sum::<u64>(), 0);
    assert!(status.shards.iter().all(|s| s.lsn > 0), "health stays");
    server.stop();
}

/// Item 10: `wasm_slots` bounds the WebAssembly slots a namespace's runs hold at once on a
/// shard: its runs wait for one another, and still all complete.
#[test]
fn a_namespace_runs_at_most_its_wasm_slots_quota_at_once() {
    use flo::protocol::RunStatus;
    let dir = temp_dir();
    let quotas = format!("{ADMIN_TOKEN_YAML}quotas:\n  tenant-a: {{wasm_slots: 1}}\n");
    let (server, _) = auth_server(dir.path(), &quotas, &["--shards", "1"]);
    let mut a = admin(&server, "tenant-a");
    a.register_action(ActionSpec {
        namespace: String::new(),
        name: "nap".into(),
        kind: ActionKind::Wasm,
        wasm: Some(flo_testkit::guests::sleep_guest(300).into_bytes()),
        timeout_ms: None,
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    })
    .unwrap();
    let ids: Vec<String> = (0..4)
        .map(|_| a.invoke("nap", b"{}", Default::default()).unwrap())
        .collect();
    let mut most = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while ids.iter().any(|id| !a.run(id).unwrap().status.is_final()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the runs did not finish"
        );
        let status = a.status().unwrap();
        most = most.max(status.shards[0].executions);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(most, 1, "executions at once");
    for id in &ids {
        assert_eq!(a.run(id).unwrap().status, RunStatus::Completed);
    }
    server.stop();
}
