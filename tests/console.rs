//! The web console (`/` and `/api/...` on the HTTP port): in a real headless Chromium, the
//! overview loads live data, a run started by the test opens from the runs list with its
//! history timeline and its workflow's graph, a signal sent from the page completes it;
//! runs are paused, resumed, continued and cancelled from their page and a worker drained
//! from the workers page, each seen through the SDK; the runs page lists every kind of run
//! at once; and the browser reports no console error. Without a browser (apt-get install
//! chromium) those tests say they are skipped; the API's own tests need none: its answers,
//! its errors as JSON, and its auth (401 without a token, 403 for a role that may not, 200
//! with one that may); in the browser, a server with an auth file makes the page ask for a
//! token. `console_screenshots` (ignored: run it by name) draws each page into
//! docs/console/.

mod common;

use common::{TestServer, fixed_wasm_action, guest_action, temp_dir, user_action, wait_until};
use flo::protocol::{
    GroupConfig, GroupMode, GroupReadSpec, GroupStart, RunStatus, StreamConfig, StreamRecordIn,
    WorkerSpec, WorkerStatus, WorkerType, WorkflowRunStatus,
};
use flo::{Client, InvokeOptions, StartOptions};
use flo_testkit::http::{HttpResponse, http_get, http_raw};
use headless_chrome::protocol::cdp::Log::LogEntryLevel;
use headless_chrome::protocol::cdp::Page::CaptureScreenshotFormatOption;
use headless_chrome::protocol::cdp::Runtime::ConsoleAPICalledEventTypeOption;
use headless_chrome::protocol::cdp::types::Event;
use headless_chrome::{Browser, LaunchOptions, Tab};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Waits for a signal, then runs a WebAssembly step: a graph of two steps and three ends.
const WORKFLOW: &str = r#"
kind: Workflow
name: console-approval
version: "1"
start:
  waitForSignal:
    type: approve
    timeoutMs: 600000
    onTimeout: Expired
  transitions:
    success: confirm
steps:
  confirm:
    run: "@actions/console-confirm"
    transitions:
      success: flo.Completed
      failure: flo.Failed
terminals:
  Expired:
    status: failed
"#;

const ADMIN: &str = "console-admin-token";
const WORKER: &str = "console-worker-token";
const AUTH_YAML: &str = r#"
tokens:
  - {token: "console-admin-token", role: admin, namespaces: ["*"], name: operator}
  - {token: "console-worker-token", role: worker, namespaces: ["default"], name: worker}
"#;

/// How long the page may take to show what a step waits for.
const PAGE_TIMEOUT: Duration = Duration::from_secs(20);

fn http_addr(server: &TestServer) -> SocketAddr {
    server.http.expect("the server serves HTTP")
}

/// The action, the workflow and a run of it waiting for its signal; the run's id.
fn waiting_run(client: &mut Client) -> String {
    fixed_wasm_action(client, "console-confirm", r#"{"confirmed":true}"#);
    client
        .create_workflow(WORKFLOW)
        .expect("create the workflow");
    let run_id = client
        .start_workflow(
            "console-approval",
            b"{\"order\":7}",
            StartOptions::default(),
        )
        .expect("start");
    let waiting = wait_until(Duration::from_secs(10), || {
        client.workflow_run(&run_id).unwrap().status == WorkflowRunStatus::Waiting
    });
    assert!(waiting, "the run waits for its signal");
    run_id
}

fn get_json(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, Value) {
    let answer = http_get(addr, path, token).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    (answer.status, json_of(&answer, path))
}

fn post_json(addr: SocketAddr, path: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = http_raw(addr, request.as_bytes()).unwrap_or_else(|e| panic!("POST {path}: {e}"));
    (answer.status, json_of(&answer, path))
}

fn json_of(answer: &HttpResponse, path: &str) -> Value {
    assert!(
        answer
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/json")),
        "{path} answers JSON: {answer:?}"
    );
    serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{path}: {e}: {}", answer.body))
}

// --- The JSON API, without a browser. ---

#[test]
fn the_api_lists_shows_and_signals_a_run_and_draws_its_workflow() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let mut client = server.client();
    let run_id = waiting_run(&mut client);

    let (status, page) = get_json(http, "/api/runs?kind=workflow&name=console-approval", None);
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["runs"][0]["run_id"], run_id.as_str());
    assert_eq!(page["runs"][0]["status"], "waiting");

    let (status, run) = get_json(http, &format!("/api/workflow-runs/{run_id}"), None);
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["input"]["order"], 7, "the input as the JSON it holds");
    assert_eq!(run["waiting_for"], "signal approve");

    let (_, def) = get_json(http, "/api/workflows/console-approval", None);
    let nodes: Vec<&str> = def["graph"]["nodes"]
        .as_array()
        .expect("a graph")
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "_start",
            "confirm",
            "Expired",
            "flo.Completed",
            "flo.Failed"
        ]
    );
    assert_eq!(def["graph"]["edges"].as_array().unwrap().len(), 4);

    let signal = format!("/api/workflow-runs/{run_id}/signal");
    let (status, done) = post_json(
        http,
        &signal,
        None,
        r#"{"type":"approve","payload":{"ok":1}}"#,
    );
    assert_eq!(status, 200, "{done}");
    let run = client.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(run.status, WorkflowRunStatus::Completed);

    let (_, history) = get_json(http, &format!("/api/workflow-runs/{run_id}/history"), None);
    let types: Vec<&str> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .collect();
    assert_eq!(types.first(), Some(&"workflow_started"));
    assert!(types.contains(&"signal_received"), "{types:?}");
    assert_eq!(types.last(), Some(&"workflow_completed"));

    // The step executed in the shard's slots (no action run): the action's runs are its
    // invocations.
    let opts = InvokeOptions::default();
    let invoked = client.invoke_and_wait("console-confirm", b"{}", opts, 10_000);
    assert_eq!(invoked.unwrap().status, RunStatus::Completed);
    let (status, actions) = get_json(http, "/api/runs?kind=action&name=console-confirm", None);
    assert_eq!(status, 200, "{actions}");
    assert_eq!(actions["runs"][0]["status"], "completed");
    for path in [
        "/api/overview",
        "/api/status",
        "/api/actions",
        "/api/workers",
        "/api/streams",
        "/api/schedules",
    ] {
        let (status, doc) = get_json(http, path, None);
        assert_eq!(status, 200, "{path}: {doc}");
    }
}

/// Its one step runs a user-hosted action no worker takes: the run waits for that action
/// run (what `continue` starts again).
const STUCK_WORKFLOW: &str = r#"
kind: Workflow
name: console-stuck
version: "1"
start:
  run: "@actions/console-slow"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;

/// A run of `console-stuck` waiting for its step's action run; the run's id and what it
/// waits for.
fn stuck_run(client: &mut Client) -> (String, String) {
    user_action(client, "console-slow", 600_000, 0, 1000);
    client
        .create_workflow(STUCK_WORKFLOW)
        .expect("create the workflow");
    let run_id = client
        .start_workflow("console-stuck", b"{}", StartOptions::default())
        .expect("start");
    let mut waiting_for = None;
    let waits = wait_until(Duration::from_secs(10), || {
        waiting_for = client.workflow_run(&run_id).unwrap().waiting_for;
        waiting_for
            .as_deref()
            .is_some_and(|w| w.starts_with("action run "))
    });
    assert!(waits, "the run waits for its action run: {waiting_for:?}");
    (run_id, waiting_for.unwrap())
}

fn workflow_status(client: &mut Client, run_id: &str) -> WorkflowRunStatus {
    client.workflow_run(run_id).unwrap().status
}

#[test]
fn the_api_pauses_resumes_and_continues_a_run_and_lists_every_kind_of_run() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let mut client = server.client();
    let run_id = waiting_run(&mut client);
    let run = format!("/api/workflow-runs/{run_id}");

    let (status, doc) = post_json(http, &format!("{run}/pause"), None, "");
    assert_eq!(
        (status, doc["status"].as_str()),
        (200, Some("on_hold")),
        "{doc}"
    );
    assert_eq!(
        workflow_status(&mut client, &run_id),
        WorkflowRunStatus::OnHold
    );
    let (status, doc) = post_json(http, &format!("{run}/resume"), None, "{}");
    assert_eq!(
        (status, doc["status"].as_str()),
        (200, Some("waiting")),
        "{doc}"
    );
    assert_eq!(
        workflow_status(&mut client, &run_id),
        WorkflowRunStatus::Waiting
    );
    // Continue applies to a step waiting for an action run, not for a signal.
    let (status, doc) = post_json(http, &format!("{run}/continue"), None, "{}");
    assert_eq!(
        (status, doc["error"]["code"].as_str()),
        (409, Some("conflict")),
        "{doc}"
    );
    let (stuck, waited) = stuck_run(&mut client);
    let body = r#"{"reset_visits": true}"#;
    let (status, doc) = post_json(
        http,
        &format!("/api/workflow-runs/{stuck}/continue"),
        None,
        body,
    );
    assert_eq!(status, 200, "{doc}");
    let moved = wait_until(Duration::from_secs(10), || {
        let now = client.workflow_run(&stuck).unwrap().waiting_for;
        now.is_some_and(|w| w.starts_with("action run ") && w != waited)
    });
    assert!(moved, "the step started again: a new action run");
    let (status, doc) = post_json(
        http,
        &format!("{run}/continue"),
        None,
        r#"{"reset_visits": 1}"#,
    );
    assert_eq!(status, 400, "{doc}");

    // Every run at once: both workflows' and the action runs (the one the waiting run's
    // step will run is not there yet), newest first.
    let (status, page) = get_json(http, "/api/runs?kind=all&limit=100", None);
    assert_eq!(status, 200, "{page}");
    let listed: Vec<(&str, &str)> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["kind"].as_str().unwrap(), r["run_id"].as_str().unwrap()))
        .collect();
    assert!(
        listed.contains(&("workflow", run_id.as_str())),
        "{listed:?}"
    );
    assert!(listed.contains(&("workflow", stuck.as_str())), "{listed:?}");
    assert_eq!(
        listed.iter().filter(|(k, _)| *k == "action").count(),
        2,
        "the stuck step's two action runs (the first cancelled): {listed:?}"
    );
    let created: Vec<u64> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["created_at_ms"].as_u64().unwrap())
        .collect();
    assert!(
        created.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {created:?}"
    );
    assert_eq!(page["next_cursor"], Value::Null, "one page holds them all");

    // A page at a time: one run per page, each run once.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..10 {
        let path = match &cursor {
            None => "/api/runs?kind=all&limit=1".to_string(),
            Some(c) => format!("/api/runs?kind=all&limit=1&cursor={}", encode(c)),
        };
        let (status, page) = get_json(http, &path, None);
        assert_eq!(status, 200, "{page}");
        for r in page["runs"].as_array().unwrap() {
            seen.push(r["run_id"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    let mut all: Vec<String> = listed.iter().map(|(_, id)| id.to_string()).collect();
    all.sort();
    seen.sort();
    assert_eq!(seen, all, "paged one by one: every run once");

    // A status keeps the kinds it applies to: waiting is a workflow run's only.
    let (_, page) = get_json(http, "/api/runs?kind=all&status=waiting", None);
    let kinds: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert!(
        !kinds.is_empty() && kinds.iter().all(|k| *k == "workflow"),
        "{kinds:?}"
    );
    let (status, _) = get_json(http, "/api/runs?kind=all&name=console-approval", None);
    assert_eq!(status, 400, "a name is for one kind");
    let (status, _) = get_json(http, "/api/runs?kind=all&cursor=%7Bnot", None);
    assert_eq!(status, 400, "a cursor the list did not give");
}

/// `text` as a query string's value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn bad_api_requests_are_answered_as_json_errors_and_the_server_goes_on() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let http = http_addr(&server);
    let cases = [
        ("/api/runs?limit=many&name=x", 400, "bad_request"),
        ("/api/runs?kind=sideways", 400, "bad_request"),
        ("/api/runs?kind=workflow", 400, "bad_request"),
        (
            "/api/runs?kind=action&name=x&status=asleep",
            400,
            "bad_request",
        ),
        ("/api/workflow-runs/wfrun-404", 404, "not_found"),
        ("/api/workflows/nothing", 404, "not_found"),
        ("/api/nowhere", 404, "not_found"),
    ];
    for (path, want, code) in cases {
        let (status, doc) = get_json(http, path, None);
        assert_eq!(
            (status, doc["error"]["code"].as_str()),
            (want, Some(code)),
            "{path}: {doc}"
        );
        assert!(
            doc["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let signal = "/api/workflow-runs/wfrun-1/signal";
    let (status, doc) = post_json(http, signal, None, "{not json");
    assert_eq!(status, 400, "{doc}");
    let (status, doc) = post_json(http, signal, None, r#"{"payload":{}}"#);
    assert_eq!(
        (status, doc["error"]["message"].as_str()),
        (400, Some("give the signal's type"))
    );
    let big = format!(r#"{{"type":"x","payload":"{}"}}"#, "a".repeat(100 << 10));
    let (status, doc) = post_json(http, signal, None, &big);
    assert_eq!(status, 413, "{doc}");
    let (status, doc) = get_json(http, signal, None);
    assert_eq!(status, 405, "{doc}");
    let page = http_get(http, "/", None).unwrap();
    assert_eq!(page.status, 200);
    assert!(page.body.contains("/ui/app.js"));
    assert!(page.header("content-security-policy").is_some());
    assert_eq!(http_get(http, "/ui/app.js", None).unwrap().status, 200);
    assert_eq!(
        http_get(http, "/ui/../Cargo.toml", None).unwrap().status,
        404
    );
    let (status, _) = get_json(http, "/api/overview", None);
    assert_eq!(status, 200, "still serving");
}

#[test]
fn with_an_auth_file_the_api_wants_a_token_that_grants_the_operation() {
    let dir = temp_dir();
    let file = dir.path().join("auth.yaml");
    std::fs::write(&file, AUTH_YAML).unwrap();
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--auth-file", file.to_str().unwrap()],
    );
    let http = http_addr(&server);
    let mut admin = Client::connect_as(server.addr, Some(ADMIN)).expect("connect as admin");
    let run_id = waiting_run(&mut admin);
    let run = format!("/api/workflow-runs/{run_id}");

    for token in [None, Some("not-a-token")] {
        let answer = http_get(http, &run, token).unwrap();
        assert_eq!(answer.status, 401, "{token:?}: {}", answer.body);
        assert_eq!(answer.header("www-authenticate"), Some("Bearer"));
        assert_eq!(json_of(&answer, &run)["error"]["code"], "unauthenticated");
    }
    let (status, doc) = get_json(http, &run, Some(ADMIN));
    assert_eq!(
        (status, doc["status"].as_str()),
        (200, Some("waiting")),
        "{doc}"
    );
    // The page itself is public: it asks for the token.
    assert_eq!(http_get(http, "/", None).unwrap().status, 200);

    let signal = format!("{run}/signal");
    let body = r#"{"type":"approve"}"#;
    let (status, doc) = post_json(http, &signal, Some(WORKER), body);
    assert_eq!(status, 403, "a worker token may not signal: {doc}");
    assert_eq!(doc["error"]["code"], "unauthorized");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may not send workflow_signal"),
        "{doc}"
    );
    let (status, _) = get_json(http, "/api/workflows", Some(WORKER));
    assert_eq!(status, 403, "nor list definitions");
    let (status, _) = get_json(http, "/api/overview", Some(WORKER));
    assert_eq!(status, 200, "any known token reads the overview");
    let (status, _) = get_json(http, "/api/workers", Some(WORKER));
    assert_eq!(status, 200, "a worker may list workers");

    let (status, doc) = post_json(http, &signal, Some(ADMIN), body);
    assert_eq!(status, 200, "{doc}");
    let done = admin.wait_workflow(&run_id, 10_000).unwrap();
    assert_eq!(done.status, WorkflowRunStatus::Completed);
}

// --- The page, in a real browser. ---

/// The browser to drive: `$CHROME`, else `chromium`, `chromium-browser`, `google-chrome`
/// or `google-chrome-stable` on the PATH.
fn find_browser() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("CHROME").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        assert!(
            is_executable(&path),
            "CHROME={} is not an executable",
            path.display()
        );
        return Some(path);
    }
    let names = [
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
    ];
    let dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    names
        .iter()
        .flat_map(|name| dirs.iter().map(move |dir| dir.join(name)))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn launch(path: PathBuf) -> Browser {
    let options = LaunchOptions::default_builder()
        .path(Some(path))
        .headless(true)
        // As root (CI) Chromium runs only without its sandbox.
        .sandbox(false)
        .window_size(Some((1280, 1000)))
        .idle_browser_timeout(Duration::from_secs(120))
        .args(vec![std::ffi::OsStr::new("--disable-dev-shm-usage")])
        .build()
        .expect("launch options");
    Browser::new(options).expect("start chromium")
}

/// What the page reported as errors: exceptions, console errors, failed loads.
type Errors = Arc<Mutex<Vec<String>>>;

fn collect_errors(tab: &Tab) -> Errors {
    let errors: Errors = Arc::default();
    let sink = errors.clone();
    tab.enable_log().unwrap().enable_runtime().unwrap();
    let listener = move |event: &Event| {
        let error = match event {
            Event::RuntimeExceptionThrown(e) => Some(format!("exception: {:?}", e.params)),
            Event::LogEntryAdded(e) if e.params.entry.level == LogEntryLevel::Error => Some(
                format!("log: {} ({:?})", e.params.entry.text, e.params.entry.url),
            ),
            Event::RuntimeConsoleAPICalled(e)
                if e.params.Type == ConsoleAPICalledEventTypeOption::Error =>
            {
                let args: Vec<String> = e
                    .params
                    .args
                    .iter()
                    .map(|a| format!("{:?}", a.value))
                    .collect();
                Some(format!("console.error: {}", args.join(" ")))
            }
            _ => None,
        };
        if let Some(error) = error {
            sink.lock().unwrap().push(error);
        }
    };
    tab.add_event_listener(Arc::new(listener)).unwrap();
    errors
}

/// The value of `expression` evaluated in the page.
fn eval(tab: &Tab, expression: &str) -> Value {
    tab.evaluate(expression, false)
        .unwrap_or_else(|e| panic!("evaluate {expression}: {e}"))
        .value
        .unwrap_or(Value::Null)
}

/// Waits until `expression` is true in the page; panics after `PAGE_TIMEOUT` saying what.
fn wait_for(tab: &Tab, what: &str, expression: &str) {
    let deadline = Instant::now() + PAGE_TIMEOUT;
    while Instant::now() < deadline {
        if eval(tab, expression) == Value::Bool(true) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = eval(tab, "document.getElementById('main').innerText");
    panic!("the page never showed {what} ({expression}); it shows:\n{text}");
}

#[test]
fn in_a_browser_a_run_opens_with_its_history_and_graph_and_a_signal_completes_it() {
    let Some(chrome) = find_browser() else {
        eprintln!(
            "skipped: no chromium (apt-get install chromium, or set CHROME to a Chrome or \
             Chromium binary)"
        );
        return;
    };
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let mut client = server.client();
    let run_id = waiting_run(&mut client);

    let browser = launch(chrome);
    let tab = browser.new_tab().expect("a tab");
    let errors = collect_errors(&tab);
    tab.navigate_to(&format!("http://{http}/"))
        .and_then(|t| t.wait_until_navigated())
        .expect("load the console");

    // The overview, live: polled again and again, a row per shard.
    wait_for(
        &tab,
        "the overview polled three times",
        "Number(document.getElementById('overview')?.dataset.polls) >= 3",
    );
    wait_for(
        &tab,
        "both shards serving",
        "document.querySelectorAll('#overview tr.shard-row').length === 2 && \
         document.querySelector('#overview .cards').innerText.includes('2 / 2')",
    );

    // The runs list (the only workflow chosen by default), then the run.
    tab.wait_for_element("#nav a[data-page=runs]")
        .and_then(|a| a.click().map(|_| ()))
        .expect("open the runs page");
    let link = format!("#runs a.run-link[href='#/runs/workflow/{run_id}']");
    tab.wait_for_element_with_custom_timeout(&link, PAGE_TIMEOUT)
        .and_then(|a| a.click().map(|_| ()))
        .expect("open the run from the list");
    wait_for(
        &tab,
        "the run waiting",
        "document.getElementById('run-status')?.innerText === 'waiting'",
    );
    wait_for(
        &tab,
        "the history timeline",
        "[...document.querySelectorAll('#run-history li.event')].map(e => e.dataset.type)\
         .includes('waiting_for_signal')",
    );
    wait_for(
        &tab,
        "the graph with its steps, the current one marked",
        "!!document.querySelector('#run-graph svg.graph g.node.current.signal[data-id=_start]') && \
         !!document.querySelector('#run-graph svg.graph g.node[data-id=confirm]') && \
         document.querySelectorAll('#run-graph svg.graph g.edge').length === 4",
    );

    // The signal, from the page's form.
    assert_eq!(
        eval(&tab, "document.getElementById('signal-type').value"),
        "approve",
        "the form names the signal the run waits for"
    );
    eval(
        &tab,
        "document.getElementById('signal-payload').value = '{\"approved_by\": \"console test\"}'",
    );
    tab.wait_for_element("#signal-send")
        .and_then(|b| b.click().map(|_| ()))
        .expect("send the signal");
    wait_for(
        &tab,
        "the run completed",
        "document.getElementById('run-status')?.innerText === 'completed'",
    );
    wait_for(
        &tab,
        "the whole history",
        "(() => { const t = [...document.querySelectorAll('#run-history li.event')]\
         .map(e => e.dataset.type); return t.includes('signal_received') && \
         t[t.length - 1] === 'workflow_completed'; })()",
    );
    wait_for(
        &tab,
        "the path taken marked on the graph",
        "!!document.querySelector('#run-graph g.node.visited[data-id=confirm]') && \
         !!document.querySelector('#run-graph g.node.reached[data-id=\"flo.Completed\"]')",
    );
    let (_, run) = get_json(http, &format!("/api/workflow-runs/{run_id}"), None);
    assert_eq!(run["status"], "completed");
    // The payload typed in the page is what the signal step put out.
    let done = client.workflow_run(&run_id).unwrap();
    let outputs: Vec<String> = done
        .steps
        .iter()
        .filter_map(|s| s.output.as_deref())
        .map(|o| String::from_utf8_lossy(o).into_owned())
        .collect();
    assert!(
        outputs.iter().any(|o| o.contains("console test")),
        "{outputs:?}"
    );

    let reported = errors.lock().unwrap().clone();
    assert!(
        reported.is_empty(),
        "the page reported errors: {reported:#?}"
    );
    // The collector itself hears an error (else the check above proves nothing).
    eval(&tab, "console.error('collector probe'); 1");
    let heard = wait_until(Duration::from_secs(5), || {
        errors
            .lock()
            .unwrap()
            .iter()
            .any(|e| e.contains("collector probe"))
    });
    assert!(heard, "the error collector heard nothing");
}

/// Opens `page` (`#/...`) of the console in `tab`: loads the console the first time, then
/// moves within it as a link does (a new hash).
fn open(tab: &Tab, http: SocketAddr, page: &str) {
    let origin = format!("http://{http}/");
    if !tab.get_url().starts_with(&origin) {
        tab.navigate_to(&format!("{origin}{page}"))
            .and_then(|t| t.wait_until_navigated())
            .unwrap_or_else(|e| panic!("load {page}: {e}"));
        return;
    }
    let hash = serde_json::to_string(page).unwrap();
    eval(tab, &format!("location.hash = {hash}; true"));
}

/// Clicks the element `selector` once it is there. A page polled rebuilds its buttons: one
/// found may be replaced before the click lands, so a click that fails is tried again — at
/// least three times, since one try may wait out the whole deadline for an event the
/// replaced button never sends (met once on a loaded machine).
fn click(tab: &Tab, selector: &str) {
    let deadline = Instant::now() + PAGE_TIMEOUT;
    let mut tries = 0;
    loop {
        tries += 1;
        let clicked = tab
            .wait_for_element_with_custom_timeout(selector, PAGE_TIMEOUT)
            .and_then(|b| b.click().map(|_| ()));
        match clicked {
            Ok(()) => return,
            Err(e) if tries >= 3 && Instant::now() >= deadline => {
                panic!("click {selector}: {e} ({tries} tries)")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// Registers worker `id` for `actions`.
fn register_worker(client: &mut Client, id: &str, actions: &[&str]) {
    client
        .register_worker(WorkerSpec {
            namespace: String::new(),
            worker_id: id.into(),
            worker_type: WorkerType::Action,
            max_concurrency: None,
            processes: actions.iter().map(|a| a.to_string()).collect(),
            metadata: None,
            machine_id: None,
            labels: None,
        })
        .expect("register a worker");
}

fn assert_no_errors(errors: &Errors) {
    let reported = errors.lock().unwrap().clone();
    assert!(
        reported.is_empty(),
        "the page reported errors: {reported:#?}"
    );
}

#[test]
fn in_a_browser_runs_are_paused_resumed_continued_and_cancelled_and_a_worker_drained() {
    let Some(chrome) = find_browser() else {
        eprintln!("skipped: no chromium (apt-get install chromium)");
        return;
    };
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let mut client = server.client();
    let run_id = waiting_run(&mut client);
    let (stuck, waited) = stuck_run(&mut client);
    register_worker(&mut client, "console-w1", &["console-slow"]);

    let browser = launch(chrome);
    let tab = browser.new_tab().expect("a tab");
    let errors = collect_errors(&tab);

    // Every kind of run on the runs page, without choosing one.
    open(&tab, http, "#/runs");
    for (kind, id) in [("workflow", &run_id), ("workflow", &stuck)] {
        let link = format!("#runs a.run-link[href='#/runs/{kind}/{id}']");
        tab.wait_for_element_with_custom_timeout(&link, PAGE_TIMEOUT)
            .unwrap_or_else(|e| panic!("{id} in all runs: {e}"));
    }
    wait_for(
        &tab,
        "an action run among them",
        "[...document.querySelectorAll('#runs a.run-link')].some(a =>          a.getAttribute('href').startsWith('#/runs/action/console-slow'))",
    );

    // Pause, then resume, from the run's page.
    open(&tab, http, &format!("#/runs/workflow/{run_id}"));
    wait_for(
        &tab,
        "the run waiting, Pause offered, Continue not",
        "document.getElementById('run-status')?.innerText === 'waiting' &&          !!document.getElementById('run-pause') && !document.getElementById('run-continue')",
    );
    click(&tab, "#run-pause");
    let paused = wait_until(PAGE_TIMEOUT, || {
        workflow_status(&mut client, &run_id) == WorkflowRunStatus::OnHold
    });
    assert!(paused, "the SDK sees the run on hold");
    wait_for(
        &tab,
        "the run on hold, Resume offered",
        "document.getElementById('run-status')?.innerText === 'on_hold' &&          !!document.getElementById('run-resume') && !document.getElementById('run-pause')",
    );
    click(&tab, "#run-resume");
    let resumed = wait_until(PAGE_TIMEOUT, || {
        workflow_status(&mut client, &run_id) == WorkflowRunStatus::Waiting
    });
    assert!(resumed, "the SDK sees the run waiting again");
    wait_for(
        &tab,
        "the run waiting again",
        "document.getElementById('run-status')?.innerText === 'waiting' &&          !!document.getElementById('run-pause')",
    );

    // Cancel, from the run's page.
    eval(
        &tab,
        "document.getElementById('cancel-reason').value = 'cancelled from the console'",
    );
    click(&tab, "#cancel-run");
    let cancelled = wait_until(PAGE_TIMEOUT, || {
        workflow_status(&mut client, &run_id) == WorkflowRunStatus::Cancelled
    });
    assert!(cancelled, "the SDK sees the run cancelled");
    wait_for(
        &tab,
        "the run cancelled, no control left",
        "document.getElementById('run-status')?.innerText === 'cancelled' &&          !document.getElementById('run-control')",
    );

    // Continue, from the page of a run whose step waits for an action run.
    open(&tab, http, &format!("#/runs/workflow/{stuck}"));
    click(&tab, "#run-continue");
    let continued = wait_until(PAGE_TIMEOUT, || {
        let now = client.workflow_run(&stuck).unwrap().waiting_for;
        now.is_some_and(|w| w.starts_with("action run ") && w != waited)
    });
    assert!(continued, "the SDK sees the step started again");
    let first = waited.trim_start_matches("action run ");
    assert_eq!(client.run(first).unwrap().status, RunStatus::Cancelled);

    // Drain, from the workers page (a first click arms the button, a second drains).
    open(&tab, http, "#/workers");
    tab.wait_for_element_with_custom_timeout("#drain-console-w1", PAGE_TIMEOUT)
        .expect("the worker's drain button");
    eval(
        &tab,
        "(() => { const b = document.getElementById('drain-console-w1'); b.click();          b.click(); return true; })()",
    );
    let drained = wait_until(PAGE_TIMEOUT, || {
        client.worker("console-w1").unwrap().status == WorkerStatus::Draining
    });
    assert!(drained, "the SDK sees the worker draining");
    wait_for(
        &tab,
        "the worker shown draining",
        "[...document.querySelectorAll('.listing .badge')].some(b => b.innerText === 'draining')",
    );
    assert_no_errors(&errors);
}

#[test]
fn in_a_browser_the_page_asks_for_a_token_and_keeps_it_for_the_tab() {
    let Some(chrome) = find_browser() else {
        eprintln!("skipped: no chromium (apt-get install chromium)");
        return;
    };
    let dir = temp_dir();
    let file = dir.path().join("auth.yaml");
    std::fs::write(&file, AUTH_YAML).unwrap();
    let server = TestServer::start(
        &dir.path().join("data"),
        &["--auth-file", file.to_str().unwrap()],
    );
    let browser = launch(chrome);
    let tab = browser.new_tab().expect("a tab");
    tab.navigate_to(&format!("http://{}/", http_addr(&server)))
        .and_then(|t| t.wait_until_navigated())
        .expect("load the console");
    wait_for(
        &tab,
        "the token dialog",
        "document.getElementById('token-dialog').open",
    );
    tab.wait_for_element("#token-input")
        .and_then(|input| input.click().map(|_| ()))
        .expect("the token box");
    tab.type_str(ADMIN).expect("type the token");
    tab.wait_for_element("#token-save")
        .and_then(|b| b.click().map(|_| ()))
        .expect("use the token");
    wait_for(
        &tab,
        "the overview with the token",
        "!document.getElementById('token-dialog').open && \
         Number(document.getElementById('overview')?.dataset.polls) >= 2",
    );
    assert_eq!(
        eval(&tab, "sessionStorage.getItem('flo.token')"),
        ADMIN,
        "kept in the tab's session storage"
    );
}

// --- Screenshots for the docs (run by hand). ---

/// Where the screenshots go, from the checkout's root.
const SCREENSHOTS_DIR: &str = "docs/console";
/// The height of a screenshot at most and at least (the page's own height between), in
/// pixels.
const SCREENSHOT_HEIGHT_MAX: f64 = 1800.0;
const SCREENSHOT_HEIGHT_MIN: f64 = 480.0;
const SCREENSHOT_WIDTH: f64 = 1280.0;

/// Sizes the window so that its page shows `height` pixels high, `SCREENSHOT_WIDTH` wide.
fn size_window(tab: &Tab, height: f64) {
    let frame = eval(tab, "window.outerHeight - window.innerHeight")
        .as_f64()
        .unwrap_or(0.0)
        .max(0.0);
    tab.set_bounds(headless_chrome::types::Bounds::Normal {
        left: Some(0),
        top: Some(0),
        width: Some(SCREENSHOT_WIDTH),
        height: Some(height + frame),
    })
    .expect("size the window");
    std::thread::sleep(Duration::from_millis(300));
}

/// Draws each console page into `docs/console/NAME.png` against a server holding a little
/// of everything: `cargo test -p flo --test console console_screenshots -- --ignored`.
#[test]
#[ignore = "writes docs/console/*.png; run it by name"]
fn console_screenshots() {
    let chrome = find_browser().expect("a chromium to draw the pages (apt-get install chromium)");
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let http = http_addr(&server);
    let mut client = server.client();
    let (done, waiting) = screenshot_fixture(&mut client);

    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCREENSHOTS_DIR);
    std::fs::create_dir_all(&out).unwrap();
    let browser = launch(chrome);
    let tab = browser.new_tab().expect("a tab");
    let errors = collect_errors(&tab);
    let shots: [(&str, String, &str); 8] = [
        (
            "overview",
            "#/".into(),
            "Number(document.getElementById('overview')?.dataset.polls) >= 3",
        ),
        (
            "runs",
            "#/runs".into(),
            "document.querySelectorAll('#runs tr.run-row').length >= 8",
        ),
        (
            "run",
            format!("#/runs/workflow/{done}"),
            "document.querySelectorAll('#run-history li.event').length > 5 && \
             !!document.querySelector('#run-graph svg.graph')",
        ),
        (
            "workflow-graph",
            "#/workflows/order-processing".into(),
            "!!document.querySelector('#definition-graph svg.graph')",
        ),
        (
            "actions",
            "#/actions".into(),
            "document.querySelectorAll('.listing tbody tr').length >= 5",
        ),
        (
            "workers",
            "#/workers".into(),
            "document.querySelectorAll('.listing tbody tr').length >= 2",
        ),
        (
            "streams",
            "#/streams".into(),
            "document.querySelectorAll('.listing tbody tr').length >= 1",
        ),
        (
            "schedules",
            "#/schedules".into(),
            "document.querySelectorAll('.listing tbody tr').length >= 1",
        ),
    ];
    for (name, page, ready) in shots {
        open(&tab, http, &page);
        wait_for(&tab, name, ready);
        if name == "streams" {
            // The consumer groups of the stream, opened.
            eval(
                &tab,
                "document.querySelector('.listing tbody button').click(); true",
            );
            wait_for(
                &tab,
                "the groups",
                "document.body.innerText.includes('billing')",
            );
        }
        // Let the page settle (a poll, the sparklines), then fit the window to it: its
        // content's height measured in a short window, plus the window's own frame.
        std::thread::sleep(Duration::from_millis(1600));
        size_window(&tab, SCREENSHOT_HEIGHT_MIN);
        let content = eval(&tab, "document.documentElement.scrollHeight")
            .as_f64()
            .unwrap_or(SCREENSHOT_HEIGHT_MAX);
        let height = content.clamp(SCREENSHOT_HEIGHT_MIN, SCREENSHOT_HEIGHT_MAX);
        size_window(&tab, height);
        let png = tab
            .capture_screenshot(CaptureScreenshotFormatOption::Png, None, None, true)
            .expect("a screenshot");
        let file = out.join(format!("{name}.png"));
        std::fs::write(&file, png).unwrap();
        eprintln!("wrote {} ({height} px high)", file.display());
    }
    assert_no_errors(&errors);
    // The run left waiting shows on the runs page; keep the server until the end.
    assert_eq!(
        workflow_status(&mut client, &waiting),
        WorkflowRunStatus::Waiting
    );
}

/// Order-processing runs (completed, failed and one waiting for its approval), a worker
/// fleet, a stream with two consumer groups and a schedule: the completed run's id and the
/// waiting one's.
fn screenshot_fixture(client: &mut Client) -> (String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/workflows");
    let yaml = |name: &str| std::fs::read_to_string(root.join(name)).unwrap();
    fixed_wasm_action(client, "validate-order", r#"{"valid":true}"#);
    fixed_wasm_action(client, "charge-payment", r#"{"charged":true,"amount":120}"#);
    guest_action(
        client,
        "check-approval-needed",
        flo_testkit::guests::failing_guest(),
        None,
    );
    fixed_wasm_action(client, "ship-order", r#"{"tracking":"TRK-1042"}"#);
    fixed_wasm_action(client, "reconcile", r#"{"ok":true}"#);
    fixed_wasm_action(client, "reconcile-report", r#"{"report":"done"}"#);
    user_action(client, "pack-box", 30_000, 3, 1000);
    user_action(client, "print-label", 30_000, 3, 1000);
    client
        .create_workflow(&yaml("order-processing.yaml"))
        .unwrap();
    client
        .create_workflow(&yaml("reconcile-accounts.yaml"))
        .unwrap();
    let mut runs = Vec::new();
    for i in 0..4 {
        let options = StartOptions {
            idempotency_key: Some(format!("order-{i}")),
            ..StartOptions::default()
        };
        let input = format!("{{\"order_id\":\"o-{i}\",\"amount\":{}}}", 100 + 10 * i);
        let run_id = client
            .start_workflow("order-processing", input.as_bytes(), options)
            .unwrap();
        let waiting = wait_until(Duration::from_secs(10), || {
            workflow_status(client, &run_id) == WorkflowRunStatus::Waiting
        });
        assert!(waiting, "run {run_id} waits for its approval");
        runs.push(run_id);
    }
    for run_id in &runs[..2] {
        client
            .signal_workflow(run_id, "approval", br#"{"approved_by":"ops"}"#)
            .unwrap();
        let run = client.wait_workflow(run_id, 10_000).unwrap();
        assert_eq!(run.status, WorkflowRunStatus::Completed);
    }
    client
        .cancel_workflow(&runs[2], Some("customer withdrew"))
        .unwrap();
    for i in 0..3 {
        let labels = InvokeOptions::default();
        client
            .invoke("pack-box", format!("{{\"box\":{i}}}").as_bytes(), labels)
            .unwrap();
    }
    register_worker(client, "packer-1", &["pack-box"]);
    register_worker(client, "packer-2", &["pack-box", "print-label"]);
    register_worker(client, "labeler-1", &["print-label"]);
    client.drain_worker("labeler-1").unwrap();
    let tasks = client
        .await_tasks("packer-1", &["pack-box"], 1, 5000)
        .unwrap();
    assert_eq!(tasks.len(), 1);

    client
        .create_stream("orders", StreamConfig::default())
        .unwrap();
    let records: Vec<StreamRecordIn> = (0..20)
        .map(|i| StreamRecordIn {
            key: Some(format!("customer-{}", i % 4)),
            payload: format!("{{\"order\":{i}}}").into_bytes(),
            ..Default::default()
        })
        .collect();
    client.append("orders", records).unwrap();
    for group in ["billing", "audit"] {
        let config = GroupConfig {
            mode: GroupMode::Shared,
            start: GroupStart::Start,
            max_deliveries: None,
            message_timeout_ms: None,
        };
        client.create_group("orders", group, config).unwrap();
    }
    let read = client
        .group_read(GroupReadSpec {
            stream: "orders".into(),
            group: "billing".into(),
            consumer: "billing-1".into(),
            count: Some(5),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(read.len(), 5);
    (runs[0].clone(), runs[3].clone())
}
