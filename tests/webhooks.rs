//! Completion webhooks end to end, against an HTTP receiver written here: the events a
//! definition asks for arrive signed (`X-Flo-Signature: sha256=HMAC(secret, body)`) with
//! a stable delivery id; a receiver failing twice is retried until it takes the delivery;
//! one that keeps failing dead-letters it (`flo webhook failed`) until `flo webhook
//! redeliver`; `--webhook URL` sends one run elsewhere; bad input is refused with nothing
//! changed; deliveries waiting when the server is killed -9 arrive after the restart, and
//! none the receiver took is sent again.

mod common;

use common::{TestServer, cli_fails, cli_json, cli_ok, temp_dir, wait_until};
use flo::StartOptions;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request the receiver took.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    /// Names lower-cased.
    headers: HashMap<String, String>,
    body: Vec<u8>,
    status: u16,
}

impl Hit {
    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("a JSON body")
    }
}

/// A local HTTP/1.1 receiver (keep-alive). How it answers depends on the path:
/// `/ok` 200; `/flaky` 500 to the first two attempts of each delivery, then 200; `/down`
/// 503 while `down` is set, else 200; `/hang` never.
#[derive(Clone)]
struct Receiver {
    port: u16,
    hits: Arc<Mutex<Vec<Hit>>>,
    down: Arc<AtomicBool>,
}

impl Receiver {
    fn start() -> Receiver {
        Receiver::on(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    fn on(listener: TcpListener) -> Receiver {
        let r = Receiver {
            port: listener.local_addr().unwrap().port(),
            hits: Arc::default(),
            down: Arc::new(AtomicBool::new(true)),
        };
        let me = r.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let me = me.clone();
                std::thread::spawn(move || me.serve(conn));
            }
        });
        r
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn serve(&self, conn: TcpStream) {
        let mut reader = BufReader::new(conn.try_clone().unwrap());
        let mut writer = conn;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            let mut headers = HashMap::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 {
                    return;
                }
                let h = h.trim_end();
                if h.is_empty() {
                    break;
                }
                if let Some((k, v)) = h.split_once(':') {
                    headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                }
            }
            let len: usize = headers
                .get("content-length")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0; len];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            let status = {
                let mut hits = self.hits.lock().unwrap();
                let id = headers.get("x-flo-delivery").cloned().unwrap_or_default();
                let earlier = hits
                    .iter()
                    .filter(|h| h.header("x-flo-delivery") == id)
                    .count();
                if path == "/hang" {
                    drop(hits);
                    // Never answers (the connection is held until the test ends).
                    std::thread::sleep(Duration::from_secs(120));
                    return;
                }
                let status = match path.as_str() {
                    "/flaky" if earlier < 2 => 500,
                    "/down" if self.down.load(Ordering::SeqCst) => 503,
                    _ => 200,
                };
                hits.push(Hit {
                    path: path.clone(),
                    headers,
                    body,
                    status,
                });
                status
            };
            let answer = format!("HTTP/1.1 {status} X\r\nContent-Length: 2\r\n\r\nok");
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }

    /// Hits of delivery `id`.
    fn of(&self, id: &str) -> Vec<Hit> {
        self.hits()
            .into_iter()
            .filter(|h| h.header("x-flo-delivery") == id)
            .collect()
    }

    /// Deliveries the receiver took (a 2xx), by id: how many times.
    fn taken(&self) -> HashMap<String, usize> {
        let mut taken = HashMap::new();
        for h in self.hits().iter().filter(|h| h.status == 200) {
            *taken
                .entry(h.header("x-flo-delivery").to_string())
                .or_insert(0) += 1;
        }
        taken
    }
}

fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn flow(name: &str, webhook: &str) -> String {
    format!(
        "kind: Workflow\nname: {name}\nversion: \"1\"\nstate: {{stage: 1}}\nwebhook:\n{webhook}\nstart:\n  run: \"@actions/prepare\"\n  transitions:\n    success: ship\nsteps:\n  ship:\n    run: \"@actions/prepare\"\n    transitions:\n      success: flo.Completed\n"
    )
}

fn start(c: &mut flo::Client, workflow: &str, run_id: &str, webhook: Option<String>) {
    let opts = StartOptions {
        run_id: Some(run_id.to_string()),
        webhook,
        ..StartOptions::default()
    };
    c.start_workflow(workflow, br#"{"order": 7}"#, opts)
        .unwrap();
}

const WAIT: Duration = Duration::from_secs(20);

/// A receiver, and a 2-shard server with the action the flows run.
fn setup() -> (Receiver, tempfile::TempDir, TestServer, flo::Client) {
    let rx = Receiver::start();
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    common::fixed_wasm_action(&mut c, "prepare", r#"{"ready": true}"#);
    (rx, dir, server, c)
}

/// `flo webhook failed|pending [ARGS]`: the deliveries listed.
fn listed(addr: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["webhook"];
    all.extend_from_slice(args);
    cli_json(addr, &all)["deliveries"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn deliveries_are_signed_retried_dead_lettered_and_redelivered() {
    let (rx, _dir, server, mut c) = setup();
    let addr = server.addr_string();

    // Retried: the receiver fails twice, takes the third attempt; signed, headers kept.
    let flaky = format!(
        "  url: {}\n  secret: s3cret\n  headers: {{X-Team: payments}}\n  retry: {{max_attempts: 4, initial_delay_ms: 100, backoff: constant}}",
        rx.url("/flaky")
    );
    c.create_workflow(&flow("flaky", &flaky)).unwrap();
    start(&mut c, "flaky", "order-1", None);
    assert!(
        wait_until(WAIT, || rx.taken().len() == 1),
        "the delivery was taken: {:?}",
        rx.hits()
    );
    let id = rx.taken().into_keys().next().unwrap();
    let hits = rx.of(&id);
    assert_eq!(
        hits.iter().map(|h| h.status).collect::<Vec<_>>(),
        [500, 500, 200],
        "two failures then the delivery"
    );
    for (i, h) in hits.iter().enumerate() {
        assert_eq!(h.path, "/flaky");
        assert_eq!(h.header("x-flo-attempt"), (i + 1).to_string());
        assert_eq!(h.header("x-flo-event"), "completed");
        assert_eq!(h.header("x-team"), "payments");
        assert_eq!(h.header("content-type"), "application/json");
        assert_eq!(h.header("x-flo-signature"), signature("s3cret", &h.body));
        assert_eq!(h.body, hits[0].body, "the same body on every attempt");
    }
    let body = hits[0].json();
    assert_eq!(body["id"], id.as_str());
    assert_eq!(body["event"], "completed");
    assert_eq!(body["workflow"], "flaky");
    assert_eq!(body["run_id"], "order-1");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["state"]["order"], 7);
    assert_eq!(body["state"]["ready"], true);
    assert_eq!(body["state"]["stage"], 1);
    // Nothing waits, nothing failed.
    let wait_empty = |failed: bool| {
        wait_until(WAIT, || {
            let kind = if failed { "failed" } else { "pending" };
            listed(&addr, &[kind]).is_empty()
        })
    };
    assert!(wait_empty(false) && wait_empty(true));

    // The events asked for, in order: started, each step, the end.
    let every = format!(
        "  url: {}\n  events: [workflow_started, step_finished, completed]",
        rx.url("/ok")
    );
    c.create_workflow(&flow("every", &every)).unwrap();
    start(&mut c, "every", "order-2", None);
    let of_run = |run: &str| -> Vec<serde_json::Value> {
        let mut hits: Vec<_> = rx
            .hits()
            .into_iter()
            .map(|h| h.json())
            .filter(|b| b["run_id"] == run)
            .collect();
        hits.sort_by_key(|b| (b["at_ms"].as_u64(), b["id"].as_str().map(str::to_string)));
        hits
    };
    assert!(wait_until(WAIT, || of_run("order-2").len() == 4));
    let kinds: Vec<String> = of_run("order-2")
        .iter()
        .map(|b| format!("{} {}", b["event"], b["step"]))
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "\"completed\" null",
            "\"step_finished\" \"_start\"",
            "\"step_finished\" \"ship\"",
            "\"workflow_started\" null"
        ],
        "{kinds:?}"
    );
    let ship = of_run("order-2")
        .into_iter()
        .find(|b| b["step"] == "ship")
        .unwrap();
    assert_eq!(
        (&ship["outcome"], &ship["output"]["ready"]),
        (&"success".into(), &true.into())
    );
    assert!(of_run("order-2").iter().all(|b| b.get("secret").is_none()));

    // Dead-lettered: `--webhook` sends this run to a receiver that is down; two attempts.
    let down = "  url: http://127.0.0.1:9/never\n  retry: {max_attempts: 2, initial_delay_ms: 50}";
    c.create_workflow(&flow("down", down)).unwrap();
    start(&mut c, "down", "order-3", Some(rx.url("/down")));
    assert!(wait_until(WAIT, || listed(&addr, &["failed"]).len() == 1));
    let failed = cli_json(&addr, &["webhook", "failed", "--workflow", "down"]);
    let dead = &failed["deliveries"][0];
    assert_eq!(dead["run_id"], "order-3");
    assert_eq!(dead["event"], "completed");
    assert_eq!(dead["attempts"], 2);
    assert_eq!(dead["last_error"], "HTTP 503");
    assert_eq!(dead["url"], rx.url("/down").as_str());
    let dead_id = dead["id"].as_str().unwrap().to_string();
    assert_eq!(rx.of(&dead_id).len(), 2);
    let text = cli_ok(&addr, &["webhook", "failed"]);
    assert!(
        text.contains(&dead_id) && text.contains("HTTP 503"),
        "{text}"
    );
    assert!(listed(&addr, &["failed", "--workflow", "flaky"]).is_empty());

    // Bad input: refused, nothing changed.
    let e = cli_fails(&addr, &["webhook", "redeliver", "9-99"]);
    assert!(e.contains("no failed webhook delivery"), "{e}");
    let e = cli_fails(&addr, &["webhook", "redeliver", "nonsense"]);
    assert!(e.contains("no failed webhook delivery"), "{e}");
    let e = cli_fails(
        &addr,
        &["workflow", "start", "down", "--webhook", "ftp://x/y"],
    );
    assert!(e.contains("not http:// or https://"), "{e}");
    let bad = flow("bad", "  url: http://h/\n  events: [finished]");
    let e = c.create_workflow(&bad).unwrap_err().to_string();
    assert!(e.contains("E514") && e.contains("finished"), "{e}");
    assert_eq!(rx.of(&dead_id).len(), 2);

    // Redelivered once the receiver is back: the same id and body, attempts from 1.
    rx.down.store(false, Ordering::SeqCst);
    cli_ok(&addr, &["webhook", "redeliver", &dead_id]);
    assert!(wait_until(WAIT, || rx.taken().contains_key(&dead_id)));
    let hits = rx.of(&dead_id);
    assert_eq!(hits.len(), 3);
    assert_eq!(hits[2].header("x-flo-attempt"), "1");
    assert_eq!(hits[2].body, hits[0].body);
    assert!(wait_empty(true));
    let e = cli_fails(&addr, &["webhook", "redeliver", &dead_id]);
    assert!(e.contains("no failed webhook delivery"), "{e}");
    server.stop();
}

#[test]
fn deliveries_waiting_at_a_kill_9_arrive_after_the_restart_and_none_taken_is_sent_again() {
    let (rx, dir, server, mut c) = setup();
    let hook = format!(
        "  url: {}\n  retry: {{max_attempts: 50, initial_delay_ms: 200, backoff: constant}}",
        rx.url("/down")
    );
    c.create_workflow(&flow("kept", &hook)).unwrap();
    let runs: Vec<String> = (0..6).map(|i| format!("kept-{i}")).collect();
    for run in &runs[..3] {
        start(&mut c, "kept", run, None);
    }
    // The receiver is down: each delivery has been tried (and refused) at least once.
    let tried = |rx: &Receiver, n: usize| {
        let mut ids: Vec<String> = rx
            .hits()
            .iter()
            .map(|h| h.header("x-flo-delivery").to_string())
            .collect();
        ids.sort();
        ids.dedup();
        ids.len() >= n
    };
    assert!(wait_until(WAIT, || tried(&rx, 3)));
    // Three more runs, their deliveries taken before the crash.
    rx.down.store(false, Ordering::SeqCst);
    assert!(wait_until(WAIT, || rx.taken().len() == 3));
    rx.down.store(true, Ordering::SeqCst);
    for run in &runs[3..] {
        start(&mut c, "kept", run, None);
    }
    assert!(wait_until(WAIT, || tried(&rx, 6)));
    let taken_before = rx.taken();
    server.kill9();

    rx.down.store(false, Ordering::SeqCst);
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let addr = server.addr_string();
    assert!(
        wait_until(WAIT, || rx.taken().len() == 6),
        "every delivery arrives after the restart: {:?}",
        rx.taken()
    );
    let runs_told: Vec<String> = rx
        .hits()
        .iter()
        .filter(|h| h.status == 200)
        .map(|h| h.json()["run_id"].as_str().unwrap().to_string())
        .collect();
    for run in &runs {
        assert!(runs_told.contains(run), "{run} was told of: {runs_told:?}");
    }
    // Taken before the crash and recorded (the crash came well after): not sent again.
    for (id, n) in &taken_before {
        assert_eq!(rx.taken()[id], *n, "delivery {id} was sent again");
    }
    assert!(wait_until(WAIT, || listed(&addr, &["pending"]).is_empty()));
    // Another restart sends nothing again.
    let before = rx.hits().len();
    server.stop();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        rx.hits().len(),
        before,
        "nothing is sent after a clean restart"
    );
    server.stop();
}

#[test]
fn a_receiver_that_never_answers_slows_no_run_and_its_deliveries_time_out() {
    let (rx, _dir, server, mut c) = setup();
    let addr = server.addr_string();
    let hook = format!(
        "  url: {}\n  timeoutMs: 300\n  retry: {{max_attempts: 2, initial_delay_ms: 100}}",
        rx.url("/hang")
    );
    c.create_workflow(&flow("hung", &hook)).unwrap();
    // 300 runs, each with a delivery to a receiver that never answers: every run ends as
    // fast as without one (the deliveries wait off the shards), the server answers.
    let started = std::time::Instant::now();
    for i in 0..300 {
        start(&mut c, "hung", &format!("hung-{i}"), None);
    }
    for i in 0..300 {
        let run = c.wait_workflow(&format!("hung-{i}"), 10_000).unwrap();
        assert_eq!(run.status, flo::protocol::WorkflowRunStatus::Completed);
    }
    let took = started.elapsed();
    assert!(took < Duration::from_secs(15), "300 runs took {took:?}");
    cli_ok(&addr, &["status"]);
    // Each delivery timed out twice and was given up, saying so.
    assert!(wait_until(Duration::from_secs(60), || {
        listed(&addr, &["failed", "--limit", "1000"]).len() == 300
    }));
    let failed = cli_json(&addr, &["webhook", "failed", "--limit", "1"]);
    let d = &failed["deliveries"][0];
    assert_eq!(d["attempts"], 2);
    assert_eq!(d["last_error"], "no answer within 300 ms", "{d}");
    server.stop();
}
