//! Records and bytes in a stopped server's logs, by record type: what a workload costs in
//! log records. Usage: `cargo run --release -p flo-fuzz --example log_census -- DATA_DIR`
//! (every `shard-*` directory in it is read as recovery reads it; header bytes included).
use flo_engine::testing::record::Record;
use std::collections::BTreeMap;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: log_census DATA_DIR");
        std::process::exit(2);
    };
    let mut by_type: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let shards = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    for shard in shards {
        let path = shard.expect("a directory entry").path();
        if !path.is_dir() {
            continue;
        }
        let census = flo_ual::recover(&path, |_lsn, _type, payload| {
            let record = Record::decode(payload)?;
            let text = format!("{record:?}");
            let name = text
                .split([' ', '{', '('])
                .next()
                .unwrap_or("?")
                .to_string();
            let entry = by_type.entry(name).or_default();
            entry.0 += 1;
            entry.1 += (payload.len() + flo_ual::RECORD_HEADER_BYTES) as u64;
            Ok::<(), flo_engine::DecodeError>(())
        });
        if let Err(e) = census {
            eprintln!("{}: {e}", path.display());
        }
    }
    let (mut records, mut bytes) = (0, 0);
    println!(
        "{:24} {:>10} {:>12} {:>8}",
        "record", "count", "bytes", "each"
    );
    for (name, (count, size)) in &by_type {
        let each = *size as f64 / *count as f64;
        println!("{name:24} {count:>10} {size:>12} {each:>8.1}");
        records += count;
        bytes += size;
    }
    println!("{:24} {records:>10} {bytes:>12}", "total");
}
