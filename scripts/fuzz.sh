#!/usr/bin/env bash
# Usage: scripts/fuzz.sh TARGET [flo-fuzz options: --runs N --seed S --corpus DIR ...]
#
# A fuzzing campaign with edge coverage, on the stable toolchain: builds flo-fuzz with
# LLVM's SanitizerCoverage (one byte counter per edge; see fuzz/src/coverage.rs) in the
# `fuzz` profile (release speed, debug assertions and overflow checks on), then runs it at
# the lowest priority. TARGET is frame, record, yaml or auth. Findings are saved to
# fuzz/regressions/TARGET/; see docs/fuzz.md.
#
#   scripts/fuzz.sh yaml --runs 10000000
#   scripts/fuzz.sh record --replay fuzz/regressions/record
#
# The --target flag keeps the instrumentation off build scripts and proc macros, and the
# build in its own directory (target/TRIPLE/fuzz/), apart from ordinary builds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $# -lt 1 ]]; then
    echo "usage: scripts/fuzz.sh TARGET [--runs N] [--seed S] [--corpus DIR]..." >&2
    exit 2
fi

triple=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS="-C passes=sancov-module -C llvm-args=-sanitizer-coverage-level=3 \
-C llvm-args=-sanitizer-coverage-inline-8bit-counters ${RUSTFLAGS:-}" \
    cargo build --profile fuzz --target "$triple" -p flo-fuzz
exec nice -n 19 "target/$triple/fuzz/flo-fuzz" "$@"
