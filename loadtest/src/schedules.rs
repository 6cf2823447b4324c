//! The `schedule` workload: `--keys` workflows (default 50), each with an interval schedule
//! of `--interval-ms` whose runs are one trivial WASM step, until `--ops` ticks fired in
//! all. Reports the drift of each tick: when its run started minus the tick's time.

use crate::args::Args;
use crate::workload::register_wasm_action;
use hdrhistogram::Histogram;
use serde_json::json;
use std::time::{Duration, Instant};

/// Workflows when `--keys` is not given.
const WORKFLOWS_DEFAULT: u64 = 50;
const POLL: Duration = Duration::from_millis(200);

fn yaml(i: u64, interval_ms: u64) -> String {
    format!(
        "kind: Workflow\nname: loadtest-sched-{i}\nversion: \"1\"\nschedule:\n  interval: \
         {interval_ms}\n  max_concurrent: 1000\nstart:\n  run: \"@actions/loadtest-ok\"\n  \
         transitions:\n    success: flo.Completed\n    failure: flo.Failed\n"
    )
}

/// The tick a scheduled run's id names (`sched:WORKFLOW:TICK[.K]`).
fn tick_of(run_id: &str) -> Option<u64> {
    let tick = run_id.rsplit(':').next()?;
    tick.split('.').next()?.parse().ok()
}

/// Runs the workload; prints the report; true when every tick wanted fired.
pub fn run(args: &Args, addr: &str, token: Option<&str>) -> Result<bool, String> {
    let workflows = args.keys.unwrap_or(WORKFLOWS_DEFAULT).max(1);
    let interval_ms = args.interval_ms;
    register_wasm_action(addr, token, &args.namespace)?;
    let mut c = flo::Client::connect_as(addr, token)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?
        .with_namespace(args.namespace.clone());
    for i in 0..workflows {
        c.create_workflow(&yaml(i, interval_ms))
            .map_err(|e| format!("cannot create loadtest-sched-{i}: {e}"))?;
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(args.max_secs);
    let mut fired = 0;
    while fired < args.ops && Instant::now() < deadline {
        std::thread::sleep(POLL);
        fired = c
            .list_schedules()
            .map_err(|e| format!("cannot list schedules: {e}"))?
            .iter()
            .filter(|s| s.workflow.starts_with("loadtest-sched-"))
            .map(|s| s.fired)
            .sum();
        if !args.json {
            eprintln!(
                "{:>6.1} s  {fired} ticks fired",
                start.elapsed().as_secs_f64()
            );
        }
    }
    let elapsed = start.elapsed();
    for i in 0..workflows {
        let name = format!("loadtest-sched-{i}");
        c.set_workflow_enabled(&name, false)
            .map_err(|e| format!("cannot disable {name}: {e}"))?;
    }
    let mut drift_ms = Histogram::<u64>::new(3).expect("a histogram");
    let mut runs = 0u64;
    for i in 0..workflows {
        let name = format!("loadtest-sched-{i}");
        let mut cursor: Option<String> = None;
        loop {
            let page = c
                .list_workflow_runs_page(&name, None, Some(1000), cursor.as_deref())
                .map_err(|e| format!("cannot list the runs of {name}: {e}"))?;
            for r in &page.items {
                if let Some(tick) = tick_of(&r.run_id) {
                    runs += 1;
                    let _ = drift_ms.record(r.created_at_ms.saturating_sub(tick));
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
    }
    let q = |p: f64| drift_ms.value_at_quantile(p);
    if args.json {
        let doc = json!({
            "workload": "schedule",
            "workflows": workflows,
            "interval_ms": interval_ms,
            "ticks_fired": fired,
            "runs": runs,
            "elapsed_s": elapsed.as_secs_f64(),
            "drift_ms": {"p50": q(0.5), "p99": q(0.99), "p999": q(0.999), "max": drift_ms.max()},
        });
        println!("{doc}");
    } else {
        println!("workload            schedule ({workflows} workflows, every {interval_ms} ms)");
        println!(
            "ticks fired         {fired} in {:.1} s",
            elapsed.as_secs_f64()
        );
        println!("runs measured       {runs}");
        println!(
            "drift (run start − tick)  p50 {} ms  p99 {} ms  p99.9 {} ms  max {} ms",
            q(0.5),
            q(0.99),
            q(0.999),
            drift_ms.max()
        );
    }
    Ok(fired >= args.ops)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_scheduled_run_id_names_its_tick() {
        assert_eq!(
            super::tick_of("sched:w:1764000000000"),
            Some(1_764_000_000_000)
        );
        assert_eq!(
            super::tick_of("sched:w:1764000000000.3"),
            Some(1_764_000_000_000)
        );
        assert_eq!(super::tick_of("wfrun-3"), None);
    }
}
