//! Instance reuse for modules that opt in (`flo_reuse_instance`): what carries over from one
//! execution to the next, and when an instance is let go.

use super::*;

/// Counts its calls and the `dealloc` calls it got; input: one byte, the pages of memory
/// to grow by (255: trap). Output: calls and deallocs (u32 LE each). Logs one line and
/// writes one key per call.
const COUNTER: &str = r#"
  (data (i32.const 100) "hi")
  (data (i32.const 104) "k")
  (global $calls (mut i32) (i32.const 0))
  (global $freed (mut i32) (i32.const 0))
  (func (export "flo_reuse_instance"))
  (func (export "dealloc") (param i32 i32)
    (global.set $freed (i32.add (global.get $freed) (i32.const 1))))
  (func (export "handle") (param $p i32) (param $n i32) (result i64)
    (local $out i32) (local $b i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.gt_u (local.get $n) (i32.const 0))
      (then
        (local.set $b (i32.load8_u (local.get $p)))
        (if (i32.eq (local.get $b) (i32.const 255)) (then unreachable))
        (if (i32.eq (memory.grow (local.get $b)) (i32.const -1)) (then unreachable))))
    (call $log (i32.const 1) (i32.const 100) (i32.const 2))
    (drop (call $kv_set (i32.const 104) (i32.const 1) (i32.const 100) (i32.const 2)))
    (local.set $out (call $alloc (i32.const 8)))
    (i32.store (local.get $out) (global.get $calls))
    (i32.store offset=4 (local.get $out) (global.get $freed))
    (call $pack (local.get $out) (i32.const 8)))"#;

fn counter() -> WasmModule {
    compile(COUNTER)
}

fn mib(n: u64) -> ExecLimits {
    ExecLimits {
        memory_limit_bytes: n << 20,
        ..limits()
    }
}

/// Runs `module` with `input` keeping instances in `kept` under `scope`: (calls, deallocs)
/// the guest reports, and whether the instance was a kept one.
fn call(
    module: &WasmModule,
    kept: &WarmInstances,
    scope: &str,
    input: &[u8],
    limits: ExecLimits,
) -> (u32, u32, bool) {
    let r = block_on(module.execute_kept(
        Some((kept, scope)),
        ENTRYPOINT_DEFAULT,
        input,
        None,
        kv(),
        limits,
        &StopSignal::default(),
    ));
    let out = r.output.unwrap_or_else(|e| panic!("execution failed: {e}"));
    assert_eq!(r.logs.len(), 1, "only this execution's log: {:?}", r.logs);
    assert_eq!(r.kv_writes.len(), 1, "only this execution's write");
    let word = |i: usize| u32::from_le_bytes(out[i..i + 4].try_into().unwrap());
    (word(0), word(4), r.reused)
}

#[test]
fn an_opted_in_module_keeps_its_instance_and_hands_back_what_it_allocated() {
    let _g = shared();
    let module = counter();
    assert!(module.reuses_instances());
    let kept = WarmInstances::new(4);
    assert_eq!(call(&module, &kept, "a", &[0], limits()), (1, 0, false));
    assert_eq!(kept.len(), 1);
    // The second call sees the first's global, and the first's input and output were freed.
    assert_eq!(call(&module, &kept, "a", &[0], limits()), (2, 2, true));
    assert_eq!(call(&module, &kept, "a", &[], limits()), (3, 4, true));
    // Empty input: only the output was handed back.
    assert_eq!(call(&module, &kept, "a", &[0], limits()), (4, 5, true));
    assert_eq!(kept.len(), 1);
}

#[test]
fn instances_never_serve_another_scope_or_memory_limit() {
    let _g = shared();
    let module = counter();
    let kept = WarmInstances::new(4);
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 1);
    assert_eq!(call(&module, &kept, "b", &[0], limits()).0, 1);
    assert_eq!(call(&module, &kept, "a", &[0], mib(8)).0, 1);
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 2);
    assert_eq!(call(&module, &kept, "b", &[0], limits()).0, 2);
    assert_eq!(kept.len(), 3);
    // The same bytes compiled again are another module: its own instances.
    let again = counter();
    assert_eq!(call(&again, &kept, "a", &[0], limits()).0, 1);
}

#[test]
fn a_module_that_does_not_opt_in_always_starts_fresh() {
    let _g = shared();
    let module = compile(&COUNTER.replace(r#"(func (export "flo_reuse_instance"))"#, ""));
    assert!(!module.reuses_instances());
    let kept = WarmInstances::new(4);
    for _ in 0..3 {
        assert_eq!(call(&module, &kept, "a", &[0], limits()), (1, 0, false));
    }
    assert!(kept.is_empty());
    // Nor without a place to keep instances.
    let module = counter();
    let r = block_on(module.execute(&[0], kv(), limits()));
    let r2 = block_on(module.execute(&[0], kv(), limits()));
    assert_eq!(r.output, r2.output);
    assert!(!r2.reused);
}

#[test]
fn a_failed_or_stopped_execution_lets_its_instance_go() {
    let _g = shared();
    let module = counter();
    let kept = WarmInstances::new(4);
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 1);
    let trapped = block_on(module.execute_kept(
        Some((&kept, "a")),
        ENTRYPOINT_DEFAULT,
        &[255],
        None,
        kv(),
        limits(),
        &StopSignal::default(),
    ));
    assert!(
        matches!(trapped.output, Err(GuestError::Trap(_))),
        "{:?}",
        trapped.output
    );
    assert!(kept.is_empty());
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 1);
    let stop = StopSignal::default();
    stop.stop();
    let stopped = block_on(module.execute_kept(
        Some((&kept, "a")),
        ENTRYPOINT_DEFAULT,
        &[0],
        None,
        kv(),
        limits(),
        &stop,
    ));
    assert_eq!(stopped.output, Err(GuestError::Cancelled));
    assert!(kept.is_empty());
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 1);
}

#[test]
fn memory_past_half_the_limit_retires_an_instance_and_a_used_one_never_costs_room() {
    let _g = shared();
    let module = counter();
    let kept = WarmInstances::new(4);
    // 1 MiB = 16 pages; the guest starts with 1. Growing by 4: 5 pages kept, 9 (past 8) not.
    assert_eq!(call(&module, &kept, "a", &[4], mib(1)), (1, 0, false));
    assert_eq!(call(&module, &kept, "a", &[4], mib(1)), (2, 2, true));
    assert!(kept.is_empty());
    assert_eq!(call(&module, &kept, "a", &[3], mib(1)), (1, 0, false));
    // 4 pages used: 13 more do not fit in the kept instance, but do in a fresh one, where
    // the execution runs again.
    assert_eq!(call(&module, &kept, "a", &[13], mib(1)), (1, 0, false));
    // More than a fresh instance has still fails, as it would have anyway.
    let r = block_on(module.execute_kept(
        Some((&kept, "a")),
        ENTRYPOINT_DEFAULT,
        &[16],
        None,
        kv(),
        mib(1),
        &StopSignal::default(),
    ));
    assert_eq!(
        r.output,
        Err(GuestError::MemoryLimit {
            limit_bytes: 1 << 20
        })
    );
}

#[test]
fn at_most_capacity_instances_are_kept_the_least_recently_used_go_first() {
    let _g = shared();
    let module = counter();
    let kept = WarmInstances::new(2);
    for scope in ["a", "b", "c"] {
        assert_eq!(call(&module, &kept, scope, &[0], limits()).0, 1);
    }
    assert_eq!(kept.len(), 2);
    assert_eq!(call(&module, &kept, "c", &[0], limits()).0, 2);
    assert_eq!(call(&module, &kept, "b", &[0], limits()).0, 2);
    assert_eq!(call(&module, &kept, "a", &[0], limits()).0, 1);
    kept.clear();
    assert!(kept.is_empty());
    let none = WarmInstances::new(0);
    assert_eq!(call(&module, &none, "a", &[0], limits()).0, 1);
    assert_eq!(call(&module, &none, "a", &[0], limits()).0, 1);
}
