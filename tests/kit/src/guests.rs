//! The WAT guests that tests and harnesses register as WebAssembly actions (the server
//! accepts WAT text as well as binary modules, so these are text).
//!
//! [`guest`] gives every module the same frame: the `flo` host imports, one page of memory,
//! a bump `alloc`, a `$pack` helper; each guest supplies the body of `handle`. A module that
//! is the subject of one test (a broken one, one with a missing export) stays in that test.

/// Where `alloc` starts handing out memory; constant strings live below it.
pub const HEAP_START: u32 = 4096;
/// Constant strings (`data`) stay below this offset.
pub const DATA_END: u32 = 1024;

/// The WASI import [`sleep_wat`] calls.
pub const POLL_ONEOFF_IMPORT: &str = r#"(import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))"#;

/// A WAT string literal holding `text`.
pub fn wat_string(text: &str) -> String {
    let mut s = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// A guest module. `data` places constant strings at fixed offsets (below [`DATA_END`]);
/// `body` is the body of `handle(param $ptr i32) (param $len i32) (result i64)`, which may
/// use the locals `$out`, `$buf`, `$n` (i32), the host imports `$log`, `$kv_get`, `$kv_set`,
/// `$kv_delete`, `$outcome`, and `$alloc` / `$pack` (ptr, len → packed i64).
pub fn guest(data: &[(u32, &str)], body: &str) -> String {
    guest_with_imports("", data, body)
}

/// [`guest`] with more imports (e.g. [`POLL_ONEOFF_IMPORT`]).
pub fn guest_with_imports(extra_imports: &str, data: &[(u32, &str)], body: &str) -> String {
    let data: String = data
        .iter()
        .map(|(offset, text)| {
            assert!(
                offset + text.len() as u32 <= DATA_END,
                "constant strings stay below {DATA_END}"
            );
            format!("  (data (i32.const {offset}) {})\n", wat_string(text))
        })
        .collect();
    format!(
        r#"(module
  (import "flo" "log" (func $log (param i32 i32 i32)))
  (import "flo" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "flo" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (import "flo" "kv_delete" (func $kv_delete (param i32 i32) (result i32)))
  (import "flo" "outcome" (func $outcome (param i32 i32)))
  {extra_imports}
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const {HEAP_START}))
{data}
  (func $alloc (export "alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func $pack (param $p i32) (param $l i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32))
      (i64.extend_i32_u (local.get $l))))
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (local $out i32) (local $buf i32) (local $n i32)
    {body})
)
"#
    )
}

/// `module` (a [`guest`]) opting in to instance reuse: it exports `flo_reuse_instance`, and a
/// `dealloc` that empties its heap (everything it allocates lives for one execution).
pub fn reusable(module: &str) -> String {
    let end = module.rfind(')').expect("a module");
    format!(
        r#"{}  (func (export "flo_reuse_instance"))
  (func (export "dealloc") (param i32 i32) (global.set $heap (i32.const {HEAP_START})))
)
"#,
        &module[..end]
    )
}

/// Returns `json` whatever the input.
pub fn fixed_guest(json: &str) -> String {
    guest(
        &[(0, json)],
        &format!("(call $pack (i32.const 0) (i32.const {}))", json.len()),
    )
}

/// The host imports a workflow step's guest uses for its run's state.
pub const STATE_IMPORTS: &str = r#"(import "flo" "state_get" (func $state_get (param i32 i32) (result i32)))
  (import "flo" "state_set" (func $state_set (param i32 i32) (result i32)))"#;

/// A workflow step's guest: returns its run's state as it read it (`flo.state_get`, up to
/// 32 KiB; empty outside a step) and sets `fields` (a JSON object) in it (`flo.state_set`).
pub fn state_guest(fields: &str) -> String {
    let body = format!(
        "(local.set $buf (call $alloc (i32.const 32768)))
    (local.set $n (call $state_get (local.get $buf) (i32.const 32768)))
    (drop (call $state_set (i32.const 0) (i32.const {})))
    (if (i32.lt_s (local.get $n) (i32.const 0))
      (then (return (call $pack (i32.const 0) (i32.const 0)))))
    (call $pack (local.get $buf) (local.get $n))",
        fields.len()
    );
    guest_with_imports(STATE_IMPORTS, &[(0, fields)], &body)
}

/// Returns its input unchanged.
pub fn echo_guest() -> String {
    guest(&[], "(call $pack (local.get $ptr) (local.get $len))")
}

/// `handle` returns `code` (negative: an error code).
pub fn code_guest(code: i64) -> String {
    guest(&[], &format!("(i64.const {code})"))
}

/// Always fails: an execution error (`handle` returns -3).
pub fn failing_guest() -> String {
    code_guest(-3)
}

/// `handle` executes `unreachable`.
pub fn trap_guest() -> String {
    guest(&[], "(unreachable)")
}

/// `handle` loops forever.
pub fn spin_guest() -> String {
    guest(&[], "(loop $forever (br $forever))\n    (i64.const 0)")
}

/// WAT that sleeps `ms` of wall time (needs [`POLL_ONEOFF_IMPORT`]): WASI `poll_oneoff` with
/// one subscription at 1024 (userdata 0, tag 0 = clock, clock id 1 = monotonic, timeout in
/// ns, flags 0 = relative), events at 2048, the event count at 2100. Fails the run (-3) if
/// the call fails.
pub fn sleep_wat(ms: u64) -> String {
    format!(
        r#"
    (i32.store (i32.const 1040) (i32.const 1))
    (i64.store (i32.const 1048) (i64.const {}))
    (if (i32.ne (call $poll (i32.const 1024) (i32.const 2048) (i32.const 1) (i32.const 2100)) (i32.const 0))
      (then (return (i64.const -3))))"#,
        ms * 1_000_000
    )
}

/// Sleeps `ms` of wall time, then returns `{"slept":MS}`.
pub fn sleep_guest(ms: u64) -> String {
    let output = format!(r#"{{"slept":{ms}}}"#);
    guest_with_imports(
        POLL_ONEOFF_IMPORT,
        &[(0, &output)],
        &format!(
            "{}\n    (call $pack (i32.const 0) (i32.const {}))",
            sleep_wat(ms),
            output.len()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_for_wat() {
        assert_eq!(wat_string(r#"{"a":"b\c"}"#), r#""{\"a\":\"b\\c\"}""#);
    }

    #[test]
    fn every_guest_is_valid_wat() {
        for (name, wat) in [
            ("fixed", fixed_guest(r#"{"ok":true}"#)),
            ("echo", echo_guest()),
            ("failing", failing_guest()),
            ("trap", trap_guest()),
            ("spin", spin_guest()),
            ("sleep", sleep_guest(5)),
        ] {
            if let Err(e) = wat::parse_str(&wat) {
                panic!("the {name} guest is not valid WAT: {e}\n{wat}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "constant strings stay below")]
    fn constant_strings_stay_below_the_heap() {
        guest(&[(1000, &"x".repeat(100))], "(i64.const 0)");
    }
}
