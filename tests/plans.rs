//! Inline plans end to end, their executors user-hosted actions run by the SDK's
//! `ActionWorker` that fail on command (with error codes): failover in priority order
//! with each executor's retries, fatal codes, both fallback conditions, a circuit breaker
//! opening, skipping and half-opening on the test clock, a rate limit, the cache and its
//! invalidation, async tracking's timeout, kill -9 mid-plan, and the spec's payment
//! example with its plan.

mod common;

use common::{TestServer, temp_dir, user_action};
use flo::protocol::{WorkflowRunInfo, WorkflowRunStatus};
use flo::{ActionResult, ActionWorker, Client, CodedError, StartOptions};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A workflow `w` whose start step runs plan `p` (`plan`: its body, indented 4).
fn plan_workflow(name: &str, plan: &str) -> String {
    format!(
        "kind: Workflow\nname: {name}\nversion: \"1\"\nplans:\n  p:\n{plan}start:\n  run: \"@plan/p\"\n  transitions:\n    success: flo.Completed\n    failure: flo.Failed\n"
    )
}

/// A server started with `args`, the user actions `actions` registered (attempts of
/// `timeout_ms`), and the workflow `name` over plan `p` (`plan`) created.
fn setup(
    args: &[&str],
    actions: &[&str],
    timeout_ms: u64,
    name: &str,
    plan: &str,
) -> (tempfile::TempDir, TestServer, Client) {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), args);
    let mut c = server.client();
    for a in actions {
        user_action(&mut c, a, timeout_ms, 0, 100);
    }
    c.create_workflow(&plan_workflow(name, plan)).unwrap();
    (dir, server, c)
}

fn start(c: &mut Client, workflow: &str, input: Value) -> String {
    c.start_workflow(
        workflow,
        input.to_string().as_bytes(),
        StartOptions::default(),
    )
    .unwrap_or_else(|e| panic!("start {workflow}: {e}"))
}

fn wait_final(c: &mut Client, run_id: &str) -> WorkflowRunInfo {
    let run = c.wait_workflow(run_id, 20_000).unwrap();
    assert!(run.status.is_final(), "run {run_id} still: {run:?}");
    run
}

/// The run's history as `type detail` lines, plan events only.
fn plan_events(c: &mut Client, run_id: &str) -> Vec<String> {
    c.workflow_history(run_id)
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type.to_string().starts_with("plan_"))
        .map(|e| format!("{} {}", e.event_type, e.detail))
        .collect()
}

fn output(run: &WorkflowRunInfo) -> Value {
    serde_json::from_slice(run.output.as_deref().unwrap_or(b"null")).unwrap()
}

/// Counts calls; fails (with `code`) while `failing` is set.
#[derive(Clone)]
struct Switch {
    calls: Arc<AtomicU32>,
    failing: Arc<AtomicBool>,
}

impl Switch {
    fn new(failing: bool) -> Switch {
        Switch {
            calls: Arc::new(AtomicU32::new(0)),
            failing: Arc::new(AtomicBool::new(failing)),
        }
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }
}

/// A worker for `actions` (name, switch, error code when failing, output when not).
fn worker(
    server: &TestServer,
    actions: Vec<(&'static str, Switch, &'static str)>,
) -> flo::RunningWorker {
    let mut b = ActionWorker::builder(server.addr)
        .worker_id("plans")
        .concurrency(4)
        .block_ms(100);
    for (name, switch, code) in actions {
        b = b.action(name, move |_ctx| {
            switch.calls.fetch_add(1, Ordering::SeqCst);
            if switch.failing.load(Ordering::SeqCst) {
                return Err(CodedError::new(code, format!("{name} is failing")).into());
            }
            ActionResult::json(&json!({"by": name}))
        });
    }
    b.spawn().unwrap()
}

#[test]
fn executors_fail_over_in_priority_order_after_their_retries() {
    let (_dir, server, mut c) = setup(
        &["--shards", "2"],
        &["primary", "secondary"],
        60_000,
        "failover",
        "    executors:\n      - {name: second, action: \"@actions/secondary\", priority: 50}\n      - {name: first, action: \"@actions/primary\", priority: 100, retry: {max_attempts: 2, backoff: constant, initial_delay_ms: 10}}\n",
    );
    let (p, s) = (Switch::new(true), Switch::new(false));
    let w = worker(
        &server,
        vec![
            ("primary", p.clone(), "temporary_failure"),
            ("secondary", s.clone(), "x"),
        ],
    );
    let run_id = start(&mut c, "failover", json!({"n": 1}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(output(&run), json!({"by": "secondary"}));
    assert_eq!((p.calls(), s.calls()), (2, 1));
    let events = plan_events(&mut c, &run_id);
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "plan_executor_start",
            "plan_executor_retry",
            "plan_executor_start",
            "plan_executor_exhausted",
            "plan_executor_start",
            "plan_executor_success"
        ],
        "{events:#?}"
    );
    assert!(events[0].contains("first (attempt 1)"), "{events:#?}");
    assert!(events[2].contains("first (attempt 2)"), "{events:#?}");
    assert!(events[3].contains("temporary_failure"), "{events:#?}");
    assert!(events[5].ends_with("second"), "{events:#?}");
    w.stop();
}

#[test]
fn fatal_codes_skip_retries_and_fallbacks_answer_for_exhausted_or_any_error() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for a in ["card", "backup"] {
        user_action(&mut c, a, 60_000, 0, 100);
    }
    let executors = "    executors:\n      - {name: card, action: \"@actions/card\", priority: 2, retry: {max_attempts: 3, initial_delay_ms: 10}}\n      - {name: backup, action: \"@actions/backup\", priority: 1}\n    errors: {retryable: [timeout], fatal: [invalid_card]}\n";
    c.create_workflow(&plan_workflow(
        "exhausted",
        &format!("{executors}    fallback: {{value: '{{\"status\": \"declined\"}}', condition: exhausted}}\n"),
    ))
    .unwrap();
    c.create_workflow(&plan_workflow(
        "any-error",
        &format!("{executors}    fallback: {{value: {{status: later}}, condition: any_error}}\n"),
    ))
    .unwrap();
    c.create_workflow(&plan_workflow("no-fallback", executors))
        .unwrap();
    let (card, backup) = (Switch::new(true), Switch::new(true));
    let w = worker(
        &server,
        vec![
            ("card", card.clone(), "invalid_card"),
            ("backup", backup.clone(), "boom"),
        ],
    );
    // Fatal: one attempt on `card` despite its 3; then `backup`; then the fallback.
    let run_id = start(&mut c, "exhausted", json!({}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(output(&run), json!({"status": "declined"}));
    assert_eq!((card.calls(), backup.calls()), (1, 1));
    let events = plan_events(&mut c, &run_id);
    assert!(
        events[1].contains("invalid_card") && events[1].contains("(fatal)"),
        "{events:#?}"
    );
    assert!(
        events.last().unwrap().starts_with("plan_fallback"),
        "{events:#?}"
    );
    // any_error: the first executor's failure gives the fallback; `backup` is not tried.
    let run_id = start(&mut c, "any-error", json!({}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(output(&run), json!({"status": "later"}));
    assert_eq!((card.calls(), backup.calls()), (2, 1));
    // No fallback: the step fails, naming the last error.
    let run_id = start(&mut c, "no-fallback", json!({}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Failed, "{run:?}");
    let error = run.error.unwrap_or_default();
    assert!(
        error.contains("no executor succeeded") && error.contains("boom"),
        "{error}"
    );
    w.stop();
}

#[test]
fn a_breaker_opens_skips_its_executor_and_half_opens_after_the_cooldown() {
    let (_dir, server, mut c) = setup(
        &["--test-clock", "--shards", "1"],
        &["flaky", "steady"],
        60_000,
        "guarded",
        "    executors:\n      - {name: flaky, action: \"@actions/flaky\", priority: 2, breaker: {failure_threshold: 2, cooldown_ms: 10000, half_open_max_calls: 1}}\n      - {name: steady, action: \"@actions/steady\", priority: 1}\n",
    );
    let (flaky, steady) = (Switch::new(true), Switch::new(false));
    let w = worker(
        &server,
        vec![
            ("flaky", flaky.clone(), "unavailable"),
            ("steady", steady.clone(), "x"),
        ],
    );
    for _ in 0..2 {
        let run_id = start(&mut c, "guarded", json!({}));
        assert_eq!(
            wait_final(&mut c, &run_id).status,
            WorkflowRunStatus::Completed
        );
    }
    assert_eq!(flaky.calls(), 2);
    let status = c.plan_status("guarded", None).unwrap();
    let row = status.iter().find(|r| r.executor == "flaky").unwrap();
    assert_eq!(
        (row.breaker.as_str(), row.consecutive_failures),
        ("open", 2)
    );
    // Open: skipped without an attempt.
    let run_id = start(&mut c, "guarded", json!({}));
    assert_eq!(
        wait_final(&mut c, &run_id).status,
        WorkflowRunStatus::Completed
    );
    assert_eq!(flaky.calls(), 2);
    let events = plan_events(&mut c, &run_id);
    assert_eq!(events[0], "plan_breaker_skip flaky", "{events:#?}");
    // After the cooldown one probe goes through; it succeeds and closes the breaker.
    flaky.set_failing(false);
    c.advance_clock(10_001).unwrap();
    let run_id = start(&mut c, "guarded", json!({}));
    let run = wait_final(&mut c, &run_id);
    assert_eq!(output(&run), json!({"by": "flaky"}));
    let status = c.plan_status("guarded", Some("p")).unwrap();
    let row = status.iter().find(|r| r.executor == "flaky").unwrap();
    assert_eq!(row.breaker, "closed", "{status:?}");
    // The CLI shows the same.
    let text = common::cli_ok(
        &server.addr_string(),
        &["workflow", "plan-status", "guarded"],
    );
    assert!(text.contains("flaky") && text.contains("closed"), "{text}");
    w.stop();
}

#[test]
fn a_rate_limit_skips_an_executor_over_it_until_its_window_turns() {
    let (_dir, server, mut c) = setup(
        &["--test-clock", "--shards", "1"],
        &["metered", "spare"],
        60_000,
        "metered",
        "    executors:\n      - {name: metered, action: \"@actions/metered\", priority: 2, rate_limit: {max_per_minute: 2}}\n      - {name: spare, action: \"@actions/spare\", priority: 1}\n",
    );
    let (metered, spare) = (Switch::new(false), Switch::new(false));
    let w = worker(
        &server,
        vec![
            ("metered", metered.clone(), "x"),
            ("spare", spare.clone(), "x"),
        ],
    );
    let mut last = String::new();
    for _ in 0..3 {
        last = start(&mut c, "metered", json!({}));
        wait_final(&mut c, &last);
    }
    // Two per minute: the third went to `spare` (unless the minute turned meanwhile).
    let events = plan_events(&mut c, &last);
    if metered.calls() == 2 {
        assert_eq!(spare.calls(), 1);
        assert_eq!(events[0], "plan_rate_limit_skip metered", "{events:#?}");
        c.advance_clock(60_000).unwrap();
        let run_id = start(&mut c, "metered", json!({}));
        assert_eq!(
            output(&wait_final(&mut c, &run_id)),
            json!({"by": "metered"})
        );
    } else {
        // The minute turned between the runs: all three fit.
        assert_eq!((metered.calls(), spare.calls()), (3, 0));
    }
    w.stop();
}

#[test]
fn the_cache_answers_a_repeated_key_until_its_event_invalidates_it() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "1"]);
    let mut c = server.client();
    user_action(&mut c, "lookup", 60_000, 0, 100);
    c.create_workflow(&plan_workflow(
        "cached",
        "    executors:\n      - {name: lookup, action: \"@actions/lookup\"}\n    cache: {ttl_ms: 600000, key: \"c:{input.customer}\", invalidate_on: [customer.deleted]}\n",
    ))
    .unwrap();
    let lookup = Switch::new(false);
    let w = worker(&server, vec![("lookup", lookup.clone(), "x")]);
    let first = start(&mut c, "cached", json!({"customer": "c-1"}));
    wait_final(&mut c, &first);
    let hit = start(&mut c, "cached", json!({"customer": "c-1"}));
    let run = wait_final(&mut c, &hit);
    assert_eq!(output(&run), json!({"by": "lookup"}));
    assert_eq!(lookup.calls(), 1);
    assert_eq!(plan_events(&mut c, &hit), ["plan_cache_hit c:c-1"]);
    // Another key misses.
    let other = start(&mut c, "cached", json!({"customer": "c-2"}));
    wait_final(&mut c, &other);
    assert_eq!(lookup.calls(), 2);
    // The event drops both entries; the next run calls the executor again.
    let addr = server.addr_string();
    let doc = common::cli_json(&addr, &["plan", "invalidate", "customer.deleted"]);
    assert_eq!(doc["entries"], 2, "{doc}");
    assert_eq!(c.invalidate_plan_cache("unrelated", None).unwrap(), 0);
    let again = start(&mut c, "cached", json!({"customer": "c-1"}));
    wait_final(&mut c, &again);
    assert_eq!(lookup.calls(), 3);
    w.stop();
}

#[test]
fn an_async_attempt_without_a_result_times_out_and_the_next_executor_runs() {
    let (_dir, server, mut c) = setup(
        &["--test-clock"],
        &["webhook", "direct"],
        600_000,
        "tracked",
        "    executors:\n      - {name: webhook, action: \"@actions/webhook\", priority: 2, tracking: {mode: async, timeout_ms: 5000}}\n      - {name: direct, action: \"@actions/direct\", priority: 1}\n",
    );
    // Only `direct` has a worker: `webhook`'s attempt never reports.
    let direct = Switch::new(false);
    let w = worker(&server, vec![("direct", direct.clone(), "x")]);
    let run_id = start(&mut c, "tracked", json!({}));
    assert!(common::wait_until(
        std::time::Duration::from_secs(10),
        || {
            // Pending: its attempt waits for a worker.
            let run = c.workflow_run(&run_id).unwrap();
            run.waiting_for
                .as_deref()
                .is_some_and(|w| w.starts_with("action run"))
        }
    ));
    c.advance_clock(5_001).unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(output(&run), json!({"by": "direct"}), "{run:?}");
    let events = plan_events(&mut c, &run_id);
    assert!(
        events[1].starts_with("plan_executor_exhausted webhook: timeout"),
        "{events:#?}"
    );
    w.stop();
}

#[test]
fn after_kill_9_a_plan_step_goes_on_with_the_executor_it_was_on() {
    let (dir, server, mut c) = setup(
        &[],
        &["slow", "other"],
        600_000,
        "resumed",
        "    selection: round-robin\n    executors:\n      - {name: slow, action: \"@actions/slow\", priority: 2}\n      - {name: other, action: \"@actions/other\", priority: 1}\n",
    );
    // No worker yet: the first executor's attempt waits.
    let run_id = start(&mut c, "resumed", json!({}));
    assert!(common::wait_until(
        std::time::Duration::from_secs(10),
        || {
            // Pending: its attempt waits for a worker.
            let run = c.workflow_run(&run_id).unwrap();
            run.waiting_for
                .as_deref()
                .is_some_and(|w| w.starts_with("action run"))
        }
    ));
    let before = plan_events(&mut c, &run_id);
    assert_eq!(before.len(), 1, "{before:#?}");
    let executor = before[0]
        .strip_prefix("plan_executor_start ")
        .and_then(|d| d.split(' ').next())
        .unwrap()
        .to_string();
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    let (slow, other) = (Switch::new(false), Switch::new(false));
    let w = worker(
        &server,
        vec![("slow", slow.clone(), "x"), ("other", other.clone(), "x")],
    );
    let run = wait_final(&mut c, &run_id);
    assert_eq!(output(&run), json!({"by": executor.clone()}), "{run:?}");
    assert_eq!(slow.calls() + other.calls(), 1);
    let events = plan_events(&mut c, &run_id);
    assert_eq!(
        events,
        [
            format!("plan_executor_start {executor} (attempt 1)"),
            format!("plan_executor_success {executor}")
        ]
    );
    w.stop();
}

#[test]
fn the_spec_payment_example_runs_with_its_plan() {
    let yaml = include_str!("../testdata/workflows/payment-processing.yaml");
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &[]);
    let mut c = server.client();
    for a in [
        "charge-stripe",
        "charge-adyen",
        "check-payment-status",
        "send-notification",
    ] {
        user_action(&mut c, a, 60_000, 0, 100);
    }
    c.create_workflow(yaml).unwrap();
    let w = ActionWorker::builder(server.addr)
        .worker_id("payments")
        .concurrency(4)
        .block_ms(100)
        .action("charge-stripe", |ctx| {
            let input: Value = ctx.json()?;
            assert_eq!(input, json!({"customer_id": "c-9", "amount": 120}));
            ActionResult::json(&json!({"payment_id": "pay_1"}))
        })
        .action("charge-adyen", |_| Err("adyen must not be called".into()))
        .action("check-payment-status", |_| {
            ActionResult::json(&json!({"state": "succeeded"}))
        })
        .action("send-notification", |_| {
            ActionResult::json(&json!({"sent": true}))
        })
        .spawn()
        .unwrap();
    let run_id = c
        .start_workflow(
            "payment-processing",
            json!({"customer_id": "c-9", "amount": 120, "idempotency_key": "k-1"})
                .to_string()
                .as_bytes(),
            StartOptions {
                idempotency_key: Some("pay-1".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let run = wait_final(&mut c, &run_id);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    let start = run.steps.iter().find(|s| s.name == "_start").unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(start.output.as_deref().unwrap()).unwrap(),
        json!({"payment_id": "pay_1"})
    );
    let events = plan_events(&mut c, &run_id);
    assert_eq!(
        events,
        [
            "plan_executor_start stripe-primary (attempt 1)",
            "plan_executor_success stripe-primary"
        ]
    );
    // A second payment by the same customer and key comes from the plan's cache.
    let again = c
        .start_workflow(
            "payment-processing",
            json!({"customer_id": "c-9", "amount": 120, "idempotency_key": "k-1"})
                .to_string()
                .as_bytes(),
            StartOptions {
                idempotency_key: Some("pay-2".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let run = wait_final(&mut c, &again);
    assert_eq!(run.status, WorkflowRunStatus::Completed, "{run:?}");
    assert_eq!(
        plan_events(&mut c, &again),
        ["plan_cache_hit charge:c-9:k-1"]
    );
    w.stop();
}

#[test]
fn a_rate_limit_holds_across_shards() {
    let (_dir, server, mut c) = setup(
        &["--shards", "2"],
        &["metered", "spare"],
        60_000,
        "shared-limit",
        "    executors:\n      - {name: metered, action: \"@actions/metered\", priority: 2, rate_limit: {max_per_hour: 2}}\n      - {name: spare, action: \"@actions/spare\", priority: 1}\n",
    );
    let (metered, spare) = (Switch::new(false), Switch::new(false));
    let w = worker(
        &server,
        vec![
            ("metered", metered.clone(), "x"),
            ("spare", spare.clone(), "x"),
        ],
    );
    let hour = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 3600
    };
    let before = hour();
    // Runs named so that both shards own some.
    for i in 0..12 {
        let run_id = c
            .start_workflow(
                "shared-limit",
                b"{}",
                StartOptions {
                    run_id: Some(format!("limited-{i}")),
                    ..Default::default()
                },
            )
            .unwrap();
        wait_final(&mut c, &run_id);
    }
    if hour() == before {
        // 2 an hour over the server: 1 per shard.
        assert!(
            metered.calls() <= 2,
            "{} calls over a limit of 2",
            metered.calls()
        );
        assert_eq!(metered.calls() + spare.calls(), 12);
    }
    let rows = c.plan_status("shared-limit", None).unwrap();
    let shares: Vec<Option<u32>> = rows
        .iter()
        .filter(|r| r.executor == "metered")
        .map(|r| r.rate_share[2])
        .collect();
    assert!(shares.iter().all(|s| *s == Some(1)), "{rows:?}");
    w.stop();
}
