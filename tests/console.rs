//! The web console (`/` and `/api/...` on the HTTP port): in a real headless Chromium, the
//! overview loads live data, a run started by the test opens from the runs list with its
//! history timeline and its workflow's graph, a signal sent from the page completes it, and
//! the browser reports no console error. Without a browser (apt-get install chromium) that
//! test says it is skipped; the API's own tests need none: its answers, its errors as JSON,
//! and its auth (401 without a token, 403 for a role that may not, 200 with one that may);
//! in the browser, a server with an auth file makes the page ask for a token.

mod common;

use common::{TestServer, fixed_wasm_action, temp_dir, wait_until};
use flo::protocol::WorkflowRunStatus;
use flo::{Client, StartOptions};
use flo_testkit::http::{HttpResponse, http_get, http_raw};
use headless_chrome::protocol::cdp::Log::LogEntryLevel;
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
