#!/usr/bin/env bash
# Usage: scripts/ci.sh [fast]
#
#   fast   the unit tests of the workspace and the engine's tests (its simulation among
#          them): no server is started. Measured: 1 min 43 s with a warm build.
#
# Exactly what CI runs: every test of the workspace (unit tests, the engine's simulation,
# integration tests against a real server), then a build of the runtime on its own. Each
# shard locks --io-memory-mb of memory for its disk buffers, so lift the locked-memory
# limit where we may (see README, "Locked memory"); where we may not, the tests run with
# whatever limit there is.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ulimit -l unlimited 2>/dev/null || true
if [[ ${1:-} == fast ]]; then
    cargo test --workspace --lib
    cargo test -p flo-engine --tests
    exit
fi
cargo test --workspace
# The runtime builds against the engine's face alone (without `test-support`): it cannot
# name a record, the fold or the commit path (ARCHITECTURE.md, "The crates").
cargo build -p flo-runtime
