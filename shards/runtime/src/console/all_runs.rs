//! The console's "all runs": the recent runs of every action and workflow at once, newest
//! first, a page at a time, without choosing one first.
//!
//! No protocol operation lists runs across workflow names, so a page asks each source for
//! its next runs and merges them by creation time, the way the engine merges its shards'
//! parts of one list (`engine/fanout.rs`): the action runs of every action (one `RunList`
//! whose query names every status, which the run index decides without reading a run) and
//! the runs of each workflow (`WorkflowListRuns`, the first `WORKFLOWS_MAX` definitions by
//! name; the page says how many were left out). The cursor holds, per source, where its
//! list goes on and how many runs of that next page were shown already.
//!
//! Cost: one call per source per page (the workflows listed once, on the first page), each
//! a list of at most `skip + limit` runs; a source whose shown runs pile up (`skip` reaching
//! the page's size) is moved past them with one more call first.

use super::caller::{Caller, Console};
use super::errors::ApiError;
use super::params::Params;
use super::views;
use flo_protocol::{Op, Reply, RunStatus, WorkflowRunStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Workflows whose runs the view merges, at most (each costs a call per page).
pub(crate) const WORKFLOWS_MAX: usize = 20;
/// The cursor's bytes, at most (it names up to `WORKFLOWS_MAX` workflows and their lists'
/// cursors).
const CURSOR_BYTES_MAX: usize = 16 << 10;
/// Every status of an action run, as the run query language names them.
const ACTION_STATUSES: [RunStatus; 6] = [
    RunStatus::Pending,
    RunStatus::Running,
    RunStatus::Completed,
    RunStatus::Failed,
    RunStatus::Cancelled,
    RunStatus::TimedOut,
];

/// Where one source's list goes on: its list's cursor (None: from the start), and how many
/// runs of the page from there were already shown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
struct SourcePos {
    after: Option<String>,
    skip: u32,
}

/// The page's cursor: the sources whose lists go on (a source ended is no longer there).
#[derive(Debug, Default, Serialize, Deserialize)]
struct AllCursor {
    /// `action`, or `workflow:NAME`.
    sources: BTreeMap<String, SourcePos>,
    /// Workflows beyond `WORKFLOWS_MAX`, not listed.
    left_out: usize,
}

const ACTION_SOURCE: &str = "action";
const WORKFLOW_SOURCE: &str = "workflow:";

/// One source's next runs, as fetched for a page.
#[derive(Debug)]
struct Fetched {
    source: String,
    pos: SourcePos,
    /// The runs from `pos.after` (those before `pos.skip` were shown already), as the list
    /// shows them.
    rows: Vec<Value>,
    /// The cursor after `rows` (None: the list ends with them).
    next: Option<String>,
}

/// `GET /api/runs?kind=all&status=&limit=&cursor=`: one page of every source's runs.
pub(crate) async fn list(
    console: &Console,
    caller: Caller,
    p: &Params,
    limit: u32,
) -> Result<Value, ApiError> {
    if p.get("name").is_some() || p.get("query").is_some() || p.flag("dead_letter")? {
        return Err(ApiError::bad_request(
            "all runs take a status only: for a name, a query or dead letters, choose the \
             workflow or action kind",
        ));
    }
    let status = p.get("status");
    let filter = StatusFilter::parse(status)?;
    let cursor = match p.get("cursor") {
        Some(text) => decode_cursor(text)?,
        None => first_cursor(console, caller, p, &filter).await?,
    };
    let mut fetched = Vec::with_capacity(cursor.sources.len());
    for (source, pos) in cursor.sources {
        let pos = match pos.skip >= limit {
            true => move_past_shown(console, caller, p, &filter, &source, pos).await?,
            false => Some(pos),
        };
        let Some(pos) = pos else {
            continue;
        };
        let want = pos.skip.saturating_add(limit);
        let op = source_op(p, &filter, &source, want, pos.after.clone())?;
        let (rows, next) = page_of(console.call(caller, op).await?)?;
        fetched.push(Fetched {
            source,
            pos,
            rows,
            next,
        });
    }
    let sources = fetched.len();
    let (runs, positions) = merge(fetched, limit as usize);
    let next_cursor = (!positions.is_empty()).then(|| {
        encode_cursor(&AllCursor {
            sources: positions,
            left_out: cursor.left_out,
        })
    });
    Ok(json!({
        "runs": runs,
        "next_cursor": next_cursor,
        "scanned": null,
        "sources": sources,
        "workflows_left_out": cursor.left_out,
    }))
}

/// Which sources a status leaves: action runs for an action status, workflow runs for a
/// workflow status (`waiting` and `on_hold` are workflow runs' only).
#[derive(Debug, Clone, Copy)]
struct StatusFilter {
    action: Option<Option<RunStatus>>,
    workflow: Option<Option<WorkflowRunStatus>>,
}

impl StatusFilter {
    fn parse(status: Option<&str>) -> Result<StatusFilter, ApiError> {
        let Some(s) = status else {
            return Ok(StatusFilter {
                action: Some(None),
                workflow: Some(None),
            });
        };
        let (action, workflow) = (RunStatus::parse(s), WorkflowRunStatus::parse(s));
        if action.is_none() && workflow.is_none() {
            return Err(ApiError::bad_request(format!(
                "status {s:?}: a run is pending, running, waiting, on_hold, completed, failed, \
                 cancelled or timed_out"
            )));
        }
        Ok(StatusFilter {
            action: action.map(Some),
            workflow: workflow.map(Some),
        })
    }
}

/// The first page's sources: the action runs, and the runs of the first `WORKFLOWS_MAX`
/// workflows by name.
async fn first_cursor(
    console: &Console,
    caller: Caller,
    p: &Params,
    filter: &StatusFilter,
) -> Result<AllCursor, ApiError> {
    let mut cursor = AllCursor::default();
    if filter.action.is_some() {
        cursor
            .sources
            .insert(ACTION_SOURCE.to_string(), SourcePos::default());
    }
    if filter.workflow.is_none() {
        return Ok(cursor);
    }
    let op = Op::WorkflowList {
        namespace: p.namespace(),
    };
    let Reply::Workflows(list) = console.call(caller, op).await? else {
        return Err(ApiError::unexpected("workflow_list"));
    };
    let mut names: Vec<&str> = list.iter().map(|w| w.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    cursor.left_out = names.len().saturating_sub(WORKFLOWS_MAX);
    for name in names.into_iter().take(WORKFLOWS_MAX) {
        let source = format!("{WORKFLOW_SOURCE}{name}");
        cursor.sources.insert(source, SourcePos::default());
    }
    Ok(cursor)
}

/// The operation that lists `want` runs of `source` from `after`.
fn source_op(
    p: &Params,
    filter: &StatusFilter,
    source: &str,
    want: u32,
    after: Option<String>,
) -> Result<Op, ApiError> {
    let want = want.min(flo_protocol::RUN_LIST_LIMIT_MAX);
    if source == ACTION_SOURCE {
        let statuses: Vec<RunStatus> = match filter.action {
            Some(Some(status)) => vec![status],
            _ => ACTION_STATUSES.to_vec(),
        };
        let names: Vec<String> = statuses
            .iter()
            .map(|s| format!("\"{}\"", s.as_str()))
            .collect();
        return Ok(Op::RunList {
            namespace: p.namespace(),
            action: String::new(),
            status: None,
            dead_letter: false,
            limit: Some(want),
            cursor: after,
            query: Some(format!("status IN ({})", names.join(", "))),
        });
    }
    let Some(name) = source.strip_prefix(WORKFLOW_SOURCE) else {
        return Err(ApiError::bad_request(
            "the cursor names a source that is none",
        ));
    };
    Ok(Op::WorkflowListRuns {
        namespace: p.namespace(),
        name: name.to_string(),
        status: filter.workflow.flatten(),
        limit: Some(want),
        cursor: after,
        timed_out: None,
    })
}

/// A source whose shown runs reached a page's size: its list's cursor moved past them
/// (None: its list ends there).
async fn move_past_shown(
    console: &Console,
    caller: Caller,
    p: &Params,
    filter: &StatusFilter,
    source: &str,
    pos: SourcePos,
) -> Result<Option<SourcePos>, ApiError> {
    let op = source_op(p, filter, source, pos.skip, pos.after)?;
    let (_, next) = page_of(console.call(caller, op).await?)?;
    Ok(next.map(|after| SourcePos {
        after: Some(after),
        skip: 0,
    }))
}

/// A list's runs as the page shows them, and its cursor.
fn page_of(reply: Reply) -> Result<(Vec<Value>, Option<String>), ApiError> {
    match reply {
        Reply::Runs {
            runs, next_cursor, ..
        } => Ok((
            runs.iter().map(views::action_run_row).collect(),
            next_cursor,
        )),
        Reply::WorkflowRuns {
            runs, next_cursor, ..
        } => Ok((
            runs.iter().map(views::workflow_run_row).collect(),
            next_cursor,
        )),
        _ => Err(ApiError::unexpected("a run list")),
    }
}

/// A run's place in the merge: newer first, then by id.
fn order_key(row: &Value) -> (u64, &str) {
    let created = row["created_at_ms"].as_u64().unwrap_or(0);
    (created, row["run_id"].as_str().unwrap_or(""))
}

/// Up to `limit` runs taken from the sources' heads, newest first (each source's own order
/// kept), and where each source goes on: past its page once every run of it was shown, else
/// at the same page with more shown; a source whose list ended is left out.
fn merge(fetched: Vec<Fetched>, limit: usize) -> (Vec<Value>, BTreeMap<String, SourcePos>) {
    let mut heads: Vec<usize> = fetched
        .iter()
        .map(|f| (f.pos.skip as usize).min(f.rows.len()))
        .collect();
    let mut out = Vec::with_capacity(limit);
    while out.len() < limit {
        let newest = (0..fetched.len())
            .filter(|&i| heads[i] < fetched[i].rows.len())
            .max_by(|&a, &b| {
                let (ka, kb) = (
                    order_key(&fetched[a].rows[heads[a]]),
                    order_key(&fetched[b].rows[heads[b]]),
                );
                // Equal keys: the first source wins (max_by keeps the last of equals).
                ka.cmp(&kb).then(b.cmp(&a))
            });
        let Some(i) = newest else {
            break;
        };
        out.push(fetched[i].rows[heads[i]].clone());
        heads[i] += 1;
    }
    let mut positions = BTreeMap::new();
    for (f, shown) in fetched.into_iter().zip(heads) {
        let pos = match (shown >= f.rows.len(), f.next) {
            (false, _) => SourcePos {
                after: f.pos.after,
                skip: shown as u32,
            },
            (true, Some(next)) => SourcePos {
                after: Some(next),
                skip: 0,
            },
            (true, None) => continue,
        };
        positions.insert(f.source, pos);
    }
    (out, positions)
}

fn encode_cursor(cursor: &AllCursor) -> String {
    serde_json::to_string(cursor).unwrap_or_default()
}

fn decode_cursor(text: &str) -> Result<AllCursor, ApiError> {
    let bad = || ApiError::bad_request("the cursor is not one this list gave");
    if text.len() > CURSOR_BYTES_MAX {
        return Err(bad());
    }
    let cursor: AllCursor = serde_json::from_str(text).map_err(|_| bad())?;
    let workflows = cursor
        .sources
        .keys()
        .filter(|s| s.starts_with(WORKFLOW_SOURCE))
        .count();
    let known = |s: &String| s == ACTION_SOURCE || s.starts_with(WORKFLOW_SOURCE);
    if workflows > WORKFLOWS_MAX || !cursor.sources.keys().all(known) {
        return Err(bad());
    }
    Ok(cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, created: u64) -> Value {
        json!({"run_id": id, "created_at_ms": created})
    }

    fn fetched(source: &str, skip: u32, rows: &[(&str, u64)], next: Option<&str>) -> Fetched {
        Fetched {
            source: source.to_string(),
            pos: SourcePos {
                after: Some(format!("{source}-at")),
                skip,
            },
            rows: rows.iter().map(|(id, c)| row(id, *c)).collect(),
            next: next.map(str::to_string),
        }
    }

    fn ids(rows: &[Value]) -> Vec<&str> {
        rows.iter().map(|r| r["run_id"].as_str().unwrap()).collect()
    }

    #[test]
    fn the_newest_runs_of_every_source_come_first_and_each_source_goes_on_where_it_stopped() {
        let a = fetched("action", 0, &[("a3", 30), ("a1", 10)], Some("a-next"));
        let w = fetched("workflow:w", 0, &[("w4", 40), ("w2", 20)], None);
        let (runs, pos) = merge(vec![a, w], 3);
        assert_eq!(ids(&runs), ["w4", "a3", "w2"]);
        // The action list's page was shown in part: the same page, one run shown.
        assert_eq!(
            pos["action"],
            SourcePos {
                after: Some("action-at".into()),
                skip: 1
            }
        );
        // The workflow's list was shown whole and ends: no longer a source.
        assert!(!pos.contains_key("workflow:w"));
    }

    #[test]
    fn runs_shown_before_are_skipped_and_a_page_shown_whole_moves_to_the_next() {
        let a = fetched("action", 1, &[("a3", 30), ("a1", 10)], Some("a-next"));
        let (runs, pos) = merge(vec![a], 5);
        assert_eq!(ids(&runs), ["a1"]);
        assert_eq!(
            pos["action"],
            SourcePos {
                after: Some("a-next".into()),
                skip: 0
            }
        );
    }

    #[test]
    fn a_short_page_that_goes_on_keeps_its_source() {
        // A list may answer fewer runs than asked (its byte budget) and go on.
        let w = fetched("workflow:w", 0, &[], Some("w-next"));
        let (runs, pos) = merge(vec![w], 5);
        assert!(runs.is_empty());
        assert_eq!(pos["workflow:w"].after.as_deref(), Some("w-next"));
    }

    #[test]
    fn a_cursor_names_known_sources_only_and_keeps_its_bound() {
        let mut cursor = AllCursor::default();
        cursor
            .sources
            .insert("workflow:orders".into(), SourcePos::default());
        let text = encode_cursor(&cursor);
        assert_eq!(decode_cursor(&text).unwrap().sources.len(), 1);
        assert!(
            decode_cursor(r#"{"sources":{"kv":{"after":null,"skip":0}},"left_out":0}"#).is_err()
        );
        assert!(decode_cursor("not json").is_err());
        let many: BTreeMap<String, SourcePos> = (0..=WORKFLOWS_MAX)
            .map(|i| (format!("workflow:w{i}"), SourcePos::default()))
            .collect();
        let text = encode_cursor(&AllCursor {
            sources: many,
            left_out: 0,
        });
        assert!(decode_cursor(&text).is_err());
    }

    #[test]
    fn a_status_keeps_the_sources_it_applies_to() {
        let waiting = StatusFilter::parse(Some("waiting")).unwrap();
        assert!(waiting.action.is_none(), "no action run waits");
        assert_eq!(waiting.workflow, Some(Some(WorkflowRunStatus::Waiting)));
        let failed = StatusFilter::parse(Some("failed")).unwrap();
        assert_eq!(failed.action, Some(Some(RunStatus::Failed)));
        assert!(StatusFilter::parse(Some("asleep")).is_err());
    }
}
