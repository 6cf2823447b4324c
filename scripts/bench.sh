#!/usr/bin/env bash
# Usage: scripts/bench.sh [--ops N] [WORKLOAD...]
#
# Builds the release binaries, then runs the load-test rows of docs/benchmarks.md's
# table, each against a server of its own (`flo-loadtest --spawn`), and prints each row's
# figures followed by a summary.
#
#   WORKLOAD...   only the rows of these workloads: kv-put, wasm-invoke, worker, workflow,
#                 stream-append, stream-consume, trigger (default: every row)
#   --ops N       run every row with N operations instead of the table's (a quick check:
#                 --ops 20000)
#
# Environment:
#   FLO_BENCH_BIN_DIR   take flo-loadtest and flo from this directory (another build's
#                       target/release, say) instead of building this checkout; run the
#                       script twice, with and without it, to compare two builds back to back
#   FLO_BENCH_OUT       keep each row's JSON report in this directory (default: a temporary
#                       directory, removed at the end)
#
# The rows share the machine with the load generator (as in docs/benchmarks.md); figures vary by
# ±30% from run to run on a shared machine. The full table takes several minutes of CPU.
set -euo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

# The rows of docs/benchmarks.md's table. Keep them in step with it.
ROWS=(
    "--workload kv-put --ops 600000 --shards 1 --durability sync --connections 2 --pipeline 256"
    "--workload kv-put --ops 600000 --shards 2 --durability sync --connections 8 --pipeline 256"
    "--workload kv-put --ops 500000 --shards 1 --durability sync --connections 4 --pipeline 128"
    "--workload kv-put --ops 500000 --shards 2 --durability sync --connections 4 --pipeline 128"
    "--workload kv-put --ops 500000 --shards 1 --durability async --connections 4 --pipeline 128"
    "--workload kv-put --ops 500000 --shards 2 --durability async --connections 4 --pipeline 128"
    "--workload wasm-invoke --ops 500000 --shards 2 --connections 4 --pipeline 128"
    "--workload wasm-invoke --ops 300000 --shards 1 --connections 4 --pipeline 128"
    "--workload wasm-invoke --ops 200000 --shards 2 --connections 2 --pipeline 16"
    "--workload worker --ops 500000 --shards 2 --connections 2 --pipeline 64 --workers 2 --await-batch 256"
    "--workload worker --ops 500000 --shards 2 --connections 2 --pipeline 32 --workers 4 --await-batch 64"
    "--workload workflow --ops 500000 --shards 2 --connections 4 --pipeline 128"
    "--workload stream-append --ops 300000 --shards 2 --connections 4 --pipeline 128"
    "--workload stream-append --ops 10000 --shards 2 --connections 4 --pipeline 16 --batch 100"
    "--workload stream-consume --ops 3000 --shards 2 --connections 2 --pipeline 8 --batch 100 --workers 2 --await-batch 1000"
    "--workload stream-consume --ops 300000 --shards 2 --connections 2 --pipeline 16 --workers 2 --await-batch 256"
    "--workload trigger --ops 5000 --shards 2 --connections 2 --pipeline 4 --batch 100"
)
WORKLOADS="kv-put wasm-invoke worker workflow stream-append stream-consume trigger"

usage() {
    sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

ops=""
selected=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --ops)
            [[ $# -ge 2 && $2 =~ ^[1-9][0-9]*$ ]] || usage
            ops=$2
            shift 2
            ;;
        -h | --help) usage ;;
        -*) usage ;;
        *)
            [[ " $WORKLOADS " == *" $1 "* ]] || {
                echo "bench.sh: unknown workload '$1' (one of: $WORKLOADS)" >&2
                exit 2
            }
            selected+=("$1")
            shift
            ;;
    esac
done

if [[ -n ${FLO_BENCH_BIN_DIR:-} ]]; then
    bin_dir=$(cd "$FLO_BENCH_BIN_DIR" && pwd)
else
    cargo build --release -p flo -p flo-loadtest
    bin_dir=$PWD/target/release
fi
for exe in flo flo-loadtest; do
    [[ -x $bin_dir/$exe ]] || {
        echo "bench.sh: $bin_dir/$exe is missing (build it with cargo build --release -p flo -p flo-loadtest)" >&2
        exit 2
    }
done

if [[ -n ${FLO_BENCH_OUT:-} ]]; then
    out_dir=$FLO_BENCH_OUT
    mkdir -p "$out_dir"
else
    out_dir=$(mktemp -d -t flo-bench.XXXXXX)
    trap 'rm -rf "$out_dir"' EXIT
fi

# Each spawned shard locks memory for its disk buffers (README: "Locked memory").
ulimit -l unlimited 2>/dev/null || true

have_jq=false
command -v jq >/dev/null && have_jq=true

summary=()
failed=0
n=0
for row in "${ROWS[@]}"; do
    workload=$(sed -E 's/.*--workload ([a-z-]+).*/\1/' <<<"$row")
    if [[ ${#selected[@]} -gt 0 && " ${selected[*]} " != *" $workload "* ]]; then
        continue
    fi
    if [[ -n $ops ]]; then
        row=$(sed -E "s/--ops [0-9]+/--ops $ops/" <<<"$row")
    fi
    n=$((n + 1))
    json=$out_dir/row-$n.json
    echo "== [$n] flo-loadtest --spawn $row"
    # shellcheck disable=SC2086 # the row is a list of arguments
    if "$bin_dir/flo-loadtest" --spawn $row --json >"$json"; then
        status=ok
    else
        status="FAILED (exit $?)"
        failed=$((failed + 1))
    fi
    if $have_jq && jq -e . "$json" >/dev/null 2>&1; then
        figures=$(jq -r '
            def f: . * 100 | round / 100;
            if .tasks then
                "\(.tasks.completed_per_s) tasks/s  e2e p50 \(.tasks.latency_ms.p50 | f) ms  p99 \(.tasks.latency_ms.p99 | f) ms  (invokes \(.ops_per_s)/s, errors \(.errors + .tasks.errors))"
            else
                "\(.ops_per_s) ops/s  p50 \(.latency_ms.p50 | f) ms  p99 \(.latency_ms.p99 | f) ms  (errors \(.errors))"
            end' "$json")
    else
        figures=$(tr -d '\n' <"$json")
    fi
    echo "   $figures  [$status]"
    summary+=("[$n] $row"$'\n'"    $figures  [$status]")
done

if [[ $n -eq 0 ]]; then
    echo "bench.sh: no row selected" >&2
    exit 2
fi
echo
echo "== summary (binaries: $bin_dir${ops:+, --ops $ops})"
printf '%s\n' "${summary[@]}"
[[ -n ${FLO_BENCH_OUT:-} ]] && echo "JSON reports in $out_dir"
exit $((failed > 0))
