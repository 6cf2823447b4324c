use super::CliError;
use super::output::Output;
use flo::Client;
use serde_json::json;

pub fn run(client: &mut Client, out: &Output) -> Result<(), CliError> {
    let info = client.status()?;
    let shards: Vec<_> = info
        .shards
        .iter()
        .map(|s| {
            json!({
                "shard": s.shard, "lsn": s.lsn, "durable_lsn": s.durable_lsn,
                "segments": s.segments, "kv_keys": s.kv_keys, "runs": s.runs,
                "workflow_runs": s.workflow_runs, "archived_runs": s.archived_runs,
                "run_index_bytes": s.run_index_bytes,
                "snapshot_lsn": s.snapshot_lsn, "snapshot_age_ms": s.snapshot_age_ms,
                "snapshot_pause_ms": s.snapshot_pause_ms,
                "snapshot_write_ms": s.snapshot_write_ms, "disk_bytes": s.disk_bytes,
                "disk_full": s.disk_full, "executions": s.executions,
                "stream_records": s.stream_records, "stream_bytes": s.stream_bytes,
            })
        })
        .collect();
    let doc = json!({
        "server_version": info.server_version,
        "shard_count": info.shards.len(),
        "durability": info.durability,
        "partitions": info.partitions,
        "shards": shards,
        "counts_hidden": info.counts_hidden,
        "module_cache": info.module_cache.map(|m| json!({
            "bytes": m.bytes, "modules": m.modules, "budget_bytes": m.budget_bytes,
        })),
    });
    out.print(doc, || {
        let mut text = format!(
            "flo {} · {} shards · durability {} · keys hashed into {} partitions",
            info.server_version,
            info.shards.len(),
            info.durability,
            info.partitions
        );
        if let Some(m) = info.module_cache {
            text.push_str(&format!(
                " · module cache {} of {} ({} modules)",
                human_bytes(m.bytes),
                human_bytes(m.budget_bytes),
                m.modules
            ));
        }
        text.push('\n');
        text.push_str(&format!(
            "{:<6} {:>12} {:>12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>12} {:>9} {:>10} {:>6}  {}",
            "SHARD",
            "LSN",
            "DURABLE",
            "SEGMENTS",
            "KV KEYS",
            "RUNS",
            "WF RUNS",
            "ARCHIVED",
            "INDEX",
            "STREAM RECS",
            "STREAM BYTES",
            "SNAPSHOT",
            "AGE",
            "DISK",
            "EXECS",
            "STATE"
        ));
        for s in &info.shards {
            let age = s
                .snapshot_age_ms
                .map_or("-".to_string(), |ms| format!("{}s", ms / 1000));
            text.push_str(&format!(
                "\n{:<6} {:>12} {:>12} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10} {:>12} {:>9} {:>10} {:>6}  {}",
                s.shard,
                s.lsn,
                s.durable_lsn,
                s.segments,
                s.kv_keys,
                s.runs,
                s.workflow_runs,
                s.archived_runs,
                human_bytes(s.run_index_bytes),
                s.stream_records,
                human_bytes(s.stream_bytes),
                s.snapshot_lsn,
                age,
                human_bytes(s.disk_bytes),
                s.executions,
                match s.disk_full {
                    true => "read-only: disk full",
                    false => "ok",
                }
            ));
        }
        if info.counts_hidden {
            text.push_str(
                "\n(keys, runs, stream records and executions add up every namespace: they \
                 are shown to tokens for every namespace only)",
            );
        }
        text
    });
    Ok(())
}

/// `1.5 MiB`, `640 B`.
fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}
