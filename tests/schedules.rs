//! Schedules end to end on the test clock: the reference's `reconcile-accounts.yaml` fires
//! on its cron ticks; an interval schedule skips ticks while `max_concurrent` runs still
//! run, pauses while its workflow is disabled or paused, fires on demand; a tick fires
//! exactly once across kill -9; missed ticks are caught up by the `catchup` policy.

mod common;

use common::{
    TestServer, all_workflow_runs, cli_json, cli_ok, fixed_wasm_action, temp_dir, wait_until,
};
use flo::Client;
use flo::protocol::{ErrorCode, ScheduleInfo, WorkflowRunInfo, WorkflowRunStatus};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const RECONCILE: &str = include_str!("../testdata/workflows/reconcile-accounts.yaml");
const HOUR_MS: u64 = 3_600_000;

/// A test-clock server's time: the wall clock plus what the test moved it by.
struct Clock {
    moved_ms: u64,
}

impl Clock {
    fn now_ms(&self) -> u64 {
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        wall.as_millis() as u64 + self.moved_ms
    }

    fn advance(&mut self, c: &mut Client, ms: u64) {
        c.advance_clock(ms).unwrap();
        self.moved_ms += ms;
    }

    /// Moves the clock just past `at_ms`.
    fn pass(&mut self, c: &mut Client, at_ms: u64) {
        let now = self.now_ms();
        if at_ms + 1_000 > now {
            self.advance(c, at_ms + 1_000 - now);
        }
    }
}

fn schedule(c: &mut Client, workflow: &str) -> ScheduleInfo {
    c.list_schedules()
        .unwrap()
        .into_iter()
        .find(|s| s.workflow == workflow)
        .unwrap_or_else(|| panic!("no schedule for {workflow}"))
}

/// Every run of `workflow`, oldest id first.
fn runs(c: &mut Client, workflow: &str) -> Vec<WorkflowRunInfo> {
    let mut out = all_workflow_runs(c, workflow);
    out.sort_by(|a, b| a.run_id.cmp(&b.run_id));
    out
}

fn wait_runs(c: &mut Client, workflow: &str, n: usize) -> Vec<WorkflowRunInfo> {
    let ok = wait_until(Duration::from_secs(20), || runs(c, workflow).len() >= n);
    let got = runs(c, workflow);
    assert!(ok, "{n} runs of {workflow}, got {}: {got:#?}", got.len());
    got
}

/// A workflow whose runs wait for a `go` signal (so they stay running), fired every
/// `interval`.
fn waiting_workflow(name: &str, schedule: &str) -> String {
    format!(
        "kind: Workflow\nname: {name}\nversion: \"1\"\nschedule: {schedule}\nstart:\n  \
         waitForSignal:\n    type: go\n  transitions:\n    success: flo.Completed\n"
    )
}

#[test]
fn reconcile_accounts_fires_on_its_cron_ticks_with_its_input() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock"]);
    let mut c = server.client();
    let mut clock = Clock { moved_ms: 0 };
    fixed_wasm_action(&mut c, "reconcile", r#"{"ok":true}"#);
    fixed_wasm_action(&mut c, "reconcile-report", r#"{"ok":true}"#);
    let (name, _, created, _) = c.create_workflow(RECONCILE).unwrap();
    assert!(created);
    let s = schedule(&mut c, &name);
    assert_eq!(s.every, r#"cron "0 */6 * * *" UTC"#);
    assert_eq!((s.max_concurrent, s.paused.as_deref()), (1, None));
    let first = s.next_fire_ms.expect("a next fire time");
    assert_eq!(first % (6 * HOUR_MS), 0, "on a 6-hour boundary: {first}");
    assert!(first > clock.now_ms() && first <= clock.now_ms() + 6 * HOUR_MS);

    clock.pass(&mut c, first);
    let got = wait_runs(&mut c, &name, 1);
    // The id names the tick (with `.K` when needed to land on the schedule's shard).
    assert!(
        got[0].run_id.starts_with(&format!("sched:{name}:{first}")),
        "{got:#?}"
    );
    assert_eq!(got[0].input, br#"{"mode":"full"}"#);
    assert!(wait_until(Duration::from_secs(20), || {
        c.workflow_run(&got[0].run_id).unwrap().status == WorkflowRunStatus::Completed
    }));
    let s = schedule(&mut c, &name);
    assert_eq!((s.fired, s.skipped, s.running), (1, 0, 0));
    assert_eq!(s.last_tick_ms, Some(first));
    assert_eq!(s.next_fire_ms, Some(first + 6 * HOUR_MS));

    clock.pass(&mut c, first + 6 * HOUR_MS);
    let got = wait_runs(&mut c, &name, 2);
    let second = format!("sched:{name}:{}", first + 6 * HOUR_MS);
    assert!(got[1].run_id.starts_with(&second), "{got:#?}");
    // The CLI lists it with its next fire time.
    let list = cli_json(&server.addr_string(), &["schedule", "list"]);
    assert_eq!(list[0]["workflow"], name);
    assert_eq!(list[0]["next_fire_ms"], first + 12 * HOUR_MS);
    let text = cli_ok(&server.addr_string(), &["schedule", "list"]);
    assert!(text.contains("reconcile-accounts"), "{text}");
}

#[test]
fn an_interval_skips_ticks_while_busy_pauses_with_its_workflow_and_fires_on_demand() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock", "--shards", "2"]);
    let mut c = server.client();
    let addr = server.addr_string();
    let mut clock = Clock { moved_ms: 0 };
    let yaml = waiting_workflow("nightly", "{interval: 60s, input: {n: 1}}");
    c.create_workflow(&yaml).unwrap();
    let next = schedule(&mut c, "nightly").next_fire_ms.unwrap();

    // The first tick starts a run; the next finds it running (max_concurrent 1): skipped.
    clock.pass(&mut c, next);
    let first = wait_runs(&mut c, "nightly", 1).remove(0);
    assert_eq!(first.input, br#"{"n":1}"#);
    clock.pass(&mut c, next + 60_000);
    assert!(wait_until(Duration::from_secs(10), || {
        schedule(&mut c, "nightly").skipped == 1
    }));
    let s = schedule(&mut c, "nightly");
    assert_eq!((s.fired, s.running), (1, 1));
    assert!(s.last_skip.unwrap().contains("max_concurrent"));
    assert_eq!(runs(&mut c, "nightly").len(), 1);
    // Once it finished, the next tick fires.
    c.signal_workflow(&first.run_id, "go", b"{}").unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        schedule(&mut c, "nightly").running == 0
    }));
    clock.pass(&mut c, next + 120_000);
    let got = wait_runs(&mut c, "nightly", 2);
    c.signal_workflow(&got[1].run_id, "go", b"{}").unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        schedule(&mut c, "nightly").running == 0
    }));

    // Disabled: no tick fires, and none is made up once enabled again.
    c.set_workflow_enabled("nightly", false).unwrap();
    let s = schedule(&mut c, "nightly");
    assert_eq!(
        (s.paused.as_deref(), s.next_fire_ms),
        (Some("workflow disabled"), None)
    );
    clock.advance(&mut c, 300_000);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(runs(&mut c, "nightly").len(), 2);
    c.set_workflow_enabled("nightly", true).unwrap();
    let s = schedule(&mut c, "nightly");
    assert_eq!(s.paused, None);
    assert!(s.next_fire_ms.unwrap() > clock.now_ms() - 1_000);
    assert_eq!(runs(&mut c, "nightly").len(), 2);

    // Paused by an operator: the same, through the CLI.
    let paused = cli_json(&addr, &["schedule", "pause", "nightly"]);
    assert_eq!(paused["paused"], "paused (flo schedule pause)");
    clock.advance(&mut c, 300_000);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(runs(&mut c, "nightly").len(), 2);
    // A trigger fires anyway, with the schedule's input.
    let run_id = cli_ok(&addr, &["schedule", "trigger", "nightly"]);
    let run_id = run_id.trim();
    assert!(run_id.starts_with("sched:nightly:manual-"), "{run_id}");
    let run = c.workflow_run(run_id).unwrap();
    assert_eq!(run.input, br#"{"n":1}"#);
    c.signal_workflow(run_id, "go", b"{}").unwrap();
    let resumed = cli_ok(&addr, &["schedule", "resume", "nightly"]);
    assert!(resumed.contains("resumed; next fire"), "{resumed}");
    let next = schedule(&mut c, "nightly").next_fire_ms.unwrap();
    clock.pass(&mut c, next);
    wait_runs(&mut c, "nightly", 4);

    // Errors name what is wrong.
    let e = c.pause_schedule("missing").unwrap_err();
    assert!(
        matches!(&e, flo::Error::Server(v) if v.code == ErrorCode::NotFound),
        "{e}"
    );
    c.create_workflow(&waiting_workflow("plain", "null").replace("schedule: null\n", ""))
        .unwrap();
    let e = c.trigger_schedule("plain").unwrap_err();
    assert!(e.to_string().contains("has no schedule"), "{e}");
    // Callers cannot take the ids of scheduled runs.
    let opts = flo::StartOptions {
        run_id: Some("sched:nightly:1".into()),
        ..Default::default()
    };
    let e = c.start_workflow("nightly", b"{}", opts).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
}

#[test]
fn a_tick_fires_exactly_once_across_kill9_and_missed_ticks_follow_catchup() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--test-clock", "--shards", "2"]);
    let mut c = server.client();
    let mut clock = Clock { moved_ms: 0 };
    // Runs that finish at once (a WASM step), so max_concurrent never skips.
    fixed_wasm_action(&mut c, "tick", r#"{"ok":true}"#);
    let flow = |name: &str, schedule: &str| {
        format!(
            "kind: Workflow\nname: {name}\nversion: \"1\"\nschedule: {schedule}\nstart:\n  \
             run: \"@actions/tick\"\n  transitions:\n    success: flo.Completed\n"
        )
    };
    c.create_workflow(&flow("latest", "{interval: 1m}"))
        .unwrap();
    c.create_workflow(&flow(
        "every",
        "{interval: 1m, catchup: all, max_concurrent: 50}",
    ))
    .unwrap();
    c.create_workflow(&flow("none", "{interval: 1m, catchup: none}"))
        .unwrap();
    let next = schedule(&mut c, "latest").next_fire_ms.unwrap();
    clock.pass(&mut c, next);
    for w in ["latest", "every", "none"] {
        wait_runs(&mut c, w, 1);
    }
    let fired_before: Vec<String> = runs(&mut c, "latest")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    drop(c);
    server.kill9();

    // The restarted server's test clock starts where the wall clock is: move it back to
    // where it was, then ten minutes on (the server "was down" for them).
    let server = TestServer::start(dir.path(), &["--test-clock", "--shards", "2"]);
    let mut c = server.client();
    let moved = clock.moved_ms;
    clock.moved_ms = 0;
    clock.advance(&mut c, moved);
    let after_restart: Vec<String> = runs(&mut c, "latest")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(
        after_restart, fired_before,
        "a fired tick is not fired again"
    );
    // Ten ticks passed, the newest 30 s ago (late enough to count as missed).
    clock.advance(&mut c, 10 * 60_000 + 30_000);
    // latest: the newest missed tick fires, the others are skipped.
    let got = wait_runs(&mut c, "latest", 2);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(runs(&mut c, "latest").len(), 2, "{got:#?}");
    let s = schedule(&mut c, "latest");
    assert_eq!((s.fired, s.skipped), (2, 9), "{s:#?}");
    // all: every missed tick fires.
    wait_runs(&mut c, "every", 11);
    assert_eq!(schedule(&mut c, "every").skipped, 0);
    // none: the missed ticks are skipped, the next one fires.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(runs(&mut c, "none").len(), 1);
    assert_eq!(schedule(&mut c, "none").skipped, 10);
    let next = schedule(&mut c, "none").next_fire_ms.unwrap();
    clock.pass(&mut c, next);
    wait_runs(&mut c, "none", 2);
    // Each run's id names its tick, once.
    let ids: Vec<String> = runs(&mut c, "every")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);
}
