//! Authentication (`flo server --auth-file`): tokens → role and namespaces, presented in
//! the handshake (`--token`/`FLO_TOKEN`, SDK options); a request outside what its token
//! grants answers `unauthorized` (CLI exit code 1) and is logged without the token.
//! Without an auth file the server is open, on loopback only unless `--insecure`.

mod common;

use common::{
    TestServer, cli_command, cli_fails, cli_ok, expect_refusal, run_command, temp_dir, wait_until,
};
use flo::protocol::{ActionKind, ActionSpec, ErrorCode, RunStatus};
use flo::{ActionResult, ActionWorker, Client, Error, InvokeOptions, MuxClient, MuxOptions};
use std::path::{Path, PathBuf};
use std::time::Duration;

const ADMIN: &str = "s3cret-admin-token";
const CLIENT: &str = "payments-client-token";
const WORKER: &str = "payments-worker-token";

const AUTH_YAML: &str = r#"
tokens:
  - token: "s3cret-admin-token"
    role: admin
    namespaces: ["*"]
  - token: "payments-client-token"
    role: client
    namespaces: ["payments"]
    name: payments-app
  - token: "payments-worker-token"
    role: worker
    namespaces: ["payments"]
"#;

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A server with the example auth file (in `dir`/auth.yaml).
fn auth_server(dir: &Path) -> TestServer {
    let file = write_file(dir, "auth.yaml", AUTH_YAML);
    TestServer::start(&dir.join("data"), &["--auth-file", file.to_str().unwrap()])
}

/// `flo --addr ADDR --token TOKEN ARGS...`.
fn with_token<'a>(token: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--token", token];
    all.extend_from_slice(args);
    all
}

fn assert_unauthorized(stderr: &str) {
    assert!(
        stderr.starts_with("error: not authorized: "),
        "expected an unauthorized refusal: {stderr}"
    );
}

fn user_action_spec(name: &str) -> ActionSpec {
    ActionSpec {
        namespace: String::new(),
        name: name.into(),
        kind: ActionKind::User,
        wasm: None,
        timeout_ms: Some(30_000),
        max_retries: Some(0),
        retry_delay_ms: None,
        description: None,
        memory_limit_mb: None,
        wasm_entrypoint: None,
    }
}

#[test]
fn an_admin_token_may_do_everything_in_every_namespace() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let addr = server.addr_string();
    cli_ok(&addr, &with_token(ADMIN, &["status"]));
    for ns in ["payments", "default", "other"] {
        cli_ok(
            &addr,
            &with_token(ADMIN, &["--namespace", ns, "kv", "put", "k", "v"]),
        );
        let out = cli_ok(
            &addr,
            &with_token(ADMIN, &["--namespace", ns, "kv", "get", "k"]),
        );
        assert!(out.contains('v'), "{out}");
        cli_ok(
            &addr,
            &with_token(ADMIN, &["--namespace", ns, "action", "register", "charge"]),
        );
    }
    // Worker operations too.
    cli_ok(
        &addr,
        &with_token(
            ADMIN,
            &[
                "--namespace",
                "payments",
                "worker",
                "register",
                "w-admin",
                "charge",
            ],
        ),
    );
}

#[test]
fn a_client_token_is_allowed_in_its_namespace_and_refused_outside_it() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let addr = server.addr_string();
    let pay = |args: &[&'static str]| {
        let mut all = vec!["--token", CLIENT, "--namespace", "payments"];
        all.extend_from_slice(args);
        all
    };
    cli_ok(&addr, &pay(&["kv", "put", "k", "v1"]));
    cli_ok(&addr, &pay(&["kv", "get", "k"]));
    cli_ok(&addr, &with_token(CLIENT, &["status"]));

    // Another namespace: refused, exit code 1.
    let e = cli_fails(&addr, &with_token(CLIENT, &["kv", "get", "k"]));
    assert_unauthorized(&e);
    assert!(e.contains("namespace \"default\""), "{e}");
    let e = cli_fails(
        &addr,
        &with_token(CLIENT, &["--namespace", "billing", "kv", "put", "k", "v"]),
    );
    assert_unauthorized(&e);

    // Admin-only and worker operations, even in its namespace.
    let e = cli_fails(&addr, &pay(&["action", "register", "charge"]));
    assert_unauthorized(&e);
    assert!(
        e.contains("a client token may not send action_register"),
        "{e}"
    );
    let e = cli_fails(&addr, &pay(&["worker", "register", "w-1", "charge"]));
    assert_unauthorized(&e);

    // Nothing refused changed anything: the admin still finds the first value only.
    let out = cli_ok(
        &addr,
        &with_token(ADMIN, &["--namespace", "payments", "kv", "get", "k"]),
    );
    assert!(out.contains("v1"), "{out}");
    let e = cli_fails(
        &addr,
        &with_token(ADMIN, &["--namespace", "billing", "kv", "get", "k"]),
    );
    assert!(!e.contains("authorized"), "{e}");

    // Each denial is logged: shard, operation, namespace, who; never the token.
    let logged = wait_until(Duration::from_secs(5), || {
        server
            .stderr()
            .contains("unauthorized kv_get in namespace \"default\" by payments-app (role client)")
    });
    let log = server.stderr();
    assert!(logged, "the denial is logged:\n{log}");
    assert!(
        log.contains("unauthorized action_register in namespace \"payments\""),
        "{log}"
    );
    assert!(
        !log.contains(CLIENT) && !log.contains(ADMIN),
        "a token in the log:\n{log}"
    );
}

#[test]
fn a_worker_token_takes_tasks_but_may_not_act_as_a_client() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let addr = server.addr_string();
    cli_ok(
        &addr,
        &with_token(
            ADMIN,
            &["--namespace", "payments", "action", "register", "charge"],
        ),
    );
    let work = |args: &[&'static str]| {
        let mut all = vec!["--token", WORKER, "--namespace", "payments"];
        all.extend_from_slice(args);
        all
    };
    cli_ok(&addr, &work(&["worker", "register", "w-1", "charge"]));
    cli_ok(&addr, &work(&["worker", "heartbeat", "--worker-id", "w-1"]));
    cli_ok(
        &addr,
        &work(&[
            "worker",
            "await",
            "charge",
            "--worker-id",
            "w-1",
            "--block",
            "0",
        ]),
    );
    // KV reads, for what workers need to look up.
    cli_ok(
        &addr,
        &with_token(
            ADMIN,
            &["--namespace", "payments", "kv", "put", "rate", "3"],
        ),
    );
    let out = cli_ok(&addr, &work(&["kv", "get", "rate"]));
    assert!(out.contains('3'), "{out}");

    for args in [
        &["kv", "put", "k", "v"][..],
        &["action", "invoke", "charge", "{}"],
        &["action", "register", "other"],
        &["workflow", "list"],
    ] {
        let e = cli_fails(&addr, &work(args));
        assert_unauthorized(&e);
    }
    // Its worker operations in another namespace.
    let e = cli_fails(
        &addr,
        &with_token(WORKER, &["worker", "register", "w-2", "charge"]),
    );
    assert_unauthorized(&e);
}

#[test]
fn a_missing_or_wrong_token_is_refused() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let addr = server.addr_string();
    let e = cli_fails(&addr, &["status"]);
    assert_unauthorized(&e);
    assert!(e.contains("requires a token"), "{e}");
    let e = cli_fails(&addr, &with_token("guess", &["kv", "get", "k"]));
    assert_unauthorized(&e);
    assert!(e.contains("not valid"), "{e}");

    // FLO_TOKEN works like --token.
    let mut cmd = cli_command();
    cmd.env("FLO_TOKEN", ADMIN)
        .args(["--addr", &addr, "status"]);
    let out = run_command(cmd);
    assert!(out.status.success(), "{}", out.stderr);

    // SDK: no token, a wrong one, then a good one.
    match Client::connect(server.addr) {
        Err(Error::Server(e)) => assert_eq!(e.code, ErrorCode::Unauthorized),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a connection without a token was accepted"),
    }
    match Client::connect_with_token(server.addr, "guess") {
        Err(Error::Server(e)) => assert_eq!(e.code, ErrorCode::Unauthorized),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a wrong token was accepted"),
    }
    let mut c = Client::connect_with_token(server.addr, CLIENT)
        .unwrap()
        .with_namespace("payments");
    c.status().unwrap();
    let log = server.stderr();
    assert!(!log.contains("guess"), "a token in the log:\n{log}");
}

#[test]
fn sdk_clients_and_workers_present_their_tokens() {
    let dir = temp_dir();
    let server = auth_server(dir.path());
    let mut admin = Client::connect_with_token(server.addr, ADMIN)
        .unwrap()
        .with_namespace("payments");
    admin.register_action(user_action_spec("charge")).unwrap();

    // A worker without a token cannot even register.
    let refused = ActionWorker::builder(server.addr)
        .namespace("payments")
        .action("charge", |_ctx| ActionResult::json(&"no"))
        .spawn();
    assert!(refused.is_err(), "a worker without a token started");

    let worker = ActionWorker::builder(server.addr)
        .namespace("payments")
        .token(WORKER)
        .worker_id("charger")
        .action("charge", |_ctx| ActionResult::json(&"charged"))
        .spawn()
        .expect("the worker starts with its token");

    let mut client = Client::connect_with_token(server.addr, CLIENT)
        .unwrap()
        .with_namespace("payments");
    let run_id = client
        .invoke("charge", b"{}", InvokeOptions::default())
        .unwrap();
    let run = client.wait_run(&run_id, 20_000).unwrap();
    assert_eq!(run.status, RunStatus::Completed, "{run:?}");
    assert_eq!(run.output.as_deref(), Some(&b"\"charged\""[..]));
    worker.stop_and_join().unwrap();

    // A MuxClient with a client token: its namespace only.
    let options = MuxOptions {
        namespace: "payments".into(),
        token: Some(CLIENT.into()),
        ..MuxOptions::default()
    };
    let mux = MuxClient::connect_with(server.addr, options).unwrap();
    mux.call(flo::protocol::Op::Status).unwrap();
    let e = mux
        .call(flo::protocol::Op::KvList {
            namespace: "default".into(),
            prefix: String::new(),
            limit: None,
            cursor: None,
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::Server(v) if v.code == ErrorCode::Unauthorized),
        "{e}"
    );
}

#[test]
fn without_an_auth_file_no_token_is_needed() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    cli_ok(&addr, &["kv", "put", "k", "v"]);
    // A token given to an open server is ignored.
    cli_ok(&addr, &with_token("anything", &["kv", "get", "k"]));
    let mut c = server.client();
    c.status().unwrap();
}

#[test]
fn a_bad_auth_file_stops_the_server_from_starting() {
    let dir = temp_dir();
    let cases = [
        (
            "unknown-role.yaml",
            "tokens:\n  - {token: a, role: root, namespaces: ['*']}\n",
            "unknown variant `root`",
        ),
        (
            "empty-token.yaml",
            "tokens:\n  - {token: '', role: admin, namespaces: ['*']}\n",
            "the token is empty",
        ),
        (
            "duplicate.yaml",
            "tokens:\n  - {token: a, role: admin, namespaces: ['*']}\n  - {token: a, role: client, namespaces: [x]}\n",
            "the same token as token #1",
        ),
        ("syntax.toml", "[[tokens]\n", "cannot parse it"),
        ("empty.yaml", "tokens: []\n", "lists no tokens"),
    ];
    for (name, text, problem) in cases {
        let file = write_file(dir.path(), name, text);
        let r = expect_refusal(
            &dir.path().join("data"),
            &["--auth-file", file.to_str().unwrap()],
        );
        assert!(
            r.stderr.contains(&format!("auth file {}", file.display()))
                && r.stderr.contains(problem),
            "{name}: the refusal names the file and the problem:\n{}",
            r.stderr
        );
        assert_eq!(r.status.code(), Some(2), "{name}: {}", r.stderr);
    }
    let missing = dir.path().join("missing.yaml");
    let r = expect_refusal(
        &dir.path().join("data"),
        &["--auth-file", missing.to_str().unwrap()],
    );
    assert!(r.stderr.contains("cannot read it"), "{}", r.stderr);
}

#[test]
fn a_toml_auth_file_works_like_yaml() {
    let dir = temp_dir();
    let file = write_file(
        dir.path(),
        "auth.toml",
        "[[tokens]]\ntoken = \"t-client\"\nrole = \"client\"\nnamespaces = [\"default\"]\n",
    );
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--auth-file", file.to_str().unwrap()],
    );
    let addr = server.addr_string();
    cli_ok(&addr, &with_token("t-client", &["kv", "put", "k", "v"]));
    let e = cli_fails(&addr, &with_token("t-client", &["action", "register", "a"]));
    assert_unauthorized(&e);
}

#[test]
fn a_non_loopback_address_needs_an_auth_file_or_insecure() {
    let dir = temp_dir();
    let r = expect_refusal(dir.path(), &["--listen", "0.0.0.0:0"]);
    assert!(
        r.stderr.contains("--auth-file") && r.stderr.contains("--insecure"),
        "{}",
        r.stderr
    );
    assert_eq!(r.status.code(), Some(2));

    let server = TestServer::start(dir.path(), &["--listen", "0.0.0.0:0", "--insecure"]);
    assert!(
        server
            .stderr()
            .contains("with no authentication (--insecure)"),
        "{}",
        server.stderr()
    );
    let port = server.addr.port();
    cli_ok(&format!("127.0.0.1:{port}"), &["status"]);
    drop(server);

    let file = write_file(dir.path(), "auth.yaml", AUTH_YAML);
    let server = TestServer::start(
        dir.path(),
        &[
            "--listen",
            "0.0.0.0:0",
            "--auth-file",
            file.to_str().unwrap(),
        ],
    );
    let addr = format!("127.0.0.1:{}", server.addr.port());
    cli_ok(&addr, &with_token(ADMIN, &["status"]));
    assert_unauthorized(&cli_fails(&addr, &["status"]));
}

/// A token's `workers` list bounds the worker ids it may act as (issue 21): one fleet's
/// token cannot register as, heartbeat for or report on another fleet's workers.
#[test]
fn a_token_acts_only_as_the_workers_it_lists() {
    let dir = temp_dir();
    let file = write_file(
        dir.path(),
        "auth.yaml",
        r#"
tokens:
  - token: "s3cret-admin-token"
    role: admin
    namespaces: ["*"]
  - token: "gpu-fleet-token"
    role: worker
    namespaces: ["payments"]
    workers: ["gpu-*"]
"#,
    );
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--auth-file", file.to_str().unwrap()],
    );
    let addr = server.addr_string();
    cli_ok(
        &addr,
        &with_token(
            ADMIN,
            &["--namespace", "payments", "action", "register", "charge"],
        ),
    );
    let gpu = |args: &[&'static str]| {
        let mut all = vec!["--token", "gpu-fleet-token", "--namespace", "payments"];
        all.extend_from_slice(args);
        all
    };
    cli_ok(&addr, &gpu(&["worker", "register", "gpu-1", "charge"]));
    cli_ok(
        &addr,
        &gpu(&["worker", "heartbeat", "--worker-id", "gpu-1"]),
    );
    for args in [
        &["worker", "register", "cpu-1", "charge"][..],
        &["worker", "heartbeat", "--worker-id", "cpu-1"],
        &[
            "worker",
            "await",
            "charge",
            "--worker-id",
            "cpu-1",
            "--block",
            "0",
        ],
    ] {
        let e = cli_fails(&addr, &gpu(args));
        assert_unauthorized(&e);
        assert!(e.contains("may not act as worker \"cpu-1\""), "{e}");
    }
    server.stop();
}
