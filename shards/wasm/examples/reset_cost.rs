//! What resetting a guest's memory costs between executions, with and without the
//! PAGEMAP_SCAN ioctl (`PoolingAllocationConfig::pagemap_scan`; Linux 6.7+): µs per
//! instantiate + call + drop, for a one-page guest and for a 17-page guest that writes at
//! the top of its memory, where a compiled guest keeps its stack (Rust's default layout).
//! The pool is configured as `WasmEngine::new` configures it. Run with
//! `cargo run --release -p flo-wasm --example reset_cost` (docs/benchmarks.md).

use wasmtime::{
    Config, Enabled, Engine, Instance, InstanceAllocationStrategy, Module, PoolingAllocationConfig,
    Store,
};

const EXECUTIONS: u32 = 200_000;

fn main() {
    let top = 17 * 65536;
    let guests: [(u32, Vec<u32>); 2] = [
        (1, vec![0, 4096]),
        (17, vec![0, 4096, 8192, top - 4096, top - 8192]),
    ];
    for (pages, writes) in &guests {
        for pagemap in [false, true] {
            let mut pool = PoolingAllocationConfig::new();
            pool.total_core_instances(8)
                .total_memories(8)
                .total_tables(8)
                .total_stacks(8)
                .max_memory_size(64 << 20)
                .linear_memory_keep_resident(64 << 10)
                .table_keep_resident(16 << 10)
                .pagemap_scan(if pagemap { Enabled::Auto } else { Enabled::No });
            let mut config = Config::new();
            config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
            let engine = Engine::new(&config).expect("engine");
            let stores: String = writes
                .iter()
                .map(|at| format!("(i32.store (i32.const {at}) (i32.const 7))"))
                .collect();
            let wat = format!(
                r#"(module (memory (export "memory") {pages}) (data (i32.const 0) "flo")
                     (func (export "handle") {stores}))"#
            );
            let module = Module::new(&engine, wat).expect("module");
            let started = std::time::Instant::now();
            for _ in 0..EXECUTIONS {
                let mut store = Store::new(&engine, ());
                let instance = Instance::new(&mut store, &module, &[]).expect("instance");
                instance
                    .get_typed_func::<(), ()>(&mut store, "handle")
                    .expect("handle")
                    .call(&mut store, ())
                    .expect("call");
            }
            let us = started.elapsed().as_secs_f64() * 1e6 / f64::from(EXECUTIONS);
            println!(
                "{pages:>2} pages, {} written, pagemap {pagemap:<5}: {us:.2} µs",
                writes.len()
            );
        }
    }
}
