//! `flo action runs --query`: the filter a run list applies to action runs, in the query
//! language of `flo workflow list-runs --query` (`flo_workflow::query`).
//!
//! The run index decides the terms it holds without reading a run: the action (its name
//! tag), the status and the dead-letter flag, when the query's top-level `AND` names them.
//! Every other field (labels, times, attempts, ids) is checked on the run itself: in memory
//! for runs in flight, on the archived document read back for finished ones (at most
//! `DOC_READS_MAX` of them per shard and page).

use flo_protocol::{ErrorValue, RunStatus};
use flo_workflow::query::{CmpOp, Expr, FieldValue, Literal, parse_query};

/// Archived documents a page of a query reads at most per shard, beyond the page's limit,
/// when the index cannot decide the query: a page may be short, its cursor goes on.
pub const DOC_READS_MAX: usize = 256;

const FIELDS: [&str; 10] = [
    "status",
    "action",
    "run_id",
    "created_at",
    "updated_at",
    "attempt",
    "priority",
    "dead_letter",
    "workflow_run_id",
    "outcome",
];

const LABELS: &str = "labels.";

/// A parsed action-run query.
#[derive(Debug, Clone)]
pub struct RunQuery {
    expr: Expr,
    /// The actions a matching run must be of (top-level `action = …` or `IN`), if named.
    pub actions: Option<Vec<String>>,
    /// The statuses a matching run must have, if named.
    pub statuses: Option<Vec<RunStatus>>,
    /// A top-level `dead_letter = true`.
    pub dead_letter: bool,
    /// Whether the terms above decide the whole query.
    pub decided_by_index: bool,
    /// Whether it names a label (the run's labels are parsed then).
    reads_labels: bool,
}

/// An action run's fields, as a query reads them.
pub struct RunFields<'a> {
    pub run_id: &'a str,
    pub action: &'a str,
    pub status: RunStatus,
    pub created_at_ms: u64,
    pub updated_at_ms: u64,
    pub attempt: u32,
    pub priority: u8,
    pub dead_lettered: bool,
    pub workflow_run_id: Option<&'a str>,
    pub outcome: Option<&'a str>,
    /// The run's labels, a JSON object.
    pub labels: Option<&'a str>,
}

impl RunQuery {
    pub fn parse(text: &str) -> Result<RunQuery, ErrorValue> {
        let expr = parse_query(text).map_err(|e| ErrorValue::bad_request(e.to_string()))?;
        for field in expr.fields() {
            let label = field.strip_prefix(LABELS);
            if label.is_some_and(str::is_empty) || (label.is_none() && !FIELDS.contains(&field)) {
                return Err(ErrorValue::bad_request(format!(
                    "unknown field `{field}`: an action-run query names {} or labels.NAME",
                    FIELDS.join(", ")
                )));
            }
        }
        let (mut actions, mut statuses, mut dead_letter) = (None, None, false);
        let mut decided = true;
        for term in expr.conjuncts() {
            let (field, values): (&str, Vec<&Literal>) = match term {
                Expr::Cmp {
                    field,
                    op: CmpOp::Eq,
                    value,
                } => (field, vec![value]),
                Expr::In { field, values } => (field, values.iter().collect()),
                _ => {
                    decided = false;
                    continue;
                }
            };
            let texts = || -> Option<Vec<&str>> {
                values
                    .iter()
                    .map(|v| match v {
                        Literal::Str(s) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect()
            };
            match field {
                "action" => match texts() {
                    Some(names) => narrow(&mut actions, names.into_iter().map(String::from)),
                    None => decided = false,
                },
                "status" => {
                    let parsed = texts().map(|t| {
                        t.into_iter()
                            .map(|s| {
                                RunStatus::parse(s).ok_or_else(|| {
                                    ErrorValue::bad_request(format!(
                                        "unknown status {s:?}: use pending, running, completed, \
                                         failed, cancelled or timed_out"
                                    ))
                                })
                            })
                            .collect::<Result<Vec<_>, _>>()
                    });
                    match parsed {
                        Some(list) => narrow(&mut statuses, list?),
                        None => decided = false,
                    }
                }
                "dead_letter" if values == [&Literal::Bool(true)] => dead_letter = true,
                _ => decided = false,
            }
        }
        let reads_labels = expr.fields().iter().any(|f| f.starts_with(LABELS));
        Ok(RunQuery {
            reads_labels,
            expr,
            actions,
            statuses,
            dead_letter,
            decided_by_index: decided,
        })
    }

    pub fn matches(&self, run: &RunFields<'_>) -> bool {
        let labels: Option<serde_json::Map<String, serde_json::Value>> = run
            .labels
            .filter(|_| self.reads_labels)
            .and_then(|l| serde_json::from_str(l).ok());
        let get = |field: &str| -> Option<FieldValue<'_>> {
            Some(match field {
                "status" => FieldValue::Str(run.status.as_str()),
                "action" => FieldValue::Str(run.action),
                "run_id" => FieldValue::Str(run.run_id),
                "created_at" => FieldValue::Time(run.created_at_ms),
                "updated_at" => FieldValue::Time(run.updated_at_ms),
                "attempt" => FieldValue::Num(run.attempt as f64),
                "priority" => FieldValue::Num(run.priority as f64),
                "dead_letter" => FieldValue::Bool(run.dead_lettered),
                "workflow_run_id" => FieldValue::Str(run.workflow_run_id?),
                "outcome" => FieldValue::Str(run.outcome?),
                other => match labels.as_ref()?.get(other.strip_prefix(LABELS)?)? {
                    serde_json::Value::String(s) => FieldValue::Str(s),
                    serde_json::Value::Number(n) => FieldValue::Num(n.as_f64()?),
                    serde_json::Value::Bool(b) => FieldValue::Bool(*b),
                    _ => return None,
                },
            })
        };
        self.expr.matches(&get)
    }
}

/// Keeps in `set` only what `values` also holds (the first term sets it).
fn narrow<T: PartialEq>(set: &mut Option<Vec<T>>, values: impl IntoIterator<Item = T>) {
    let values: Vec<T> = values.into_iter().collect();
    *set = Some(match set.take() {
        None => values,
        Some(old) => old.into_iter().filter(|v| values.contains(v)).collect(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<'a>(labels: Option<&'a str>) -> RunFields<'a> {
        RunFields {
            run_id: "charge-7",
            action: "charge",
            status: RunStatus::Failed,
            created_at_ms: 1_793_577_600_000,
            updated_at_ms: 1_793_577_601_000,
            attempt: 3,
            priority: 5,
            dead_lettered: true,
            workflow_run_id: None,
            outcome: None,
            labels,
        }
    }

    fn yes(q: &str) -> bool {
        RunQuery::parse(q)
            .unwrap()
            .matches(&run(Some(r#"{"region":"eu","gpu":true,"tier":2}"#)))
    }

    #[test]
    fn fields_labels_and_times_filter_a_run() {
        assert!(yes(r#"action = "charge" AND status = "failed""#));
        assert!(yes(
            r#"labels.region = "eu" AND labels.gpu = true AND labels.tier >= 2"#
        ));
        assert!(yes(
            r#"attempt > 2 AND dead_letter = true AND priority IN (4, 5)"#
        ));
        assert!(yes(
            r#"created_at >= "2026-11-02" AND updated_at < "2026-11-03""#
        ));
        assert!(!yes(r#"labels.region = "us" OR labels.missing = "x""#));
        assert!(!yes(r#"workflow_run_id = "wfrun-1""#));
        assert!(yes(r#"NOT run_id = "charge-8""#));
        // Without labels a label term matches nothing.
        let q = RunQuery::parse(r#"labels.region != "us""#).unwrap();
        assert!(!q.matches(&run(None)));
    }

    #[test]
    fn the_index_decides_action_status_and_dead_letter_terms() {
        let q = RunQuery::parse(
            r#"action IN ("charge", "refund") AND status = "failed" AND action = "charge""#,
        )
        .unwrap();
        assert_eq!(q.actions, Some(vec!["charge".to_string()]));
        assert_eq!(q.statuses, Some(vec![RunStatus::Failed]));
        assert!(q.decided_by_index);
        let q = RunQuery::parse(r#"dead_letter = true AND labels.region = "eu""#).unwrap();
        assert!(q.dead_letter && !q.decided_by_index && q.actions.is_none());
        let q = RunQuery::parse(r#"status = "failed" OR action = "charge""#).unwrap();
        assert!(q.statuses.is_none() && !q.decided_by_index);
    }

    #[test]
    fn unknown_fields_and_statuses_are_refused_by_name() {
        let e = RunQuery::parse(r#"customer = "c-1""#).unwrap_err();
        assert!(
            e.message.contains("unknown field `customer`"),
            "{}",
            e.message
        );
        let e = RunQuery::parse(r#"status = "done""#).unwrap_err();
        assert!(
            e.message.contains("unknown status \"done\""),
            "{}",
            e.message
        );
        assert!(RunQuery::parse(r#"labels. = "x""#).is_err());
        assert!(RunQuery::parse("status =").is_err());
    }
}
