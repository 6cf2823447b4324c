//! How deep a YAML text nests its collections and how large it is once its aliases are
//! expanded, found by libyaml's own parser (the one serde_yaml runs) and given up as soon
//! as it passes a limit. Checked before serde_yaml reads a workflow definition or an auth
//! file.
//!
//! Why it exists: serde_yaml reads a document's events whole before its depth check (128
//! levels) sees them, and libyaml's scanner looks at every open flow level on each token
//! (`yaml_parser_stale_simple_keys`), so a run of `[[[[…` costs time quadratic in its
//! depth — 8,000 levels took over a second, the 1 MiB a definition may hold would take
//! about an hour of a shard (found by fuzzing, `fuzz/regressions/yaml`). Stopping at the
//! limit bounds that work: libyaml reads at most 1,024 characters ahead of the last event
//! (the reach of a simple key), so at most `limit` + 1,024 levels are ever open.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use unsafe_libyaml::{
    YAML_ALIAS_EVENT, YAML_MAPPING_END_EVENT, YAML_MAPPING_START_EVENT, YAML_SCALAR_EVENT,
    YAML_SEQUENCE_END_EVENT, YAML_SEQUENCE_START_EVENT, YAML_STREAM_END_EVENT, YAML_UTF8_ENCODING,
    yaml_event_delete, yaml_event_t, yaml_parser_delete, yaml_parser_initialize, yaml_parser_parse,
    yaml_parser_set_encoding, yaml_parser_set_input_string, yaml_parser_t,
};

/// serde_yaml's own limit on nesting: refusing deeper text first changes no result.
pub const YAML_NESTING_MAX: usize = 128;

/// What a YAML text may not exceed once read: how deep it nests and how large it is with
/// every alias (`*name`) replaced by what its anchor (`&name`) marks.
#[derive(Debug, Clone, Copy)]
pub struct YamlLimits {
    pub nesting_max: usize,
    /// Bytes of scalars (one more per scalar and per collection) after alias expansion.
    /// serde_yaml expands aliases into the value it builds, and bounds only their count
    /// (100 × the document's events): a 64 KiB scalar repeated through aliases in a 95 KB
    /// text became a 655 MB definition.
    pub expanded_bytes_max: u64,
}

/// The first limit a YAML text passes, as far as libyaml reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YamlExcess {
    Nesting,
    /// Larger than the limit once its aliases are expanded.
    Expanded,
}

/// Whether `yaml` nests sequences and mappings (block or flow) more than `limit` levels
/// deep, as far as libyaml reads it: text after a syntax error is not looked at (serde_yaml
/// reports that error).
pub fn nests_deeper_than(yaml: &str, limit: usize) -> bool {
    let limits = YamlLimits {
        nesting_max: limit,
        expanded_bytes_max: u64::MAX,
    };
    exceeds(yaml, limits) == Some(YamlExcess::Nesting)
}

/// The first of `limits` that `yaml` exceeds, if any. Text after a syntax error is not
/// looked at (serde_yaml reports that error). Linear in the text: an alias costs a lookup,
/// not a copy.
pub fn exceeds(yaml: &str, limits: YamlLimits) -> Option<YamlExcess> {
    let mut parser = MaybeUninit::<yaml_parser_t>::uninit();
    let parser = parser.as_mut_ptr();
    let mut count = Expansion::default();
    // SAFETY: the parser is initialised before use, stays in place (libyaml keeps a
    // pointer to it) and is deleted once, below; `yaml` outlives it; each event is read
    // (its type, and the union member that type says is set) before it is deleted.
    unsafe {
        if yaml_parser_initialize(parser).fail {
            return None;
        }
        yaml_parser_set_encoding(parser, YAML_UTF8_ENCODING);
        yaml_parser_set_input_string(parser, yaml.as_ptr(), yaml.len() as u64);
        let excess = loop {
            let mut event = MaybeUninit::<yaml_event_t>::uninit();
            let event = event.as_mut_ptr();
            if yaml_parser_parse(parser, event).fail {
                break None;
            }
            let kind = (*event).type_;
            match kind {
                YAML_SEQUENCE_START_EVENT => {
                    count.open(anchor_name((*event).data.sequence_start.anchor))
                }
                YAML_MAPPING_START_EVENT => {
                    count.open(anchor_name((*event).data.mapping_start.anchor))
                }
                YAML_SEQUENCE_END_EVENT | YAML_MAPPING_END_EVENT => count.close(),
                YAML_SCALAR_EVENT => {
                    let scalar = (*event).data.scalar;
                    count.scalar(anchor_name(scalar.anchor), scalar.length)
                }
                YAML_ALIAS_EVENT => count.alias(anchor_name((*event).data.alias.anchor)),
                _ => {}
            }
            yaml_event_delete(event);
            if count.open_levels() > limits.nesting_max {
                break Some(YamlExcess::Nesting);
            }
            if count.bytes > limits.expanded_bytes_max {
                break Some(YamlExcess::Expanded);
            }
            if kind == YAML_STREAM_END_EVENT {
                break None;
            }
        };
        yaml_parser_delete(parser);
        excess
    }
}

/// An anchor's name, copied out of the event (which is deleted after).
///
/// # Safety
/// `anchor` is null or a NUL-terminated string libyaml owns for the event's life.
unsafe fn anchor_name(anchor: *const u8) -> Option<Vec<u8>> {
    if anchor.is_null() {
        return None;
    }
    // SAFETY: as the caller promises.
    let name = unsafe { std::ffi::CStr::from_ptr(anchor.cast()) };
    Some(name.to_bytes().to_vec())
}

/// The running size of a document with its aliases expanded.
#[derive(Default)]
struct Expansion {
    bytes: u64,
    /// The open collections: the anchor each was given, and `bytes` when it opened.
    open: Vec<(Option<Vec<u8>>, u64)>,
    /// Each anchor's expanded size (a later anchor of the same name replaces it, as in
    /// YAML).
    anchors: HashMap<Vec<u8>, u64>,
}

impl Expansion {
    fn open_levels(&self) -> usize {
        self.open.len()
    }

    fn open(&mut self, anchor: Option<Vec<u8>>) {
        self.bytes = self.bytes.saturating_add(1);
        self.open.push((anchor, self.bytes - 1));
    }

    fn close(&mut self) {
        if let Some((Some(name), at_open)) = self.open.pop() {
            self.anchors.insert(name, self.bytes - at_open);
        }
    }

    fn scalar(&mut self, anchor: Option<Vec<u8>>, length: u64) {
        let size = length.saturating_add(1);
        self.bytes = self.bytes.saturating_add(size);
        if let Some(name) = anchor {
            self.anchors.insert(name, size);
        }
    }

    fn alias(&mut self, anchor: Option<Vec<u8>>) {
        let size = anchor.and_then(|name| self.anchors.get(&name).copied());
        // An unknown anchor is serde_yaml's error to report.
        self.bytes = self.bytes.saturating_add(size.unwrap_or(0));
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

    fn expanded(yaml: &str, max: u64) -> bool {
        let limits = YamlLimits {
            nesting_max: YAML_NESTING_MAX,
            expanded_bytes_max: max,
        };
        exceeds(yaml, limits) == Some(YamlExcess::Expanded)
    }

    #[test]
    fn aliases_count_what_their_anchor_marks() {
        let big = "x".repeat(1000);
        let once = format!("a: &s {big}\nb: 1\n");
        let thrice = format!("a: &s {big}\nb: *s\nc: *s\n");
        assert!(!expanded(&once, 1100));
        assert!(expanded(&thrice, 2500));
        assert!(!expanded(&thrice, 3100));
        // An anchored collection counts whole, and an alias inside an anchor counts again
        // each time that anchor is used: 4 × 4 × the scalar.
        let nested = format!("a: &s {big}\nl1: &l [*s, *s, *s, *s]\nl2: [*l, *l, *l, *l]\n");
        assert!(expanded(&nested, 16_000));
        assert!(!expanded(&nested, 25_000));
    }

    /// The repro: a 64 KiB scalar repeated through aliases in a ~100 KB text.
    #[test]
    fn a_billion_laughs_is_refused_before_expansion() {
        let mut yaml = format!("a: &s {}\nb:\n", "x".repeat(64 << 10));
        for i in 0..3000 {
            yaml.push_str(&format!("  k{i}: *s\n"));
        }
        assert!(yaml.len() < 150_000);
        assert!(expanded(&yaml, 2 << 20));
        assert!(!nests_deeper_than(&yaml, YAML_NESTING_MAX));
    }
}
