//! Workflow definitions on this shard: a creation or an enable/disable planned against what the
//! shard has (the coordinator commits it, `definitions.rs`), and their reads.

use crate::core::Core;
use crate::fold::record::Record;
use flo_protocol::check_namespace;
use flo_protocol::{ErrorValue, ValidationIssue, WorkflowInfo};

pub const WORKFLOW_YAML_BYTES_MAX: usize = 1 << 20;
/// Largest definition record (its YAML and the validated definition), below the log's
/// record limit.
pub const DEFINITION_RECORD_BYTES_MAX: usize = 6 << 20;

/// Validates a new definition; `None` when this exact version exists already.
pub fn plan_create(
    core: &Core,
    namespace: &str,
    yaml: &str,
    now_ms: u64,
) -> Result<(Option<Record>, String, String, Vec<ValidationIssue>), ErrorValue> {
    check_namespace(namespace)?;
    if yaml.len() > WORKFLOW_YAML_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "a workflow definition must be at most {WORKFLOW_YAML_BYTES_MAX} bytes"
        )));
    }
    let validated = flo_workflow::parse_workflow(yaml).map_err(|issues| {
        let lines: Vec<String> = issues
            .iter()
            .map(|i| match i.path.as_str() {
                "" => format!("  {}: {}", i.code, i.message),
                path => format!("  {} {path}: {}", i.code, i.message),
            })
            .collect();
        ErrorValue::bad_request(format!(
            "invalid workflow definition:\n{}",
            lines.join("\n")
        ))
    })?;
    let (name, version) = (validated.def.name.clone(), validated.def.version.clone());
    if let Some(existing) = core
        .state()
        .workflows
        .def(namespace, &name)
        .and_then(|e| e.get(Some(&version)))
    {
        if existing.yaml == yaml {
            return Ok((None, name, version, validated.warnings));
        }
        return Err(ErrorValue::conflict(format!(
            "workflow {name:?} version {version:?} exists with a different definition; \
             give the new definition another version"
        )));
    }
    let record = Record::WorkflowDefined {
        namespace: namespace.to_string(),
        name: name.clone(),
        version: version.clone(),
        yaml: yaml.to_string(),
        at_ms: now_ms,
        def: Some(Box::new(validated.def)),
    };
    // The text is bounded and so is its expansion, but the definition the record carries
    // beside it normalises every step: refuse here what the log could not hold.
    let bytes = record.encoded_len();
    if bytes > DEFINITION_RECORD_BYTES_MAX {
        return Err(ErrorValue::bad_request(format!(
            "the workflow definition takes {bytes} bytes once validated and stored; at most \
             {DEFINITION_RECORD_BYTES_MAX} are allowed: split it into child workflows"
        )));
    }
    Ok((Some(record), name, version, validated.warnings))
}

pub fn plan_set_enabled(
    core: &Core,
    namespace: &str,
    name: &str,
    enabled: bool,
    now_ms: u64,
) -> Result<Record, ErrorValue> {
    find_entry(core, namespace, name)?;
    Ok(Record::WorkflowEnabled {
        namespace: namespace.to_string(),
        name: name.to_string(),
        enabled,
        at_ms: now_ms,
    })
}

pub(super) fn find_entry<'a>(
    core: &'a Core,
    namespace: &str,
    name: &str,
) -> Result<&'a crate::fold::workflow_defs::WfEntry, ErrorValue> {
    core.state().workflows.def(namespace, name).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {name:?} is not defined in namespace {namespace:?} \
             (create it with flo workflow create -f FILE)"
        ))
    })
}

pub fn info(
    core: &Core,
    namespace: &str,
    name: &str,
    version: Option<&str>,
) -> Result<WorkflowInfo, ErrorValue> {
    let entry = find_entry(core, namespace, name)?;
    let v = entry.get(version).ok_or_else(|| {
        ErrorValue::not_found(format!(
            "workflow {name:?} has no version {:?}",
            version.unwrap_or_default()
        ))
    })?;
    Ok(workflow_info(namespace, name, entry, v))
}

pub fn list(core: &Core, namespace: &str) -> Vec<WorkflowInfo> {
    crate::fold::workflow_defs::sorted_defs(&core.state().workflows.defs, namespace)
        .into_iter()
        .filter_map(|(name, entry)| {
            entry
                .versions
                .last()
                .map(|v| workflow_info(namespace, name, entry, v))
        })
        .collect()
}

fn workflow_info(
    namespace: &str,
    name: &str,
    entry: &crate::fold::workflow_defs::WfEntry,
    v: &crate::fold::workflow_defs::WfVersion,
) -> WorkflowInfo {
    WorkflowInfo {
        namespace: namespace.to_string(),
        name: name.to_string(),
        version: v.version.clone(),
        versions: entry.versions.iter().map(|x| x.version.clone()).collect(),
        enabled: entry.enabled,
        yaml: v.yaml.clone(),
        created_at_ms: v.created_at_ms,
        updated_at_ms: entry.updated_at_ms,
    }
}
