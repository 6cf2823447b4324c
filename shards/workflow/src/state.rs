//! Per-run state: each run holds a JSON object, initialised from the definition's `state:`
//! defaults with the run's input fields laid over them, into which each step's output is
//! merged — its fields as they are (flow8's automatic mapping), those an `outputMapping:`
//! selects and renames, or nothing with `skipOutputMapping: true`. Mappings read it as
//! `$.state`. This module has the checks (E510) and the pure functions the engine folds
//! runs with.

use crate::def::{Step, WorkflowDef};
use crate::issues::IssueCode;
use crate::mapping::{mapping_paths, resolve_mapping};
use crate::validate::Checker;
use serde_json::{Map, Value, json};

/// Largest state document (as JSON): a step whose output would take it past this fails.
pub const STATE_BYTES_MAX: usize = 1 << 20;

pub use crate::names::{STATE_SIGNAL, reserved_signal_type};

/// A state key's scope (flow8's KV scoping), from its prefix: `global:` (or none) is the
/// run's own state; `flow:` is shared by every run of the definition; `flow_group:` by every
/// run started with the same `--group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Run,
    Flow,
    Group,
}

/// A write to a shared scope: the value, or `{"$increment": n}` — an atomic add to the
/// number there (absent counts as 0).
#[derive(Debug, Clone, PartialEq)]
pub enum ScopedWrite {
    Set(Value),
    Add(i64),
}

/// Where the fields a step sets in its state go: the run's own (prefix `global:` removed)
/// and the shared scopes' (name, write).
#[derive(Debug, Default, PartialEq)]
pub struct Scoped {
    pub run: Map<String, Value>,
    pub flow: Vec<(String, ScopedWrite)>,
    pub group: Vec<(String, ScopedWrite)>,
}

/// Splits fields by their keys' scopes.
pub fn split_scopes(fields: Map<String, Value>) -> Scoped {
    let mut out = Scoped::default();
    for (key, value) in fields {
        let (scope, name) = match key.split_once(':') {
            Some(("global", name)) => (Scope::Run, name.to_string()),
            Some(("flow", name)) => (Scope::Flow, name.to_string()),
            Some(("flow_group", name)) => (Scope::Group, name.to_string()),
            _ => (Scope::Run, key),
        };
        let write = match value.as_object().and_then(|o| o.get("$increment")) {
            Some(n) if value.as_object().is_some_and(|o| o.len() == 1) => {
                ScopedWrite::Add(n.as_i64().unwrap_or(0))
            }
            _ => ScopedWrite::Set(value),
        };
        match (scope, write) {
            (Scope::Run, ScopedWrite::Set(v)) => {
                out.run.insert(name, v);
            }
            (Scope::Run, ScopedWrite::Add(n)) => {
                out.run.insert(name, json!({"$increment": n}));
            }
            (Scope::Flow, w) => out.flow.push((name, w)),
            (Scope::Group, w) => out.group.push((name, w)),
        }
    }
    out
}

/// The KV key a shared scope's field lives at (in the run's namespace).
pub fn scoped_key(scope: Scope, owner: &str, name: &str) -> String {
    use flo_protocol::{SharedScope, shared_state_prefix};
    match scope {
        Scope::Flow => shared_state_prefix(SharedScope::Flow, owner) + name,
        Scope::Group => shared_state_prefix(SharedScope::Group, owner) + name,
        Scope::Run => name.to_string(),
    }
}

/// What a run's state starts as: the defaults, with the input's fields (when the input
/// is an object) laid over them.
pub fn initial_state(def: &WorkflowDef, input: &Value) -> Value {
    let mut state = match &def.state {
        Some(Value::Object(defaults)) => defaults.clone(),
        _ => Map::new(),
    };
    if let Value::Object(fields) = input {
        for (k, v) in fields {
            state.insert(k.clone(), v.clone());
        }
    }
    Value::Object(state)
}

/// The fields `step`'s `output` puts into the state (None: nothing).
pub fn mapped_output(
    step: &Step,
    output: &Value,
    state: &Value,
    input: &Value,
) -> Option<Map<String, Value>> {
    if step.skip_output_mapping {
        return None;
    }
    match &step.output_mapping {
        None => match output {
            Value::Object(fields) => Some(fields.clone()),
            _ => None,
        },
        Some(mapping) => {
            let ctx = json!({"output": output, "state": state, "input": input});
            match resolve_mapping(mapping, &ctx) {
                Value::Object(fields) => Some(fields),
                _ => None,
            }
        }
    }
}

/// Lays `fields` over `state` (an object; anything else is replaced by one).
pub fn merge(state: &mut Value, fields: Map<String, Value>) {
    if !state.is_object() {
        *state = Value::Object(Map::new());
    }
    if let Value::Object(map) = state {
        for (k, v) in fields {
            map.insert(k, v);
        }
    }
}

impl Checker {
    /// `state:`: defaults, a JSON object (text or YAML).
    pub(crate) fn state_defaults(&mut self, raw: Option<serde_yaml::Value>) -> Option<Value> {
        let value = self.json_object("state", raw?)?;
        let bytes = value.to_string().len();
        if bytes > STATE_BYTES_MAX {
            self.error(
                IssueCode::E510,
                "state",
                format!("`state` defaults are {bytes} bytes as JSON; at most {STATE_BYTES_MAX}"),
            );
        }
        Some(value)
    }

    /// `outputMapping:` and `skipOutputMapping:` of the step at `path`.
    pub(crate) fn output_mapping(
        &mut self,
        path: &str,
        raw: Option<serde_yaml::Value>,
        skip: Option<bool>,
    ) -> (Option<Value>, bool) {
        let skip = skip.unwrap_or(false);
        let Some(raw) = raw else {
            return (None, skip);
        };
        let field = format!("{path}.outputMapping");
        if skip {
            self.error(
                IssueCode::E510,
                &field,
                "`outputMapping` and `skipOutputMapping: true` contradict each other: keep one",
            );
        }
        let Some(mapping) = self.json_object(&field, raw) else {
            return (None, skip);
        };
        for p in mapping_paths(&mapping) {
            let root = p.trim_start_matches("$.");
            let allowed = ["output", "state", "input"].iter().any(|r| {
                root == *r
                    || root.starts_with(&format!("{r}."))
                    || root.starts_with(&format!("{r}["))
            });
            let parses = crate::mapping::parse_json_path(&p);
            if !allowed || parses.is_err() {
                self.error(
                    IssueCode::E510,
                    &field,
                    format!(
                        "`{p}`: an output mapping reads `$.output...`, `$.state...` or `$.input...` (valid JSONPath)"
                    ),
                );
            }
        }
        (Some(mapping), skip)
    }

    /// `raw` (JSON text or YAML) as a JSON object, or an E510 at `path`.
    fn json_object(&mut self, path: &str, raw: serde_yaml::Value) -> Option<Value> {
        let value = match raw {
            serde_yaml::Value::String(text) => serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("is text but not JSON ({e})")),
            yaml => serde_json::to_value(&yaml).map_err(|e| format!("cannot be JSON ({e})")),
        };
        match value {
            Ok(v @ Value::Object(_)) => Some(v),
            Ok(_) => {
                self.error(
                    IssueCode::E510,
                    path,
                    format!("`{path}` must be an object of names and values"),
                );
                None
            }
            Err(why) => {
                self.error(IssueCode::E510, path, format!("`{path}` {why}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_workflow;

    fn def(body: &str) -> WorkflowDef {
        parse_workflow(&format!("kind: Workflow\nname: w\nversion: \"1\"\n{body}"))
            .unwrap_or_else(|e| panic!("{e:#?}"))
            .def
    }

    #[test]
    fn fields_split_by_scope_and_increments_are_told_apart() {
        let fields = json!({
            "a": 1, "global:b": 2, "flow:c": 3, "flow_group:total": {"$increment": 5},
            "flow_group:name": {"$increment": 1, "other": 2},
        });
        let Value::Object(fields) = fields else {
            unreachable!()
        };
        let s = split_scopes(fields);
        assert_eq!(Value::Object(s.run), json!({"a": 1, "b": 2}));
        assert_eq!(s.flow, vec![("c".to_string(), ScopedWrite::Set(json!(3)))]);
        assert_eq!(s.group.len(), 2);
        assert!(
            s.group
                .contains(&("total".to_string(), ScopedWrite::Add(5)))
        );
        assert_eq!(
            scoped_key(Scope::Group, "batch-7", "total"),
            "flo.group/batch-7/total"
        );
    }

    #[test]
    fn state_starts_from_defaults_and_input_and_takes_mapped_outputs() {
        let d = def(
            "state: {count: 0, region: eu}\nstart:\n  run: \"@actions/a\"\n  transitions: {success: b}\nsteps:\n  b:\n    run: \"@actions/b\"\n    outputMapping: {total: \"$.output.sum\", was: \"$.state.count\"}\n    transitions: {success: c}\n  c:\n    run: \"@actions/c\"\n    skipOutputMapping: true\n    transitions: {success: flo.Completed}\n",
        );
        let input = json!({"count": 2, "order": "o-1"});
        let mut state = initial_state(&d, &input);
        assert_eq!(state, json!({"count": 2, "region": "eu", "order": "o-1"}));
        let out = json!({"ok": true, "count": 3});
        let fields = mapped_output(&d.start, &out, &state, &input).unwrap();
        merge(&mut state, fields);
        assert_eq!(state["count"], 3);
        let b = &d.steps["b"];
        let fields = mapped_output(b, &json!({"sum": 9}), &state, &input).unwrap();
        assert_eq!(Value::Object(fields), json!({"total": 9, "was": 3}));
        assert!(mapped_output(&d.steps["c"], &json!({"x": 1}), &state, &input).is_none());
        // Output that is not an object adds nothing by default.
        assert!(mapped_output(&d.start, &json!([1]), &state, &input).is_none());
    }

    #[test]
    fn e510_state_and_output_mappings_are_checked() {
        let refused = |body: &str| {
            parse_workflow(&format!("kind: Workflow\nname: w\nversion: \"1\"\n{body}"))
                .unwrap_err()
                .into_iter()
                .map(|i| format!("{} {}", i.code, i.path))
                .collect::<Vec<_>>()
        };
        let start = "start:\n  run: \"@actions/a\"\n  transitions: {success: flo.Completed}\n";
        assert_eq!(refused(&format!("state: [1]\n{start}")), ["E510 state"]);
        assert_eq!(
            refused(
                "start:\n  run: \"@actions/a\"\n  outputMapping: {a: \"$.steps.x\"}\n  transitions: {success: flo.Completed}\n"
            ),
            ["E510 start.outputMapping"]
        );
        assert_eq!(
            refused(
                "start:\n  run: \"@actions/a\"\n  outputMapping: {a: \"$.output\"}\n  skipOutputMapping: true\n  transitions: {success: flo.Completed}\n"
            ),
            ["E510 start.outputMapping"]
        );
    }
}
