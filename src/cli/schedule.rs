//! `flo schedule ...`: the schedules of workflows (`schedule:` in a definition).

use super::CliError;
use super::output::{Output, time_text};
use clap::Subcommand;
use flo::Client;
use flo::protocol::ScheduleInfo;
use serde_json::{Value, json};

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Every schedule of the namespace: its next fire time, last tick, runs and skips.
    List,
    /// Stop a workflow's schedule firing (the ticks until `resume` are not made up).
    Pause { workflow: String },
    /// Start a paused schedule again, from now.
    Resume { workflow: String },
    /// Fire a workflow's schedule now: a run with the schedule's input, whatever its
    /// pause and max_concurrent say. Prints the run's id.
    Trigger { workflow: String },
}

pub fn run(c: &mut Client, cmd: &ScheduleCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        ScheduleCommand::List => {
            let list = c.list_schedules()?;
            let doc = Value::Array(list.iter().map(info_json).collect());
            out.print(doc, || {
                if list.is_empty() {
                    return "no schedules (a workflow gets one with `schedule:`)".to_string();
                }
                let mut lines = vec![format!(
                    "{:<28} {:<26} {:<26} {:>7} {:>7} {:>7}",
                    "WORKFLOW", "SCHEDULE", "NEXT FIRE", "RUNNING", "FIRED", "SKIPPED"
                )];
                lines.extend(list.iter().map(|s| {
                    let next = match (&s.paused, s.next_fire_ms) {
                        (Some(why), _) => why.clone(),
                        (None, Some(ms)) => time_text(ms),
                        (None, None) => "never".to_string(),
                    };
                    format!(
                        "{:<28} {:<26} {:<26} {:>7} {:>7} {:>7}",
                        s.workflow,
                        s.every,
                        next,
                        format!("{}/{}", s.running, s.max_concurrent),
                        s.fired,
                        s.skipped
                    )
                }));
                lines.join("\n")
            });
        }
        ScheduleCommand::Pause { workflow } => {
            let info = c.pause_schedule(workflow)?;
            out.print(info_json(&info), || {
                format!("schedule of {} paused", info.workflow)
            });
        }
        ScheduleCommand::Resume { workflow } => {
            let info = c.resume_schedule(workflow)?;
            out.print(info_json(&info), || {
                match (&info.paused, info.next_fire_ms) {
                    (Some(why), _) => format!("schedule of {} resumed, but {why}", info.workflow),
                    (None, Some(ms)) => format!(
                        "schedule of {} resumed; next fire {}",
                        info.workflow,
                        time_text(ms)
                    ),
                    (None, None) => {
                        format!("schedule of {} resumed; no tick is left", info.workflow)
                    }
                }
            });
        }
        ScheduleCommand::Trigger { workflow } => {
            let run_id = c.trigger_schedule(workflow)?;
            out.print(json!({ "run_id": run_id }), || run_id.clone());
        }
    }
    Ok(())
}

fn info_json(s: &ScheduleInfo) -> Value {
    json!({
        "namespace": s.namespace,
        "workflow": s.workflow,
        "version": s.version,
        "schedule": s.every,
        "max_concurrent": s.max_concurrent,
        "catchup": s.catchup,
        "paused": s.paused,
        "next_fire": s.next_fire_ms.map(time_text),
        "next_fire_ms": s.next_fire_ms,
        "last_tick": s.last_tick_ms.map(time_text),
        "running": s.running,
        "fired": s.fired,
        "skipped": s.skipped,
        "last_skip": s.last_skip,
        "shard": s.shard,
    })
}
