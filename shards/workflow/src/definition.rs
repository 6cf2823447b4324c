//! A workflow definition from YAML: parsed into raw structs (`parse`), then checked and
//! normalised (`validate`).

use crate::def::Validated;
use crate::issues::{IssueCode, issue};
use crate::parse::parse_raw;
use crate::validate::validate;
use crate::yaml_depth::{YAML_NESTING_MAX, YamlExcess, YamlLimits, exceeds};
use flo_protocol::ValidationIssue;

/// Largest definition accepted, in bytes of YAML.
pub const DEFINITION_BYTES_MAX: usize = 1 << 20;
/// Deepest nesting of collections accepted (see `yaml_depth`).
pub const DEFINITION_NESTING_MAX: usize = YAML_NESTING_MAX;
/// Largest definition accepted once its YAML aliases are expanded (bytes of scalars,
/// about): what is stored and run is the expanded definition.
pub const DEFINITION_EXPANDED_BYTES_MAX: u64 = 2 << 20;

/// Parses and validates a workflow definition. On success, the definition and its warnings;
/// otherwise every error found (see [`IssueCode`] for the codes).
pub fn parse_workflow(yaml: &str) -> Result<Validated, Vec<ValidationIssue>> {
    if yaml.len() > DEFINITION_BYTES_MAX {
        return Err(vec![issue(
            IssueCode::E100,
            "",
            format!(
                "the definition is {} bytes; at most {DEFINITION_BYTES_MAX} are allowed",
                yaml.len()
            ),
        )]);
    }
    if yaml
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(vec![issue(
            IssueCode::E100,
            "",
            "the definition is empty: a workflow needs at least kind, name, version and start"
                .to_string(),
        )]);
    }
    let limits = YamlLimits {
        nesting_max: DEFINITION_NESTING_MAX,
        expanded_bytes_max: DEFINITION_EXPANDED_BYTES_MAX,
    };
    if let Some(excess) = exceeds(yaml, limits) {
        let message = match excess {
            YamlExcess::Nesting => format!(
                "the definition nests collections more than {DEFINITION_NESTING_MAX} levels \
                 deep"
            ),
            YamlExcess::Expanded => format!(
                "the definition is larger than {DEFINITION_EXPANDED_BYTES_MAX} bytes once its \
                 YAML aliases (*name) are expanded; repeat less through aliases"
            ),
        };
        return Err(vec![issue(IssueCode::E100, "", message)]);
    }
    let raw = parse_raw(yaml).map_err(|e| vec![e])?;
    validate(raw)
}
