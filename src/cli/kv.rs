use super::CliError;
use super::args::KvCommand;
use super::output::{Output, entry_json, more_hint, value_text};
use flo::{Client, PutOptions};
use serde_json::json;

pub fn run(client: &mut Client, cmd: &KvCommand, out: &Output) -> Result<(), CliError> {
    match cmd {
        KvCommand::Put {
            key,
            value,
            ttl_ms,
            if_version,
            nx,
            xx,
        } => {
            let opts = PutOptions {
                // `--ttl 0`: no expiry.
                ttl_ms: ttl_ms.filter(|&ms| ms > 0),
                if_version: if *nx { Some(0) } else { *if_version },
                if_exists: *xx,
            };
            let version = client.kv_put(key, value, opts)?;
            out.print(json!({ "key": key, "version": version }), || {
                format!("OK (version {version})")
            });
        }
        KvCommand::Get {
            key,
            wait_ms,
            block_ms,
            after_version,
        } => {
            let found = match (block_ms, after_version) {
                (Some(block_ms), None) => client.kv_get_next(key, *block_ms)?,
                _ => {
                    let wait_ms = wait_ms.or(*block_ms).unwrap_or(0);
                    client.kv_get_wait(key, wait_ms, *after_version)?
                }
            };
            let Some(entry) = found else {
                let waited = wait_ms.or(*block_ms).unwrap_or(0);
                let newer = match (block_ms, after_version) {
                    (_, Some(v)) => Newer::Than(*v),
                    (Some(_), None) => Newer::ThanCurrent,
                    (None, None) => Newer::Any,
                };
                let namespace = client.namespace();
                return Err(CliError::Failed(not_found(key, namespace, waited, newer)));
            };
            out.print(entry_json(&entry), || value_text(&entry.value));
        }
        KvCommand::Delete { key, if_version } => {
            let deleted = client.kv_delete(key, *if_version)?;
            out.print(json!({ "key": key, "deleted": deleted }), || {
                if deleted {
                    "deleted".into()
                } else {
                    format!("key {key:?} did not exist")
                }
            });
        }
        KvCommand::List {
            prefix,
            limit,
            cursor,
        } => {
            let page =
                client.kv_list_page(prefix.as_deref().unwrap_or(""), *limit, cursor.as_deref())?;
            let doc = json!({
                "entries": page.items.iter().map(entry_json).collect::<Vec<_>>(),
                "truncated": page.next_cursor.is_some(),
                "next_cursor": page.next_cursor,
            });
            out.print(doc, || {
                let mut lines: Vec<String> = page
                    .items
                    .iter()
                    .map(|e| format!("{}\t{}", e.key, value_text(&e.value)))
                    .collect();
                lines.extend(more_hint(page.next_cursor.as_deref(), "keys"));
                lines.join("\n")
            });
        }
    }
    Ok(())
}

/// Which versions a read asked for.
enum Newer {
    Any,
    Than(u64),
    ThanCurrent,
}

/// What a read that found nothing (in time) says.
fn not_found(key: &str, namespace: &str, wait_ms: u64, newer: Newer) -> String {
    let waited = if wait_ms > 0 {
        format!(" (timed out after {wait_ms} ms)")
    } else {
        String::new()
    };
    match newer {
        Newer::Than(v) => {
            format!("no version of key {key:?} newer than {v} in namespace {namespace:?}{waited}")
        }
        Newer::ThanCurrent => {
            format!("no new version of key {key:?} was written in namespace {namespace:?}{waited}")
        }
        Newer::Any => format!("key {key:?} not found in namespace {namespace:?}{waited}"),
    }
}
