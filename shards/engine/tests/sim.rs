//! Deterministic simulation of a flo server: 1–3 engines wired by hand (`sim/cluster.rs`),
//! random clients, workers, executions, message interleavings (FIFO per pair of shards),
//! disk writes, clock jumps and whole-server crashes with torn tails, all from one seed.
//! Each seed picks a retention of finished runs (most forget runs within the run) and a
//! segment size; shards roll segments, write snapshots and delete the segments nothing
//! needs as the runtime does, and crashes strike at any point of that (`sim/storage.rs`).
//! Invariants are checked as it runs and once it is driven to quiescence.
//!
//! `FLO_SIM_SEEDS=N` runs N seeds; `FLO_SIM_SEED=S` runs seed S alone (a failure names
//! its seed and the last inputs).

#[path = "sim/cluster.rs"]
mod cluster;
#[path = "sim/world.rs"]
mod world;

use world::Sim;

const SEEDS_DEFAULT: u64 = 150;
const STEPS_PER_SEED: u64 = 6000;

fn run_seed(seed: u64) {
    let result = std::panic::catch_unwind(|| {
        let mut sim = Sim::new(seed);
        sim.run(STEPS_PER_SEED);
    });
    if let Err(e) = result {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!(
            "simulation seed {seed} failed: {msg}\nlast inputs:\n{}\nreplay with: \
             FLO_SIM_SEED={seed} cargo test -p flo-engine --test sim -- --nocapture",
            world::trace_dump()
        );
    }
}

#[test]
fn simulation_seeds() {
    if let Ok(seed) = std::env::var("FLO_SIM_SEED") {
        let seed: u64 = seed.parse().expect("FLO_SIM_SEED must be a number");
        run_seed(seed);
        return;
    }
    let seeds: u64 = std::env::var("FLO_SIM_SEEDS")
        .ok()
        .map(|s| s.parse().expect("FLO_SIM_SEEDS must be a number"))
        .unwrap_or(SEEDS_DEFAULT);
    for seed in 1..=seeds {
        run_seed(seed);
    }
    eprintln!(
        "simulation totals over {seeds} seeds: {:?}",
        world::totals()
    );
}
