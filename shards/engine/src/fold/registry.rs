//! Action definitions. Changes are ordered by the coordinator shard and logged on every
//! shard; each shard's registry is the fold of those records.

use crate::fold::record::{ActionDefRecord, Record};
use crate::tables::HashMap;
use flo_protocol::{
    ActionInfo, ActionKind, ActionSpec, ErrorValue, WASM_ENTRYPOINT_BYTES_MAX, check_action_name,
    check_namespace,
};
use std::collections::BTreeMap;
use std::sync::Arc;

pub const TIMEOUT_MS_DEFAULT: u64 = 30_000;
pub const TIMEOUT_MS_MAX: u64 = 24 * 3600 * 1000;
/// The longest a WebAssembly action may run: a guest holds one of its shard's 4 execution
/// slots while it runs. Longer work belongs to a worker action (leases up to a day).
pub const WASM_TIMEOUT_MS_MAX: u64 = 10 * 60 * 1000;
pub const MAX_RETRIES_DEFAULT: u32 = 3;
pub const MAX_RETRIES_MAX: u32 = 100;
pub const RETRY_DELAY_MS_DEFAULT: u64 = 1000;
pub const RETRY_DELAY_MS_MAX: u64 = 24 * 3600 * 1000;
pub const MEMORY_LIMIT_MB_DEFAULT: u32 = 16;
pub const MEMORY_LIMIT_MB_MAX: u32 = 256;
pub const DESCRIPTION_BYTES_MAX: usize = 4096;
pub use crate::fold::record::ENTRYPOINT_DEFAULT;

/// Exports of the ABI that are not entrypoints.
const ABI_EXPORTS: [&str; 5] = ["memory", "alloc", "dealloc", "init", "describe"];

/// A registration's `wasm_entrypoint`: for a wasm action, 1 to
/// `WASM_ENTRYPOINT_BYTES_MAX` printable ASCII characters and none of the ABI's other
/// exports; `handle` is kept as none.
pub fn check_entrypoint(
    kind: ActionKind,
    entrypoint: Option<String>,
) -> Result<Option<String>, ErrorValue> {
    let Some(name) = entrypoint else {
        return Ok(None);
    };
    if kind != ActionKind::Wasm {
        return Err(ErrorValue::bad_request(
            "wasm_entrypoint names an export of a wasm module; a user action has none",
        ));
    }
    let printable = name.bytes().all(|b| b.is_ascii_graphic());
    if name.is_empty() || name.len() > WASM_ENTRYPOINT_BYTES_MAX || !printable {
        return Err(ErrorValue::bad_request(format!(
            "wasm_entrypoint must be 1 to {WASM_ENTRYPOINT_BYTES_MAX} printable ASCII \
             characters (an export name), got {name:?}"
        )));
    }
    if ABI_EXPORTS.contains(&name.as_str()) {
        return Err(ErrorValue::bad_request(format!(
            "wasm_entrypoint {name:?} is one of the ABI's other exports ({}); name the \
             function that handles an input",
            ABI_EXPORTS.join(", ")
        )));
    }
    Ok((name != ENTRYPOINT_DEFAULT).then_some(name))
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ActionDef {
    pub def: ActionDefRecord,
    /// Deleted: kept so a re-registration continues the version sequence.
    pub removed: bool,
    /// The module's bytes, shared with the executions that run it (`def.wasm`, set again
    /// by `relink` after a snapshot is loaded).
    #[serde(skip)]
    pub module: Option<Arc<[u8]>>,
    /// Whether the module may call `flo.state_get` or `flo.state_set` (its bytes name
    /// them): only then does a workflow step's execution get its run's state.
    #[serde(skip)]
    pub reads_state: bool,
}

/// Whether `module` (binary or WAT text) may import `flo.state_get` or `flo.state_set`:
/// an import's name is in its bytes either way. A false positive costs one serialization
/// of the run's state per execution.
fn reads_state(module: Option<&[u8]>) -> bool {
    module.is_some_and(|m| m.windows(9).any(|w| w == b"state_get" || w == b"state_set"))
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Registry {
    spaces: HashMap<String, BTreeMap<String, ActionDef>>,
}

fn bounded(
    field: &str,
    value: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> Result<u64, ErrorValue> {
    let v = value.unwrap_or(default);
    if v < min || v > max {
        return Err(ErrorValue::bad_request(format!(
            "{field} must be {min} to {max}, got {v}"
        )));
    }
    Ok(v)
}

impl Registry {
    /// A live (not deleted) action.
    pub fn get(&self, namespace: &str, name: &str) -> Option<&ActionDefRecord> {
        self.spaces
            .get(namespace)?
            .get(name)
            .filter(|a| !a.removed)
            .map(|a| &a.def)
    }

    pub fn list(&self, namespace: &str) -> Vec<(&str, &ActionDefRecord)> {
        let Some(space) = self.spaces.get(namespace) else {
            return Vec::new();
        };
        space
            .iter()
            .filter(|(_, a)| !a.removed)
            .map(|(n, a)| (n.as_str(), &a.def))
            .collect()
    }

    /// The module of a live WASM action.
    pub fn module(&self, namespace: &str, name: &str) -> Option<&Arc<[u8]>> {
        self.spaces
            .get(namespace)?
            .get(name)
            .filter(|a| !a.removed)?
            .module
            .as_ref()
    }

    /// Whether a live WASM action's module may use its run's state (`flo.state_get`,
    /// `flo.state_set`).
    pub fn reads_state(&self, namespace: &str, name: &str) -> bool {
        self.spaces
            .get(namespace)
            .and_then(|s| s.get(name))
            .is_some_and(|a| !a.removed && a.reads_state)
    }

    /// Every definition, deleted ones included (for shards catching up).
    pub fn all(&self) -> impl Iterator<Item = (&str, &str, &ActionDef)> {
        self.spaces
            .iter()
            .flat_map(|(ns, space)| space.iter().map(move |(n, a)| (ns.as_str(), n.as_str(), a)))
    }

    /// Validates a registration and builds its record; `describe` is what the compiled
    /// module's `describe` export said (the caller compiles the module first).
    pub fn plan_register(
        &self,
        spec: ActionSpec,
        wasm_describe: Option<String>,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        check_namespace(&spec.namespace)?;
        check_action_name(&spec.name)?;
        match (spec.kind, &spec.wasm) {
            (ActionKind::Wasm, None) => {
                return Err(ErrorValue::bad_request(
                    "a wasm action needs a module (--wasm FILE)",
                ));
            }
            (ActionKind::User, Some(_)) => {
                return Err(ErrorValue::bad_request(
                    "a user action cannot carry a wasm module",
                ));
            }
            _ => {}
        }
        if spec
            .description
            .as_ref()
            .is_some_and(|d| d.len() > DESCRIPTION_BYTES_MAX)
        {
            return Err(ErrorValue::bad_request(format!(
                "description must be at most {DESCRIPTION_BYTES_MAX} bytes"
            )));
        }
        let timeout_ms = bounded(
            "timeout_ms",
            spec.timeout_ms,
            TIMEOUT_MS_DEFAULT,
            1,
            TIMEOUT_MS_MAX,
        )?;
        if spec.kind == ActionKind::Wasm && timeout_ms > WASM_TIMEOUT_MS_MAX {
            return Err(ErrorValue::bad_request(format!(
                "timeout_ms of a wasm action must be at most {WASM_TIMEOUT_MS_MAX} (a running \
                 guest holds one of its shard's execution slots); run longer work as a user \
                 action served by a worker"
            )));
        }
        let max_retries = bounded(
            "max_retries",
            spec.max_retries.map(u64::from),
            MAX_RETRIES_DEFAULT.into(),
            0,
            MAX_RETRIES_MAX.into(),
        )?;
        let retry_delay_ms = bounded(
            "retry_delay_ms",
            spec.retry_delay_ms,
            RETRY_DELAY_MS_DEFAULT,
            0,
            RETRY_DELAY_MS_MAX,
        )?;
        let memory_limit_mb = bounded(
            "memory_limit_mb",
            spec.memory_limit_mb.map(u64::from),
            MEMORY_LIMIT_MB_DEFAULT.into(),
            1,
            MEMORY_LIMIT_MB_MAX.into(),
        )?;
        let wasm_entrypoint = check_entrypoint(spec.kind, spec.wasm_entrypoint)?;
        let previous = self
            .spaces
            .get(&spec.namespace)
            .and_then(|s| s.get(&spec.name));
        let live = previous.filter(|a| !a.removed);
        let def = ActionDefRecord {
            kind: spec.kind,
            version: previous.map_or(1, |a| a.def.version + 1),
            enabled: live.is_none_or(|a| a.def.enabled),
            timeout_ms,
            max_retries: max_retries as u32,
            retry_delay_ms,
            description: spec.description,
            memory_limit_mb: memory_limit_mb as u32,
            wasm: spec.wasm,
            wasm_describe,
            created_at_ms: live.map_or(now_ms, |a| a.def.created_at_ms),
            updated_at_ms: now_ms,
            wasm_entrypoint,
        };
        Ok(Record::ActionDefined {
            namespace: spec.namespace,
            name: spec.name,
            def,
        })
    }

    pub fn require(&self, namespace: &str, name: &str) -> Result<&ActionDefRecord, ErrorValue> {
        self.get(namespace, name).ok_or_else(|| {
            ErrorValue::not_found(format!(
                "action {name:?} is not registered in namespace {namespace:?}"
            ))
        })
    }

    pub fn plan_delete(
        &self,
        namespace: &str,
        name: &str,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        self.require(namespace, name)?;
        Ok(Record::ActionRemoved {
            namespace: namespace.into(),
            name: name.into(),
            at_ms: now_ms,
        })
    }

    pub fn plan_set_enabled(
        &self,
        namespace: &str,
        name: &str,
        enabled: bool,
        now_ms: u64,
    ) -> Result<Record, ErrorValue> {
        self.require(namespace, name)?;
        Ok(Record::ActionEnabled {
            namespace: namespace.into(),
            name: name.into(),
            enabled,
            at_ms: now_ms,
        })
    }

    /// The action to invoke: registered and enabled.
    pub fn invocable(&self, namespace: &str, name: &str) -> Result<&ActionDefRecord, ErrorValue> {
        let def = self.require(namespace, name)?;
        if !def.enabled {
            return Err(ErrorValue::conflict(format!(
                "action {name:?} is disabled; enable it with `flo action enable {name}`"
            )));
        }
        Ok(def)
    }

    /// Records that make this registry equal to `target` (the coordinator's).
    pub fn plan_sync(&self, target: Vec<(String, String, ActionDef)>, now_ms: u64) -> Vec<Record> {
        let mut records = Vec::new();
        let mut known = crate::tables::HashSet::default();
        for (namespace, name, def) in target {
            known.insert((namespace.clone(), name.clone()));
            let mine = self.spaces.get(&namespace).and_then(|s| s.get(&name));
            let same = mine.is_some_and(|m| {
                m.removed == def.removed
                    && m.def.version == def.def.version
                    && m.def.enabled == def.def.enabled
            });
            if same {
                continue;
            }
            if def.removed {
                if mine.is_some_and(|m| !m.removed) {
                    records.push(Record::ActionRemoved {
                        namespace,
                        name,
                        at_ms: now_ms,
                    });
                }
                continue;
            }
            records.push(Record::ActionDefined {
                namespace,
                name,
                def: def.def,
            });
        }
        for (namespace, name, mine) in self.all() {
            if !mine.removed && !known.contains(&(namespace.to_string(), name.to_string())) {
                records.push(Record::ActionRemoved {
                    namespace: namespace.into(),
                    name: name.into(),
                    at_ms: now_ms,
                });
            }
        }
        records
    }

    /// Rebuilds what a snapshot does not carry (the shared module bytes).
    pub fn relink(&mut self) {
        for def in self.spaces.values_mut().flat_map(|s| s.values_mut()) {
            def.module = def.def.wasm.as_deref().map(Arc::from);
            def.reads_state = reads_state(def.def.wasm.as_deref());
        }
    }

    pub fn apply_defined(&mut self, namespace: String, name: String, def: ActionDefRecord) {
        self.spaces.entry(namespace).or_default().insert(
            name,
            ActionDef {
                module: def.wasm.as_deref().map(Arc::from),
                reads_state: reads_state(def.wasm.as_deref()),
                def,
                removed: false,
            },
        );
    }

    pub fn apply_removed(&mut self, namespace: &str, name: &str, at_ms: u64) {
        if let Some(a) = self.spaces.get_mut(namespace).and_then(|s| s.get_mut(name)) {
            a.removed = true;
            a.def.wasm = None;
            a.module = None;
            a.def.updated_at_ms = at_ms;
        }
    }

    pub fn apply_enabled(&mut self, namespace: &str, name: &str, enabled: bool, at_ms: u64) {
        if let Some(a) = self.spaces.get_mut(namespace).and_then(|s| s.get_mut(name)) {
            a.def.enabled = enabled;
            a.def.updated_at_ms = at_ms;
        }
    }
}

pub fn action_info(namespace: &str, name: &str, def: &ActionDefRecord) -> ActionInfo {
    ActionInfo {
        namespace: namespace.into(),
        name: name.into(),
        kind: def.kind,
        version: def.version,
        enabled: def.enabled,
        timeout_ms: def.timeout_ms,
        max_retries: def.max_retries,
        retry_delay_ms: def.retry_delay_ms,
        description: def.description.clone(),
        memory_limit_mb: def.memory_limit_mb,
        wasm_bytes: def.wasm.as_ref().map(|w| w.len() as u64),
        wasm_describe: def.wasm_describe.clone(),
        wasm_entrypoint: (def.kind == ActionKind::Wasm).then(|| def.entrypoint().to_string()),
        created_at_ms: def.created_at_ms,
        updated_at_ms: def.updated_at_ms,
    }
}
