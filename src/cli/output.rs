use flo::protocol::{KvEntry, StreamRecord};
use serde_json::{Value, json};
use std::io::{ErrorKind, Write};

pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `doc` in JSON mode, otherwise the human text.
    pub fn print(&self, doc: Value, human: impl FnOnce() -> String) {
        if self.json {
            line(&doc.to_string());
        } else {
            let text = human();
            if !text.is_empty() {
                line(&text);
            }
        }
    }
}

/// Writes `text` and a newline on stdout. A reader that went away (`flo ... | head -1`)
/// ends the process quietly: what it did not read, nobody wanted.
pub fn line(text: &str) {
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{text}").and_then(|()| out.flush());
    if let Err(e) = written
        && e.kind() == ErrorKind::BrokenPipe
    {
        std::process::exit(super::EXIT_OK);
    }
}

/// Writes `bytes` on stdout as they are (a reader gone away ends the process, as `line`).
pub fn bytes(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(bytes).and_then(|()| out.flush());
    if let Err(e) = written
        && e.kind() == ErrorKind::BrokenPipe
    {
        std::process::exit(super::EXIT_OK);
    }
}

/// Writes `text` and a newline on stderr; a closed stderr is not worth a panic.
pub fn error_line(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// A value as text: UTF-8 as is, other bytes as hex.
pub fn value_text(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(s) => s.to_string(),
        Err(_) => value.iter().map(|b| format!("{b:02x}")).collect(),
    }
}

/// Bytes as a JSON value: the JSON they hold, else their text (see `value_text`).
pub fn bytes_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|_| json!(value_text(bytes)))
}

pub fn entry_json(e: &KvEntry) -> Value {
    let mut doc = json!({
        "key": e.key,
        "version": e.version,
        "expires_at_ms": e.expires_at_ms,
    });
    match std::str::from_utf8(&e.value) {
        Ok(s) => doc["value"] = json!(s),
        Err(_) => doc["value_hex"] = json!(value_text(&e.value)),
    }
    doc
}

/// Latest time shown as a date (the end of year 9999); later ones are "never".
const TIME_TEXT_MS_MAX: u64 = 253_402_300_799_999;

/// Milliseconds since the epoch as an RFC 3339 UTC time; "never" past year 9999 (a delay
/// beyond the timer horizon).
pub fn time_text(ms: u64) -> String {
    if ms > TIME_TEXT_MS_MAX {
        return "never".to_string();
    }
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    humantime::format_rfc3339_millis(t).to_string()
}

/// The line a page ends with when more may follow: how to ask for the next.
pub fn more_hint(next_cursor: Option<&str>, what: &str) -> Option<String> {
    next_cursor.map(|c| format!("(more {what} may follow: --cursor {c})"))
}

/// Records one per line (one JSON document per line with --json).
pub fn print_records(records: &[StreamRecord], out: &Output) {
    for r in records {
        out.print(record_json(r), || record_text(r));
    }
}

pub fn record_text(r: &StreamRecord) -> String {
    format!(
        "{}\t{}\t{}",
        r.id,
        r.key.as_deref().unwrap_or("-"),
        value_text(&r.payload)
    )
}

pub fn record_json(r: &StreamRecord) -> Value {
    let mut doc = json!({
        "id": r.id.to_string(),
        "partition": r.partition,
        "key": r.key,
        "headers": r.headers,
    });
    match std::str::from_utf8(&r.payload) {
        Ok(s) => doc["payload"] = json!(s),
        Err(_) => doc["payload_hex"] = json!(value_text(&r.payload)),
    }
    doc
}
