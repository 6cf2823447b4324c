//! The run query index: for every workflow run whose definition declares search
//! attributes (live, and archived until retention forgets it), a document (id, workflow,
//! start and final times, final status, attribute values) and, per namespace, the postings
//! that find documents by attribute value and by workflow. Documents are numbered by the
//! run's start sequence on the shard (`WfRun::seq`), so a page walks them newest first.
//!
//! Runs of definitions without search attributes cost nothing here. In a snapshot, the
//! documents alone; postings are rebuilt on load (`relink`).

use crate::tables::HashMap;
use flo_protocol::WorkflowRunStatus;
use flo_workflow::search::AttrValue;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Attribute values as a JSON object.
pub fn attrs_json<'a>(attrs: impl IntoIterator<Item = (&'a str, &'a AttrValue)>) -> Vec<u8> {
    let map: serde_json::Map<String, serde_json::Value> = attrs
        .into_iter()
        .map(|(name, v)| (name.to_string(), v.to_json()))
        .collect();
    serde_json::to_vec(&map).unwrap_or_default()
}

/// One run, as queries see it: names are numbers into its space's tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Doc {
    pub run_id: Box<str>,
    /// Into `Space::workflows`.
    workflow: u32,
    /// The final status once final (None: in flight — the live run says).
    pub status: Option<WorkflowRunStatus>,
    pub started_at_ms: u64,
    pub updated_at_ms: u64,
    /// The LSN of its archive record once archived (0: in memory).
    pub archived_lsn: u64,
    /// (name into `Space::names`, value), in the definition's order; attributes without a
    /// value are absent.
    attrs: Box<[(u32, AttrValue)]>,
}

/// A value as postings order it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum IndexKey {
    Bool(bool),
    /// An f64's bits, mapped so that their order is the numbers' order.
    Num(u64),
    Time(u64),
    Str(String),
}

impl IndexKey {
    pub fn num(n: f64) -> IndexKey {
        let bits = n.to_bits();
        IndexKey::Num(if bits >> 63 == 1 {
            !bits
        } else {
            bits | 1 << 63
        })
    }

    /// The keys of a value (a keyword list has one per keyword).
    fn of(v: &AttrValue) -> Vec<IndexKey> {
        match v {
            AttrValue::Str(s) => vec![IndexKey::Str(s.clone())],
            AttrValue::Num(n) => vec![IndexKey::num(*n)],
            AttrValue::Time(t) => vec![IndexKey::Time(*t)],
            AttrValue::Bool(b) => vec![IndexKey::Bool(*b)],
            AttrValue::Keywords(k) => k.iter().map(|s| IndexKey::Str(s.clone())).collect(),
        }
    }
}

/// One namespace's documents, the names they use, and the postings.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Space {
    pub docs: BTreeMap<u64, Doc>,
    /// Workflow names and attribute names, numbered in order of first use.
    workflows: Vec<String>,
    names: Vec<String>,
    /// The tables' names → numbers.
    #[serde(skip)]
    workflow_numbers: HashMap<String, u32>,
    #[serde(skip)]
    name_numbers: HashMap<String, u32>,
    /// A run id's hash → its document (ids whose hash another id has: `by_id_rest`).
    #[serde(skip)]
    by_id: HashMap<u64, u64>,
    #[serde(skip)]
    by_id_rest: HashMap<Box<str>, u64>,
    #[serde(skip)]
    pub by_workflow: HashMap<String, BTreeSet<u64>>,
    /// Attribute → value → documents.
    #[serde(skip)]
    pub postings: HashMap<String, BTreeMap<IndexKey, BTreeSet<u64>>>,
}

fn id_hash(run_id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(run_id.as_bytes())
}

/// The number of `name` in `table`, added if new.
fn number_of(table: &mut Vec<String>, numbers: &mut HashMap<String, u32>, name: &str) -> u32 {
    if let Some(&n) = numbers.get(name) {
        return n;
    }
    table.push(name.to_string());
    let n = (table.len() - 1) as u32;
    numbers.insert(name.to_string(), n);
    n
}

impl Space {
    pub fn workflow_of(&self, doc: &Doc) -> &str {
        self.workflows
            .get(doc.workflow as usize)
            .map_or("", String::as_str)
    }

    /// A document's attribute values, by name.
    pub fn attrs_of<'a>(&'a self, doc: &'a Doc) -> impl Iterator<Item = (&'a str, &'a AttrValue)> {
        doc.attrs.iter().map(|(n, v)| {
            let name = self.names.get(*n as usize).map_or("", String::as_str);
            (name, v)
        })
    }

    pub fn attr<'a>(&'a self, doc: &'a Doc, name: &str) -> Option<&'a AttrValue> {
        self.attrs_of(doc).find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    fn numbered(&mut self, attrs: Vec<(String, AttrValue)>) -> Box<[(u32, AttrValue)]> {
        attrs
            .into_iter()
            .map(|(name, v)| (number_of(&mut self.names, &mut self.name_numbers, &name), v))
            .collect()
    }

    fn post(&mut self, seq: u64, doc: &Doc) {
        let h = id_hash(&doc.run_id);
        match self.by_id.get(&h) {
            Some(&other)
                if self
                    .docs
                    .get(&other)
                    .is_some_and(|d| d.run_id != doc.run_id) =>
            {
                self.by_id_rest.insert(doc.run_id.clone(), seq);
            }
            _ => {
                self.by_id.insert(h, seq);
            }
        }
        let workflow = self.workflow_of(doc).to_string();
        self.by_workflow.entry(workflow).or_default().insert(seq);
        for (n, v) in doc.attrs.iter() {
            let name = self.names[*n as usize].clone();
            let values = self.postings.entry(name).or_default();
            for key in IndexKey::of(v) {
                values.entry(key).or_default().insert(seq);
            }
        }
    }

    fn unpost_attrs(&mut self, seq: u64, attrs: &[(u32, AttrValue)]) {
        for (n, v) in attrs {
            let Some(values) = self.postings.get_mut(&self.names[*n as usize]) else {
                continue;
            };
            for key in IndexKey::of(v) {
                if let Some(set) = values.get_mut(&key) {
                    set.remove(&seq);
                    if set.is_empty() {
                        values.remove(&key);
                    }
                }
            }
            if values.is_empty() {
                self.postings.remove(&self.names[*n as usize]);
            }
        }
    }

    fn remove(&mut self, seq: u64) {
        let Some(doc) = self.docs.remove(&seq) else {
            return;
        };
        let h = id_hash(&doc.run_id);
        if self.by_id.get(&h) == Some(&seq) {
            self.by_id.remove(&h);
        }
        if self.by_id_rest.get(&doc.run_id) == Some(&seq) {
            self.by_id_rest.remove(&doc.run_id);
        }
        let workflow = self.workflow_of(&doc).to_string();
        if let Some(set) = self.by_workflow.get_mut(&workflow) {
            set.remove(&seq);
            if set.is_empty() {
                self.by_workflow.remove(&workflow);
            }
        }
        self.unpost_attrs(seq, &doc.attrs);
    }

    pub fn seq_of(&self, run_id: &str) -> Option<u64> {
        if let Some(&seq) = self.by_id_rest.get(run_id) {
            return Some(seq);
        }
        let seq = *self.by_id.get(&id_hash(run_id))?;
        self.docs
            .get(&seq)
            .is_some_and(|d| &*d.run_id == run_id)
            .then_some(seq)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SearchIndex {
    pub spaces: HashMap<String, Space>,
    /// Archive LSN → (namespace, document), for retention.
    archived: BTreeMap<u64, (String, u64)>,
}

impl SearchIndex {
    pub fn space(&self, namespace: &str) -> Option<&Space> {
        self.spaces.get(namespace)
    }

    pub fn doc(&self, namespace: &str, run_id: &str) -> Option<&Doc> {
        let space = self.spaces.get(namespace)?;
        space.docs.get(&space.seq_of(run_id)?)
    }

    /// A run of a definition with search attributes started.
    pub fn insert(
        &mut self,
        namespace: &str,
        seq: u64,
        run_id: &str,
        workflow: &str,
        started_at_ms: u64,
        attrs: Vec<(String, AttrValue)>,
    ) {
        let space = self.spaces.entry(namespace.to_string()).or_default();
        if let Some(old) = space.seq_of(run_id) {
            space.remove(old);
        }
        let doc = Doc {
            run_id: run_id.into(),
            workflow: number_of(&mut space.workflows, &mut space.workflow_numbers, workflow),
            status: None,
            started_at_ms,
            updated_at_ms: started_at_ms,
            archived_lsn: 0,
            attrs: space.numbered(attrs),
        };
        space.post(seq, &doc);
        space.docs.insert(seq, doc);
    }

    /// A run's attribute values changed (a step it reads finished).
    pub fn set_attrs(&mut self, namespace: &str, run_id: &str, attrs: Vec<(String, AttrValue)>) {
        let Some(space) = self.spaces.get_mut(namespace) else {
            return;
        };
        let Some(seq) = space.seq_of(run_id) else {
            return;
        };
        let attrs = space.numbered(attrs);
        let Some(old) = space.docs.get(&seq).map(|d| d.attrs.clone()) else {
            return;
        };
        if old == attrs {
            return;
        }
        space.unpost_attrs(seq, &old);
        if let Some(doc) = space.docs.get_mut(&seq) {
            doc.attrs = attrs;
        }
        let doc = space.docs[&seq].clone();
        space.post(seq, &doc);
    }

    pub fn finished(
        &mut self,
        namespace: &str,
        run_id: &str,
        status: WorkflowRunStatus,
        at_ms: u64,
    ) {
        let Some(space) = self.spaces.get_mut(namespace) else {
            return;
        };
        let Some(seq) = space.seq_of(run_id) else {
            return;
        };
        if let Some(doc) = space.docs.get_mut(&seq) {
            doc.status = Some(status);
            doc.updated_at_ms = at_ms;
        }
    }

    pub fn archived(&mut self, namespace: &str, run_id: &str, lsn: u64) {
        let Some(space) = self.spaces.get_mut(namespace) else {
            return;
        };
        let Some(seq) = space.seq_of(run_id) else {
            return;
        };
        if let Some(doc) = space.docs.get_mut(&seq) {
            doc.archived_lsn = lsn;
            self.archived.insert(lsn, (namespace.to_string(), seq));
        }
    }

    /// Retention: the runs archived before `before_lsn` are forgotten.
    pub fn forget(&mut self, before_lsn: u64) {
        while let Some(entry) = self.archived.first_entry() {
            if *entry.key() >= before_lsn {
                break;
            }
            let (namespace, seq) = entry.remove();
            if let Some(space) = self.spaces.get_mut(&namespace) {
                space.remove(seq);
                if space.docs.is_empty() {
                    self.spaces.remove(&namespace);
                }
            }
        }
    }

    /// Rebuilds what a snapshot does not hold.
    pub fn relink(&mut self) {
        self.archived.clear();
        for (namespace, space) in &mut self.spaces {
            space.workflow_numbers = (0u32..)
                .zip(&space.workflows)
                .map(|(i, w)| (w.clone(), i))
                .collect();
            space.name_numbers = (0u32..)
                .zip(&space.names)
                .map(|(i, n)| (n.clone(), i))
                .collect();
            let docs = std::mem::take(&mut space.docs);
            for (&seq, doc) in &docs {
                space.post(seq, doc);
                if doc.archived_lsn > 0 {
                    self.archived
                        .insert(doc.archived_lsn, (namespace.clone(), seq));
                }
            }
            space.docs = docs;
        }
    }

    /// Canonical lines for `ShardState::digest`.
    pub fn digest(&self, lines: &mut Vec<String>) {
        for (ns, space) in &self.spaces {
            for (seq, d) in &space.docs {
                let attrs: Vec<(&str, &AttrValue)> = space.attrs_of(d).collect();
                lines.push(format!(
                    "search {ns}/{} #{seq} {} {:?} {} {} {} {:?}",
                    d.run_id,
                    space.workflow_of(d),
                    d.status,
                    d.started_at_ms,
                    d.updated_at_ms,
                    d.archived_lsn,
                    attrs
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_order_as_numbers() {
        let mut keys: Vec<IndexKey> = [3.5, -2.0, 0.0, -10.25, 100.0]
            .into_iter()
            .map(IndexKey::num)
            .collect();
        keys.sort();
        let back: Vec<IndexKey> = [-10.25, -2.0, 0.0, 3.5, 100.0]
            .into_iter()
            .map(IndexKey::num)
            .collect();
        assert_eq!(keys, back);
    }

    #[test]
    fn postings_follow_documents_through_updates_archive_and_forgetting() {
        let mut ix = SearchIndex::default();
        let c = |v: &str| vec![("customer".to_string(), AttrValue::Str(v.into()))];
        ix.insert("ns", 1, "r1", "w", 1, c("c-1"));
        ix.insert("ns", 2, "r2", "w", 1, c("c-1"));
        let posting = |ix: &SearchIndex, v: &str| {
            ix.space("ns").and_then(|s| {
                s.postings
                    .get("customer")
                    .and_then(|p| p.get(&IndexKey::Str(v.into())).cloned())
            })
        };
        assert_eq!(posting(&ix, "c-1").unwrap().len(), 2);
        ix.set_attrs("ns", "r2", c("c-2"));
        assert_eq!(posting(&ix, "c-1").unwrap().len(), 1);
        assert_eq!(posting(&ix, "c-2").unwrap().len(), 1);
        ix.finished("ns", "r1", WorkflowRunStatus::Completed, 5);
        ix.archived("ns", "r1", 10);
        // A snapshot holds the documents; the postings come back.
        let bytes = rmp_serde::to_vec(&ix).unwrap();
        let mut back: SearchIndex = rmp_serde::from_slice(&bytes).unwrap();
        back.relink();
        assert_eq!(posting(&back, "c-1").unwrap().len(), 1);
        // Names are numbered the same after the load: a new run of the same values.
        back.insert("ns", 3, "r3", "w", 1, c("c-1"));
        assert_eq!(posting(&back, "c-1").unwrap().len(), 2);
        assert_eq!(back.space("ns").unwrap().names.len(), 1);
        back.forget(11);
        assert!(back.doc("ns", "r1").is_none());
        assert!(back.doc("ns", "r2").is_some());
        assert_eq!(posting(&back, "c-1").unwrap().len(), 1);
    }
}
