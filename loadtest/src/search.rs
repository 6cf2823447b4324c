//! The `query` workload: fills the store with `--ops` runs of a one-step workflow with
//! search attributes (`loadtest-search`: `customer` among 1,000 values, `amount` 0–9,999),
//! started without waiting through the usual connections, then asks `--queries` queries
//! one at a time — `customer = "c-K" AND amount > 5000`, the first page of 100 — and
//! reports their latency and the documents each shard looked at.

use crate::args::Args;
use crate::driver;
use crate::workload::{Generator, register_wasm_action, start_op};
use flo_protocol::{Op, Reply};
use hdrhistogram::Histogram;
use serde_json::json;
use std::fmt::Write as _;
use std::time::Instant;

pub const WORKFLOW: &str = "loadtest-search";
const YAML: &str = r#"kind: Workflow
name: loadtest-search
version: "1"
searchAttributes:
  - {name: customer, type: string, from: input.customer}
  - {name: amount, type: number, from: input.amount}
start:
  run: "@actions/loadtest-ok"
  transitions:
    success: flo.Completed
    failure: flo.Failed
"#;
const CUSTOMERS: u64 = 1000;

/// `plain`: the workflow without its search attributes (what they cost is the difference).
pub fn prepare(
    addr: &str,
    token: Option<&str>,
    namespace: &str,
    plain: bool,
) -> Result<(), String> {
    register_wasm_action(addr, token, namespace)?;
    let mut client = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(namespace);
    let yaml = if plain {
        let start = YAML.find("searchAttributes:").unwrap_or(0);
        let end = YAML.find("start:").unwrap_or(start);
        format!("{}{}", &YAML[..start], &YAML[end..])
    } else {
        YAML.to_string()
    };
    client
        .create_workflow(&yaml)
        .map_err(|e| format!("cannot create {WORKFLOW}: {e}"))?;
    Ok(())
}

/// Starts of `loadtest-search`, answered once the start is durable.
pub struct SearchStart {
    namespace: String,
}

impl SearchStart {
    pub fn new(namespace: &str) -> Self {
        SearchStart {
            namespace: namespace.to_string(),
        }
    }
}

impl Generator for SearchStart {
    fn fill(&mut self, n: u64, _intended: Option<Instant>, op: &mut Op) {
        let mut input = String::with_capacity(48);
        let _ = write!(
            input,
            r#"{{"customer":"c-{}","amount":{}}}"#,
            n % CUSTOMERS,
            (n * 7) % 10_000
        );
        *op = start_op(&self.namespace, WORKFLOW, input.into_bytes());
    }

    fn check(&self, _n: u64, reply: &Reply) -> Result<(), String> {
        match reply {
            Reply::WorkflowStarted { .. } => Ok(()),
            other => Err(format!("unexpected reply to a workflow start: {other:?}")),
        }
    }
}

/// The fill (`fill`: the starts' outcome), then the queries; prints the report.
pub fn run_queries(
    args: &Args,
    addr: &str,
    token: Option<&str>,
    fill: &driver::Outcome,
) -> Result<bool, String> {
    let mut c = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(args.namespace.clone());
    let shards = c.status().map(|s| s.shards.len()).unwrap_or(1).max(1) as u64;
    // The queries are measured on a settled store: every run started has finished.
    let settle = Instant::now();
    while settle.elapsed() < std::time::Duration::from_secs(300) {
        let live: u64 = c
            .status()
            .map(|s| s.shards.iter().map(|sh| sh.workflow_runs).sum())
            .unwrap_or(0);
        if live == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut latency_us = Histogram::<u64>::new(3).expect("a histogram");
    let mut scanned_total = 0u64;
    let mut found = 0u64;
    let mut errors = 0u64;
    let queries = if args.plain_workflow { 0 } else { args.queries };
    for q in 0..queries {
        let customer = (q * 7919) % CUSTOMERS;
        let op = Op::WorkflowQuery {
            namespace: args.namespace.clone(),
            workflow: Some(WORKFLOW.into()),
            query: format!(r#"customer = "c-{customer}" AND amount > 5000"#),
            ascending: false,
            limit: Some(100),
            cursor: None,
        };
        let started = Instant::now();
        let reply = c.call(op);
        let elapsed = started.elapsed();
        match reply {
            Ok(Reply::RunSummaries { items, scanned, .. }) => {
                found += items.len() as u64;
                scanned_total += scanned;
                let _ = latency_us.record(elapsed.as_micros() as u64);
            }
            other => {
                errors += 1;
                if errors == 1 {
                    eprintln!("flo-loadtest: query {q}: {other:?}");
                }
            }
        }
    }
    let q = |p: f64| latency_us.value_at_quantile(p) as f64 / 1000.0;
    let per_shard = scanned_total as f64 / args.queries.max(1) as f64 / shards as f64;
    let fill_rate = fill.ops as f64 / fill.elapsed.as_secs_f64().max(1e-9);
    if args.json {
        let doc = json!({
            "workload": "query",
            "runs_started": fill.ops - fill.errors,
            "fill_runs_per_s": fill_rate,
            "queries": args.queries,
            "errors": errors,
            "runs_found": found,
            "latency_ms": {"p50": q(0.5), "p99": q(0.99), "max": latency_us.max() as f64 / 1000.0},
            "documents_scanned_per_shard": per_shard,
        });
        println!("{doc}");
    } else {
        println!("workload            query ({WORKFLOW}: 1,000 customers, amounts 0-9,999)");
        println!(
            "store               {} runs started ({fill_rate:.0}/s)",
            fill.ops - fill.errors
        );
        println!(
            "queries             {} (customer = \"c-K\" AND amount > 5000, first page of 100), {errors} errors, {found} runs found",
            args.queries
        );
        println!(
            "latency             p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            q(0.5),
            q(0.99),
            latency_us.max() as f64 / 1000.0
        );
        println!("work per shard      {per_shard:.0} documents looked at per query");
    }
    Ok(errors == 0 && fill.errors == 0)
}
