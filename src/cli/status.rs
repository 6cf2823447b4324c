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
            })
        })
        .collect();
    let doc = json!({
        "server_version": info.server_version,
        "shard_count": info.shards.len(),
        "durability": info.durability,
        "partitions": info.partitions,
        "shards": shards,
    });
    out.print(doc, || {
        let mut text = format!(
            "flo {} · {} shards · durability {} · {} partitions\n",
            info.server_version,
            info.shards.len(),
            info.durability,
            info.partitions
        );
        text.push_str(&format!(
            "{:<6} {:>12} {:>12} {:>9} {:>10} {:>10}",
            "SHARD", "LSN", "DURABLE", "SEGMENTS", "KV KEYS", "RUNS"
        ));
        for s in &info.shards {
            text.push_str(&format!(
                "\n{:<6} {:>12} {:>12} {:>9} {:>10} {:>10}",
                s.shard, s.lsn, s.durable_lsn, s.segments, s.kv_keys, s.runs
            ));
        }
        text
    });
    Ok(())
}
