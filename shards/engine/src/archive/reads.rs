//! Reads of archived runs: the record is read back from the log (`Effect::ReadLog`, held
//! until it is durable, answered by `Input::LogRead`), checked against the run asked for,
//! and turned into the reply a live run would get.

use crate::core::Core;
use crate::core::io::{Dest, Done};
use crate::fold::archive::{Entry, RunKind, name_tag};
use crate::fold::archived::{ArchivedRun, action_status_code, workflow_status_code};
use crate::fold::record::Record;
use crate::pages::{self, LIST_REPLY_BYTES_MAX, Part, Pos, Weighed};
use crate::run_query::{DOC_READS_MAX, RunFields, RunQuery};
use crate::tables::HashMap;
use flo_protocol::{ErrorValue, Reply, RunInfo, WorkflowRunInfo};
use std::collections::VecDeque;
use std::sync::Arc;

/// Archived entries a list looks at, at most, per shard and call (newest first): a list
/// over millions of finished runs answers each page in bounded time (a page may be short;
/// its cursor goes on from where the scan stopped).
pub const LIST_SCAN_MAX: usize = 100_000;

/// What a read of one archived run answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    RunStatus,
    WfStatus,
    /// A start naming this run's id with an idempotency key: the run started then, if it
    /// is of `workflow` and was started with `key` (answered `WorkflowStarted`, not
    /// created); otherwise the id is taken (`conflict`).
    WfStartRepeat {
        workflow: String,
        key: String,
    },
    /// The whole history, or a page of it.
    WfHistory {
        limit: Option<u32>,
        after: Option<u64>,
    },
}

/// A list of runs on this shard: the live part is done, archived candidates are read.
#[derive(Debug, Clone)]
pub struct ListQuery {
    pub namespace: String,
    /// The action or workflow.
    pub name: String,
    /// Status code (`plan::*_status_code`).
    pub status: Option<u8>,
    pub dead_letter: bool,
    /// Action runs only: the query they match (`flo action runs --query`).
    pub filter: Option<Arc<RunQuery>>,
    pub limit: u32,
    /// Where this shard's list resumes.
    pub from: Pos,
    /// This shard (its part names it for the merge).
    pub shard: u32,
}

/// The live runs a list found, and the LSN its reply waits for.
#[derive(Debug)]
pub enum Live {
    Runs(Vec<RunInfo>),
    WfRuns(Vec<WorkflowRunInfo>),
}

impl Live {
    fn len(&self) -> usize {
        match self {
            Live::Runs(r) => r.len(),
            Live::WfRuns(r) => r.len(),
        }
    }

    /// The list position after each run.
    fn positions(&self) -> Vec<Pos> {
        let at = |created_ms, id: &str| Pos::Live {
            created_ms,
            id: id.to_string(),
        };
        match self {
            Live::Runs(r) => r.iter().map(|r| at(r.created_at_ms, &r.run_id)).collect(),
            Live::WfRuns(r) => r.iter().map(|r| at(r.created_at_ms, &r.run_id)).collect(),
        }
    }

    fn last_position(&self) -> Option<Pos> {
        self.positions().pop()
    }

    fn weights(&self) -> Vec<usize> {
        match self {
            Live::Runs(r) => r.iter().map(Weighed::weight).collect(),
            Live::WfRuns(r) => r.iter().map(Weighed::weight).collect(),
        }
    }

    /// Keeps the runs that fit in a reply's byte budget (at least one); returns whether
    /// any were cut, and the bytes kept.
    fn cut_to_budget(&mut self) -> (bool, usize) {
        let weights = self.weights();
        let keep = pages::fitting(weights.iter().copied(), LIST_REPLY_BYTES_MAX, true);
        let kept = weights[..keep].iter().sum();
        let cut = keep < weights.len();
        match self {
            Live::Runs(r) => r.truncate(keep),
            Live::WfRuns(r) => r.truncate(keep),
        }
        (cut, kept)
    }
}

fn doc_weight(doc: &ArchivedRun) -> usize {
    match doc {
        ArchivedRun::Action(r, _) => r.weight(),
        ArchivedRun::Workflow(w) => w.info.weight(),
    }
}

struct Single {
    dest: Dest,
    want: Want,
    kind: RunKind,
    namespace: String,
    run_id: String,
}

struct List {
    dest: Dest,
    query: ListQuery,
    live: Live,
    live_lsn: u64,
    /// This shard's position once all its runs of the page are taken.
    end: Pos,
    /// Candidates not yet read, newest first: at most `LIST_READS_IN_FLIGHT_MAX` are read
    /// at once, and none once the page's bytes are used up.
    unread: VecDeque<u64>,
    in_flight: usize,
    /// The LSN of the last candidate read (the oldest).
    last_read: u64,
    /// Bytes of the page so far (live runs and archived runs read).
    bytes: usize,
    /// (LSN, run) of each archived run read.
    found: Vec<(u64, ArchivedRun)>,
}

impl List {
    /// Reads the next candidates, as many as may be in flight.
    fn read_more(&mut self, core: &mut Core, reads: &mut ReadTokens, id: u64) {
        if self.bytes >= LIST_REPLY_BYTES_MAX {
            // The page is full: what is not read yet comes on the next page.
            if !self.unread.is_empty() {
                self.unread.clear();
                self.end = Pos::Archive {
                    below_lsn: self.last_read,
                };
            }
            return;
        }
        while self.in_flight < LIST_READS_IN_FLIGHT_MAX {
            let Some(lsn) = self.unread.pop_front() else {
                break;
            };
            let token = reads.token();
            reads.slots.insert(token, Slot::List(id, lsn));
            core.read_log(lsn, token);
            self.in_flight += 1;
            self.last_read = lsn;
        }
    }
}

/// Archived runs a list reads from the log at once: a page's documents (each up to a
/// record's size) are never all held together.
const LIST_READS_IN_FLIGHT_MAX: usize = 16;

enum Slot {
    Single(Single),
    /// A list's read of the record at an LSN.
    List(u64, u64),
}

#[derive(Default)]
pub struct Reads {
    tokens: ReadTokens,
    lists: HashMap<u64, List>,
}

#[derive(Default)]
struct ReadTokens {
    next: u64,
    slots: HashMap<u64, Slot>,
}

impl ReadTokens {
    fn token(&mut self) -> u64 {
        self.next += 1;
        self.next
    }
}

/// Reads one archived run; `dest` gets the answer `want` asks for.
#[allow(clippy::too_many_arguments)]
pub fn read_one(
    core: &mut Core,
    reads: &mut Reads,
    entry: Entry,
    kind: RunKind,
    want: Want,
    namespace: &str,
    run_id: &str,
    dest: Dest,
) {
    let token = reads.tokens.token();
    reads.tokens.slots.insert(
        token,
        Slot::Single(Single {
            dest,
            want,
            kind,
            namespace: namespace.to_string(),
            run_id: run_id.to_string(),
        }),
    );
    core.read_log(entry.lsn, token);
}

/// Completes a list with the archived runs that match `query`: answers at once (`Some`)
/// when none may match, else reads them and answers `dest` when all are read. `live_more`:
/// more in-flight runs follow those in `live` (the page is full of them).
pub fn read_list(
    core: &mut Core,
    reads: &mut Reads,
    query: ListQuery,
    live: Live,
    live_lsn: u64,
    live_more: bool,
    dest: Dest,
) -> Option<Done> {
    let mut live = live;
    let (cut, bytes) = live.cut_to_budget();
    let live_more = live_more || cut;
    let taken = live.len();
    let need = (query.limit as usize).saturating_sub(taken);
    let below = query.from.archive_below();
    let (candidates, end) = match below {
        _ if live_more => (
            Vec::new(),
            live.last_position().unwrap_or(query.from.clone()),
        ),
        None => (Vec::new(), Pos::Done),
        Some(below_lsn) if need == 0 => (Vec::new(), Pos::Archive { below_lsn }),
        Some(below_lsn) => archive_candidates(core, &query, below_lsn, need),
    };
    if candidates.is_empty() {
        return Some(finish(query, live, live_lsn, end, Vec::new()));
    }
    let id = reads.tokens.token();
    let mut list = List {
        dest,
        query,
        live,
        live_lsn,
        end,
        unread: candidates.into(),
        in_flight: 0,
        last_read: 0,
        bytes,
        found: Vec::new(),
    };
    list.read_more(core, &mut reads.tokens, id);
    reads.lists.insert(id, list);
    None
}

/// The LSNs of up to `need` archived runs below `below_lsn` that may match `query` (by
/// the index: a name tag may collide, the record read says), newest first, and this
/// shard's position once they are taken.
fn archive_candidates(
    core: &Core,
    query: &ListQuery,
    below_lsn: u64,
    need: usize,
) -> (Vec<u64>, Pos) {
    // The name tags and statuses a candidate may have: the list's action and status, and
    // those its query's top-level terms name.
    let filter = query.filter.as_deref();
    let names: Option<Vec<&str>> =
        match (query.name.as_str(), filter.and_then(|f| f.actions.as_ref())) {
            ("", None) => None,
            ("", Some(actions)) => Some(actions.iter().map(String::as_str).collect()),
            (name, _) => Some(vec![name]),
        };
    let tags: Option<Vec<u16>> =
        names.map(|n| n.iter().map(|n| name_tag(&query.namespace, n)).collect());
    let statuses: Option<Vec<u8>> = filter
        .and_then(|f| f.statuses.as_ref())
        .map(|s| s.iter().map(|&s| action_status_code(s)).collect());
    let dead_letter = query.dead_letter || filter.is_some_and(|f| f.dead_letter);
    // A query the index cannot decide reads more documents than the page needs (the reads
    // decide); the page stops at its limit.
    let need = match filter {
        Some(f) if !f.decided_by_index => need.max(DOC_READS_MAX),
        _ => need,
    };
    let mut candidates = Vec::new();
    let mut last_scanned = None;
    for (scanned, (_, entry)) in core.state().archive.newest_below(below_lsn).enumerate() {
        if scanned == LIST_SCAN_MAX {
            // The scan stopped at its bound: the next page goes on below.
            let below_lsn = last_scanned.unwrap_or(below_lsn);
            return (candidates, Pos::Archive { below_lsn });
        }
        last_scanned = Some(entry.lsn);
        if tags.as_ref().is_some_and(|t| !t.contains(&entry.name_tag))
            || query.status.is_some_and(|s| s != entry.status)
            || statuses
                .as_ref()
                .is_some_and(|s| !s.contains(&entry.status))
            || (dead_letter && !entry.dead_lettered)
        {
            continue;
        }
        if candidates.len() == need {
            // One more matches: the list goes on below the last candidate.
            let below_lsn = *candidates.last().unwrap_or(&below_lsn);
            return (candidates, Pos::Archive { below_lsn });
        }
        candidates.push(entry.lsn);
    }
    let end = Pos::Done;
    (candidates, end)
}

/// A read of the log ended: returns the answer and where it goes, once one is complete.
pub fn on_read(
    core: &mut Core,
    reads: &mut Reads,
    token: u64,
    result: Result<Vec<u8>, String>,
) -> Option<(Dest, Done)> {
    let slot = reads.tokens.slots.remove(&token)?;
    let doc =
        result.and_then(
            |payload| match Record::decode(&payload).map_err(|e| e.to_string())? {
                Record::RunArchived { run, .. } => Ok(run),
                other => Err(format!(
                    "expected an archive record, found type {}",
                    other.type_code()
                )),
            },
        );
    match slot {
        Slot::Single(s) => {
            let result = doc
                .map_err(|e| {
                    ErrorValue::internal(format!(
                        "cannot read run {:?} from the log: {e}",
                        s.run_id
                    ))
                })
                .and_then(|doc| answer(&s, doc));
            Some((
                s.dest,
                Done {
                    result,
                    wait_lsn: 0,
                },
            ))
        }
        Slot::List(id, lsn) => {
            let list = reads.lists.get_mut(&id)?;
            list.in_flight -= 1;
            // A record that cannot be read is left out of a list (a status read names it),
            // and so is a run back in memory (a dead letter redriven): the live run is
            // listed, its archived document is stale until it is archived again.
            if let Ok(doc) = doc
                && !is_live(core, &doc)
            {
                list.bytes = list.bytes.saturating_add(doc_weight(&doc));
                list.found.push((lsn, doc));
            }
            list.read_more(core, &mut reads.tokens, id);
            if list.in_flight > 0 {
                return None;
            }
            let list = reads.lists.remove(&id)?;
            let dest = list.dest;
            let done = finish(list.query, list.live, list.live_lsn, list.end, list.found);
            Some((dest, done))
        }
    }
}

/// Whether the run an archived document describes is in memory again.
fn is_live(core: &Core, doc: &ArchivedRun) -> bool {
    let (namespace, run_id) = doc.id();
    match doc.kind() {
        RunKind::Action => core.state().runs.get(namespace, run_id).is_some(),
        RunKind::Workflow => core.state().workflows.run(namespace, run_id).is_some(),
    }
}

fn not_found(s: &Single) -> ErrorValue {
    let what = match s.kind {
        RunKind::Action => "run",
        RunKind::Workflow => "workflow run",
    };
    ErrorValue::not_found(format!(
        "{what} {:?} not found in namespace {:?}",
        s.run_id, s.namespace
    ))
}

fn answer(s: &Single, doc: ArchivedRun) -> Result<Reply, ErrorValue> {
    // Another run whose key collides: the one asked for is not archived here.
    if doc.kind() != s.kind || doc.id() != (s.namespace.as_str(), s.run_id.as_str()) {
        return Err(not_found(s));
    }
    match (&s.want, doc) {
        (Want::RunStatus, ArchivedRun::Action(info, _)) => Ok(Reply::Run(*info)),
        (Want::WfStatus, ArchivedRun::Workflow(w)) => Ok(Reply::WorkflowRun(w.info)),
        (Want::WfHistory { limit, after }, ArchivedRun::Workflow(w)) => {
            crate::pages::history_page(&w.history, *limit, *after)
        }
        (Want::WfStartRepeat { workflow, key }, ArchivedRun::Workflow(w)) => {
            if w.info.workflow == *workflow && w.info.idempotency_key.as_ref() == Some(key) {
                return Ok(Reply::WorkflowStarted {
                    run_id: s.run_id.clone(),
                    created: false,
                });
            }
            Err(crate::ids::run_id_taken(
                &s.run_id,
                &w.info.workflow,
                w.info.status.as_str(),
            ))
        }
        _ => Err(not_found(s)),
    }
}

/// This shard's part of a list: the live runs and the archived ones that match, newest
/// first, with the position after each (`pages::Part`, in the reply's `next_cursor`). The
/// fan-out's merge takes a prefix of each shard's runs (`engine/fanout.rs`).
fn finish(
    query: ListQuery,
    live: Live,
    live_lsn: u64,
    end: Pos,
    mut found: Vec<(u64, ArchivedRun)>,
) -> Done {
    found.sort_by_key(|(lsn, _)| std::cmp::Reverse(*lsn));
    // The reads in flight when the budget was reached may pass it: keep what fits.
    let live_bytes: usize = live.weights().iter().sum();
    let room = LIST_REPLY_BYTES_MAX.saturating_sub(live_bytes);
    let keep = pages::fitting(
        found.iter().map(|(_, d)| doc_weight(d)),
        room,
        live.len() == 0,
    );
    let mut end = end;
    if keep < found.len() {
        found.truncate(keep);
        end = match found.last() {
            Some(&(lsn, _)) => Pos::Archive { below_lsn: lsn },
            None => live.last_position().unwrap_or(query.from.clone()),
        };
    }
    let mut after_each = live.positions();
    let archived = |lsn| Pos::Archive { below_lsn: lsn };
    let result = match live {
        Live::Runs(mut runs) => {
            for (lsn, doc) in found {
                match doc {
                    ArchivedRun::Action(r, _)
                        if r.namespace == query.namespace
                            && (query.name.is_empty() || r.action == query.name)
                            && query
                                .status
                                .is_none_or(|s| s == action_status_code(r.status))
                            && (!query.dead_letter || r.dead_lettered)
                            && query.filter.as_ref().is_none_or(|f| f.matches(&fields(&r))) =>
                    {
                        runs.push(*r);
                        after_each.push(archived(lsn));
                    }
                    _ => {}
                }
            }
            // A query reads more documents than the page needs: it ends at its limit.
            if runs.len() > query.limit as usize {
                runs.truncate(query.limit as usize);
                after_each.truncate(query.limit as usize);
                end = after_each.last().cloned().unwrap_or(end);
            }
            let part = part_cursor(query.shard, after_each, end.clone());
            Reply::Runs {
                runs,
                truncated: end != Pos::Done,
                next_cursor: Some(part),
            }
        }
        Live::WfRuns(mut runs) => {
            for (lsn, doc) in found {
                match doc {
                    ArchivedRun::Workflow(w)
                        if w.info.namespace == query.namespace
                            && w.info.workflow == query.name
                            && query
                                .status
                                .is_none_or(|s| s == workflow_status_code(w.info.status)) =>
                    {
                        runs.push(w.info);
                        after_each.push(archived(lsn));
                    }
                    _ => {}
                }
            }
            let part = part_cursor(query.shard, after_each, end.clone());
            Reply::WorkflowRuns {
                runs,
                truncated: end != Pos::Done,
                next_cursor: Some(part),
            }
        }
    };
    Done {
        result: Ok(result),
        wait_lsn: live_lsn,
    }
}

/// An archived action run's fields, as a query reads them.
fn fields(r: &RunInfo) -> RunFields<'_> {
    RunFields {
        run_id: &r.run_id,
        action: &r.action,
        status: r.status,
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
        attempt: r.attempt,
        priority: r.priority,
        dead_lettered: r.dead_lettered,
        workflow_run_id: r.workflow_run_id.as_deref(),
        outcome: r.outcome.as_deref(),
        labels: r.labels.as_deref(),
    }
}

fn part_cursor(shard: u32, after_each: Vec<Pos>, end: Pos) -> String {
    Part {
        shard,
        after_each,
        end,
    }
    .encode()
}
