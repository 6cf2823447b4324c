//! Search attributes and run queries end to end: attributes from the input and from a
//! later step's output, shown with the run; queries with each operator over live and
//! finished (archived) runs on two shards, paged with cursors in either order; bad
//! queries' errors; the same answers after kill -9.

mod common;

use common::{TestServer, cli_json, fixed_wasm_action, temp_dir, wait_until};
use flo::Client;
use flo::protocol::{ErrorCode, WorkflowRunStatus};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const ORDERS: &str = r#"kind: Workflow
name: orders
version: "1"
searchAttributes:
  - {name: customer, type: string, from: input.customer_id}
  - {name: amount, type: number, from: input.amount}
  - {name: placed, type: timestamp, from: input.placed}
  - {name: tags, type: keyword_list, from: input.tags}
  - {name: total, type: number, from: "$.steps._start.output.total"}
start:
  run: "@actions/price"
  transitions:
    success: approve
    failure: flo.Failed
steps:
  approve:
    waitForSignal:
      type: go
    transitions:
      success: flo.Completed
"#;

const RUNS: u32 = 40;

struct Order {
    run_id: String,
    customer: String,
    amount: f64,
    vip: bool,
    /// Signalled: completed (and archived).
    done: bool,
}

fn setup(c: &mut Client) -> Vec<Order> {
    fixed_wasm_action(c, "price", r#"{"total":42}"#);
    c.create_workflow(ORDERS).unwrap();
    let mut orders = Vec::new();
    for i in 0..RUNS {
        let customer = format!("c-{}", i % 4);
        let amount = f64::from(i * 10);
        let vip = i % 5 == 0;
        // The first 20 placed in October, the others in November.
        let placed = if i >= 20 {
            "2026-11-15"
        } else {
            "2026-10-01T00:00:00Z"
        };
        let tags = if vip {
            json!(["vip", "eu"])
        } else {
            json!("eu")
        };
        let input =
            json!({"customer_id": customer, "amount": amount, "placed": placed, "tags": tags});
        let run_id = c
            .start_workflow("orders", input.to_string().as_bytes(), Default::default())
            .unwrap();
        orders.push(Order {
            run_id,
            customer,
            amount,
            vip,
            done: i % 2 == 0,
        });
    }
    for o in &orders {
        assert!(
            wait_until(Duration::from_secs(20), || {
                c.workflow_run(&o.run_id).unwrap().status == WorkflowRunStatus::Waiting
            }),
            "{} waits",
            o.run_id
        );
    }
    for o in orders.iter().filter(|o| o.done) {
        c.signal_workflow(&o.run_id, "go", b"{}").unwrap();
    }
    for o in orders.iter().filter(|o| o.done) {
        assert!(wait_until(Duration::from_secs(20), || {
            c.workflow_run(&o.run_id).unwrap().status == WorkflowRunStatus::Completed
        }));
    }
    orders
}

/// Every run a query finds, paging `limit` at a time; checks the order of each page.
fn query_all(c: &mut Client, query: &str, limit: u32, ascending: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    let mut last: Option<u64> = None;
    for _ in 0..1000 {
        let page = c
            .query_workflow_runs(
                Some("orders"),
                query,
                ascending,
                Some(limit),
                cursor.as_deref(),
            )
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(page.items.len() <= limit as usize);
        for r in &page.items {
            if let Some(prev) = last {
                let in_order = if ascending {
                    r.created_at_ms >= prev
                } else {
                    r.created_at_ms <= prev
                };
                assert!(in_order, "{query}: out of order at {}", r.run_id);
            }
            last = Some(r.created_at_ms);
            out.push(r.run_id.clone());
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("{query}: the pages never ended");
}

fn ids(orders: &[Order], keep: impl Fn(&Order) -> bool) -> BTreeSet<String> {
    orders
        .iter()
        .filter(|o| keep(o))
        .map(|o| o.run_id.clone())
        .collect()
}

fn check_queries(c: &mut Client, orders: &[Order]) {
    let cases: Vec<(&str, BTreeSet<String>)> = vec![
        (r#"customer = "c-1""#, ids(orders, |o| o.customer == "c-1")),
        (
            r#"customer = "c-1" AND amount > 100"#,
            ids(orders, |o| o.customer == "c-1" && o.amount > 100.0),
        ),
        (r#"status = "completed""#, ids(orders, |o| o.done)),
        (
            r#"status = "waiting" AND total = 42 AND amount >= 200"#,
            ids(orders, |o| !o.done && o.amount >= 200.0),
        ),
        (r#"tags IN ("vip", "none")"#, ids(orders, |o| o.vip)),
        (r#"tags = "eu" AND tags != "vip""#, ids(orders, |o| !o.vip)),
        (
            r#"placed > "2026-11-01""#,
            ids(orders, |o| o.amount >= 200.0),
        ),
        (
            r#"NOT customer = "c-1" OR amount <= 50"#,
            ids(orders, |o| o.customer != "c-1" || o.amount <= 50.0),
        ),
        (
            r#"(customer = "c-0" OR customer = "c-3") AND amount < 120"#,
            ids(orders, |o| {
                ["c-0", "c-3"].contains(&o.customer.as_str()) && o.amount < 120.0
            }),
        ),
        (r#"amount != 0 AND amount > 1000"#, BTreeSet::new()),
        (
            r#"started_at > "2020-01-01" AND workflow = "orders""#,
            ids(orders, |_| true),
        ),
    ];
    for (query, want) in cases {
        for (limit, ascending) in [(1000, false), (3, false), (7, true)] {
            let got = query_all(c, query, limit, ascending);
            let unique: BTreeSet<String> = got.iter().cloned().collect();
            assert_eq!(unique.len(), got.len(), "{query}: a run listed twice");
            assert_eq!(
                unique, want,
                "{query} (limit {limit}, ascending {ascending})"
            );
        }
    }
}

#[test]
fn queries_find_runs_by_attributes_live_and_archived_across_a_kill() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    let orders = setup(&mut c);

    // The attributes are shown with the run, the one from the step's output included.
    let run = c.workflow_run(&orders[1].run_id).unwrap();
    let attrs: Value = serde_json::from_slice(run.search_attributes.as_ref().unwrap()).unwrap();
    assert_eq!(
        attrs,
        json!({"customer": "c-1", "amount": 10.0, "placed": 1_790_812_800_000u64,
               "tags": ["eu"], "total": 42.0})
    );
    // A finished run's archived document has them too.
    let done = c.workflow_run(&orders[0].run_id).unwrap();
    assert_eq!(done.status, WorkflowRunStatus::Completed);
    assert!(done.search_attributes.is_some());

    check_queries(&mut c, &orders);

    // The CLI: the query, its order and its cursor.
    let addr = server.addr_string();
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "list-runs",
            "orders",
            "--query",
            r#"customer = "c-2""#,
            "--limit",
            "4",
        ],
    );
    assert_eq!(doc["runs"].as_array().unwrap().len(), 4);
    assert_eq!(doc["runs"][0]["search_attributes"]["customer"], "c-2");
    assert!(doc["next_cursor"].is_string());
    let doc = cli_json(
        &addr,
        &[
            "workflow",
            "list-runs",
            "--query",
            "amount >= 0",
            "--status",
            "waiting",
            "--order-by",
            "started_at:asc",
            "--limit",
            "1000",
        ],
    );
    assert_eq!(doc["runs"].as_array().unwrap().len(), RUNS as usize / 2);

    // Bad queries say what is wrong.
    let bad = |c: &mut Client, workflow: Option<&str>, q: &str| {
        let e = c
            .query_workflow_runs(workflow, q, false, None, None)
            .unwrap_err();
        match e {
            flo::Error::Server(v) => {
                assert_eq!(v.code, ErrorCode::BadRequest, "{q}: {v}");
                v.message
            }
            other => panic!("{q}: {other}"),
        }
    };
    let m = bad(&mut c, Some("orders"), r#"customer = "c-1" AND"#);
    assert!(
        m.contains("column 21") && m.contains("expected a field"),
        "{m}"
    );
    let m = bad(&mut c, Some("orders"), r#"colour = "red""#);
    assert!(
        m.contains("unknown field `colour`") && m.contains("customer"),
        "{m}"
    );
    let m = bad(&mut c, None, "amount >");
    assert!(m.contains("expected a value"), "{m}");
    c.create_workflow(
        "kind: Workflow\nname: plain\nversion: \"1\"\nstart:\n  run: \"@actions/price\"\n  \
         transitions:\n    success: flo.Completed\n",
    )
    .unwrap();
    let m = bad(&mut c, Some("plain"), r#"status = "running""#);
    assert!(m.contains("declares no searchAttributes"), "{m}");
    let e = c
        .query_workflow_runs(Some("orders"), "amount > 1", false, None, Some("q1.bogus"))
        .unwrap_err();
    assert!(e.to_string().contains("cursor"), "{e}");

    // After kill -9 the index is rebuilt: the same answers.
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    check_queries(&mut c, &orders);
}

/// An action run made by `action_run_queries_over_live_and_archived_runs_across_a_kill`.
struct ActionRun {
    run_id: String,
    action: &'static str,
    region: &'static str,
    tier: u32,
    /// Invoked after the time mark.
    late: bool,
    completed: bool,
}

/// Every action run a query finds, paging `limit` at a time.
fn query_runs_all(c: &mut Client, action: Option<&str>, query: &str, limit: u32) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let page = c
            .query_runs(action, query, Some(limit), cursor.as_deref())
            .unwrap_or_else(|e| panic!("{query}: {e}"));
        assert!(
            page.items.len() <= limit as usize,
            "{query}: page over its limit"
        );
        out.extend(page.items.into_iter().map(|r| r.run_id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("{query}: the pages never ended");
}

fn check_action_queries(c: &mut Client, runs: &[ActionRun], mark_ms: u64) {
    let ids = |keep: &dyn Fn(&ActionRun) -> bool| -> BTreeSet<String> {
        runs.iter()
            .filter(|r| keep(r))
            .map(|r| r.run_id.clone())
            .collect()
    };
    let mark = mark_ms.to_string();
    let cases: Vec<(Option<&str>, String, BTreeSet<String>)> = vec![
        (
            None,
            r#"status = "completed" AND labels.region = "eu""#.into(),
            ids(&|r| r.completed && r.region == "eu"),
        ),
        (
            Some("manual"),
            "labels.tier >= 1".into(),
            ids(&|r| r.action == "manual" && r.tier >= 1),
        ),
        (
            None,
            r#"labels.region = "us""#.into(),
            ids(&|r| r.region == "us"),
        ),
        (
            None,
            format!(r#"created_at >= {mark} AND action IN ("echo", "manual")"#),
            ids(&|r| r.late),
        ),
        (
            Some("echo"),
            r#"NOT labels.region = "eu" OR labels.tier = 2"#.into(),
            ids(&|r| r.action == "echo" && (r.region != "eu" || r.tier == 2)),
        ),
        (
            None,
            r#"status IN ("pending", "running") AND attempt <= 1"#.into(),
            ids(&|r| !r.completed),
        ),
        (
            None,
            r#"action = "echo" AND status = "failed""#.into(),
            BTreeSet::new(),
        ),
    ];
    for (action, query, want) in cases {
        for limit in [1000, 3] {
            let got = query_runs_all(c, action, &query, limit);
            let unique: BTreeSet<String> = got.iter().cloned().collect();
            assert_eq!(unique.len(), got.len(), "{query}: a run listed twice");
            assert_eq!(unique, want, "{query} (action {action:?}, limit {limit})");
        }
    }
}

#[test]
fn action_run_queries_over_live_and_archived_runs_across_a_kill() {
    let dir = temp_dir();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    fixed_wasm_action(&mut c, "echo", r#"{"ok":true}"#);
    // No worker: its runs stay pending (in memory).
    common::user_action(&mut c, "manual", 60_000, 0, 100);
    let mut runs = Vec::new();
    let mut mark_ms = 0;
    for i in 0..48u32 {
        if i == 24 {
            std::thread::sleep(Duration::from_millis(20));
            mark_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64;
            std::thread::sleep(Duration::from_millis(20));
        }
        let action = if i % 3 == 0 { "manual" } else { "echo" };
        let region = if i % 2 == 0 { "eu" } else { "us" };
        let tier = i % 3 + (i % 4 == 1) as u32;
        let opts = flo::InvokeOptions {
            labels: Some(json!({"region": region, "tier": tier}).to_string()),
            ..Default::default()
        };
        let run_id = c.invoke(action, b"{}", opts).unwrap();
        runs.push(ActionRun {
            run_id,
            action,
            region,
            tier,
            late: i >= 24,
            completed: action == "echo",
        });
    }
    for r in runs.iter().filter(|r| r.completed) {
        assert!(
            wait_until(Duration::from_secs(20), || {
                c.run(&r.run_id).unwrap().status == flo::protocol::RunStatus::Completed
            }),
            "{} completes",
            r.run_id
        );
    }
    check_action_queries(&mut c, &runs, mark_ms);

    // The CLI: every action's runs, with an action column; --status joins the query.
    let addr = server.addr_string();
    let doc = cli_json(
        &addr,
        &[
            "action",
            "runs",
            "--query",
            r#"labels.region = "eu""#,
            "--status",
            "pending",
            "--limit",
            "1000",
        ],
    );
    let listed = doc["runs"].as_array().unwrap();
    let want = runs
        .iter()
        .filter(|r| r.region == "eu" && !r.completed)
        .count();
    assert_eq!(listed.len(), want, "{doc}");
    assert!(listed.iter().all(|r| r["action"] == "manual"), "{doc}");
    let text = common::cli_ok(
        &addr,
        &["action", "runs", "--query", "attempt = 1", "--limit", "2"],
    );
    assert!(
        text.contains("ACTION") && text.contains("--cursor"),
        "{text}"
    );
    let usage = common::cli_usage_fails(&addr, &["action", "runs"]);
    assert!(usage.contains("<NAME>"), "{usage}");

    // Bad queries say what is wrong.
    for (q, says) in [
        (r#"customer = "c-1""#, "unknown field `customer`"),
        (r#"status = "done""#, "unknown status \"done\""),
        ("labels.region =", "expected a value"),
    ] {
        match c.query_runs(None, q, None, None).unwrap_err() {
            flo::Error::Server(v) => {
                assert_eq!(v.code, ErrorCode::BadRequest, "{q}: {v}");
                assert!(v.message.contains(says), "{q}: {}", v.message);
            }
            other => panic!("{q}: {other}"),
        }
    }

    // After kill -9: the same answers (finished runs from the archive, pending ones from
    // the log).
    drop(c);
    server.kill9();
    let server = TestServer::start(dir.path(), &["--shards", "2"]);
    let mut c = server.client();
    check_action_queries(&mut c, &runs, mark_ms);
}
