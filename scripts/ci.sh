#!/usr/bin/env bash
# Usage: scripts/ci.sh [fast]
#
#   fast   the unit tests of the workspace and the engine's tests (its simulation among
#          them): no server is started. Measured: 1 min 43 s with a warm build.
#
# Exactly what CI runs: every test of the workspace (unit tests, the engine's simulation,
# integration tests against a real server), then a check that the runtime does not reach
# the engine's insides. Each
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
# The web console's test drives a real headless Chromium (tests/console.rs; skipped, saying
# so, where none exists): install Debian's when it is missing and we may (root with apt).
# Quiet, and never fatal: without it that one test is skipped.
command -v chromium >/dev/null || {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null &&
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
} || true
cargo test --workspace
# The runtime uses the engine's face alone: the records, the fold and the commit path are
# reachable only through `flo_engine::testing` (behind `test-support`, which the workspace's
# test build turns on for every crate), so the runtime's sources may not name `testing`
# (ARCHITECTURE.md, "The crates"). `cargo check -p flo-runtime` proves the same without the
# feature, at the cost of compiling wasmtime once more (3-4 minutes on a clean machine).
if grep -rnw testing shards/runtime/src; then
    echo "ci.sh: the runtime names flo_engine::testing (above); it may use the engine's face only" >&2
    exit 1
fi
