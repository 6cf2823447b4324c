//! `flo webhook`: the deliveries of runs' events to their webhooks — those given up after
//! their last attempt, those waiting to be sent or retried — and sending a failed one again.

use super::CliError;
use super::output::{Output, time_text};
use clap::Subcommand;
use flo::Client;
use flo::protocol::WebhookDelivery;
use serde_json::{Value, json};

#[derive(Debug, Subcommand)]
pub enum WebhookCommand {
    /// Deliveries given up after their last attempt (or never sent: the queue was full),
    /// oldest first: id, event, run, URL, attempts and the last error.
    Failed {
        /// Only this workflow's runs.
        #[arg(long)]
        workflow: Option<String>,
        /// At most this many (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Deliveries waiting for their first attempt or a retry, with when it is due.
    Pending {
        #[arg(long)]
        workflow: Option<String>,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Send a failed delivery again (the same id and body; attempts count from 1).
    Redeliver {
        /// The delivery's id, as `flo webhook failed` shows it.
        id: String,
    },
}

pub fn run(c: &mut Client, cmd: &WebhookCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        WebhookCommand::Failed { workflow, limit } => {
            let (rows, truncated) =
                c.webhook_deliveries(true, workflow.as_deref(), Some(*limit))?;
            print_list(out, &rows, truncated, true);
        }
        WebhookCommand::Pending { workflow, limit } => {
            let (rows, truncated) =
                c.webhook_deliveries(false, workflow.as_deref(), Some(*limit))?;
            print_list(out, &rows, truncated, false);
        }
        WebhookCommand::Redeliver { id } => {
            c.redeliver_webhook(id)?;
            out.print(json!({"id": id, "redelivered": true}), || {
                format!("webhook delivery {id} will be sent again")
            });
        }
    }
    Ok(())
}

fn print_list(out: &Output, rows: &[WebhookDelivery], truncated: bool, failed: bool) {
    let doc = json!({
        "deliveries": rows.iter().map(row_json).collect::<Vec<Value>>(),
        "truncated": truncated,
    });
    out.print(doc, || {
        if rows.is_empty() {
            return match failed {
                true => "no failed webhook deliveries".to_string(),
                false => "no webhook deliveries waiting".to_string(),
            };
        }
        let when = if failed { "GIVEN UP" } else { "DUE" };
        let mut lines = vec![format!(
            "{:<14} {:<18} {:<24} {:>8}  {:<20} {:<32} LAST ERROR",
            "ID", "EVENT", "RUN", "ATTEMPTS", when, "URL"
        )];
        for r in rows {
            lines.push(format!(
                "{:<14} {:<18} {:<24} {:>8}  {:<20} {:<32} {}",
                r.id,
                r.event,
                r.run_id,
                r.attempts,
                time_text(r.at_ms),
                r.url,
                r.last_error.as_deref().unwrap_or("-")
            ));
        }
        if truncated {
            lines.push("(more left out: ask with a larger --limit or --workflow)".to_string());
        }
        lines.join("\n")
    });
}

fn row_json(r: &WebhookDelivery) -> Value {
    json!({
        "id": r.id,
        "workflow": r.workflow,
        "run_id": r.run_id,
        "event": r.event,
        "url": r.url,
        "attempts": r.attempts,
        "created_ms": r.created_ms,
        "at_ms": r.at_ms,
        "last_error": r.last_error,
    })
}
