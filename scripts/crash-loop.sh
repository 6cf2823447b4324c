#!/usr/bin/env bash
# Usage: scripts/crash-loop.sh CYCLES [FLO-CHAOS-ARG...]
#
# A crash-loop campaign (`flo-chaos`, loadtest/src/chaos/) against a release build: CYCLES
# times a seeded mixed load (KV puts, CAS and deletes, WASM runs whose guest writes a key,
# half the time on the other shard, worker tasks, workflows with signals, timers and
# children) against a server of its own, SIGKILL at a random moment 0.2-3 s in, a restart
# on the same data directory and port, and a check of everything acknowledged. Each
# violation prints one line with the command that replays it; the exit status is 1 if
# there was any. The summary gives the cycles run, operations acknowledged and in doubt per
# kind, restarts and the slowest one. docs/crash-loop.md describes the checks and keeps the
# campaigns run.
#
#   FLO-CHAOS-ARG...   e.g. --seed N (replay), --clients 8, --server-arg=--durability=async
#
# Environment:
#   FLO_BENCH_BIN_DIR   take flo and flo-chaos from here instead of building this checkout
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
cycles=$1
shift
if [[ -n ${FLO_BENCH_BIN_DIR:-} ]]; then
    bin=$FLO_BENCH_BIN_DIR
else
    cargo build --release -p flo -p flo-loadtest
    bin=$PWD/target/release
fi
# Each shard locks --io-memory-mb for its disk buffers (README, "Locked memory").
ulimit -l unlimited 2>/dev/null || true
exec "$bin/flo-chaos" --flo-bin "$bin/flo" --cycles "$cycles" "$@"
