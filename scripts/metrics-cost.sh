#!/usr/bin/env bash
# Usage: scripts/metrics-cost.sh [ROUNDS]
#
# What the metrics cost: each row below against a server of its own (`flo-loadtest --spawn`)
# with its HTTP port on (the default: the shards count and publish their metrics) and off
# (`--http off`: they count nothing), alternately on, off, on, off... ROUNDS times each
# (default 3), so that a slow phase of a shared machine falls on both. Prints, per row, the
# median throughput and server CPU per 1,000 operations of each, and the difference, as
# the Markdown rows of docs/benchmarks.md's "Metrics cost" table (the single runs on
# stderr).
#
# Environment: FLO_BENCH_BIN_DIR takes flo-loadtest and flo from this directory instead of
# building this checkout. About 10 minutes with 6 rounds on the 2-core machine. Needs jq.
set -euo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

# Async durability: no fdatasync in the loop (whose stalls on a shared disk swamp a few per
# cent), so the shards' CPU is what is measured.
ROWS=(
    "--workload kv-put --ops 500000 --shards 1 --durability async --connections 4 --pipeline 128"
    "--workload kv-put --ops 500000 --shards 2 --durability async --connections 4 --pipeline 128"
    "--workload wasm-invoke --ops 300000 --shards 2 --durability async --connections 4 --pipeline 128"
    "--workload workflow --ops 100000 --shards 2 --durability async --connections 4 --max-outstanding 128"
)

rounds=${1:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
    sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
command -v jq >/dev/null || {
    echo "metrics-cost.sh: jq is needed to read the JSON reports" >&2
    exit 2
}
if [[ -n ${FLO_BENCH_BIN_DIR:-} ]]; then
    bin_dir=$(cd "$FLO_BENCH_BIN_DIR" && pwd)
else
    cargo build --release -p flo -p flo-loadtest >&2
    bin_dir=${CARGO_TARGET_DIR:-$PWD/target}/release
fi
ulimit -l unlimited 2>/dev/null || true
out_dir=$(mktemp -d -t flo-metrics-cost.XXXXXX)
trap 'rm -rf "$out_dir"' EXIT

# A report's throughput (tasks/s for the worker workload) and server CPU ms per 1,000 ops.
FIGURES='(if .workload == "worker" then .tasks.completed_per_s else .ops_per_s end | round),
    (.server.cpu_s_per_1000_ops * 1000 * 100 | round / 100)'
CLEAN='.errors == 0 and (.tasks == null or .tasks.errors == 0)'

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# The difference of off from on, in per cent of off.
diff_pct() { awk -v on="$1" -v off="$2" 'BEGIN { printf "%+.1f%%", (on - off) * 100 / off }'; }

echo "| \`flo-loadtest --spawn ...\` | ops/s on | ops/s off | on vs off | CPU ms/1k ops on | off | on vs off |"
echo "|---|---|---|---|---|---|---|"
n=0
for row in "${ROWS[@]}"; do
    for mode in on off; do : >"$out_dir/$mode.ops"; : >"$out_dir/$mode.cpu"; done
    for round in $(seq "$rounds"); do
        for mode in on off; do
            n=$((n + 1))
            http=()
            [[ $mode == off ]] && http=(--http off)
            json=$out_dir/run-$n.json
            # shellcheck disable=SC2086 # the row is a list of arguments
            "$bin_dir/flo-loadtest" --spawn $row "${http[@]}" --json >"$json" 2>"$out_dir/run-$n.log" || {
                echo "metrics-cost.sh: run $n failed:" >&2
                tail -5 "$out_dir/run-$n.log" >&2
                exit 1
            }
            jq -e "$CLEAN" "$json" >/dev/null || echo "   (run $n had errors)" >&2
            mapfile -t figures < <(jq -r "$FIGURES" "$json")
            echo "${figures[0]}" >>"$out_dir/$mode.ops"
            echo "${figures[1]}" >>"$out_dir/$mode.cpu"
            echo "[$round $mode] $row: ${figures[0]} ops/s, ${figures[1]} ms CPU per 1,000" >&2
        done
    done
    on_ops=$(median <"$out_dir/on.ops")
    off_ops=$(median <"$out_dir/off.ops")
    on_cpu=$(median <"$out_dir/on.cpu")
    off_cpu=$(median <"$out_dir/off.cpu")
    echo "| \`$row\` | $on_ops | $off_ops | $(diff_pct "$on_ops" "$off_ops") | $on_cpu | $off_cpu | $(diff_pct "$on_cpu" "$off_cpu") |"
done
