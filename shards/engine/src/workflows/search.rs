//! `flo workflow list-runs --query`: a shard's part of a query page, from the query index
//! (`fold::search`), and the merge of the parts into a page with a cursor.
//!
//! A part picks its candidates from the index: the smallest of the postings its top-level
//! `AND` terms name (`attr = v`, `attr IN (…)`, a range on an attribute, `workflow = "w"`),
//! or every document; walks them in start order from where the cursor left this shard; and
//! checks each against the whole query. It looks at `QUERY_SCAN_MAX` documents at most, so
//! a page may be short; its cursor goes on from where it stopped.

use crate::core::Core;
use crate::core::io::Done;
use crate::fold::search::{Doc, IndexKey, Space, attrs_json};
use crate::pages::LIST_REPLY_BYTES_MAX;
use flo_protocol::{ErrorValue, QueryPart, Reply, RunSummary, check_namespace};
use flo_workflow::query::{CmpOp, Expr, FieldValue, Literal, literal_time, parse_query};
use flo_workflow::search::{AttrKind, BUILTIN_FIELDS};
use std::borrow::Cow;
use std::collections::BTreeSet;

/// Documents one part looks at, at most.
pub const QUERY_SCAN_MAX: u64 = 100_000;
pub const QUERY_LIMIT_DEFAULT: u32 = 100;
pub const QUERY_LIMIT_MAX: u32 = 1000;
/// Candidates a plan may gather from postings before it prefers the plain walk.
const CANDIDATES_MAX: usize = 100_000;

/// The query asked of one shard.
pub struct QueryAsk<'a> {
    pub namespace: &'a str,
    pub workflow: Option<&'a str>,
    pub query: &'a str,
    pub ascending: bool,
    pub limit: Option<u32>,
    pub cursor: Option<&'a str>,
}

/// This shard's part.
pub fn query_part(core: &Core, ask: &QueryAsk<'_>) -> Done {
    Done::now(part(core, ask).map(Reply::QueryPart))
}

fn part(core: &Core, ask: &QueryAsk<'_>) -> Result<QueryPart, ErrorValue> {
    check_namespace(ask.namespace)?;
    let expr = parse_query(ask.query).map_err(|e| ErrorValue::bad_request(e.to_string()))?;
    let kinds = attribute_kinds(core, ask.namespace, ask.workflow)?;
    for field in expr.fields() {
        if !BUILTIN_FIELDS.contains(&field) && !kinds.iter().any(|(n, _)| n == field) {
            let declared: Vec<&str> = kinds.iter().map(|(n, _)| n.as_str()).collect();
            return Err(ErrorValue::bad_request(format!(
                "unknown field `{field}`: a query names status, workflow, run_id, started_at, \
                 updated_at or a search attribute ({})",
                if declared.is_empty() {
                    "none declared".to_string()
                } else {
                    declared.join(", ")
                }
            )));
        }
    }
    let me = core.shard();
    let shards = core.partitioning().shards;
    let from = match decode_cursor(ask.cursor, shards)? {
        None => None,
        Some(positions) => match positions[me as usize] {
            Position::Start => None,
            Position::At(seq) => Some(seq),
            Position::Done => {
                return Ok(QueryPart {
                    shard: me,
                    items: Vec::new(),
                    from: None,
                    next: None,
                    scanned: 0,
                });
            }
        },
    };
    let limit = ask
        .limit
        .unwrap_or(QUERY_LIMIT_DEFAULT)
        .clamp(1, QUERY_LIMIT_MAX) as usize;
    let budget = LIST_REPLY_BYTES_MAX / shards.max(1) as usize;
    let mut out = QueryPart {
        shard: me,
        items: Vec::new(),
        from,
        next: None,
        scanned: 0,
    };
    let Some(space) = core.state().search.space(ask.namespace) else {
        return Ok(out);
    };
    let candidates = plan(space, &expr, ask.workflow, &kinds);
    let in_range = |seq: u64| match (from, ask.ascending) {
        (None, _) => true,
        (Some(f), true) => seq > f,
        (Some(f), false) => seq < f,
    };
    let walk: Box<dyn Iterator<Item = u64> + '_> = match (&candidates, ask.ascending) {
        (Some(set), true) => Box::new(set.iter().copied().filter(move |&s| in_range(s))),
        (Some(set), false) => Box::new(set.iter().rev().copied().filter(move |&s| in_range(s))),
        (None, true) => Box::new(space.docs.keys().copied().filter(move |&s| in_range(s))),
        (None, false) => Box::new(
            space
                .docs
                .keys()
                .rev()
                .copied()
                .filter(move |&s| in_range(s)),
        ),
    };
    let (mut bytes, mut last) = (0usize, None);
    let mut exhausted = true;
    for seq in walk {
        if out.scanned == QUERY_SCAN_MAX || out.items.len() == limit || bytes >= budget {
            exhausted = false;
            break;
        }
        out.scanned += 1;
        last = Some(seq);
        let Some(doc) = space.docs.get(&seq) else {
            continue;
        };
        if ask.workflow.is_some_and(|w| w != space.workflow_of(doc)) {
            continue;
        }
        let status = doc.status.or_else(|| {
            core.state()
                .workflows
                .run(ask.namespace, &doc.run_id)
                .map(|r| r.status())
        });
        let Some(status) = status else {
            continue;
        };
        let get = |field: &str| field_value(space, doc, status.as_str(), field);
        if !expr.matches(&get) {
            continue;
        }
        let item = summary(ask.namespace, me, seq, space, doc, status);
        bytes += 128 + item.run_id.len() + item.search_attributes.len();
        out.items.push(item);
    }
    out.next = if exhausted { None } else { last };
    Ok(out)
}

fn summary(
    namespace: &str,
    shard: u32,
    seq: u64,
    space: &Space,
    doc: &Doc,
    status: flo_protocol::WorkflowRunStatus,
) -> RunSummary {
    RunSummary {
        run_id: doc.run_id.to_string(),
        namespace: namespace.to_string(),
        workflow: space.workflow_of(doc).to_string(),
        status,
        created_at_ms: doc.started_at_ms,
        updated_at_ms: doc.updated_at_ms,
        search_attributes: attrs_json(space.attrs_of(doc)),
        shard,
        seq,
    }
}

fn field_value<'a>(
    space: &'a Space,
    doc: &'a Doc,
    status: &'a str,
    field: &str,
) -> Option<FieldValue<'a>> {
    Some(match field {
        "status" => FieldValue::Str(status),
        "workflow" => FieldValue::Str(space.workflow_of(doc)),
        "run_id" => FieldValue::Str(&doc.run_id),
        "started_at" => FieldValue::Time(doc.started_at_ms),
        "updated_at" => FieldValue::Time(doc.updated_at_ms),
        name => FieldValue::Attr(space.attr(doc, name)?),
    })
}

/// The attributes the query may name, with their types: those of `workflow`, or of every
/// workflow of the namespace (the latest version of each declares them).
fn attribute_kinds(
    core: &Core,
    namespace: &str,
    workflow: Option<&str>,
) -> Result<Vec<(String, AttrKind)>, ErrorValue> {
    let defs = &core.state().workflows.defs;
    let mut kinds: Vec<(String, AttrKind)> = Vec::new();
    let mut add = |entry: &crate::fold::workflow_defs::WfEntry| {
        for v in &entry.versions {
            if let Ok(def) = &v.def {
                for a in &def.search_attributes {
                    if !kinds.iter().any(|(n, _)| *n == a.name) {
                        kinds.push((a.name.clone(), a.kind));
                    }
                }
            }
        }
    };
    match workflow {
        Some(name) => {
            let entry = defs.def(namespace, name).ok_or_else(|| {
                ErrorValue::not_found(format!(
                    "workflow {name:?} is not defined in namespace {namespace:?}"
                ))
            })?;
            add(entry);
            if kinds.is_empty() {
                return Err(ErrorValue::bad_request(format!(
                    "workflow {name:?} declares no searchAttributes: queries search the runs of \
                     workflows that do (list its runs by --status instead)"
                )));
            }
        }
        None => {
            for ((ns, _), entry) in defs.iter() {
                if ns == namespace {
                    add(entry);
                }
            }
        }
    }
    Ok(kinds)
}

/// The candidates the cheapest indexed term of the top-level `AND` gives (None: walk every
/// document). Exact terms (`=`, `IN`, the workflow) are looked at first; a range gathers
/// its postings only while it stays smaller than the best so far.
fn plan<'a>(
    space: &'a Space,
    expr: &Expr,
    workflow: Option<&str>,
    kinds: &[(String, AttrKind)],
) -> Option<Cow<'a, BTreeSet<u64>>> {
    let of_workflow = |w: &str| {
        space
            .by_workflow
            .get(w)
            .map_or_else(|| Cow::Owned(BTreeSet::new()), Cow::Borrowed)
    };
    let mut best: Option<Cow<'a, BTreeSet<u64>>> = workflow.map(of_workflow);
    let kind_of = |field: &str| kinds.iter().find(|(n, _)| n == field).map(|(_, k)| *k);
    let terms = expr.conjuncts();
    let exact = terms.iter().filter(|t| match t {
        Expr::Cmp { op, .. } => *op == CmpOp::Eq,
        Expr::In { .. } => true,
        _ => false,
    });
    let ranges = terms
        .iter()
        .filter(|t| matches!(t, Expr::Cmp { op, .. } if !matches!(op, CmpOp::Eq | CmpOp::Ne)));
    for term in exact.chain(ranges) {
        let cap = best
            .as_ref()
            .map_or(CANDIDATES_MAX, |b| b.len().min(CANDIDATES_MAX));
        let found = match term {
            Expr::Cmp {
                field,
                op: CmpOp::Eq,
                value: Literal::Str(w),
            } if field == "workflow" => Some(of_workflow(w)),
            Expr::Cmp { field, op, value } => kind_of(field)
                .and_then(|k| postings_for(space, field, k, *op, std::slice::from_ref(value), cap))
                .map(Cow::Owned),
            Expr::In { field, values } => kind_of(field)
                .and_then(|k| postings_for(space, field, k, CmpOp::Eq, values, cap))
                .map(Cow::Owned),
            _ => None,
        };
        if let Some(set) = found
            && best.as_ref().is_none_or(|b| set.len() < b.len())
        {
            best = Some(set);
        }
    }
    best
}

/// The documents whose `field` compares to one of `values` by `op`, from its postings;
/// None when the term cannot use them (a literal of another type) or they pass `cap`.
fn postings_for(
    space: &Space,
    field: &str,
    kind: AttrKind,
    op: CmpOp,
    values: &[Literal],
    cap: usize,
) -> Option<BTreeSet<u64>> {
    let Some(postings) = space.postings.get(field) else {
        return Some(BTreeSet::new());
    };
    let mut out = BTreeSet::new();
    for value in values {
        let key = key_of(kind, value)?;
        let same_type = std::mem::discriminant(&key);
        let range: Box<dyn Iterator<Item = (&IndexKey, &BTreeSet<u64>)>> = match op {
            CmpOp::Eq => Box::new(postings.get_key_value(&key).into_iter()),
            CmpOp::Lt => Box::new(postings.range(..key)),
            CmpOp::Le => Box::new(postings.range(..=key)),
            CmpOp::Gt => Box::new(
                postings.range((std::ops::Bound::Excluded(key), std::ops::Bound::Unbounded)),
            ),
            CmpOp::Ge => Box::new(postings.range(key..)),
            CmpOp::Ne => return None,
        };
        for (k, seqs) in range {
            // A range stays within the value's type (keys of other types order apart).
            if std::mem::discriminant(k) != same_type {
                continue;
            }
            if out.len() + seqs.len() > cap {
                return None;
            }
            out.extend(seqs.iter().copied());
        }
    }
    Some(out)
}

fn key_of(kind: AttrKind, lit: &Literal) -> Option<IndexKey> {
    Some(match (kind, lit) {
        (AttrKind::String | AttrKind::KeywordList, Literal::Str(s)) => IndexKey::Str(s.clone()),
        (AttrKind::Number, Literal::Num(n)) => IndexKey::num(*n),
        (AttrKind::Number, Literal::Str(s)) => IndexKey::num(s.trim().parse().ok()?),
        (AttrKind::Timestamp, lit) => IndexKey::Time(literal_time(lit)?),
        (AttrKind::Bool, Literal::Bool(b)) => IndexKey::Bool(*b),
        _ => return None,
    })
}

/// Where each shard's part of a query stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    Start,
    At(u64),
    Done,
}

const CURSOR_PREFIX: &str = "q1.";

fn decode_cursor(cursor: Option<&str>, shards: u32) -> Result<Option<Vec<Position>>, ErrorValue> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let bad = || {
        ErrorValue::bad_request(format!(
            "query cursor {cursor:?} is not one this server gave"
        ))
    };
    let body = cursor.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
    let positions: Vec<Position> = body
        .split(',')
        .map(|p| match p {
            "" => Ok(Position::Start),
            "-" => Ok(Position::Done),
            n => n.parse().map(Position::At).map_err(|_| bad()),
        })
        .collect::<Result<_, _>>()?;
    if positions.len() != shards as usize {
        return Err(bad());
    }
    Ok(Some(positions))
}

fn encode_cursor(positions: &[Position]) -> Option<String> {
    if positions.iter().all(|p| *p == Position::Done) {
        return None;
    }
    let parts: Vec<String> = positions
        .iter()
        .map(|p| match p {
            Position::Start => String::new(),
            Position::At(n) => n.to_string(),
            Position::Done => "-".to_string(),
        })
        .collect();
    Some(format!("{CURSOR_PREFIX}{}", parts.join(",")))
}

/// The parts of every shard merged into a page: the first `limit` runs in start order,
/// and the cursor that goes on after them.
pub fn merge_parts(
    parts: Vec<Reply>,
    ascending: bool,
    limit: Option<u32>,
    shards: u32,
) -> Result<Reply, ErrorValue> {
    let limit = limit
        .unwrap_or(QUERY_LIMIT_DEFAULT)
        .clamp(1, QUERY_LIMIT_MAX) as usize;
    let mut positions = vec![Position::Done; shards as usize];
    let mut all: Vec<RunSummary> = Vec::new();
    let mut scanned = 0;
    let mut parts_by_shard = Vec::new();
    for p in parts {
        let Reply::QueryPart(part) = p else {
            return Err(ErrorValue::internal("a query part of another kind"));
        };
        scanned += part.scanned;
        all.extend(part.items.iter().cloned());
        parts_by_shard.push(part);
    }
    let key = |r: &RunSummary| (r.created_at_ms, r.shard, r.seq);
    if ascending {
        all.sort_by_key(key);
    } else {
        all.sort_by_key(|r| std::cmp::Reverse(key(r)));
    }
    let mut bytes = 0usize;
    let mut taken = 0;
    for r in &all {
        if taken == limit || (taken > 0 && bytes >= LIST_REPLY_BYTES_MAX) {
            break;
        }
        bytes += 128 + r.run_id.len() + r.search_attributes.len();
        taken += 1;
    }
    all.truncate(taken);
    for part in &parts_by_shard {
        let Some(slot) = positions.get_mut(part.shard as usize) else {
            continue;
        };
        let mine = all.iter().filter(|r| r.shard == part.shard).count();
        *slot = if mine == part.items.len() {
            // Every item given: on from where the part stopped.
            part.next.map_or(Position::Done, Position::At)
        } else if mine == 0 {
            part.from.map_or(Position::Start, Position::At)
        } else {
            let last = all.iter().rfind(|r| r.shard == part.shard).map(|r| r.seq);
            last.map_or(Position::Start, Position::At)
        };
    }
    Ok(Reply::RunSummaries {
        items: all,
        next_cursor: encode_cursor(&positions),
        scanned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(shard: u32, seq: u64, at: u64) -> RunSummary {
        RunSummary {
            run_id: format!("r{shard}-{seq}"),
            namespace: "ns".into(),
            workflow: "w".into(),
            status: flo_protocol::WorkflowRunStatus::Running,
            created_at_ms: at,
            updated_at_ms: at,
            search_attributes: b"{}".to_vec(),
            shard,
            seq,
        }
    }

    #[test]
    fn parts_merge_newest_first_and_the_cursor_goes_on_where_each_shard_stopped() {
        let parts = vec![
            Reply::QueryPart(QueryPart {
                shard: 0,
                items: vec![item(0, 9, 90), item(0, 5, 50)],
                from: None,
                next: Some(5),
                scanned: 4,
            }),
            Reply::QueryPart(QueryPart {
                shard: 1,
                items: vec![item(1, 7, 70)],
                from: None,
                next: None,
                scanned: 1,
            }),
        ];
        let Reply::RunSummaries {
            items,
            next_cursor,
            scanned,
        } = merge_parts(parts, false, Some(2), 2).unwrap()
        else {
            panic!()
        };
        let ids: Vec<&str> = items.iter().map(|r| r.run_id.as_str()).collect();
        assert_eq!(ids, ["r0-9", "r1-7"]);
        assert_eq!(scanned, 5);
        // Shard 0 goes on after seq 9; shard 1 gave everything.
        let cursor = next_cursor.unwrap();
        assert_eq!(cursor, "q1.9,-");
        assert_eq!(
            decode_cursor(Some(&cursor), 2).unwrap().unwrap(),
            [Position::At(9), Position::Done]
        );
        assert!(decode_cursor(Some("q1.9"), 2).is_err());
        assert!(decode_cursor(Some("nope"), 2).is_err());
        assert_eq!(encode_cursor(&[Position::Done, Position::Done]), None);
    }
}
