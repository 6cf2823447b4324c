//! Workflow definitions as every shard holds them: the versions of each workflow (the
//! YAML as given and the definition it validated to), enabled or not, and how a shard's
//! definitions are brought to the coordinator's at start-up (`plan_sync`).

use super::record::Record;
use crate::tables::HashMap;
use flo_workflow::WorkflowDef;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Every workflow's versions on this shard, by (namespace, name). In a snapshot, the map
/// itself.
#[derive(Default, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct WorkflowDefs {
    entries: HashMap<(String, String), WfEntry>,
}

impl WorkflowDefs {
    /// Every workflow: ((namespace, name), entry).
    pub fn iter(&self) -> impl Iterator<Item = (&(String, String), &WfEntry)> {
        self.entries.iter()
    }

    /// Every definition, for `plan_sync` on the other shards.
    pub fn sync_entries(&self) -> Vec<WfSyncEntry> {
        self.entries
            .iter()
            .map(|((namespace, name), e)| sync_entry(namespace, name, e))
            .collect()
    }

    /// One workflow's definitions, for `plan_sync` on the other shards.
    pub fn sync_entry(&self, namespace: &str, name: &str) -> Option<WfSyncEntry> {
        self.def(namespace, name)
            .map(|e| sync_entry(namespace, name, e))
    }

    /// The records that bring this shard's definitions to `entries` (the coordinator's):
    /// versions it lacks, and the enabled flag.
    pub fn plan_sync(&self, entries: &[WfSyncEntry]) -> Vec<Record> {
        let mut records = Vec::new();
        for e in entries {
            let mine = self.def(&e.namespace, &e.name);
            // From the first version that differs (absent, other YAML, other place), log
            // the coordinator's versions in its order: `apply_defined` appends, so the
            // latest ends up the same as the coordinator's.
            let same = mine.map_or(0, |m| {
                m.versions
                    .iter()
                    .zip(&e.versions)
                    .take_while(|(v, theirs)| v.version == theirs.version && v.yaml == theirs.yaml)
                    .count()
            });
            for v in &e.versions[same..] {
                records.push(Record::WorkflowDefined {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    version: v.version.clone(),
                    yaml: v.yaml.clone(),
                    at_ms: v.created_at_ms,
                    def: v.def.as_ref().map(|d| Box::new((**d).clone())),
                });
            }
            if mine.is_none_or(|m| m.enabled) != e.enabled {
                records.push(Record::WorkflowEnabled {
                    namespace: e.namespace.clone(),
                    name: e.name.clone(),
                    enabled: e.enabled,
                    at_ms: e.updated_at_ms,
                });
            }
        }
        records
    }

    pub fn def(&self, namespace: &str, name: &str) -> Option<&WfEntry> {
        self.entries.get(crate::tables::pair(&(namespace, name)))
    }

    pub fn apply_defined(
        &mut self,
        namespace: String,
        name: String,
        version: String,
        yaml: String,
        at_ms: u64,
        def: Option<Box<WorkflowDef>>,
    ) {
        let def = def.map(|d| Arc::new(*d)).ok_or_else(|| {
            format!(
                "version {version:?} of this workflow no longer validates; create it again \
                 with a new version"
            )
        });
        let entry = self.entries.entry((namespace, name)).or_insert(WfEntry {
            versions: Vec::new(),
            enabled: true,
            updated_at_ms: at_ms,
        });
        entry.versions.retain(|v| v.version != version);
        entry.versions.push(WfVersion {
            version,
            yaml,
            def,
            created_at_ms: at_ms,
        });
        entry.updated_at_ms = at_ms;
    }

    pub fn apply_enabled(&mut self, namespace: &str, name: &str, enabled: bool, at_ms: u64) {
        if let Some(entry) = self
            .entries
            .get_mut(crate::tables::pair(&(namespace, name)))
        {
            entry.enabled = enabled;
            entry.updated_at_ms = at_ms;
        }
    }
}

/// One version of a workflow.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct WfVersion {
    pub version: String,
    pub yaml: String,
    /// None when the YAML no longer parses (a run of it fails with the reason).
    pub def: Result<Arc<WorkflowDef>, String>,
    pub created_at_ms: u64,
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct WfEntry {
    /// Oldest first; the last is the latest.
    pub versions: Vec<WfVersion>,
    pub enabled: bool,
    pub updated_at_ms: u64,
}

impl WfEntry {
    pub fn get(&self, version: Option<&str>) -> Option<&WfVersion> {
        match version {
            Some(v) => self.versions.iter().find(|x| x.version == v),
            None => self.versions.last(),
        }
    }
}

/// One workflow's definitions as the coordinator has them (start-up sync).
#[derive(Debug, Clone)]
pub struct WfSyncEntry {
    pub namespace: String,
    pub name: String,
    pub enabled: bool,
    pub updated_at_ms: u64,
    /// Oldest first.
    pub versions: Vec<WfSyncVersion>,
}

#[derive(Debug, Clone)]
pub struct WfSyncVersion {
    pub version: String,
    pub yaml: String,
    pub created_at_ms: u64,
    pub def: Option<Arc<WorkflowDef>>,
}

fn sync_entry(namespace: &str, name: &str, e: &WfEntry) -> WfSyncEntry {
    WfSyncEntry {
        namespace: namespace.to_string(),
        name: name.to_string(),
        enabled: e.enabled,
        updated_at_ms: e.updated_at_ms,
        versions: e
            .versions
            .iter()
            .map(|v| WfSyncVersion {
                version: v.version.clone(),
                yaml: v.yaml.clone(),
                created_at_ms: v.created_at_ms,
                def: v.def.as_ref().ok().cloned(),
            })
            .collect(),
    }
}

/// Definitions as sorted (name → entry) for listing.
pub fn sorted_defs<'a>(defs: &'a WorkflowDefs, namespace: &str) -> BTreeMap<&'a str, &'a WfEntry> {
    defs.iter()
        .filter(|((ns, _), _)| ns == namespace)
        .map(|((_, name), e)| (name.as_str(), e))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> Option<Box<WorkflowDef>> {
        flo_workflow::parse_workflow(yaml)
            .ok()
            .map(|v| Box::new(v.def))
    }

    fn yaml(version: &str) -> String {
        format!(
            "kind: Workflow\nname: w\nversion: \"{version}\"\nstart:\n  run: \"@actions/a\"\n  transitions:\n    success: flo.Completed\n"
        )
    }

    #[test]
    fn sync_adds_missing_versions_and_the_enabled_flag_only() {
        let mut coordinator = WorkflowDefs::default();
        let mut other = WorkflowDefs::default();
        for (at, v) in [(1, "1"), (2, "2")] {
            coordinator.apply_defined(
                "ns".into(),
                "w".into(),
                v.into(),
                yaml(v),
                at,
                parsed(&yaml(v)),
            );
        }
        coordinator.apply_enabled("ns", "w", false, 3);
        other.apply_defined(
            "ns".into(),
            "w".into(),
            "1".into(),
            yaml("1"),
            1,
            parsed(&yaml("1")),
        );

        let records = other.plan_sync(&coordinator.sync_entries());
        assert_eq!(records.len(), 2, "{records:?}");
        assert!(
            matches!(&records[0], Record::WorkflowDefined { version, at_ms: 2, .. } if version == "2")
        );
        assert!(matches!(
            &records[1],
            Record::WorkflowEnabled { enabled: false, .. }
        ));
        for r in records {
            match r {
                Record::WorkflowDefined {
                    namespace,
                    name,
                    version,
                    yaml,
                    at_ms,
                    def,
                } => other.apply_defined(namespace, name, version, yaml, at_ms, def),
                Record::WorkflowEnabled {
                    namespace,
                    name,
                    enabled,
                    at_ms,
                } => other.apply_enabled(&namespace, &name, enabled, at_ms),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(other.plan_sync(&coordinator.sync_entries()).is_empty());
        let entry = other.def("ns", "w").unwrap();
        assert!(!entry.enabled);
        assert_eq!(entry.get(None).unwrap().version, "2");
    }

    #[test]
    fn sync_keeps_the_coordinators_latest_when_a_version_differs() {
        let mut coordinator = WorkflowDefs::default();
        let mut other = WorkflowDefs::default();
        let changed = yaml("2").replace("flo.Completed", "flo.Failed");
        for (w, two) in [(&mut coordinator, yaml("2")), (&mut other, changed)] {
            w.apply_defined(
                "ns".into(),
                "w".into(),
                "1".into(),
                yaml("1"),
                1,
                parsed(&yaml("1")),
            );
            let def = parsed(&two);
            w.apply_defined("ns".into(), "w".into(), "2".into(), two, 2, def);
            w.apply_defined(
                "ns".into(),
                "w".into(),
                "3".into(),
                yaml("3"),
                3,
                parsed(&yaml("3")),
            );
        }
        for r in other.plan_sync(&coordinator.sync_entries()) {
            let Record::WorkflowDefined {
                namespace,
                name,
                version,
                yaml,
                at_ms,
                def,
            } = r
            else {
                panic!("unexpected {r:?}");
            };
            other.apply_defined(namespace, name, version, yaml, at_ms, def);
        }
        let versions = |w: &WorkflowDefs| -> Vec<(String, String)> {
            let entry = w.def("ns", "w").unwrap();
            entry
                .versions
                .iter()
                .map(|v| (v.version.clone(), v.yaml.clone()))
                .collect()
        };
        assert_eq!(versions(&other), versions(&coordinator));
        assert!(other.plan_sync(&coordinator.sync_entries()).is_empty());
    }
}
