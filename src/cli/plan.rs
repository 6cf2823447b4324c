//! `flo plan invalidate` and `flo workflow plan-status`: inline plans' cache and state.

use super::CliError;
use super::output::{Output, time_text};
use clap::Subcommand;
use flo::Client;
use flo::protocol::PlanExecutorInfo;
use serde_json::{Value, json};

#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Publish a cache-invalidation event: the cached outputs of plans whose
    /// `cache.invalidate_on` names EVENT are dropped on every shard. Prints how many.
    Invalidate {
        event: String,
        /// Only the output cached under this key (as the plan's `cache.key` renders it).
        #[arg(long)]
        key: Option<String>,
    },
}

pub fn run(c: &mut Client, cmd: &PlanCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        PlanCommand::Invalidate { event, key } => {
            let entries = c.invalidate_plan_cache(event, key.as_deref())?;
            out.print(json!({"event": event, "entries": entries}), || {
                format!("{entries} cached outputs dropped for {event}")
            });
        }
    }
    Ok(())
}

/// `flo workflow plan-status NAME`: one line per executor and shard.
pub fn print_status(out: &Output, rows: &[PlanExecutorInfo]) {
    let doc = Value::Array(rows.iter().map(row_json).collect());
    out.print(doc, || {
        if rows.is_empty() {
            return "no plan state yet: no step of these plans ran since the server started"
                .to_string();
        }
        let mut lines = vec![format!(
            "{:<20} {:<20} {:>5} {:<20} {:>6} {:>8} {:>8}  RATE (s/m/h)",
            "PLAN", "EXECUTOR", "SHARD", "BREAKER", "SCORE", "SAMPLES", "FAILURES"
        )];
        for r in rows {
            let breaker = match r.open_until_ms {
                Some(ms) => format!("open until {}", time_text(ms)),
                None => r.breaker.clone(),
            };
            let rate: Vec<String> = r
                .rate_used
                .iter()
                .zip(&r.rate_share)
                .map(|(used, share)| match share {
                    Some(s) => format!("{used}/{s}"),
                    None => "-".to_string(),
                })
                .collect();
            lines.push(format!(
                "{:<20} {:<20} {:>5} {:<20} {:>6.3} {:>8} {:>8}  {}",
                r.plan,
                r.executor,
                r.shard,
                breaker,
                f64::from(r.score_permille) / 1000.0,
                r.samples,
                r.consecutive_failures,
                rate.join(" ")
            ));
        }
        lines.join("\n")
    });
}

fn row_json(r: &PlanExecutorInfo) -> Value {
    json!({
        "plan": r.plan,
        "executor": r.executor,
        "action": r.action,
        "priority": r.priority,
        "shard": r.shard,
        "breaker": r.breaker,
        "open_until_ms": r.open_until_ms,
        "consecutive_failures": r.consecutive_failures,
        "score": f64::from(r.score_permille) / 1000.0,
        "samples": r.samples,
        "rate_used": {"second": r.rate_used.first(), "minute": r.rate_used.get(1), "hour": r.rate_used.get(2)},
        "rate_limit_share": {"second": r.rate_share.first(), "minute": r.rate_share.get(1), "hour": r.rate_share.get(2)},
    })
}
