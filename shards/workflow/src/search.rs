//! Search attributes: typed values a run carries for queries, each read from the run's
//! input or a step's output (`searchAttributes:` in a definition).

use crate::mapping::parse_json_path;
use serde_json::Value;

/// Most search attributes one definition declares.
pub const SEARCH_ATTRIBUTES_MAX: usize = 32;
/// Longest attribute name.
pub const SEARCH_ATTRIBUTE_NAME_BYTES_MAX: usize = 64;
/// Longest string (or keyword) value kept; a longer one is cut at a character boundary.
pub const SEARCH_VALUE_BYTES_MAX: usize = 256;
/// Most keywords a `keyword_list` value keeps.
pub const SEARCH_KEYWORDS_MAX: usize = 32;
/// Fields every run has, which attributes may not be named after.
pub const BUILTIN_FIELDS: [&str; 7] = [
    "status",
    "workflow",
    "run_id",
    "started_at",
    "updated_at",
    "namespace",
    "version",
];

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrKind {
    String,
    Number,
    /// Milliseconds since the epoch (from a number — seconds below 10^11, else
    /// milliseconds — or an RFC 3339 text).
    Timestamp,
    Bool,
    /// A list of strings (a single string is a list of one).
    KeywordList,
}

impl AttrKind {
    pub fn parse(s: &str) -> Option<AttrKind> {
        Some(match s {
            "string" => AttrKind::String,
            "number" => AttrKind::Number,
            "timestamp" => AttrKind::Timestamp,
            "bool" => AttrKind::Bool,
            "keyword_list" | "keyword list" | "keywords" => AttrKind::KeywordList,
            _ => return None,
        })
    }
}

/// A declared attribute.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SearchAttribute {
    pub name: String,
    pub kind: AttrKind,
    /// `from` as written.
    pub from: String,
    /// The step whose output it reads (None: the input, or the state when `state`).
    pub step: Option<String>,
    /// The JSONPath applied to that input or output (`$` for the whole of it).
    pub path: String,
    /// Reads the run's state (`from: state.FIELD`), again after each step and state
    /// update (absent from definitions stored before).
    #[serde(default)]
    pub state: bool,
}

/// What an attribute reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttrSource {
    Input,
    Step(String),
    State,
}

/// A run's attribute value.
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq)]
pub enum AttrValue {
    Str(String),
    Num(f64),
    Time(u64),
    Bool(bool),
    Keywords(Vec<String>),
}

impl AttrValue {
    pub fn to_json(&self) -> Value {
        match self {
            AttrValue::Str(s) => Value::String(s.clone()),
            AttrValue::Num(n) => {
                serde_json::Number::from_f64(*n).map_or(Value::Null, Value::Number)
            }
            AttrValue::Time(t) => Value::from(*t),
            AttrValue::Bool(b) => Value::Bool(*b),
            AttrValue::Keywords(k) => Value::from(k.clone()),
        }
    }
}

/// `from` (`input.customer_id`, `$.input.amount`, `$.steps.NAME.output.total`,
/// `state.stage`) as (what it reads, the path on it). Err: not one of those forms.
pub fn parse_from(from: &str) -> Result<(AttrSource, String), String> {
    let full = if from.starts_with("$.") || from.starts_with("$[") {
        from.to_string()
    } else {
        format!("$.{from}")
    };
    let bad = || {
        format!(
            "`from: {from}` is not a path into the input (`input.FIELD`, `$.input.FIELD`), a \
             step's output (`$.steps.NAME.output.FIELD`) or the run's state (`state.FIELD`)"
        )
    };
    let (names, _) = crate::mapping::leading_names(&full[1..], 3);
    let (source, prefix_names) = match names[..] {
        ["input", ..] => (AttrSource::Input, 1),
        ["state", ..] => (AttrSource::State, 1),
        ["steps", step, "output", ..] => (AttrSource::Step(step.to_string()), 3),
        _ => return Err(bad()),
    };
    // What follows the prefix, as a path of its own.
    let (_, rest) = crate::mapping::leading_names(&full[1..], prefix_names);
    let path = format!("${rest}");
    parse_json_path(&path).map_err(|e| format!("`from: {from}` is not valid JSONPath: {e}"))?;
    Ok((source, path))
}

/// The attribute's value in `doc` (the input, or the step's output); None when the path
/// selects nothing or a value that does not convert to the attribute's type.
pub fn evaluate(attr: &SearchAttribute, doc: &Value) -> Option<AttrValue> {
    let path = parse_json_path(&attr.path).ok()?;
    let nodes = path.query(doc);
    convert(attr.kind, nodes.first()?)
}

fn cut(mut s: String) -> String {
    if s.len() > SEARCH_VALUE_BYTES_MAX {
        let mut end = SEARCH_VALUE_BYTES_MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

fn convert(kind: AttrKind, v: &Value) -> Option<AttrValue> {
    Some(match (kind, v) {
        (AttrKind::String, Value::String(s)) => AttrValue::Str(cut(s.clone())),
        (AttrKind::String, Value::Number(n)) => AttrValue::Str(n.to_string()),
        (AttrKind::String, Value::Bool(b)) => AttrValue::Str(b.to_string()),
        (AttrKind::Number, Value::Number(n)) => AttrValue::Num(n.as_f64()?),
        (AttrKind::Number, Value::String(s)) => AttrValue::Num(s.trim().parse().ok()?),
        (AttrKind::Timestamp, Value::Number(n)) => {
            let n = n.as_f64()?;
            if !(0.0..1e16).contains(&n) {
                return None;
            }
            AttrValue::Time(if n < 1e11 {
                (n * 1000.0) as u64
            } else {
                n as u64
            })
        }
        (AttrKind::Timestamp, Value::String(s)) => AttrValue::Time(parse_time(s)?),
        (AttrKind::Bool, Value::Bool(b)) => AttrValue::Bool(*b),
        (AttrKind::Bool, Value::String(s)) => AttrValue::Bool(s.parse().ok()?),
        (AttrKind::KeywordList, Value::String(s)) => AttrValue::Keywords(vec![cut(s.clone())]),
        (AttrKind::KeywordList, Value::Array(items)) => AttrValue::Keywords(
            items
                .iter()
                .filter_map(|i| match i {
                    Value::String(s) => Some(cut(s.clone())),
                    Value::Number(n) => Some(n.to_string()),
                    _ => None,
                })
                .take(SEARCH_KEYWORDS_MAX)
                .collect(),
        ),
        _ => return None,
    })
}

/// An RFC 3339 time (`2026-11-01T00:00:00Z`) or a date (`2026-11-01`, midnight UTC) as
/// milliseconds since the epoch.
pub fn parse_time(s: &str) -> Option<u64> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return u64::try_from(t.timestamp_millis()).ok();
    }
    let d = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()?;
    let t = d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
    u64::try_from(t).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attr(kind: AttrKind, from: &str) -> SearchAttribute {
        let (source, path) = parse_from(from).unwrap();
        SearchAttribute {
            name: "a".into(),
            kind,
            from: from.into(),
            step: match &source {
                AttrSource::Step(s) => Some(s.clone()),
                _ => None,
            },
            path,
            state: source == AttrSource::State,
        }
    }

    #[test]
    fn from_reads_the_input_or_a_steps_output() {
        assert_eq!(
            parse_from("input.customer_id").unwrap(),
            (AttrSource::Input, "$.customer_id".into())
        );
        assert_eq!(
            parse_from("$.input").unwrap(),
            (AttrSource::Input, "$".into())
        );
        assert_eq!(
            parse_from("$.steps.charge.output.total").unwrap(),
            (AttrSource::Step("charge".into()), "$.total".into())
        );
        assert_eq!(
            parse_from("$.steps['check-it'].output.items[0]").unwrap(),
            (AttrSource::Step("check-it".into()), "$.items[0]".into())
        );
        assert_eq!(
            parse_from("state.stage").unwrap(),
            (AttrSource::State, "$.stage".into())
        );
        assert!(parse_from("$.flo.run_id").is_err());
        assert!(parse_from("steps.x.outcome").is_err());
    }

    #[test]
    fn values_convert_to_their_type_or_are_absent() {
        let input = json!({"c": "c-1", "amount": 120.5, "n": "7", "t": "2026-11-01",
                           "secs": 1_700_000_000, "ok": true, "tags": ["a", "b", 3]});
        let v = |kind, from| evaluate(&attr(kind, from), &input);
        assert_eq!(
            v(AttrKind::String, "input.c"),
            Some(AttrValue::Str("c-1".into()))
        );
        assert_eq!(
            v(AttrKind::Number, "input.amount"),
            Some(AttrValue::Num(120.5))
        );
        assert_eq!(v(AttrKind::Number, "input.n"), Some(AttrValue::Num(7.0)));
        assert_eq!(v(AttrKind::Number, "input.c"), None);
        assert_eq!(
            v(AttrKind::Timestamp, "input.t"),
            Some(AttrValue::Time(1_793_491_200_000))
        );
        assert_eq!(
            v(AttrKind::Timestamp, "input.secs"),
            Some(AttrValue::Time(1_700_000_000_000))
        );
        assert_eq!(v(AttrKind::Bool, "input.ok"), Some(AttrValue::Bool(true)));
        assert_eq!(
            v(AttrKind::KeywordList, "input.tags"),
            Some(AttrValue::Keywords(vec![
                "a".into(),
                "b".into(),
                "3".into()
            ]))
        );
        assert_eq!(v(AttrKind::String, "input.missing"), None);
    }
}
