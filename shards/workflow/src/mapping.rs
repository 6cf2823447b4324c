//! `inputMapping`: a JSON value whose strings starting with `$.` are JSONPath queries (RFC 9535)
//! resolved against the run's context:
//!
//! ```json
//! {"input": ..., "state": {...}, "steps": {"NAME": {"output": ..., "outcome": "..."}}, "flo": {"run_id": "...", "timestamp": 123}}
//! ```
//!
//! A query's first match replaces the string; no match (or a query that does not parse) gives
//! `null`, never the whole input. Every other value passes through unchanged.

use serde_json::Value;
use serde_json_path::JsonPath;

/// Whether a mapping string is a path reference.
pub fn is_mapping_path(s: &str) -> bool {
    s.starts_with("$.")
}

/// `mapping` with every path string replaced by what it selects in `ctx`.
pub fn resolve_mapping(mapping: &Value, ctx: &Value) -> Value {
    match mapping {
        Value::String(s) if is_mapping_path(s) => resolve_path(s, ctx),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| resolve_mapping(v, ctx)).collect())
        }
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), resolve_mapping(v, ctx)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Every path string in `mapping`, in document order (object keys are never paths).
pub fn mapping_paths(mapping: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    collect_paths(mapping, &mut paths);
    paths
}

fn collect_paths(value: &Value, paths: &mut Vec<String>) {
    match value {
        Value::String(s) if is_mapping_path(s) => paths.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_paths(v, paths)),
        Value::Object(fields) => fields.values().for_each(|v| collect_paths(v, paths)),
        _ => {}
    }
}

fn resolve_path(path: &str, ctx: &Value) -> Value {
    parse_json_path(path)
        .ok()
        .and_then(|p| p.query(ctx).first().cloned())
        .unwrap_or(Value::Null)
}

/// `JsonPath::parse`, except for the paths it panics on: serde_json_path 0.7 reads the
/// hex digits of a `\u` escape with a streaming parser, which answers "incomplete" when
/// the path ends inside the escape, and `parse` calls that unreachable (found by fuzzing,
/// fuzz/regressions/yaml). Such a path ends inside an unterminated string literal, so it
/// is invalid anyway: it is refused here before the parser sees it.
pub(crate) fn parse_json_path(path: &str) -> Result<JsonPath, String> {
    if let Some(at) = path.rfind('\\') {
        let escape = &path[at + 1..];
        if escape.starts_with('u') && escape.len() < 5 {
            return Err(format!(
                "the path ends inside the escape `\\{escape}` (a string literal is not closed)"
            ));
        }
    }
    JsonPath::parse(path).map_err(|err| err.to_string())
}

/// Up to `max` leading member names of a JSONPath after its `$` (`.name`, `['name']`,
/// `["name"]`), and the rest of it.
pub(crate) fn leading_names(mut rest: &str, max: usize) -> (Vec<&str>, &str) {
    let mut names = Vec::new();
    while names.len() < max {
        let (name, after) = if let Some(r) = rest.strip_prefix('.') {
            if r.starts_with('.') {
                break; // `..`: descendants
            }
            let end = r.find(['.', '[']).unwrap_or(r.len());
            (&r[..end], &r[end..])
        } else if let Some(r) = rest.strip_prefix("['").or_else(|| rest.strip_prefix("[\"")) {
            let quote = if rest.as_bytes()[1] == b'\'' {
                '\''
            } else {
                '"'
            };
            let Some(end) = r.find(quote) else { break };
            let Some(after) = r[end + 1..].strip_prefix(']') else {
                break;
            };
            if r[..end].contains('\\') {
                break;
            }
            (&r[..end], after)
        } else {
            break;
        };
        names.push(name);
        rest = after;
    }
    (names, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Found by fuzzing: each of these made serde_json_path's `parse` panic.
    #[test]
    fn a_path_ending_inside_a_unicode_escape_is_refused_not_a_panic() {
        for path in [
            r#"$.input["a\u"#,
            r#"$.input["\uD"#,
            r#"$.input["\ud83d\u"#,
            r#"$.input["\uD83D\uD"#,
            r#"$.input['\u"#,
        ] {
            let err = parse_json_path(path).unwrap_err();
            assert!(err.contains("escape"), "{path}: {err}");
            assert_eq!(resolve_path(path, &ctx()), Value::Null);
        }
        assert!(parse_json_path(r#"$.input["\u0041"]"#).is_ok());
        // Every prefix of paths full of escapes: an error or a path, never a panic.
        for path in [
            r#"$.input["a\u0041\uD83D\uDE00\n\"b"]"#,
            r#"$.input['\ud83d\ude00\'\\u']"#,
        ] {
            for end in (0..=path.len()).filter(|&i| path.is_char_boundary(i)) {
                let _ = parse_json_path(&path[..end]);
            }
        }
    }

    fn ctx() -> Value {
        json!({
            "input": {"order_id": "ORD-1", "amount": 99.5, "customer": {"email": "a@b.c"},
                      "items": [{"sku": "x"}, {"sku": "y"}], "odd-key": 1},
            "steps": {
                "_start": {"output": {"ok": true}, "outcome": "success"},
                "enrich": {"output": {"email": "e@x.y", "tags": ["vip"]}, "outcome": "success"},
                "check-status": {"output": "done", "outcome": "pending"}
            },
            "flo": {"run_id": "wfrun-7", "timestamp": 1_700_000_000_000u64}
        })
    }

    fn resolve(mapping: Value) -> Value {
        resolve_mapping(&mapping, &ctx())
    }

    #[test]
    fn input_fields_resolve_including_nested_and_indexed_ones() {
        assert_eq!(
            resolve(json!({
                "id": "$.input.order_id",
                "amount": "$.input.amount",
                "email": "$.input.customer.email",
                "sku": "$.input.items[1].sku",
                "odd": "$.input['odd-key']",
                "all": "$.input.customer"
            })),
            json!({"id": "ORD-1", "amount": 99.5, "email": "a@b.c", "sku": "y", "odd": 1,
                   "all": {"email": "a@b.c"}})
        );
    }

    #[test]
    fn step_outputs_and_outcomes_resolve() {
        assert_eq!(
            resolve(json!({
                "email": "$.steps.enrich.output.email",
                "whole": "$.steps._start.output",
                "outcome": "$.steps.enrich.outcome",
                "hyphen": "$.steps['check-status'].outcome"
            })),
            json!({"email": "e@x.y", "whole": {"ok": true}, "outcome": "success",
                   "hyphen": "pending"})
        );
    }

    #[test]
    fn run_id_and_timestamp_resolve() {
        assert_eq!(
            resolve(json!({"run": "$.flo.run_id", "at": "$.flo.timestamp"})),
            json!({"run": "wfrun-7", "at": 1_700_000_000_000u64})
        );
    }

    #[test]
    fn a_path_that_matches_nothing_gives_null_never_the_input() {
        assert_eq!(
            resolve(
                json!({"a": "$.input.missing", "b": "$.steps.nope.output", "c": "$.input..nothing"})
            ),
            json!({"a": null, "b": null, "c": null})
        );
        assert_eq!(resolve(json!("$.input.missing")), Value::Null);
    }

    #[test]
    fn an_invalid_path_gives_null() {
        assert_eq!(
            resolve(json!({"a": "$.input[", "b": "$.steps.check-status"})),
            json!({"a": null, "b": null})
        );
    }

    #[test]
    fn a_query_with_many_matches_gives_the_first() {
        assert_eq!(resolve(json!("$.input.items[*].sku")), json!("x"));
    }

    #[test]
    fn non_path_values_pass_through_unchanged() {
        let m = json!({"template": "payment_success", "price": "$5", "dollar": "$", "n": 3,
                       "f": 1.5, "t": true, "z": null, "$.input": "key is not a path"});
        let mut want = m.clone();
        want["$.input"] = json!("key is not a path");
        assert_eq!(resolve(m), want);
    }

    #[test]
    fn arrays_and_nested_objects_are_walked() {
        assert_eq!(
            resolve(
                json!(["$.input.order_id", {"deep": ["$.steps.enrich.output.tags[0]", 1]}, "x"])
            ),
            json!(["ORD-1", {"deep": ["vip", 1]}, "x"])
        );
    }

    #[test]
    fn a_scalar_mapping_resolves_to_the_value_itself() {
        assert_eq!(resolve(json!("$.input.amount")), json!(99.5));
        assert_eq!(resolve(json!(7)), json!(7));
    }

    #[test]
    fn mapping_paths_lists_path_strings_only() {
        let m = json!({"a": "$.input.x", "b": ["$.flo.run_id", "plain", {"c": "$.steps.s.outcome"}],
                       "$.key": 1});
        assert_eq!(
            mapping_paths(&m),
            vec!["$.input.x", "$.flo.run_id", "$.steps.s.outcome"]
        );
    }
}
