//! How deep a YAML text nests its collections, found by libyaml's own parser (the one
//! serde_yaml runs) and given up as soon as it passes a limit. Checked before serde_yaml
//! reads a workflow definition or an auth file.
//!
//! Why it exists: serde_yaml reads a document's events whole before its depth check (128
//! levels) sees them, and libyaml's scanner looks at every open flow level on each token
//! (`yaml_parser_stale_simple_keys`), so a run of `[[[[…` costs time quadratic in its
//! depth — 8,000 levels took over a second, the 1 MiB a definition may hold would take
//! about an hour of a shard (found by fuzzing, `fuzz/regressions/yaml`). Stopping at the
//! limit bounds that work: libyaml reads at most 1,024 characters ahead of the last event
//! (the reach of a simple key), so at most `limit` + 1,024 levels are ever open.

use std::mem::MaybeUninit;
use unsafe_libyaml::{
    YAML_MAPPING_END_EVENT, YAML_MAPPING_START_EVENT, YAML_SEQUENCE_END_EVENT,
    YAML_SEQUENCE_START_EVENT, YAML_STREAM_END_EVENT, YAML_UTF8_ENCODING, yaml_event_delete,
    yaml_event_t, yaml_parser_delete, yaml_parser_initialize, yaml_parser_parse,
    yaml_parser_set_encoding, yaml_parser_set_input_string, yaml_parser_t,
};

/// serde_yaml's own limit on nesting: refusing deeper text first changes no result.
pub const YAML_NESTING_MAX: usize = 128;

/// Whether `yaml` nests sequences and mappings (block or flow) more than `limit` levels
/// deep, as far as libyaml reads it: text after a syntax error is not looked at (serde_yaml
/// reports that error).
pub fn nests_deeper_than(yaml: &str, limit: usize) -> bool {
    let mut parser = MaybeUninit::<yaml_parser_t>::uninit();
    let parser = parser.as_mut_ptr();
    // SAFETY: the parser is initialised before use, stays in place (libyaml keeps a
    // pointer to it) and is deleted once, below; `yaml` outlives it; each event is deleted
    // after its type is read.
    unsafe {
        if yaml_parser_initialize(parser).fail {
            return false;
        }
        yaml_parser_set_encoding(parser, YAML_UTF8_ENCODING);
        yaml_parser_set_input_string(parser, yaml.as_ptr(), yaml.len() as u64);
        let mut depth = 0usize;
        let deeper = loop {
            let mut event = MaybeUninit::<yaml_event_t>::uninit();
            let event = event.as_mut_ptr();
            if yaml_parser_parse(parser, event).fail {
                break false;
            }
            let kind = (*event).type_;
            yaml_event_delete(event);
            match kind {
                YAML_SEQUENCE_START_EVENT | YAML_MAPPING_START_EVENT => {
                    depth += 1;
                    if depth > limit {
                        break true;
                    }
                }
                YAML_SEQUENCE_END_EVENT | YAML_MAPPING_END_EVENT => {
                    depth = depth.saturating_sub(1);
                }
                YAML_STREAM_END_EVENT => break false,
                _ => {}
            }
        };
        yaml_parser_delete(parser);
        deeper
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn depth_counts_block_and_flow_collections() {
        let yaml = "a:\n  b: [1, {c: [2]}]\n";
        // a's mapping, b's, the sequence, {c}, [2]: 5 levels.
        assert!(nests_deeper_than(yaml, 4));
        assert!(!nests_deeper_than(yaml, 5));
        assert!(!nests_deeper_than("just a scalar", 0));
        // Closed collections do not add up.
        assert!(!nests_deeper_than("[[1], [2], [3], [4]]", 2));
    }

    #[test]
    fn a_syntax_error_ends_the_look() {
        let after_an_error = format!("a: b: c\n{}", "[".repeat(1000));
        assert!(!nests_deeper_than(&after_an_error, 128));
        assert!(!nests_deeper_than("key: [unclosed", 5));
    }

    #[test]
    fn a_megabyte_of_open_brackets_is_judged_quickly() {
        for (head, open) in [("x: ", "["), ("x: ", "{"), ("x: ", "[\n"), ("x:\n", "- ")] {
            let yaml = format!("{head}{}", open.repeat((1 << 20) / open.len()));
            let start = Instant::now();
            assert!(nests_deeper_than(&yaml, 128), "{open:?}");
            // About a millisecond in a release build, a quadratic scan about an hour: the
            // bound tells them apart with room for a debug build on a loaded machine.
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{open:?}: a megabyte took {:?}, the scan is not linear",
                start.elapsed()
            );
        }
    }
}
