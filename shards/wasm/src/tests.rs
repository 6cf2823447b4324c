use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use futures_lite::future::block_on;

use super::*;

static ENGINE: LazyLock<WasmEngine> = LazyLock::new(|| {
    WasmEngine::new(WasmConfig {
        max_instances: 64,
        memory_limit_bytes_max: 256 << 20,
    })
    .expect("engine")
});

/// A KV held in a map; records the keys it was asked for.
#[derive(Default)]
struct FakeKv {
    map: RefCell<HashMap<String, Vec<u8>>>,
    asked: RefCell<Vec<String>>,
}

impl GuestKv for FakeKv {
    fn get(&self, key: &str) -> Pin<Box<dyn Future<Output = crate::KvRead>>> {
        self.asked.borrow_mut().push(key.to_owned());
        Box::pin(std::future::ready(Ok(self.map.borrow().get(key).cloned())))
    }
}

/// A KV whose reads fail (the key's shard could not answer).
struct FailingKv;

impl GuestKv for FailingKv {
    fn get(&self, _key: &str) -> Pin<Box<dyn Future<Output = crate::KvRead>>> {
        Box::pin(std::future::ready(Err("shard 1 is gone".to_string())))
    }
}

/// A KV whose reads never complete.
struct HangingKv;

impl GuestKv for HangingKv {
    fn get(&self, _key: &str) -> Pin<Box<dyn Future<Output = crate::KvRead>>> {
        Box::pin(std::future::pending())
    }
}

/// The responsiveness test measures wall time: it runs alone among these tests (exclusive),
/// the others share.
static TIMING: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    TIMING.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    TIMING.write().unwrap_or_else(|e| e.into_inner())
}

fn kv() -> Rc<dyn GuestKv> {
    Rc::new(FakeKv::default())
}

fn limits() -> ExecLimits {
    ExecLimits {
        timeout_ms: 5_000,
        memory_limit_bytes: 16 << 20,
    }
}

/// A bump allocator over memory from offset 4096, growing memory as needed (0 on failure).
const ALLOC: &str = r#"
  (global $heap (mut i32) (i32.const 4096))
  (func $alloc (export "alloc") (param $n i32) (result i32)
    (local $p i32) (local $end i32)
    (local.set $p (global.get $heap))
    (local.set $end (i32.add (local.get $p) (local.get $n)))
    (if (i32.gt_u (local.get $end) (i32.mul (memory.size) (i32.const 65536)))
      (then
        (if (i32.eq
              (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end)
                (i32.mul (memory.size) (i32.const 65536))) (i32.const 16)) (i32.const 1)))
              (i32.const -1))
          (then (return (i32.const 0))))))
    (global.set $heap (local.get $end))
    (local.get $p))
  (func $pack (param $p i32) (param $n i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32))
            (i64.extend_i32_u (local.get $n))))
"#;

fn module_wat(body: &str) -> String {
    format!(
        r#"(module
  (import "flo" "log" (func $log (param i32 i32 i32)))
  (import "flo" "kv_get" (func $kv_get (param i32 i32 i32 i32) (result i32)))
  (import "flo" "kv_set" (func $kv_set (param i32 i32 i32 i32) (result i32)))
  (import "flo" "kv_delete" (func $kv_delete (param i32 i32) (result i32)))
  (import "flo" "outcome" (func $outcome (param i32 i32)))
  (import "flo" "state_get" (func $state_get (param i32 i32) (result i32)))
  (import "flo" "state_set" (func $state_set (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  {ALLOC}
  {body})"#
    )
}

fn compile(body: &str) -> WasmModule {
    ENGINE
        .compile(module_wat(body).as_bytes())
        .unwrap_or_else(|e| panic!("compile: {e}"))
}

fn compile_err(wat: &str) -> WasmError {
    ENGINE
        .compile(wat.as_bytes())
        .expect_err("should be refused")
}

fn run(module: &WasmModule, input: &[u8]) -> ExecResult {
    block_on(module.execute(input, kv(), limits()))
}

const ECHO: &str = r#"
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (call $pack (local.get $p) (local.get $n)))"#;

/// Returns `{"wrapped":<input>}`.
const WRAP: &str = r#"
  (data (i32.const 0) "{\"wrapped\":")
  (data (i32.const 16) "}")
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (local $out i32) (local $len i32)
    (local.set $len (i32.add (local.get $n) (i32.const 12)))
    (local.set $out (call $alloc (local.get $len)))
    (if (i32.eqz (local.get $out)) (then (return (i64.const -2))))
    (memory.copy (local.get $out) (i32.const 0) (i32.const 11))
    (memory.copy (i32.add (local.get $out) (i32.const 11)) (local.get $p) (local.get $n))
    (memory.copy (i32.add (i32.add (local.get $out) (i32.const 11)) (local.get $n))
                 (i32.const 16) (i32.const 1))
    (call $pack (local.get $out) (local.get $len)))"#;

#[test]
fn echo_and_json_wrap() {
    let _guard = shared();
    let echo = compile(ECHO);
    let r = run(&echo, br#"{"a":1}"#);
    assert_eq!(r.output, Ok(br#"{"a":1}"#.to_vec()));
    assert_eq!(r.outcome, None);
    assert!(r.kv_writes.is_empty() && r.logs.is_empty());
    assert_eq!(run(&echo, b"").output, Ok(Vec::new()));

    let wrap = compile(WRAP);
    let r = run(&wrap, br#"{"order":"ORD-1","n":[1,2]}"#);
    let out: serde_json::Value = serde_json::from_slice(&r.output.unwrap()).unwrap();
    assert_eq!(
        out,
        serde_json::json!({"wrapped": {"order": "ORD-1", "n": [1, 2]}})
    );
    // A big input goes through alloc's memory growth.
    let big = format!("\"{}\"", "x".repeat(300_000));
    let r = run(&wrap, big.as_bytes());
    let out: serde_json::Value = serde_json::from_slice(&r.output.unwrap()).unwrap();
    assert_eq!(out["wrapped"].as_str().unwrap().len(), 300_000);
}

/// An action may name the export its executions call (the spec's `wasm_entrypoint`): the
/// module is checked for it instead of `handle`, and executions call it.
#[test]
fn a_named_entrypoint_is_checked_and_called_instead_of_handle() {
    let _guard = shared();
    let wat = module_wat(&ECHO.replace("(export \"handle\")", "(export \"run\")"));
    let e = ENGINE.compile(wat.as_bytes()).expect_err("no handle");
    assert!(e.to_string().contains("missing export `handle`"), "{e}");
    let module = ENGINE
        .compile_for(wat.as_bytes(), Some("run"))
        .expect("run is the entrypoint");
    assert!(module.check_entrypoint("run").is_ok());
    let e = module.check_entrypoint("nope").expect_err("not exported");
    assert!(e.to_string().contains("missing export `nope`"), "{e}");
    let e = module
        .check_entrypoint("alloc")
        .expect_err("another signature");
    assert!(e.to_string().contains("export `alloc` has type"), "{e}");
    let stop = StopSignal::default();
    let r = block_on(module.execute_entrypoint("run", b"hi", None, kv(), limits(), &stop));
    assert_eq!(r.output, Ok(b"hi".to_vec()));
    // Executing an export the module lacks fails the execution, never panics.
    let r = block_on(module.execute(b"hi", kv(), limits()));
    assert!(
        matches!(&r.output, Err(GuestError::Instantiate(m)) if m.contains("`handle`")),
        "{:?}",
        r.output
    );
    // Unchecked: a module of no entrypoint compiles, for a cache of several actions.
    assert!(ENGINE.compile_for(wat.as_bytes(), None).is_ok());
}

#[test]
fn a_step_reads_its_run_state_and_sets_fields() {
    let _guard = shared();
    // rc[i] at 512 + 4 i; the state read into 600..700; output: rc then the state read.
    let module = compile(
        r#"
  (data (i32.const 100) "{\"seen\": true, \"n\": 1}")
  (data (i32.const 130) "{\"n\": 2}")
  (data (i32.const 140) "[1]")
  (func $rc (param $i i32) (param $v i32)
    (i32.store (i32.add (i32.const 512) (i32.mul (local.get $i) (i32.const 4))) (local.get $v)))
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (call $rc (i32.const 0) (call $state_get (i32.const 600) (i32.const 100)))
    (call $rc (i32.const 1) (call $state_set (i32.const 100) (i32.const 22)))
    ;; a later call wins for its fields
    (call $rc (i32.const 2) (call $state_set (i32.const 130) (i32.const 8)))
    ;; not an object; out of bounds
    (call $rc (i32.const 3) (call $state_set (i32.const 140) (i32.const 3)))
    (call $rc (i32.const 4) (call $state_get (i32.const 65530) (i32.const 100)))
    (call $pack (i32.const 512) (i32.const 188)))"#,
    );
    let stop = StopSignal::default();
    let state = br#"{"order":"o-1"}"#.to_vec();
    let run = |state: Option<Vec<u8>>| {
        block_on(module.execute_entrypoint("handle", b"", state, kv(), limits(), &stop))
    };
    let r = run(Some(state.clone()));
    let out = r.output.clone().unwrap();
    let rc = |i: usize| i32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(rc(0), state.len() as i32);
    assert_eq!(&out[88..88 + state.len()], &state[..]);
    assert_eq!((rc(1), rc(2), rc(3), rc(4)), (0, 0, -2, -2));
    let patch: serde_json::Value = serde_json::from_slice(&r.state_patch.unwrap()).unwrap();
    assert_eq!(patch, serde_json::json!({"seen": true, "n": 2}));
    // Outside a workflow step there is no state: -1, and nothing is set.
    let r = run(None);
    let out = r.output.clone().unwrap();
    let rc = |i: usize| i32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!((rc(0), rc(1), rc(2)), (-1, -1, -1));
    assert_eq!(r.state_patch, None);
}

#[test]
fn kv_writes_buffered_and_reads_see_them() {
    let _guard = shared();
    // rc[i] (i32) are stored at 512 + 4 i; buffers at 600..664; output is 512..664.
    let module = compile(
        r#"
  (data (i32.const 100) "abc12")
  (data (i32.const 110) "\ff")
  (func $rc (param $i i32) (param $v i32)
    (i32.store (i32.add (i32.const 512) (i32.mul (local.get $i) (i32.const 4))) (local.get $v)))
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (call $rc (i32.const 0) (call $kv_set (i32.const 100) (i32.const 1) (i32.const 103) (i32.const 1)))
    (call $rc (i32.const 1) (call $kv_set (i32.const 101) (i32.const 1) (i32.const 104) (i32.const 1)))
    (call $rc (i32.const 2) (call $kv_delete (i32.const 100) (i32.const 1)))
    ;; a: deleted here -> -1 without asking the store
    (call $rc (i32.const 3) (call $kv_get (i32.const 100) (i32.const 1) (i32.const 600) (i32.const 16)))
    ;; b: own write "2"
    (call $rc (i32.const 4) (call $kv_get (i32.const 101) (i32.const 1) (i32.const 616) (i32.const 16)))
    ;; c: from the store
    (call $rc (i32.const 5) (call $kv_get (i32.const 102) (i32.const 1) (i32.const 632) (i32.const 16)))
    ;; c again into a 2-byte buffer: full length returned, 2 bytes copied
    (call $rc (i32.const 6) (call $kv_get (i32.const 102) (i32.const 1) (i32.const 648) (i32.const 2)))
    ;; bad arguments: empty key, key out of bounds, non-UTF-8 key, buffer out of bounds
    (call $rc (i32.const 7) (call $kv_set (i32.const 100) (i32.const 0) (i32.const 103) (i32.const 1)))
    (call $rc (i32.const 8) (call $kv_get (i32.const 65530) (i32.const 10) (i32.const 600) (i32.const 1)))
    (call $rc (i32.const 9) (call $kv_delete (i32.const 110) (i32.const 1)))
    (call $rc (i32.const 10) (call $kv_get (i32.const 102) (i32.const 1) (i32.const 65530) (i32.const 100)))
    ;; missing everywhere
    (call $rc (i32.const 11) (call $kv_get (i32.const 103) (i32.const 1) (i32.const 600) (i32.const 1)))
    (call $pack (i32.const 512) (i32.const 152)))"#,
    );
    let fake = Rc::new(FakeKv::default());
    fake.map
        .borrow_mut()
        .insert("c".into(), b"remote-c".to_vec());
    fake.map.borrow_mut().insert("a".into(), b"stale".to_vec());
    let r = block_on(module.execute(b"{}", fake.clone(), limits()));
    let out = r.output.unwrap();
    let rc = |i: usize| i32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!((rc(0), rc(1), rc(2)), (0, 0, 0));
    assert_eq!(rc(3), -1, "own delete hides the stored value");
    assert_eq!(rc(4), 1);
    assert_eq!(&out[104..105], b"2");
    assert_eq!(rc(5), 8);
    assert_eq!(&out[120..128], b"remote-c");
    assert_eq!(rc(6), 8);
    assert_eq!(&out[136..138], b"re");
    assert_eq!(&out[138..140], &[0, 0]);
    assert_eq!((rc(7), rc(8), rc(9), rc(10)), (-2, -2, -2, -2));
    assert_eq!(rc(11), -1);
    assert_eq!(*fake.asked.borrow(), vec!["c", "c", "1"]);
    assert_eq!(
        r.kv_writes,
        vec![
            ("a".to_string(), Some(b"1".to_vec())),
            ("b".to_string(), Some(b"2".to_vec())),
            ("a".to_string(), None),
        ]
    );
    // Nothing was applied to the store.
    assert_eq!(fake.map.borrow().get("a"), Some(&b"stale".to_vec()));
}

#[test]
fn failed_execution_has_no_writes_and_its_outcome_is_the_error_code() {
    let _guard = shared();
    let module = compile(
        r#"
  (data (i32.const 100) "kvpending")
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (drop (call $kv_set (i32.const 100) (i32.const 1) (i32.const 101) (i32.const 1)))
    (call $outcome (i32.const 102) (i32.const 7))
    (i64.const -3))"#,
    );
    let r = run(&module, b"");
    assert_eq!(r.output, Err(GuestError::ExecutionError));
    assert!(r.kv_writes.is_empty());
    assert_eq!(r.outcome.as_deref(), Some("pending"));
}

#[test]
fn too_many_writes_trap() {
    let _guard = shared();
    let module = compile(
        r#"
  (data (i32.const 100) "kv")
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (local $i i32)
    (loop $l
      (drop (call $kv_set (i32.const 100) (i32.const 1) (i32.const 101) (i32.const 1)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.le_u (local.get $i) (i32.const 10000))))
    (i64.const 0))"#,
    );
    let r = run(&module, b"");
    let e = r.output.unwrap_err();
    assert!(
        e.to_string()
            .contains("too many kv writes in one execution"),
        "{e}"
    );
    assert!(r.kv_writes.is_empty());
}

#[test]
fn proc_exit_fails_the_execution() {
    let _guard = shared();
    let module = ENGINE
        .compile(
            br#"(module
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "alloc") (param i32) (result i32) (i32.const 8))
  (func (export "handle") (param i32 i32) (result i64) (call $exit (i32.const 3)) (i64.const 0)))"#,
        )
        .unwrap();
    let e = run(&module, b"x").output.unwrap_err();
    assert_eq!(
        e.to_string(),
        "guest trapped: exited through proc_exit(3) (in handle)"
    );
}

#[test]
fn logs_and_outcome() {
    let _guard = shared();
    let module = compile(
        r#"
  (data (i32.const 100) "hello info")
  (data (i32.const 200) "approved")
  (data (i32.const 300) "pending")
  (data (i32.const 400) "\ff\fe")
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (call $log (i32.const 1) (i32.const 100) (i32.const 10))
    (call $log (i32.const 3) (i32.const 100) (i32.const 5))
    (call $log (i32.const 0) (local.get $p) (local.get $n))
    (call $log (i32.const 9) (i32.const 400) (i32.const 2))
    (call $log (i32.const 1) (i32.const 65000) (i32.const 10000))
    (call $outcome (i32.const 300) (i32.const 7))
    (call $outcome (i32.const 200) (i32.const 8))
    ;; ignored: too long, not UTF-8, out of bounds
    (call $outcome (i32.const 0) (i32.const 65))
    (call $outcome (i32.const 400) (i32.const 2))
    (call $outcome (i32.const 65535) (i32.const 2))
    (call $pack (local.get $p) (local.get $n)))"#,
    );
    let r = run(&module, b"input text");
    assert_eq!(r.output, Ok(b"input text".to_vec()));
    assert_eq!(r.outcome.as_deref(), Some("approved"));
    assert_eq!(r.logs.len(), 5);
    assert_eq!(r.logs[0], (1, "hello info".to_string()));
    assert_eq!(r.logs[1], (3, "hello".to_string()));
    assert_eq!(r.logs[2], (0, "input text".to_string()));
    assert_eq!(r.logs[3], (3, "\u{fffd}\u{fffd}".to_string()));
    assert_eq!(r.logs[4].0, 2);
    assert!(
        r.logs[4].1.contains("outside guest memory"),
        "{:?}",
        r.logs[4]
    );
}

#[test]
fn logs_are_bounded() {
    let _guard = shared();
    let module = compile(
        r#"
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (local $i i32)
    (loop $l
      (call $log (i32.const 1) (local.get $p) (local.get $n))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $l (i32.lt_u (local.get $i) (i32.const 150))))
    (i64.const 0))"#,
    );
    let input = "é".repeat(3000); // 6000 bytes
    let r = run(&module, input.as_bytes());
    assert_eq!(r.output, Ok(Vec::new()));
    assert_eq!(r.logs.len(), MAX_LOG_ENTRIES);
    let (level, first) = &r.logs[0];
    assert_eq!(*level, 1);
    assert!(first.len() <= MAX_LOG_ENTRY_BYTES && first.ends_with('…'));
    assert!(first.starts_with("éé"));
    let (level, last) = r.logs.last().unwrap();
    assert_eq!(*level, 2);
    assert!(last.contains("51 more log entries dropped"), "{last}");
}

#[test]
fn refused_at_compile() {
    let _guard = shared();
    let m = |exports: &str| format!(r#"(module (memory (export "memory") 1) {exports})"#);
    let handle = r#"(func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#;
    let alloc = r#"(func (export "alloc") (param i32) (result i32) (i32.const 0))"#;

    let e = compile_err(&m(alloc));
    assert!(
        matches!(&e, WasmError::Invalid(m) if m.contains("missing export `handle`")),
        "{e}"
    );

    let e = compile_err(&m(handle));
    assert!(
        matches!(&e, WasmError::Invalid(m) if m.contains("missing export `alloc`")),
        "{e}"
    );

    let wrong = r#"(func (export "handle") (param i32 i32) (result i32) (i32.const 0))"#;
    let e = compile_err(&m(&format!("{wrong}{alloc}")));
    assert!(
        e.to_string().contains(
            "export `handle` has type func(i32, i32) -> i32, expected func(i32, i32) -> i64"
        ),
        "{e}"
    );

    let e = compile_err(&format!(
        r#"(module (import "env" "foo" (func)) (memory (export "memory") 1) {handle} {alloc})"#
    ));
    assert!(
        e.to_string().contains("imports the function `env.foo`"),
        "{e}"
    );

    let e = compile_err(&format!(
        r#"(module (import "flo" "log" (func (param i32))) (memory (export "memory") 1) {handle} {alloc})"#
    ));
    assert!(
        e.to_string()
            .contains("import `flo.log` has type func(i32)"),
        "{e}"
    );

    let e = compile_err(&format!(
        r#"(module (import "flo" "http_get" (func)) (memory (export "memory") 1) {handle} {alloc})"#
    ));
    assert!(
        e.to_string()
            .contains("`flo.http_get`, which does not exist"),
        "{e}"
    );

    let e = compile_err(&format!(
        r#"(module (import "wasi_snapshot_preview1" "no_such_call" (func)) (memory (export "memory") 1) {handle} {alloc})"#
    ));
    assert!(
        matches!(&e, WasmError::Invalid(m) if m.contains("no_such_call")),
        "{e}"
    );

    let e = compile_err(&format!(
        r#"(module (import "env" "memory" (memory 1)) (export "memory" (memory 0)) {handle} {alloc})"#
    ));
    assert!(
        e.to_string().contains("imports the memory `env.memory`"),
        "{e}"
    );

    let e = compile_err(&format!(r#"(module {handle} {alloc})"#));
    assert!(e.to_string().contains("missing export `memory`"), "{e}");

    // Memory larger than any allowed limit (256 MiB = 4096 pages).
    let e = compile_err(&format!(
        r#"(module (memory (export "memory") 5000) {handle} {alloc})"#
    ));
    assert!(e.to_string().contains("exceeds the limit"), "{e}");

    let e = ENGINE
        .compile(b"\0asm\x01\0\0\0garbage")
        .expect_err("garbage");
    assert!(matches!(e, WasmError::Compile(_)), "{e}");
    let e = ENGINE.compile(b"definitely not wasm").expect_err("garbage");
    assert!(matches!(e, WasmError::Compile(_)), "{e}");
    let e = ENGINE.compile(&[0xff; 64]).expect_err("garbage");
    assert!(matches!(e, WasmError::Compile(_)), "{e}");

    // A start function that traps cannot be instantiated at all.
    let e = compile_err(&format!(
        r#"(module (memory (export "memory") 1) (func $s unreachable) (start $s) {handle} {alloc})"#
    ));
    assert!(
        matches!(&e, WasmError::Instantiate(m) if m.contains("unreachable instruction executed (in the start function")),
        "{e}"
    );
}

#[test]
fn guest_errors() {
    let _guard = shared();
    let trap = compile(r#"(func (export "handle") (param i32 i32) (result i64) unreachable)"#);
    let e = run(&trap, b"x").output.unwrap_err();
    assert_eq!(
        e.to_string(),
        "guest trapped: unreachable instruction executed (in handle)"
    );

    for (code, want) in [
        (-1, GuestError::InvalidInput),
        (-2, GuestError::AllocationFailed),
        (-3, GuestError::ExecutionError),
        (-7, GuestError::Code(-7)),
    ] {
        let m = compile(&format!(
            r#"(func (export "handle") (param i32 i32) (result i64) (i64.const {code}))"#
        ));
        assert_eq!(run(&m, b"x").output, Err(want));
    }
    assert_eq!(
        GuestError::Code(-7).to_string(),
        "guest returned error code -7"
    );

    let oob = compile(
        r#"(func (export "handle") (param i32 i32) (result i64)
             (call $pack (i32.const 0x7fff0000) (i32.const 100)))"#,
    );
    let e = run(&oob, b"x").output.unwrap_err();
    assert!(
        matches!(&e, GuestError::BadOutput(m) if m.contains("outside guest memory")),
        "{e}"
    );
    let oob = compile(
        r#"(func (export "handle") (param i32 i32) (result i64)
             (call $pack (i32.const 65000) (i32.const 1000)))"#,
    );
    assert!(matches!(
        run(&oob, b"x").output,
        Err(GuestError::BadOutput(_))
    ));

    let init = compile(
        r#"(func (export "init") (result i32) (i32.const 5))
           (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#,
    );
    let e = run(&init, b"x").output.unwrap_err();
    assert_eq!(e, GuestError::InitFailed(5));
    assert_eq!(e.to_string(), "guest init() failed with code 5");

    // init runs before handle, in the same instance.
    let init_ok = compile(
        r#"(global $ready (mut i32) (i32.const 0))
           (func (export "init") (result i32) (global.set $ready (i32.const 1)) (i32.const 0))
           (func (export "handle") (param i32 i32) (result i64)
             (if (i32.eqz (global.get $ready)) (then unreachable))
             (i64.const 0))"#,
    );
    assert_eq!(run(&init_ok, b"x").output, Ok(Vec::new()));

    let div = compile(
        r#"(func $inner (param i32) (result i32) (i32.div_u (i32.const 1) (local.get 0)))
           (func (export "handle") (param i32 i32) (result i64)
             (i64.extend_i32_u (call $inner (i32.const 0))))"#,
    );
    let e = run(&div, b"x").output.unwrap_err();
    assert_eq!(
        e.to_string(),
        "guest trapped: integer divide by zero (in handle, at `inner`)"
    );

    let alloc_fails = ENGINE
        .compile(
            br#"(module (memory (export "memory") 1)
                 (func (export "alloc") (param i32) (result i32) (i32.const 0))
                 (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#,
        )
        .unwrap();
    assert_eq!(
        run(&alloc_fails, b"x").output,
        Err(GuestError::AllocationFailed)
    );

    let recursion = compile(
        r#"(func $f (export "handle") (param i32 i32) (result i64) (call $f (local.get 0) (local.get 1)))"#,
    );
    let e = run(&recursion, b"x").output.unwrap_err();
    assert!(e.to_string().contains("call stack exhausted"), "{e}");
}

#[test]
fn memory_limit() {
    let _guard = shared();
    // Grows one page at a time until refused, then reports allocation failure.
    let grower = compile(
        r#"(func (export "handle") (param i32 i32) (result i64)
             (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
             (i64.const -2))"#,
    );
    let small = ExecLimits {
        timeout_ms: 5_000,
        memory_limit_bytes: 1 << 20,
    };
    let r = block_on(grower.execute(b"x", kv(), small));
    let e = r.output.unwrap_err();
    assert_eq!(
        e,
        GuestError::MemoryLimit {
            limit_bytes: 1 << 20
        }
    );
    assert_eq!(e.to_string(), "guest exceeded its memory limit of 1 MiB");

    // Same, trapping instead.
    let trapper = compile(
        r#"(func (export "handle") (param i32 i32) (result i64)
             (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1))))
             unreachable)"#,
    );
    let r = block_on(trapper.execute(b"x", kv(), small));
    assert_eq!(
        r.output,
        Err(GuestError::MemoryLimit {
            limit_bytes: 1 << 20
        })
    );

    // A refused growth the guest recovers from is not an error.
    let recovers = compile(
        r#"(func (export "handle") (param i32 i32) (result i64)
             (drop (memory.grow (i32.const 1000)))
             (i64.const 0))"#,
    );
    let r = block_on(recovers.execute(b"x", kv(), small));
    assert_eq!(r.output, Ok(Vec::new()));

    // Initial memory above the limit: refused at instantiation.
    let big = ENGINE
        .compile(
            br#"(module (memory (export "memory") 32)
                 (func (export "alloc") (param i32) (result i32) (i32.const 8))
                 (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#,
        )
        .unwrap();
    let r = block_on(big.execute(b"x", kv(), small));
    assert_eq!(
        r.output,
        Err(GuestError::MemoryLimit {
            limit_bytes: 1 << 20
        })
    );
    assert_eq!(
        block_on(big.execute(b"x", kv(), limits())).output,
        Ok(Vec::new())
    );
}

const SPIN: &str = r#"(func (export "handle") (param i32 i32) (result i64)
    (loop $l (br $l)) (i64.const 0))"#;

#[test]
fn timeout_keeps_the_executor_responsive() {
    let _guard = exclusive();
    let spin = compile(SPIN);
    let echo = compile(ECHO);
    glommio::LocalExecutorBuilder::default()
        .make()
        .unwrap()
        .run(async move {
            let started = Instant::now();
            let spin_started = Rc::new(std::cell::Cell::new(None));
            let looping = {
                let spin_started = spin_started.clone();
                glommio::spawn_local(async move {
                    spin_started.set(Some(Instant::now()));
                    let r = spin
                        .execute(
                            b"{}",
                            kv(),
                            ExecLimits {
                                timeout_ms: 100,
                                memory_limit_bytes: 16 << 20,
                            },
                        )
                        .await;
                    (r, Instant::now())
                })
            };
            // Let the loop start.
            futures_lite::future::yield_now().await;
            assert!(spin_started.get().is_some());
            let mut completed = 0;
            for i in 0..50 {
                let input = format!("{{\"i\":{i}}}");
                let r = echo.execute(input.as_bytes(), kv(), limits()).await;
                assert_eq!(r.output, Ok(input.into_bytes()));
                completed += 1;
                if i % 10 == 9 {
                    // Let the spinning guest run again: it must hand the thread back.
                    futures_lite::future::yield_now().await;
                }
            }
            let echoes_done = Instant::now();
            println!(
                "50 echoes done after {:?} while the guest spun",
                echoes_done - started
            );
            let (r, loop_done) = looping.await;
            assert_eq!(completed, 50);
            assert_eq!(r.output, Err(GuestError::Timeout { timeout_ms: 100 }));
            assert_eq!(
                r.output.unwrap_err().to_string(),
                "execution timed out after 100 ms"
            );
            assert!(
                echoes_done < loop_done,
                "echoes finished while the guest looped"
            );
            let elapsed = loop_done - started;
            assert!(elapsed >= Duration::from_millis(100), "{elapsed:?}");
            assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        });
}

/// A read the host could not make fails the execution with the reason: the guest never
/// takes it for an absent key.
#[test]
fn a_read_that_fails_fails_the_execution() {
    let _guard = shared();
    let module = compile(
        r#"(data (i32.const 100) "k")
           (func (export "handle") (param i32 i32) (result i64)
             (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 200) (i32.const 10)))
             (i64.const 0))"#,
    );
    let r = block_on(module.execute(b"x", Rc::new(FailingKv), limits()));
    let error = r.output.unwrap_err().to_string();
    assert!(error.contains("kv_get \"k\": shard 1 is gone"), "{error}");
    assert!(r.kv_writes.is_empty());
}

/// A guest timeout of tens of milliseconds that fires later than this is broken, not slow:
/// a bound, since "fired on time" is a time (a loaded machine stays far below it).
const TIMEOUT_LATE: Duration = Duration::from_secs(10);

#[test]
fn timeout_while_waiting_on_the_host() {
    let _guard = shared();
    let module = compile(
        r#"(data (i32.const 100) "k")
           (func (export "handle") (param i32 i32) (result i64)
             (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 200) (i32.const 10)))
             (i64.const 0))"#,
    );
    let started = Instant::now();
    let r = block_on(module.execute(
        b"x",
        Rc::new(HangingKv),
        ExecLimits {
            timeout_ms: 50,
            memory_limit_bytes: 1 << 20,
        },
    ));
    assert_eq!(r.output, Err(GuestError::Timeout { timeout_ms: 50 }));
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert!(
        started.elapsed() < TIMEOUT_LATE,
        "the 50 ms timeout fired after {:?}: its timer does not end a wait on the host",
        started.elapsed()
    );
}

#[test]
fn timeout_under_block_on() {
    let _guard = shared();
    let spin = compile(SPIN);
    let started = Instant::now();
    let r = block_on(spin.execute(
        b"x",
        kv(),
        ExecLimits {
            timeout_ms: 30,
            memory_limit_bytes: 1 << 20,
        },
    ));
    assert_eq!(r.output, Err(GuestError::Timeout { timeout_ms: 30 }));
    assert!(
        started.elapsed() < TIMEOUT_LATE,
        "the 30 ms timeout fired after {:?}: its timer does not run under block_on",
        started.elapsed()
    );
}

/// Limits under which only a stop ends these guests within the test.
const LONG: ExecLimits = ExecLimits {
    timeout_ms: 600_000,
    memory_limit_bytes: 1 << 20,
};

/// Sets `stop` from another thread after `after`; returns when it was set.
fn stop_later(stop: &StopSignal, after: Duration) -> std::thread::JoinHandle<Instant> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        stop.stop();
        Instant::now()
    })
}

#[test]
fn a_stopped_guest_looping_forever_ends_at_once_with_no_writes() {
    let _guard = shared();
    let module = compile(
        r#"(data (i32.const 100) "k")
           (func (export "handle") (param i32 i32) (result i64)
             (drop (call $kv_set (i32.const 100) (i32.const 1) (i32.const 100) (i32.const 1)))
             (call $log (i32.const 1) (i32.const 100) (i32.const 1))
             (loop $l (br $l)) (i64.const 0))"#,
    );
    let stop = StopSignal::default();
    let setter = stop_later(&stop, Duration::from_millis(50));
    let r = block_on(module.execute_with_stop(b"x", kv(), LONG, &stop));
    let ended = Instant::now();
    let stopped_at = setter.join().unwrap();
    assert_eq!(r.output, Err(GuestError::Cancelled));
    assert_eq!(
        r.output.as_ref().unwrap_err().to_string(),
        "execution cancelled"
    );
    assert!(r.kv_writes.is_empty(), "{:?}", r.kv_writes);
    assert_eq!(r.outcome, None);
    assert_eq!(r.logs, vec![(1, "k".to_string())], "logs are kept");
    let took = ended.saturating_duration_since(stopped_at);
    assert!(
        took < Duration::from_millis(500),
        "ended {took:?} after the stop"
    );
}

#[test]
fn a_stopped_guest_waiting_on_the_host_ends_at_once() {
    let _guard = shared();
    // Blocked in a kv_get the host never answers.
    let reader = compile(
        r#"(data (i32.const 100) "k")
           (func (export "handle") (param i32 i32) (result i64)
             (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 200) (i32.const 10)))
             (i64.const 0))"#,
    );
    // Asleep in WASI poll_oneoff for 60 s.
    let sleeper = ENGINE
        .compile(
            format!(
                r#"(module
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  {ALLOC}
  (func (export "handle") (param i32 i32) (result i64)
    (i32.store (i32.const 516) (i32.const 1))
    (i64.store (i32.const 524) (i64.const 60000000000))
    (drop (call $poll (i32.const 500) (i32.const 600) (i32.const 1) (i32.const 700)))
    (i64.const 0)))"#
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    for (what, module, kv) in [
        ("kv_get", &reader, Rc::new(HangingKv) as Rc<dyn GuestKv>),
        ("poll_oneoff", &sleeper, kv()),
    ] {
        let stop = StopSignal::default();
        let setter = stop_later(&stop, Duration::from_millis(50));
        let r = block_on(module.execute_with_stop(b"x", kv, LONG, &stop));
        let took = Instant::now().saturating_duration_since(setter.join().unwrap());
        assert_eq!(r.output, Err(GuestError::Cancelled), "{what}");
        assert!(
            took < Duration::from_millis(500),
            "{what}: ended {took:?} after the stop"
        );
    }
}

#[test]
fn a_stop_on_the_executing_thread_frees_it_for_the_next_execution() {
    let _guard = shared();
    let spin = compile(SPIN);
    let echo = compile(ECHO);
    glommio::LocalExecutorBuilder::default()
        .make()
        .unwrap()
        .run(async move {
            let stop = StopSignal::default();
            let looping = {
                let stop = stop.clone();
                glommio::spawn_local(async move {
                    spin.execute_with_stop(b"{}", kv(), LONG, &stop).await
                })
            };
            glommio::timer::sleep(Duration::from_millis(20)).await;
            let stopped_at = Instant::now();
            stop.stop();
            let r = looping.await;
            assert_eq!(r.output, Err(GuestError::Cancelled));
            let took = stopped_at.elapsed();
            assert!(took < Duration::from_millis(500), "{took:?}");
            assert_eq!(
                echo.execute(b"x", kv(), limits()).await.output,
                Ok(b"x".to_vec())
            );
        });
}

#[test]
fn an_execution_stopped_before_it_starts_never_runs() {
    let _guard = shared();
    let fake = Rc::new(FakeKv::default());
    let module = compile(
        r#"(data (i32.const 100) "k")
           (func (export "handle") (param i32 i32) (result i64)
             (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 200) (i32.const 10)))
             (i64.const 0))"#,
    );
    let stop = StopSignal::default();
    stop.stop();
    let r = block_on(module.execute_with_stop(b"x", fake.clone(), limits(), &stop));
    assert_eq!(r.output, Err(GuestError::Cancelled));
    assert!(fake.asked.borrow().is_empty(), "the guest ran");
}

#[test]
fn module_size_is_its_compiled_image() {
    let _guard = shared();
    let small = compile(ECHO);
    let big_body: String = (0..2000)
        .map(|i| format!("(func $f{i} (result i32) (i32.add (i32.const {i}) (i32.const 1)))\n"))
        .collect();
    let big = compile(&format!("{ECHO}\n{big_body}"));
    assert!(small.size_bytes() > 0);
    assert!(
        big.size_bytes() > small.size_bytes() + 10_000,
        "{} vs {}",
        big.size_bytes(),
        small.size_bytes()
    );
    assert_eq!(small.clone().size_bytes(), small.size_bytes());
    // Data segments are part of the image.
    let data = ENGINE
        .compile(
            format!(
                r#"(module (memory (export "memory") 8) {ALLOC}
                     (data (i32.const 4096) "{}")
                     (func (export "handle") (param i32 i32) (result i64) (i64.const 0)))"#,
                "x".repeat(300 << 10)
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(data.size_bytes() >= 300 << 10, "{}", data.size_bytes());
}

#[test]
fn wasi_module_runs_without_filesystem() {
    let _guard = shared();
    let module = ENGINE
        .compile(
            format!(
                r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "random_get" (func $random_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_prestat_get" (func $fd_prestat_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll_oneoff (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock_time_get (param i32 i64 i32) (result i32)))
  (memory (export "memory") 1)
  {ALLOC}
  (data (i32.const 300) "hello from wasi\npartial")
  (data (i32.const 350) "oops\n")
  (data (i32.const 360) "/etc/passwd")
  (func $rc (param $i i32) (param $v i32)
    (i32.store (i32.add (i32.const 1024) (i32.mul (local.get $i) (i32.const 4))) (local.get $v)))
  (func (export "handle") (param i32 i32) (result i64)
    ;; stdout: iovec at 200 -> 300 (23 bytes)
    (i32.store (i32.const 200) (i32.const 300))
    (i32.store (i32.const 204) (i32.const 23))
    (call $rc (i32.const 0) (call $fd_write (i32.const 1) (i32.const 200) (i32.const 1) (i32.const 220)))
    ;; stderr
    (i32.store (i32.const 200) (i32.const 350))
    (i32.store (i32.const 204) (i32.const 5))
    (call $rc (i32.const 1) (call $fd_write (i32.const 2) (i32.const 200) (i32.const 1) (i32.const 220)))
    (call $rc (i32.const 2) (call $random_get (i32.const 1100) (i32.const 16)))
    ;; no preopened directory: fd 3 does not exist
    (call $rc (i32.const 3) (call $path_open (i32.const 3) (i32.const 0) (i32.const 360) (i32.const 11)
      (i32.const 0) (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 240)))
    (call $rc (i32.const 4) (call $fd_prestat_get (i32.const 3) (i32.const 240)))
    ;; sleep 5 ms: one relative monotonic clock subscription at 500 (userdata 7)
    (i64.store (i32.const 500) (i64.const 7))
    (i32.store8 (i32.const 508) (i32.const 0))
    (i32.store (i32.const 516) (i32.const 1))
    (i64.store (i32.const 524) (i64.const 5000000))
    (i64.store (i32.const 532) (i64.const 0))
    (i32.store16 (i32.const 540) (i32.const 0))
    (call $rc (i32.const 5) (call $poll_oneoff (i32.const 500) (i32.const 600) (i32.const 1) (i32.const 700)))
    (call $rc (i32.const 6) (i32.load (i32.const 700)))
    (call $rc (i32.const 7) (i32.load (i32.const 600)))
    (call $rc (i32.const 8) (call $environ_sizes_get (i32.const 712) (i32.const 716)))
    (call $rc (i32.const 9) (i32.load (i32.const 712)))
    (call $rc (i32.const 10) (call $clock_time_get (i32.const 0) (i64.const 1) (i32.const 720)))
    (call $pack (i32.const 1024) (i32.const 92))))"#
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let started = Instant::now();
    let r = run(&module, b"{}");
    let elapsed = started.elapsed();
    let out = r.output.unwrap();
    let rc = |i: usize| i32::from_le_bytes(out[i * 4..i * 4 + 4].try_into().unwrap());
    assert_eq!(rc(0), 0, "fd_write stdout");
    assert_eq!(rc(1), 0, "fd_write stderr");
    assert_eq!(rc(2), 0, "random_get");
    assert_ne!(&out[76..92], &[0u8; 16], "random bytes");
    assert_eq!(rc(3), 8, "path_open fails with badf");
    assert_eq!(rc(4), 8, "no preopens");
    assert_eq!(rc(5), 0, "poll_oneoff");
    assert_eq!(rc(6), 1, "one event");
    assert_eq!(rc(7), 7, "event userdata");
    assert!(elapsed >= Duration::from_millis(5), "{elapsed:?}");
    assert_eq!((rc(8), rc(9)), (0, 0), "no environment");
    assert_eq!(rc(10), 0, "clock_time_get");
    assert_eq!(
        r.logs,
        vec![
            (1, "hello from wasi".to_string()),
            (2, "oops".to_string()),
            (1, "partial".to_string()),
        ]
    );
}

#[test]
fn describe_read_at_compile() {
    let _guard = shared();
    let module = compile(
        r#"(data (i32.const 100) "{\"name\":\"rules\",\"version\":2}")
           (func (export "describe") (result i64) (call $pack (i32.const 100) (i32.const 28)))
           (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#,
    );
    assert_eq!(module.describe(), Some(r#"{"name":"rules","version":2}"#));
    assert_eq!(compile(ECHO).describe(), None);

    let e = ENGINE
        .compile(
            module_wat(
                r#"(func (export "describe") (result i64) unreachable)
                   (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#,
            )
            .as_bytes(),
        )
        .unwrap_err();
    assert!(
        e.to_string().contains(
            "describe() failed: guest trapped: unreachable instruction executed (in describe)"
        ),
        "{e}"
    );
    let e = ENGINE
        .compile(
            module_wat(
                r#"(data (i32.const 100) "not json")
                   (func (export "describe") (result i64) (call $pack (i32.const 100) (i32.const 8)))
                   (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#,
            )
            .as_bytes(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("not JSON"), "{e}");
    let e = ENGINE
        .compile(
            module_wat(
                r#"(func (export "describe") (result i64) (loop $l (br $l)) (i64.const 0))
                   (func (export "handle") (param i32 i32) (result i64) (i64.const 0))"#,
            )
            .as_bytes(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("timed out"), "{e}");
}

#[test]
fn precompiled_roundtrip() {
    let _guard = shared();
    let bytes = ENGINE.precompile(module_wat(WRAP).as_bytes()).unwrap();
    // SAFETY: produced just above by the same engine.
    let module = unsafe { ENGINE.load_precompiled(&bytes) }.unwrap();
    let r = run(&module, b"1");
    assert_eq!(r.output, Ok(br#"{"wrapped":1}"#.to_vec()));
    // SAFETY: not a precompiled artifact; must be refused, not loaded.
    let e = unsafe { ENGINE.load_precompiled(b"\0asm\x01\0\0\0") }.unwrap_err();
    assert!(matches!(e, WasmError::Deserialize(_)), "{e}");
}

#[test]
fn binary_modules_compile() {
    let _guard = shared();
    let bytes = wat::parse_str(module_wat(ECHO)).unwrap();
    let module = ENGINE.compile(&bytes).unwrap();
    assert_eq!(run(&module, b"[1]").output, Ok(b"[1]".to_vec()));
}

#[test]
fn engine_config_checked() {
    let _guard = shared();
    let e = WasmEngine::new(WasmConfig {
        max_instances: 0,
        memory_limit_bytes_max: 1 << 20,
    })
    .unwrap_err();
    assert!(matches!(e, WasmError::Config(_)));
    let e = WasmEngine::new(WasmConfig {
        max_instances: 1,
        memory_limit_bytes_max: 5 << 30,
    })
    .unwrap_err();
    assert!(matches!(e, WasmError::Config(_)));
}

#[test]
fn pool_exhaustion_is_an_error_not_a_panic() {
    let _guard = shared();
    let engine = WasmEngine::new(WasmConfig {
        max_instances: 2,
        memory_limit_bytes_max: 1 << 20,
    })
    .unwrap();
    let wait = engine
        .compile(
            module_wat(
                r#"(data (i32.const 100) "k")
                   (func (export "handle") (param i32 i32) (result i64)
                     (drop (call $kv_get (i32.const 100) (i32.const 1) (i32.const 200) (i32.const 10)))
                     (i64.const 0))"#,
            )
            .as_bytes(),
        )
        .unwrap();
    let echo = engine.compile(module_wat(ECHO).as_bytes()).unwrap();
    let limits = ExecLimits {
        timeout_ms: 60_000,
        memory_limit_bytes: 1 << 20,
    };
    block_on(async {
        // Two executions parked in kv_get hold both slots.
        let mut a = Box::pin(wait.execute(b"", Rc::new(HangingKv), limits));
        let mut b = Box::pin(wait.execute(b"", Rc::new(HangingKv), limits));
        assert!(futures_lite::future::poll_once(&mut a).await.is_none());
        assert!(futures_lite::future::poll_once(&mut b).await.is_none());
        let r = echo.execute(b"x", kv(), limits).await;
        let e = r.output.unwrap_err();
        assert!(matches!(e, GuestError::Instantiate(_)), "{e}");
        // Dropping an execution mid-flight releases its slot.
        drop(a);
        drop(b);
        assert_eq!(
            echo.execute(b"x", kv(), limits).await.output,
            Ok(b"x".to_vec())
        );
    });
}

/// `cargo test -p flo-shards --release wasm -- --ignored --nocapture`
#[test]
#[ignore]
fn measure_instantiate_and_call() {
    let _guard = exclusive();
    let echo = compile(ECHO);
    let wrap = compile(WRAP);
    let input = br#"{"age":25,"country":"US"}"#;
    glommio::LocalExecutorBuilder::default()
        .make()
        .unwrap()
        .run(async move {
            for (name, module) in [("echo", &echo), ("wrap", &wrap)] {
                let kv: Rc<dyn GuestKv> = Rc::new(FakeKv::default());
                for _ in 0..1_000 {
                    module
                        .execute(input, kv.clone(), limits())
                        .await
                        .output
                        .unwrap();
                }
                let n = 100_000;
                let started = Instant::now();
                let cpu_started = thread_cpu_time();
                for _ in 0..n {
                    module
                        .execute(input, kv.clone(), limits())
                        .await
                        .output
                        .unwrap();
                }
                let per = started.elapsed().as_secs_f64() * 1e6 / f64::from(n);
                let cpu = (thread_cpu_time() - cpu_started).as_secs_f64() * 1e6 / f64::from(n);
                println!(
                    "{name}: {per:.2} µs wall, {cpu:.2} µs CPU per execution \
                     (instantiate + alloc + handle), {n} runs"
                );
            }
        });
}

/// CPU time of the calling thread (for measurements on a busy machine).
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

mod reuse;
