//! Reliability: restarts on the same port with clients connected.

mod common;

use common::*;
use std::process::{Child, Command, Stdio};

/// Clients left connected across a stop: a worker long-polling for a task and a few idle
/// protocol connections.
struct Connected {
    awaiting: Child,
    idle: Vec<flo::Client>,
}

fn connect_clients(server: &TestServer) -> Connected {
    let addr = server.addr_string();
    cli_ok(&addr, &["action", "register", "resize"]);
    cli_ok(&addr, &["worker", "register", "w1", "resize"]);
    let awaiting = {
        let mut cmd: Command = cli_command();
        cmd.args([
            "--addr",
            &addr,
            "worker",
            "await",
            "resize",
            "--worker-id",
            "w1",
            "--block",
            "20000",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        cmd.spawn().expect("spawn flo worker await")
    };
    let mut idle: Vec<flo::Client> = (0..4).map(|_| server.client()).collect();
    for (i, c) in idle.iter_mut().enumerate() {
        c.kv_put(&format!("k{i}"), b"v", Default::default())
            .expect("put");
    }
    // The await is parked on the server before the stop.
    std::thread::sleep(std::time::Duration::from_millis(300));
    Connected { awaiting, idle }
}

fn restart_on_the_same_port(dir: &std::path::Path, addr: &str) -> TestServer {
    match TestServer::try_start(dir, &["--listen", addr]) {
        Ok(server) => server,
        Err(r) => panic!("restart on {addr} failed ({}):\n{}", r.status, r.stderr),
    }
}

#[test]
fn a_restart_on_the_same_port_works_right_after_a_graceful_stop_or_a_kill_with_clients_connected() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let addr = server.addr_string();
    let mut connected = connect_clients(&server);
    server.stop();
    let _ = connected.awaiting.wait();
    drop(connected.idle);

    // At once: the connections the server closed are in TIME_WAIT.
    let server = restart_on_the_same_port(dir.path(), &addr);
    let mut c = server.client();
    for i in 0..4 {
        assert!(c.kv_get(&format!("k{i}")).expect("get").is_some());
    }
    let mut connected = connect_clients(&server);
    server.kill9();
    let _ = connected.awaiting.kill();
    let _ = connected.awaiting.wait();
    connected.idle.clear();

    let server = restart_on_the_same_port(dir.path(), &addr);
    assert!(server.client().kv_get("k0").expect("get").is_some());

    // A port a live server serves is still refused.
    let other = temp_dir();
    let refused = expect_refusal(other.path(), &["--listen", &addr]);
    assert!(refused.stderr.contains(&addr), "{}", refused.stderr);
    server.stop();
}
