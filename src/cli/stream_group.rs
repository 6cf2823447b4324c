//! `flo stream group ...`: consumer groups — create, read as a consumer, ack, nack, the
//! pending list, where a group stands, delete.

use super::CliError;
use super::output::{Output, print_records, record_json, time_text};
use clap::{Subcommand, ValueEnum};
use flo::Client;
use flo::protocol::{
    GROUP_BLOCK_MS_MAX, GroupConfig, GroupInfo, GroupMode, GroupReadSpec, GroupStart,
    STREAM_READ_COUNT_MAX, StreamId,
};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ModeArg {
    /// Competing consumers: each record goes to one of them.
    Shared,
    /// One consumer at a time per partition.
    Exclusive,
    /// Records with one key go to one consumer, in order.
    #[value(name = "key_shared", alias = "key-shared")]
    KeyShared,
}

#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Create a consumer group (again with the same settings: nothing changes).
    Create {
        stream: String,
        group: String,
        /// Where the group starts: `start` (the oldest retained record), `end` (records
        /// appended from now on), or an id (included).
        #[arg(long, default_value = "end", value_parser = parse_start)]
        from: GroupStart,
        #[arg(long, value_enum, default_value = "shared")]
        mode: ModeArg,
        /// Deliveries after which a record moves to the stream's dead-letter stream
        /// (NAME:dlq); default 16.
        #[arg(long)]
        max_deliveries: Option<u32>,
        /// Milliseconds a delivered record may go unacknowledged before it is delivered
        /// again; default 300000 (5 minutes).
        #[arg(long, value_name = "MS")]
        message_timeout: Option<u64>,
    },
    /// Read records as a consumer of the group (each is pending until acknowledged).
    Read {
        stream: String,
        group: String,
        #[arg(long)]
        consumer: String,
        #[arg(long, default_value_t = 10,
              value_parser = clap::value_parser!(u32).range(1..=STREAM_READ_COUNT_MAX as i64))]
        count: u32,
        /// Wait up to this many ms for a record when none is there.
        #[arg(long, value_name = "MS",
              value_parser = clap::value_parser!(u64).range(0..=GROUP_BLOCK_MS_MAX))]
        block: Option<u64>,
    },
    /// Acknowledge records: they are never delivered again.
    Ack {
        stream: String,
        group: String,
        #[arg(required = true)]
        ids: Vec<StreamId>,
    },
    /// Have records delivered again, after --delay ms.
    Nack {
        stream: String,
        group: String,
        #[arg(required = true)]
        ids: Vec<StreamId>,
        #[arg(long, value_name = "MS", default_value_t = 0)]
        delay: u64,
    },
    /// Records delivered and not acknowledged, oldest first.
    Pending {
        stream: String,
        group: String,
        #[arg(long)]
        count: Option<u32>,
    },
    /// Where the group stands (or every group of the stream, without GROUP).
    Info {
        stream: String,
        group: Option<String>,
    },
    /// Delete the group (its pending records with it).
    Delete { stream: String, group: String },
}

fn parse_start(text: &str) -> Result<GroupStart, String> {
    match text {
        "start" => Ok(GroupStart::Start),
        "end" => Ok(GroupStart::End),
        id => id
            .parse::<StreamId>()
            .map(GroupStart::At)
            .map_err(|e| format!("use start, end or an id: {}", e.message)),
    }
}

pub fn run(client: &mut Client, cmd: &GroupCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        GroupCommand::Create {
            stream,
            group,
            from,
            mode,
            max_deliveries,
            message_timeout,
        } => {
            let config = GroupConfig {
                mode: match mode {
                    ModeArg::Shared => GroupMode::Shared,
                    ModeArg::Exclusive => GroupMode::Exclusive,
                    ModeArg::KeyShared => GroupMode::KeyShared,
                },
                start: *from,
                max_deliveries: *max_deliveries,
                message_timeout_ms: *message_timeout,
            };
            let created = client.create_group(stream, group, config)?;
            out.print(json!({ "group": group, "created": created }), || {
                let verb = if created { "created" } else { "exists:" };
                format!("{verb} group {group} of stream {stream}")
            });
        }
        GroupCommand::Read {
            stream,
            group,
            consumer,
            count,
            block,
        } => {
            let spec = GroupReadSpec {
                stream: stream.clone(),
                group: group.clone(),
                consumer: consumer.clone(),
                count: Some(*count),
                block_ms: *block,
                ..Default::default()
            };
            let records = client.group_read(spec)?;
            let doc = json!({ "records": records.iter().map(record_json).collect::<Vec<_>>() });
            if out.json {
                out.print(doc, String::new);
            } else if records.is_empty() {
                out.print(doc, || "no records".into());
            } else {
                print_records(&records, out);
            }
        }
        GroupCommand::Ack { stream, group, ids } => {
            let n = client.ack(stream, group, ids.clone())?;
            out.print(json!({ "acked": n }), || format!("acked {n}"));
        }
        GroupCommand::Nack {
            stream,
            group,
            ids,
            delay,
        } => {
            let n = client.nack(stream, group, ids.clone(), *delay)?;
            out.print(json!({ "nacked": n }), || format!("nacked {n}"));
        }
        GroupCommand::Pending {
            stream,
            group,
            count,
        } => {
            let pending = client.group_pending(stream, group, *count)?;
            let doc = json!({ "pending": pending.iter().map(|p| json!({
                "id": p.id.to_string(),
                "consumer": p.consumer,
                "deliveries": p.deliveries,
                "delivered_at_ms": p.delivered_at_ms,
            })).collect::<Vec<_>>() });
            out.print(doc, || {
                if pending.is_empty() {
                    return "no pending records".into();
                }
                pending
                    .iter()
                    .map(|p| {
                        format!(
                            "{}\t{}\t{} deliveries\t{}",
                            p.id,
                            p.consumer,
                            p.deliveries,
                            time_text(p.delivered_at_ms)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        GroupCommand::Info { stream, group } => {
            let groups = client.groups(stream, group.as_deref())?;
            let doc = match (group, groups.first()) {
                (Some(_), Some(g)) => group_json(g),
                _ => json!({ "groups": groups.iter().map(group_json).collect::<Vec<_>>() }),
            };
            out.print(doc, || {
                if groups.is_empty() {
                    return format!("stream {stream} has no consumer groups");
                }
                groups
                    .iter()
                    .map(group_text)
                    .collect::<Vec<_>>()
                    .join("\n\n")
            });
        }
        GroupCommand::Delete { stream, group } => {
            client.delete_group(stream, group)?;
            out.print(json!({ "deleted": true }), || {
                format!("deleted group {group}")
            });
        }
    }
    Ok(())
}

fn group_json(g: &GroupInfo) -> Value {
    json!({
        "stream": g.stream,
        "group": g.group,
        "mode": g.mode.as_str(),
        "max_deliveries": g.max_deliveries,
        "message_timeout_ms": g.message_timeout_ms,
        "created_at_ms": g.created_at_ms,
        "pending": g.pending,
        "lag": g.lag,
        "delivered": g.delivered,
        "acked": g.acked,
        "dead_lettered": g.dead_lettered,
        "consumers": g.consumers,
    })
}

fn group_text(g: &GroupInfo) -> String {
    [
        format!("group:           {} (stream {})", g.group, g.stream),
        format!("mode:            {}", g.mode.as_str()),
        format!("pending:         {}", g.pending),
        format!("lag:             {}", g.lag),
        format!(
            "delivered:       {} (acked {}, dead-lettered {})",
            g.delivered, g.acked, g.dead_lettered
        ),
        format!("max deliveries:  {}", g.max_deliveries),
        format!("message timeout: {} ms", g.message_timeout_ms),
        format!("consumers:       {}", g.consumers.join(", ")),
    ]
    .join("\n")
}
