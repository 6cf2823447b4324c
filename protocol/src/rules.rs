//! The rules on names and small values a request carries, one home each: the server checks
//! them on every request, the SDK before it sends, the workflow language on the names a
//! definition gives. Each says what was wrong as an `Invalid` (a bad request on the wire).

use crate::error::ErrorValue;
use crate::message::{
    ACTION_NAME_BYTES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, NAMESPACE_BYTES_MAX, WORKER_ID_BYTES_MAX,
};
use crate::streams::{
    DEAD_LETTER_SUFFIX, STREAM_HEADERS_BYTES_MAX, STREAM_HEADERS_MAX, STREAM_KEY_BYTES_MAX,
    STREAM_NAME_BYTES_MAX, STREAM_PAYLOAD_BYTES_MAX, StreamRecordIn,
};

/// Largest labels object (its JSON text), on a task or a worker.
pub const LABELS_BYTES_MAX: usize = 4096;
/// Longest delay accepted anywhere a client or a definition gives one (a signed 64-bit
/// count of milliseconds, what other clients' languages send).
pub const DELAY_MS_ACCEPTED_MAX: u64 = i64::MAX as u64;

/// A value that breaks its rule: the message says which rule and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<Invalid> for ErrorValue {
    fn from(e: Invalid) -> Self {
        ErrorValue::bad_request(e.0)
    }
}

/// Namespaces: 1 to `NAMESPACE_BYTES_MAX` bytes, no control characters.
pub fn check_namespace(namespace: &str) -> Result<(), Invalid> {
    if namespace.is_empty() || namespace.len() > NAMESPACE_BYTES_MAX {
        return Err(Invalid(format!(
            "namespace must be 1 to {NAMESPACE_BYTES_MAX} bytes, got {}",
            namespace.len()
        )));
    }
    if namespace.chars().any(char::is_control) {
        return Err(Invalid(format!(
            "namespace {namespace:?} is invalid: it may not hold control characters"
        )));
    }
    Ok(())
}

/// Action names: 1 to `ACTION_NAME_BYTES_MAX` bytes of letters, digits, `-`, `_`, `.`.
pub fn check_action_name(name: &str) -> Result<(), Invalid> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.len() > ACTION_NAME_BYTES_MAX || !ok_chars {
        return Err(Invalid(format!(
            "action name {name:?} is invalid: use 1 to {ACTION_NAME_BYTES_MAX} letters, \
             digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

/// Worker ids: 1 to `WORKER_ID_BYTES_MAX` bytes, no control characters.
pub fn check_worker_id(worker_id: &str) -> Result<(), Invalid> {
    if worker_id.is_empty() || worker_id.len() > WORKER_ID_BYTES_MAX {
        return Err(Invalid(format!(
            "worker id must be 1 to {WORKER_ID_BYTES_MAX} bytes, got {}",
            worker_id.len()
        )));
    }
    if worker_id.chars().any(char::is_control) {
        return Err(Invalid(format!(
            "worker id {worker_id:?} is invalid: it may not hold control characters"
        )));
    }
    Ok(())
}

/// Idempotency keys: 1 to `IDEMPOTENCY_KEY_BYTES_MAX` bytes.
pub fn check_idempotency_key(key: &str) -> Result<(), Invalid> {
    if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX {
        return Err(Invalid(format!(
            "idempotency key must be 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes"
        )));
    }
    Ok(())
}

/// Labels (a task's required labels, a worker's own): a flat JSON object of at most
/// `LABELS_BYTES_MAX` bytes whose values are strings, numbers or booleans.
pub fn check_labels(labels: &str) -> Result<(), Invalid> {
    if labels.len() > LABELS_BYTES_MAX {
        return Err(Invalid(format!(
            "labels must be at most {LABELS_BYTES_MAX} bytes"
        )));
    }
    let value: serde_json::Value = serde_json::from_str(labels)
        .map_err(|e| Invalid(format!("labels must be a JSON object: {e}")))?;
    let Some(map) = value.as_object() else {
        return Err(Invalid(
            "labels must be a JSON object like {\"gpu\":true}".to_string(),
        ));
    };
    if let Some((k, _)) = map
        .iter()
        .find(|(_, v)| !(v.is_string() || v.is_number() || v.is_boolean()))
    {
        return Err(Invalid(format!(
            "label {k:?} must be a string, number or boolean (labels are flat)"
        )));
    }
    Ok(())
}

/// Stream names: 1 to `STREAM_NAME_BYTES_MAX` bytes of letters, digits, `-`, `_`, `.`.
pub fn check_stream_name(name: &str) -> Result<(), Invalid> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.len() > STREAM_NAME_BYTES_MAX || !ok_chars {
        return Err(Invalid(format!(
            "stream name {name:?} is invalid: use 1 to {STREAM_NAME_BYTES_MAX} letters, \
             digits, '-', '_' or '.'"
        )));
    }
    Ok(())
}

/// A stream a request names: a stream's name, or its dead-letter stream's (`NAME:dlq`).
pub fn check_stream_ref(name: &str) -> Result<(), Invalid> {
    check_stream_name(name.strip_suffix(DEAD_LETTER_SUFFIX).unwrap_or(name))
}

/// Consumer group names: the rule of stream names.
pub fn check_group_name(name: &str) -> Result<(), Invalid> {
    check_stream_name(name).map_err(|_| {
        Invalid(format!(
            "group name {name:?} is invalid: use 1 to {STREAM_NAME_BYTES_MAX} letters, \
             digits, '-', '_' or '.'"
        ))
    })
}

/// Consumer names: 1 to `WORKER_ID_BYTES_MAX` bytes (a worker's id is the default).
pub fn check_consumer_name(name: &str) -> Result<(), Invalid> {
    if name.is_empty() || name.len() > WORKER_ID_BYTES_MAX {
        return Err(Invalid(format!(
            "consumer name must be 1 to {WORKER_ID_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

/// A record to append: its payload, key and headers within their bounds.
pub fn check_stream_record(record: &StreamRecordIn) -> Result<(), Invalid> {
    if record.payload.len() > STREAM_PAYLOAD_BYTES_MAX {
        return Err(Invalid(format!(
            "a record's payload is {} bytes; the most is {STREAM_PAYLOAD_BYTES_MAX}",
            record.payload.len()
        )));
    }
    if let Some(key) = &record.key
        && (key.is_empty() || key.len() > STREAM_KEY_BYTES_MAX)
    {
        return Err(Invalid(format!(
            "a record's key must be 1 to {STREAM_KEY_BYTES_MAX} bytes, got {}",
            key.len()
        )));
    }
    let header_bytes: usize = record.headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if record.headers.len() > STREAM_HEADERS_MAX || header_bytes > STREAM_HEADERS_BYTES_MAX {
        return Err(Invalid(format!(
            "a record has {} headers of {header_bytes} bytes; the most is {STREAM_HEADERS_MAX} \
             headers of {STREAM_HEADERS_BYTES_MAX} bytes",
            record.headers.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_refuse_control_characters() {
        assert!(check_namespace("team-a/prod é").is_ok());
        assert!(check_worker_id("worker 1").is_ok());
        for bad in ["a\nfatal: shard 0 panicked", "a\x1b[2J", "a\u{7f}", "\t"] {
            assert!(check_namespace(bad).is_err(), "{bad:?}");
            assert!(check_worker_id(bad).is_err(), "{bad:?}");
            assert!(check_action_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels_are_a_flat_object_of_strings_numbers_and_booleans() {
        assert!(check_labels(r#"{"gpu":true,"vram_gb":24,"region":"us"}"#).is_ok());
        assert!(check_labels("{}").is_ok());
        for bad in [
            "[1]",
            r#"{"a":{"b":1}}"#,
            r#"{"a":[1]}"#,
            r#"{"a":null}"#,
            "nope",
        ] {
            assert!(check_labels(bad).is_err(), "{bad}");
        }
        let big = format!(r#"{{"a":"{}"}}"#, "x".repeat(LABELS_BYTES_MAX));
        assert!(check_labels(&big).unwrap_err().0.contains("at most"));
    }

    #[test]
    fn names_have_bounds_and_a_character_set() {
        assert!(check_action_name("send-email.v2_x").is_ok());
        assert!(check_action_name("").is_err());
        assert!(check_action_name("a b").is_err());
        assert!(check_action_name(&"a".repeat(ACTION_NAME_BYTES_MAX + 1)).is_err());
        assert!(check_namespace("default").is_ok());
        assert!(check_namespace("").is_err());
        assert!(check_worker_id(&"w".repeat(WORKER_ID_BYTES_MAX)).is_ok());
        assert!(check_worker_id(&"w".repeat(WORKER_ID_BYTES_MAX + 1)).is_err());
        assert!(check_idempotency_key("k").is_ok());
        assert!(check_idempotency_key("").is_err());
        let e: ErrorValue = check_namespace("").unwrap_err().into();
        assert_eq!(e.code, crate::ErrorCode::BadRequest);
    }
}

/// A shared scope of workflow run state (flow8's KV scoping): `flow:NAME` fields are shared
/// by every run of a definition, `flow_group:NAME` fields by every run of a `--group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedScope {
    Flow,
    Group,
}

/// Where a shared scope's fields live in the KV store (in the runs' namespace): the prefix
/// of `owner`'s (the workflow's, or the group's) fields; a field is the prefix and its name.
pub fn shared_state_prefix(scope: SharedScope, owner: &str) -> String {
    match scope {
        SharedScope::Flow => format!("flo.flow/{owner}/"),
        SharedScope::Group => format!("flo.group/{owner}/"),
    }
}
