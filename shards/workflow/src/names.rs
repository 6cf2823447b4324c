//! The forms a definition's names take: run targets, workflow and step names, versions,
//! and the `$.` paths of input mappings.

use crate::bounds::{
    MAPPING_PATH_NESTING_MAX, STEP_NAME_BYTES_MAX, VERSION_BYTES_MAX, WORKFLOW_NAME_BYTES_MAX,
};
use crate::def::{START_STEP, Target};
use crate::mapping::leading_names;
use flo_protocol::check_action_name;
use std::collections::BTreeSet;

/// Names listed in a message before it says "...".
const NAMES_LISTED_MAX: usize = 20;

/// `a, b, c` (at most [`NAMES_LISTED_MAX`], then `...`), or `none`.
pub(crate) fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let mut names = names.peekable();
    if names.peek().is_none() {
        return "none".to_owned();
    }
    let mut out: Vec<String> = names
        .by_ref()
        .take(NAMES_LISTED_MAX)
        .map(str::to_owned)
        .collect();
    if names.next().is_some() {
        out.push("...".to_owned());
    }
    out.join(", ")
}

/// A run target: `@actions/NAME`, `@workflow/NAME`, `@workflow/NAME:VERSION` or `@plan/NAME`.
pub fn parse_target(run: &str) -> Result<Target, String> {
    if let Some(name) = run.strip_prefix("@actions/") {
        check_action_name(name).map_err(|e| format!("`{run}`: {e}"))?;
        return Ok(Target::Action(name.to_owned()));
    }
    if let Some(rest) = run.strip_prefix("@workflow/") {
        let (name, version) = match rest.split_once(':') {
            Some((name, version)) => (name, Some(version)),
            None => (rest, None),
        };
        check_workflow_name(name).map_err(|why| format!("`{run}`: the workflow name {why}"))?;
        if let Some(version) = version {
            check_version(version).map_err(|why| format!("`{run}`: the version {why}"))?;
        }
        return Ok(Target::Workflow {
            name: name.to_owned(),
            version: version.map(str::to_owned),
        });
    }
    if let Some(name) = run.strip_prefix("@plan/") {
        if name.is_empty() || name.contains(char::is_whitespace) {
            return Err(format!(
                "`{run}`: the plan name must be non-empty and without whitespace"
            ));
        }
        return Ok(Target::Plan(name.to_owned()));
    }
    Err(format!(
        "`{run}` is not a target: use `@actions/NAME`, `@workflow/NAME`, `@workflow/NAME:VERSION` or `@plan/NAME`"
    ))
}

/// Workflow names: 1 to [`WORKFLOW_NAME_BYTES_MAX`] bytes, no whitespace or control characters,
/// no `:` (it separates the version in `@workflow/NAME:VERSION`). Err: why, to follow "the name".
pub fn check_workflow_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("is empty".to_owned());
    }
    if name.len() > WORKFLOW_NAME_BYTES_MAX {
        return Err(format!(
            "is {} bytes; at most {WORKFLOW_NAME_BYTES_MAX} are allowed",
            name.len()
        ));
    }
    if name.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{name:?} contains whitespace or control characters; use e.g. `-` instead"
        ));
    }
    if name.contains(':') {
        return Err(format!(
            "{name:?} contains `:`, which separates the version in `@workflow/NAME:VERSION`"
        ));
    }
    Ok(())
}

/// Versions: 1 to [`VERSION_BYTES_MAX`] bytes, no whitespace or control characters.
pub fn check_version(version: &str) -> Result<(), String> {
    if version.is_empty() {
        return Err("is empty".to_owned());
    }
    if version.len() > VERSION_BYTES_MAX {
        return Err(format!(
            "is {} bytes; at most {VERSION_BYTES_MAX} are allowed",
            version.len()
        ));
    }
    if version.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{version:?} contains whitespace or control characters"
        ));
    }
    Ok(())
}

/// Step and custom terminal names: 1 to [`STEP_NAME_BYTES_MAX`] ASCII letters, digits, `_`,
/// `-`, `.`; not `_start`, not starting with `flo.`.
pub(crate) fn check_step_name(name: &str) -> Result<(), String> {
    if name == START_STEP {
        return Err(
            "`_start` is reserved for the start step, which is defined under `start:`".to_owned(),
        );
    }
    if name.starts_with("flo.") {
        return Err("names starting with `flo.` are reserved for built-in terminals".to_owned());
    }
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if name.is_empty() || name.len() > STEP_NAME_BYTES_MAX || !ok_chars {
        return Err(format!(
            "the name is invalid: use 1 to {STEP_NAME_BYTES_MAX} letters, digits, `_`, `-` or `.`"
        ));
    }
    Ok(())
}

const MAPPING_PATH_FORMS: &str = "`$.input...`, `$.state...`, `$.steps.NAME.output...`, `$.steps.NAME.outcome`, `$.flo.run_id`, `$.flo.timestamp`";

/// Whether a `$.` mapping string is valid JSONPath of an allowed form naming a known step.
pub(crate) fn check_mapping_path(path: &str, steps: &BTreeSet<String>) -> Result<(), String> {
    let nesting = nesting(path);
    if nesting > MAPPING_PATH_NESTING_MAX {
        return Err(format!(
            "nests brackets and parentheses {nesting} deep; at most {MAPPING_PATH_NESTING_MAX} \
             levels are allowed"
        ));
    }
    if let Err(err) = crate::mapping::parse_json_path(path) {
        return Err(format!(
            "is not valid JSONPath (RFC 9535): {err}; names with characters other than letters, digits and `_` need brackets, e.g. `$.steps['check-status'].output`"
        ));
    }
    let known_step = |step: &str| {
        if step == START_STEP || steps.contains(step) {
            Ok(())
        } else {
            Err(format!(
                "names step `{step}`, which is not defined (steps: {})",
                listed(std::iter::once(START_STEP).chain(steps.iter().map(String::as_str)))
            ))
        }
    };
    let (names, rest) = leading_names(&path[1..], 3);
    match names[..] {
        ["input", ..] | ["state", ..] => Ok(()),
        ["steps", step, "output", ..] => known_step(step),
        ["steps", step, "outcome"] if rest.is_empty() => known_step(step),
        ["flo", "run_id" | "timestamp"] if rest.is_empty() => Ok(()),
        _ => Err(format!(
            "is not one of the paths allowed: {MAPPING_PATH_FORMS}"
        )),
    }
}

/// How deep `(` and `[` nest in `path`. Never less than the parser's nesting: every opening
/// bracket counts (even in a string literal), a closing one only outside string literals.
fn nesting(path: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut quote = None::<char>;
    let mut escaped = false;
    for c in path.chars() {
        if matches!(c, '(' | '[') {
            depth += 1;
            deepest = deepest.max(depth);
        }
        match (quote, c) {
            (Some(_), _) if escaped => escaped = false,
            (Some(_), '\\') => escaped = true,
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            (None, ')' | ']') => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The signal type a `waitForState:` step waits for: only `update-state --continue` sends
/// it (users' signal types may not start with `flo.`).
pub const STATE_SIGNAL: &str = "flo.state";

/// Whether a signal type is the engine's own (`flo.`...), refused from users.
pub fn reserved_signal_type(signal_type: &str) -> bool {
    signal_type.starts_with("flo.")
}
