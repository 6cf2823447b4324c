//! The `flo` command-line client against a real server.

mod common;

use common::{
    TestServer, cli_command, cli_json as json, cli_ok as ok, run_cli, run_command, temp_dir,
};
use flo::PutOptions;

fn free_port_without_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[test]
fn kv_commands_print_sensible_human_output() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();

    let out = ok(&addr, &["kv", "put", "greeting", "hello world"]);
    assert_eq!(out.trim(), "OK (version 1)");
    let out = ok(&addr, &["kv", "put", "greeting", "hello again"]);
    assert!(out.contains("version 2"), "{out}");
    assert_eq!(ok(&addr, &["kv", "get", "greeting"]), "hello again\n");
    ok(&addr, &["kv", "put", "farewell", "bye"]);
    ok(&addr, &["kv", "put", "other", "x"]);

    // list: one `key<TAB>value` line per key, in key order; prefix filters.
    let out = ok(&addr, &["kv", "list"]);
    assert_eq!(out, "farewell\tbye\ngreeting\thello again\nother\tx\n");
    let out = ok(&addr, &["kv", "list", "g"]);
    assert_eq!(out, "greeting\thello again\n");
    let out = ok(&addr, &["kv", "list", "--limit", "1"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "farewell\tbye");
    assert_eq!(
        lines.len(),
        2,
        "one entry and a note that more keys match: {out}"
    );
    assert!(lines[1].contains("more"), "{out}");

    // Compare-and-set through the CLI.
    let out = ok(
        &addr,
        &["kv", "put", "greeting", "cas", "--if-version", "2"],
    );
    assert!(out.contains("version 3"), "{out}");
    let (status, stdout, stderr) = run_cli(
        &addr,
        &["kv", "put", "greeting", "stale", "--if-version", "2"],
    );
    assert!(!status.success());
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains("version"),
        "{stderr}"
    );
    assert_eq!(ok(&addr, &["kv", "get", "greeting"]), "cas\n");

    // TTL through the CLI.
    ok(&addr, &["kv", "put", "short", "lived", "--ttl", "60000"]);
    let mut c = server.client();
    assert!(c.kv_get("short").unwrap().unwrap().expires_at_ms.is_some());

    // delete: reports whether the key existed; either way the command succeeds.
    assert_eq!(ok(&addr, &["kv", "delete", "greeting"]).trim(), "deleted");
    let out = ok(&addr, &["kv", "delete", "greeting"]);
    assert!(
        out.contains("did not exist") && out.contains("greeting"),
        "{out}"
    );
    assert_eq!(c.kv_get("greeting").unwrap(), None);
    server.stop();
}

#[test]
fn status_prints_version_shards_and_durability() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    ok(&addr, &["kv", "put", "a", "1"]);

    let out = ok(&addr, &["status"]);
    let first = out.lines().next().unwrap();
    assert!(
        first.contains(&format!("flo {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(
        first.contains("2 shards") && first.contains("durability sync"),
        "{out}"
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "title, header, one row per shard: {out}");
    assert!(
        lines[1].contains("SHARD") && lines[1].contains("LSN") && lines[1].contains("SEGMENTS"),
        "{out}"
    );
    assert!(
        lines[2].trim_start().starts_with('0') && lines[3].trim_start().starts_with('1'),
        "{out}"
    );
    server.stop();
}

#[test]
fn json_mode_prints_exactly_one_document_per_command() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--durability", "async"]);
    let addr = server.addr_string();

    let doc = json(&addr, &["kv", "put", "k1", "v1"]);
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["key"], "k1");
    let doc = json(&addr, &["kv", "put", "k1", "v1b"]);
    assert_eq!(doc["version"], 2);
    json(&addr, &["kv", "put", "k2", "v2", "--ttl", "60000"]);

    let doc = json(&addr, &["kv", "get", "k1"]);
    assert_eq!(doc["key"], "k1");
    assert_eq!(doc["value"], "v1b");
    assert_eq!(doc["version"], 2);
    assert!(doc["expires_at_ms"].is_null(), "{doc}");
    let doc = json(&addr, &["kv", "get", "k2"]);
    assert!(doc["expires_at_ms"].as_u64().is_some(), "{doc}");

    // A value that is not UTF-8 comes out as hex.
    server
        .client()
        .kv_put("bin", &[0xff, 0x00, 0x10], PutOptions::default())
        .unwrap();
    let doc = json(&addr, &["kv", "get", "bin"]);
    assert_eq!(doc["value_hex"], "ff0010", "{doc}");

    let doc = json(&addr, &["kv", "list", "k"]);
    assert_eq!(doc["truncated"], false);
    let entries = doc["entries"].as_array().expect("entries is an array");
    let keys: Vec<&str> = entries.iter().map(|e| e["key"].as_str().unwrap()).collect();
    assert_eq!(keys, vec!["k1", "k2"]);
    assert_eq!(entries[0]["value"], "v1b");
    assert_eq!(entries[0]["version"], 2);
    let doc = json(&addr, &["kv", "list", "--limit", "1"]);
    assert_eq!(doc["truncated"], true);
    assert_eq!(doc["entries"].as_array().unwrap().len(), 1);
    let doc = json(&addr, &["kv", "list", "nothing-here"]);
    assert_eq!(doc["entries"].as_array().unwrap().len(), 0);

    let doc = json(&addr, &["kv", "delete", "k1"]);
    assert_eq!(doc["deleted"], true);
    let doc = json(&addr, &["kv", "delete", "k1"]);
    assert_eq!(doc["deleted"], false);

    let doc = json(&addr, &["status"]);
    assert_eq!(doc["server_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(doc["shard_count"], 2);
    assert_eq!(doc["durability"], "async");
    let shards = doc["shards"].as_array().expect("shards is an array");
    assert_eq!(shards.len(), 2);
    let mut lsn_sum = 0;
    for (i, s) in shards.iter().enumerate() {
        assert_eq!(s["shard"], i);
        lsn_sum += s["lsn"].as_u64().expect("lsn is a number");
        assert!(
            s["segments"].as_u64().expect("segments is a number") >= 1,
            "{doc}"
        );
    }
    assert_eq!(lsn_sum, 5, "4 puts and 1 delete were logged: {doc}");
    server.stop();
}

#[test]
fn get_of_a_missing_key_fails_with_a_message_on_stderr_only() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    for args in [
        &["kv", "get", "nope"][..],
        &["--json", "kv", "get", "nope"][..],
    ] {
        let (status, stdout, stderr) = run_cli(&addr, args);
        assert!(!status.success(), "{args:?}");
        assert_eq!(stdout, "", "{args:?}: nothing on stdout");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains("nope") && stderr.contains("not found"),
            "{stderr}"
        );
    }
    server.stop();
}

#[test]
fn flo_addr_and_flo_namespace_environment_variables_are_honoured() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();

    let mut cmd = cli_command();
    cmd.env("FLO_ADDR", &addr)
        .env("FLO_NAMESPACE", "envspace")
        .args(["kv", "put", "ek", "from-env"]);
    let out = run_command(cmd);
    assert!(out.status.success(), "{out:?}");

    // The put went to namespace "envspace" on the server named by FLO_ADDR.
    let mut c = server.client().with_namespace("envspace");
    assert_eq!(c.kv_get("ek").unwrap().unwrap().value, b"from-env");
    assert_eq!(
        server.client().kv_get("ek").unwrap(),
        None,
        "not in the default namespace"
    );

    let mut cmd = cli_command();
    cmd.env("FLO_ADDR", &addr)
        .env("FLO_NAMESPACE", "envspace")
        .args(["kv", "get", "ek"]);
    let out = run_command(cmd);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, "from-env\n");

    // The --namespace flag selects the namespace too, and flags beat the environment.
    assert_eq!(
        ok(&addr, &["--namespace", "envspace", "kv", "get", "ek"]),
        "from-env\n"
    );
    let mut cmd = cli_command();
    cmd.env("FLO_ADDR", "127.0.0.1:1")
        .env("FLO_NAMESPACE", "elsewhere");
    cmd.args([
        "--addr",
        &addr,
        "--namespace",
        "envspace",
        "kv",
        "get",
        "ek",
    ]);
    let out = run_command(cmd);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, "from-env\n");

    // Without FLO_NAMESPACE the default namespace is used.
    let mut cmd = cli_command();
    cmd.env("FLO_ADDR", &addr).args(["kv", "get", "ek"]);
    let out = run_command(cmd);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stderr.contains("not found"), "{out:?}");
    server.stop();
}

#[test]
fn cli_without_a_server_exits_non_zero_with_a_clear_message() {
    let port = free_port_without_server();
    let addr = format!("127.0.0.1:{port}");
    for args in [
        &["status"][..],
        &["kv", "get", "x"][..],
        &["--json", "kv", "put", "x", "y"][..],
    ] {
        let (status, stdout, stderr) = run_cli(&addr, args);
        assert!(!status.success(), "{args:?}");
        assert_eq!(stdout, "", "{args:?}");
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains("cannot connect") && stderr.contains(&addr),
            "{stderr}"
        );
    }
    // An address that is not one is a usage error, said before any connection is tried.
    for bad in ["notanaddr", "host:port", ":9000"] {
        let (status, _, stderr) = run_cli(bad, &["kv", "get", "x"]);
        assert_eq!(status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("is not a server address"), "{stderr}");
    }
    // A page size the server would refuse is a usage error too, for every listing.
    let pages: [&[&str]; 6] = [
        &["kv", "list", "--limit", "0"],
        &["action", "runs", "a", "--limit", "0"],
        &["action", "dlq", "a", "--limit", "0"],
        &["workflow", "list-runs", "w", "--limit", "10001"],
        &["workflow", "timed-out", "w", "--limit", "0"],
        &["workflow", "history", "r", "--limit", "0"],
    ];
    for args in pages {
        let (status, _, stderr) = run_cli(&addr, args);
        assert_eq!(status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("for '--limit <N>'"), "{stderr}");
    }
}

/// The README's first command runs `flo server` with the default, relative data directory
/// (`./flo-data`): it must start (glommio wants absolute paths for the directories it syncs).
#[test]
fn the_server_starts_with_a_relative_data_dir() {
    use std::io::BufRead;
    let dir = temp_dir();
    let mut child = cli_command()
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--http",
            "off",
            "--shards",
            "1",
        ])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flo server");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    let addr = common::parse_ready_line(&line);
    let _ = child.kill();
    let output = child.wait_with_output().expect("wait");
    assert!(
        addr.is_some(),
        "the server did not start: {line:?}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(dir.path().join("flo-data").join("shard-000").is_dir());
}
