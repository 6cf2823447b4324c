//! `flo stream ...`: create, append, read, tail, describe, list, trim and delete streams.

use super::CliError;
use super::arg_value::{ArgBytes, parse_bytes};
use super::duration::parse_ttl;
use super::output::{Output, print_records, record_json, record_text, time_text};
use super::stream_group::GroupCommand;
use clap::Subcommand;
use flo::Client;
use flo::protocol::{
    GROUP_BLOCK_MS_MAX, STREAM_READ_COUNT_MAX, StreamConfig, StreamId, StreamInfo, StreamReadSpec,
    StreamRecordIn,
};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum StreamCommand {
    /// Create a stream (again with the same settings: nothing changes).
    Create {
        name: String,
        /// Partitions, fixed for the stream's life (default: the server's shard count).
        #[arg(long)]
        partitions: Option<u32>,
        /// Remove records older than this: `30s`, `12h`, `7d`, or milliseconds.
        #[arg(long, value_name = "DURATION", value_parser = parse_ttl)]
        retention: Option<u64>,
        /// Keep at most this many records (each partition its share).
        #[arg(long, value_name = "N")]
        max_len: Option<u64>,
        /// Keep at most this many payload bytes (each partition its share).
        #[arg(long, value_name = "BYTES")]
        max_bytes: Option<u64>,
    },
    /// Append one record; a missing stream is created with the default settings.
    Append {
        name: String,
        /// The payload: text, `@FILE` for a file's bytes, `-` for standard input (`@@` for
        /// a payload starting with `@`).
        #[arg(value_parser = parse_bytes, allow_hyphen_values = true)]
        payload: ArgBytes,
        /// Records with one key go to one partition, in order.
        #[arg(long)]
        key: Option<String>,
        /// A header, `NAME=VALUE` (repeat for more).
        #[arg(long = "header", value_name = "NAME=VALUE", value_parser = parse_header)]
        headers: Vec<(String, String)>,
        /// Put the record in this partition.
        #[arg(long)]
        partition: Option<u32>,
    },
    /// Read records in id order, oldest first (all partitions merged, or one).
    Read {
        name: String,
        /// From this id on (included).
        #[arg(long, value_name = "ID", conflicts_with = "after")]
        from: Option<StreamId>,
        /// After this id (what a page printed to go on).
        #[arg(long, value_name = "ID")]
        after: Option<StreamId>,
        #[arg(long, default_value_t = 100,
              value_parser = clap::value_parser!(u32).range(1..=STREAM_READ_COUNT_MAX as i64))]
        count: u32,
        #[arg(long)]
        partition: Option<u32>,
        /// When there is nothing to read, wait up to this many ms for a record.
        #[arg(long, value_name = "MS",
              value_parser = clap::value_parser!(u64).range(0..=GROUP_BLOCK_MS_MAX))]
        block: Option<u64>,
    },
    /// The newest records; with --follow, then every record appended after them.
    Tail {
        name: String,
        #[arg(long, default_value_t = 10,
              value_parser = clap::value_parser!(u32).range(1..=STREAM_READ_COUNT_MAX as i64))]
        count: u32,
        #[arg(long)]
        follow: bool,
    },
    /// A stream's settings and what it holds.
    Info { name: String },
    /// The streams of the namespace.
    List,
    /// Delete a stream and its records (its dead-letter stream with it).
    Delete { name: String },
    /// Consumer groups: each record to one consumer of the group, until acknowledged.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Remove the oldest records: all before an id, or all but the newest N (exactly).
    Trim {
        name: String,
        #[arg(
            long,
            value_name = "N",
            required_unless_present = "before",
            conflicts_with = "before"
        )]
        max_len: Option<u64>,
        #[arg(long, value_name = "ID")]
        before: Option<StreamId>,
        /// Only say how many records would go.
        #[arg(long)]
        dry_run: bool,
    },
}

/// `--header NAME=VALUE`.
fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

/// How long one read of `tail --follow` waits for new records on the server.
const FOLLOW_BLOCK_MS: u64 = 30_000;

pub fn run(client: &mut Client, cmd: &StreamCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        StreamCommand::Create {
            name,
            partitions,
            retention,
            max_len,
            max_bytes,
        } => {
            let config = StreamConfig {
                partitions: *partitions,
                retention_ms: *retention,
                max_len: *max_len,
                max_bytes: *max_bytes,
            };
            let created = client.create_stream(name, config)?;
            let info = client.stream(name)?;
            out.print(
                json!({ "created": created, "stream": info_json(&info) }),
                || {
                    let verb = if created { "created" } else { "exists:" };
                    format!("{verb} stream {name} ({} partitions)", info.partitions)
                },
            );
        }
        StreamCommand::Append {
            name,
            payload,
            key,
            headers,
            partition,
        } => {
            let record = StreamRecordIn {
                key: key.clone(),
                headers: headers.iter().cloned().collect::<BTreeMap<_, _>>(),
                payload: payload.to_vec(),
            };
            let ids = client.append_to(name, vec![record], *partition)?;
            let id = ids.first().copied().unwrap_or_default();
            out.print(json!({ "id": id.to_string() }), || id.to_string());
        }
        StreamCommand::Read {
            name,
            from,
            after,
            count,
            partition,
            block,
        } => {
            let spec = StreamReadSpec {
                stream: name.clone(),
                after: after.or_else(|| from.and_then(before_id)),
                count: Some(*count),
                partition: *partition,
                block_ms: *block,
                ..Default::default()
            };
            let page = client.read_stream(spec)?;
            let doc = json!({
                "records": page.records.iter().map(record_json).collect::<Vec<_>>(),
                "next_after": page.next_after.map(|id| id.to_string()),
            });
            out.print(doc, || {
                let mut lines: Vec<String> = page.records.iter().map(record_text).collect();
                if let Some(next) = page.next_after {
                    lines.push(format!("(more records may follow: --after {next})"));
                }
                lines.join("\n")
            });
        }
        StreamCommand::Tail {
            name,
            count,
            follow,
        } => tail(client, name, *count, *follow, out)?,
        StreamCommand::Info { name } => {
            let info = client.stream(name)?;
            out.print(info_json(&info), || info_text(&info));
        }
        StreamCommand::List => {
            let streams = client.list_streams()?;
            let doc = json!({ "streams": streams.iter().map(info_json).collect::<Vec<_>>() });
            out.print(doc, || {
                if streams.is_empty() {
                    return "no streams".into();
                }
                streams
                    .iter()
                    .map(|s| {
                        format!(
                            "{}\t{} partitions\t{} records\t{} bytes",
                            s.name, s.partitions, s.length, s.bytes
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        StreamCommand::Group(cmd) => super::stream_group::run(client, cmd, out)?,
        StreamCommand::Delete { name } => {
            client.delete_stream(name)?;
            out.print(json!({ "deleted": true }), || {
                format!("deleted stream {name}")
            });
        }
        StreamCommand::Trim {
            name,
            max_len,
            before,
            dry_run,
        } => {
            let before = match (before, max_len) {
                (Some(id), _) => Some(*id),
                (None, Some(n)) => keep_newest(client, name, *n)?,
                (None, None) => return Err(CliError::Usage("give --max-len or --before".into())),
            };
            let removed = match before {
                Some(id) => client.trim_stream(name, id, *dry_run)?,
                None => 0,
            };
            let verb = if *dry_run { "would remove" } else { "removed" };
            out.print(json!({ "removed": removed, "dry_run": dry_run }), || {
                format!("{verb} {removed} records")
            });
        }
    }
    Ok(())
}

/// The id just before `id` (a read from `id` on is a read after it).
fn before_id(id: StreamId) -> Option<StreamId> {
    match (id.ms, id.seq) {
        (0, 0) => None,
        (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
        (ms, seq) => Some(StreamId::new(ms, seq - 1)),
    }
}

/// The id of the oldest record to keep so that `n` remain (None: no more than `n` now).
fn keep_newest(client: &mut Client, name: &str, n: u64) -> Result<Option<StreamId>, CliError> {
    if n == 0 {
        let last = client.stream(name)?.last_id;
        return Ok(last.map(|l| StreamId::new(l.ms, l.seq + 1)));
    }
    if n <= STREAM_READ_COUNT_MAX as u64 {
        let spec = StreamReadSpec {
            stream: name.into(),
            count: Some(n as u32),
            tail: true,
            ..Default::default()
        };
        let page = client.read_stream(spec)?;
        if (page.records.len() as u64) < n {
            return Ok(None);
        }
        return Ok(page.records.first().map(|r| r.id));
    }
    // More than one read returns: skip the records that go, from the oldest.
    let length = client.stream(name)?.length;
    let mut to_skip = length.saturating_sub(n);
    if to_skip == 0 {
        return Ok(None);
    }
    let mut after = None;
    loop {
        let count = to_skip.min(STREAM_READ_COUNT_MAX as u64) as u32;
        let spec = StreamReadSpec {
            stream: name.into(),
            after,
            count: Some(count),
            ..Default::default()
        };
        let page = client.read_stream(spec)?;
        let Some(last) = page.records.last() else {
            return Ok(None);
        };
        to_skip -= page.records.len() as u64;
        after = Some(last.id);
        if to_skip == 0 {
            return Ok(after.map(|a| StreamId::new(a.ms, a.seq + 1)));
        }
    }
}

fn tail(
    client: &mut Client,
    name: &str,
    count: u32,
    follow: bool,
    out: &Output,
) -> Result<(), CliError> {
    let spec = StreamReadSpec {
        stream: name.into(),
        count: Some(count),
        tail: true,
        ..Default::default()
    };
    let page = client.read_stream(spec)?;
    let mut after = page.records.last().map(|r| r.id);
    print_records(&page.records, out);
    if !follow {
        return Ok(());
    }
    if after.is_none() {
        after = client.stream(name)?.last_id;
    }
    loop {
        let spec = StreamReadSpec {
            stream: name.into(),
            after,
            count: Some(STREAM_READ_COUNT_MAX),
            block_ms: Some(FOLLOW_BLOCK_MS),
            ..Default::default()
        };
        let page = client.read_stream(spec)?;
        print_records(&page.records, out);
        after = page.records.last().map(|r| r.id).or(after);
    }
}

fn info_json(s: &StreamInfo) -> Value {
    json!({
        "name": s.name,
        "namespace": s.namespace,
        "partitions": s.partitions,
        "retention_ms": s.retention_ms,
        "max_len": s.max_len,
        "max_bytes": s.max_bytes,
        "created_at_ms": s.created_at_ms,
        "length": s.length,
        "bytes": s.bytes,
        "first_id": s.first_id.map(|id| id.to_string()),
        "last_id": s.last_id.map(|id| id.to_string()),
        "appended": s.appended,
    })
}

fn info_text(s: &StreamInfo) -> String {
    let id = |id: Option<StreamId>| id.map_or("-".to_string(), |i| i.to_string());
    let limit = |v: Option<u64>| v.map_or("none".to_string(), |v| v.to_string());
    [
        format!("stream:      {}", s.name),
        format!("partitions:  {}", s.partitions),
        format!("records:     {} ({} bytes)", s.length, s.bytes),
        format!("first id:    {}", id(s.first_id)),
        format!("last id:     {}", id(s.last_id)),
        format!("appended:    {}", s.appended),
        format!(
            "retention:   {}",
            s.retention_ms
                .map_or("none".to_string(), |ms| humantime::format_duration(
                    Duration::from_millis(ms)
                )
                .to_string())
        ),
        format!("max length:  {}", limit(s.max_len)),
        format!("max bytes:   {}", limit(s.max_bytes)),
        format!("created:     {}", time_text(s.created_at_ms)),
    ]
    .join("\n")
}
