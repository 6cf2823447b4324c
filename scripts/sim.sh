#!/usr/bin/env bash
# Usage: scripts/sim.sh SEEDS
#
# Runs the engine's deterministic simulation (shards/engine/tests/sim.rs) with seeds 1..=SEEDS, in
# a release build (debug assertions on) so that many seeds take little time. The simulation drives bare engines
# (no sockets, no runtime) from one seed: random clients, workers, executions, message
# interleavings, disk syncs, clock jumps, retention of finished runs, segment rolls,
# snapshots, segment deletion and crashes that drop what was not durable (at any point of a
# snapshot or a deletion), with invariants checked as it runs; a failure names its seed.
#
# Replay one seed (a debug build, debug assertions on):
#   FLO_SIM_SEED=N cargo test -p flo-engine --test sim
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -ne 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: scripts/sim.sh SEEDS   (how many seeds to run, e.g. 10000)" >&2
    exit 2
fi

log=$(mktemp -t flo-sim.XXXXXX)
trap 'rm -f "$log"' EXIT
status=0
# Release speed, with the engine's debug assertions (LSN continuity, impossible records) on.
FLO_SIM_SEEDS=$1 CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
    cargo test --release -p flo-engine --test sim -- --nocapture 2>&1 |
    tee "$log" || status=$?
if [[ $status -ne 0 ]]; then
    seed=$(grep -o 'simulation seed [0-9]* failed' "$log" | head -n 1 | grep -o '[0-9][0-9]*' || true)
    echo >&2
    if [[ -n $seed ]]; then
        echo "sim.sh: seed $seed failed; replay it with:" >&2
        echo "  FLO_SIM_SEED=$seed cargo test -p flo-engine --test sim" >&2
    else
        echo "sim.sh: the simulation failed (exit $status) without naming a seed (did it build?)" >&2
        echo "replay a failing seed with:  FLO_SIM_SEED=N cargo test -p flo-engine --test sim" >&2
    fi
    exit "$status"
fi
echo "sim.sh: seeds 1..=$1 passed; replay one with:  FLO_SIM_SEED=N cargo test -p flo-engine --test sim"
