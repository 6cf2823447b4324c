#!/usr/bin/env bash
# Usage: scripts/bench.sh [--ops N] [WORKLOAD...]
#
# Builds the release binaries, runs each row of docs/benchmarks.md's load-test table against
# a server of its own (`flo-loadtest --spawn`), and prints the table's Markdown rows (on
# stdout, after the progress of each row on stderr), ready to paste.
#
#   WORKLOAD...   only the rows of these workloads: kv-put, wasm-invoke, worker, workflow,
#                 workflow-worker, mixed, stream-append, stream-consume, trigger (default:
#                 every row)
#   --ops N       run every closed-loop row with N operations instead of the table's (a
#                 quick check: --ops 20000); open-loop rows (--rate) keep their schedule
#
# Environment:
#   FLO_BENCH_BIN_DIR   take flo-loadtest and flo from this directory (another build's
#                       target/release, say) instead of building this checkout; run the
#                       script twice, with and without it, to compare two builds back to back
#   FLO_BENCH_OUT       keep each row's JSON report in this directory (default: a temporary
#                       directory, removed at the end)
#   FLO_BENCH_MAX_SECS  stop a row's requests after this many seconds (default 120: a row
#                       that meets one of the server's write-load stalls ends, marked as cut
#                       short, instead of holding up the table)
#
# Each row is 100,000 to 500,000 operations: from the rows' rates the whole table should take
# about 5 minutes on a quiet 2-core machine (not counting the build), each row at most
# FLO_BENCH_MAX_SECS. The rows share the machine with the
# load generator (as in docs/benchmarks.md); figures vary by ±30% from run to run on a
# shared machine. Run by hand, never by CI. Needs jq.
set -euo pipefail
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
cd "$(dirname "$self")/.."

# The rows of docs/benchmarks.md's table: "what it measures|flo-loadtest arguments".
# Keep them in step with it.
ROWS=(
    "durable KV puts|--workload kv-put --ops 500000 --shards 1 --durability sync --connections 2 --pipeline 256"
    "durable KV puts|--workload kv-put --ops 500000 --shards 2 --durability sync --connections 8 --pipeline 256"
    "durable KV puts|--workload kv-put --ops 500000 --shards 1 --durability sync --connections 4 --pipeline 128"
    "durable KV puts|--workload kv-put --ops 500000 --shards 2 --durability sync --connections 4 --pipeline 128"
    "durable KV puts, each key through a connection on its owner|--workload kv-put --ops 500000 --shards 2 --durability sync --connections 4 --pipeline 128 --route-keys"
    "KV puts, async|--workload kv-put --ops 500000 --shards 1 --durability async --connections 4 --pipeline 128"
    "KV puts, async|--workload kv-put --ops 500000 --shards 2 --durability async --connections 4 --pipeline 128"
    "durable KV puts, open loop at 100k/s (latency from the intended send time)|--workload kv-put --rate 100000 --duration 5s --shards 2 --connections 4 --pipeline 128"
    "WASM runs, invoke + wait for completion|--workload wasm-invoke --ops 500000 --shards 2 --connections 4 --pipeline 128"
    "WASM runs, invoke + wait for completion|--workload wasm-invoke --ops 300000 --shards 1 --connections 4 --pipeline 128"
    "WASM runs, a module that reuses its instance|--workload wasm-invoke --ops 500000 --shards 2 --connections 4 --pipeline 128 --reuse-instances"
    "WASM runs, one at a time|--workload wasm-invoke --ops 5000 --shards 2 --connections 1 --pipeline 1 --max-outstanding 1"
    "WASM runs at about a quarter of the peak rate|--workload wasm-invoke --ops 200000 --shards 2 --connections 2 --pipeline 16"
    "WASM runs, open loop at 30k/s|--workload wasm-invoke --rate 30000 --duration 10s --shards 2 --connections 4 --pipeline 128"
    "worker tasks (invoke → await → complete)|--workload worker --ops 500000 --shards 2 --connections 2 --pipeline 64 --workers 2 --await-batch 256"
    "worker tasks, generator-limited|--workload worker --ops 500000 --shards 2 --connections 2 --pipeline 32 --workers 4 --await-batch 64"
    "worker tasks, at most 1,024 invoked and not completed|--workload worker --ops 300000 --shards 2 --connections 2 --pipeline 64 --workers 2 --await-batch 256 --max-outstanding 1024"
    "worker tasks, at most 100 invoked and not completed|--workload worker --ops 300000 --shards 2 --connections 2 --pipeline 64 --workers 2 --await-batch 64 --max-outstanding 100"
    "3-step workflows of WASM actions, one at a time|--workload workflow --ops 5000 --shards 2 --connections 1 --pipeline 1 --max-outstanding 1"
    "3-step workflows of WASM actions, start + wait for completion|--workload workflow --ops 300000 --shards 2 --connections 4 --pipeline 128"
    "3-step workflows of WASM actions, at most 128 outstanding|--workload workflow --ops 300000 --shards 2 --connections 4 --pipeline 32 --max-outstanding 128"
    "3-step workflows, a module that reuses its instance, at most 128 outstanding|--workload workflow --ops 300000 --shards 2 --connections 4 --pipeline 32 --max-outstanding 128 --reuse-instances"
    "3-step workflows of worker-hosted actions, start + wait for completion|--workload workflow-worker --ops 100000 --shards 2 --connections 4 --pipeline 64 --workers 2 --await-batch 256"
    "3-step workflows of worker-hosted actions, at most 128 outstanding|--workload workflow-worker --ops 200000 --shards 2 --connections 4 --pipeline 32 --max-outstanding 128 --workers 4"
    "mixed: KV puts/gets 50, WASM 20, worker tasks 15, workflows 15|--workload mixed --ops 300000 --shards 2 --connections 4 --pipeline 128 --workers 2 --await-batch 256 --max-outstanding 2048"
    "durable appends, one record per request, pipelined|--workload stream-append --ops 300000 --shards 2 --connections 4 --pipeline 128"
    "durable appends, 100 records per request|--workload stream-append --ops 10000 --shards 2 --connections 4 --pipeline 16 --batch 100"
    "consume + ack through a shared group|--workload stream-consume --ops 3000 --shards 2 --connections 2 --pipeline 8 --batch 100 --workers 2 --await-batch 1000"
    "append → ack latency, consumers keeping up|--workload stream-consume --ops 300000 --shards 2 --connections 2 --pipeline 16 --workers 2 --await-batch 256"
    "triggered 1-step WASM workflows: records in, completed runs out|--workload trigger --ops 5000 --shards 2 --connections 2 --pipeline 4 --batch 100"
)
WORKLOADS="kv-put wasm-invoke worker workflow workflow-worker mixed stream-append stream-consume trigger"

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

max_secs=${FLO_BENCH_MAX_SECS:-120}
[[ $max_secs =~ ^[1-9][0-9]*$ ]] || {
    echo "bench.sh: FLO_BENCH_MAX_SECS must be a whole number of seconds" >&2
    exit 2
}
command -v jq >/dev/null || {
    echo "bench.sh: jq is needed to turn the JSON reports into table rows" >&2
    exit 2
}

if [[ -n ${FLO_BENCH_BIN_DIR:-} ]]; then
    bin_dir=$(cd "$FLO_BENCH_BIN_DIR" && pwd)
else
    cargo build --release -p flo -p flo-loadtest >&2
    bin_dir=${CARGO_TARGET_DIR:-$PWD/target}/release
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

# One report as the figure columns of its table row: throughput | p50 | p99 | server CPU
# per 1,000 ops | server peak RSS. Worker rows give tasks/s and invoke-to-complete
# latency; open-loop rows the achieved rate, and say so when the generator fell behind.
# shellcheck disable=SC2016 # a jq program, not a shell string
FIGURES='
    def group: tostring | if length > 3 then (.[:-3] | group) + "," + .[-3:] else . end;
    def n: round | group;
    def ms: if . == null then "–" else (. * 100 | round / 100 | tostring) end;
    def server:
        if .server == null then "– | –" else
            "\(.server.cpu_s_per_1000_ops * 1000 | ms) ms | \(.server.peak_rss_bytes / 1048576 | round) MiB"
        end;
    if .workload == "worker" then
        "\(.tasks.completed_per_s | n) tasks/s | \(.tasks.latency_ms.p50 | ms) e2e | \(.tasks.latency_ms.p99 | ms) e2e | \(server)"
    elif .workload == "stream-consume" or .workload == "trigger" then
        "\(.tasks.completed_per_s | n) records/s | \(.latency_ms.p50 | ms) | \(.latency_ms.p99 | ms) | \(server)"
    elif .open_loop != null then
        "\(.open_loop.achieved_per_s | n)\(if .open_loop.fell_behind then " (fell behind)" else "" end) | \(.latency_ms.p50 | ms) | \(.latency_ms.p99 | ms) | \(server)"
    else
        "\(.ops_per_s | n) | \(.latency_ms.p50 | ms) | \(.latency_ms.p99 | ms) | \(server)"
    end'
# Whether a report's run was clean: no error anywhere, every task done.
CLEAN='.errors == 0 and (.tasks == null or (.tasks.errors == 0 and .tasks.completed >= .tasks.expected))'

table=()
failed=0
n=0
for entry in "${ROWS[@]}"; do
    what=${entry%%|*}
    row=${entry#*|}
    workload=$(sed -E 's/.*--workload ([a-z-]+).*/\1/' <<<"$row")
    if [[ ${#selected[@]} -gt 0 && " ${selected[*]} " != *" $workload "* ]]; then
        continue
    fi
    if [[ -n $ops ]]; then
        row=$(sed -E "s/--ops [0-9]+/--ops $ops/" <<<"$row")
    fi
    n=$((n + 1))
    json=$out_dir/row-$n.json
    echo "== [$n] flo-loadtest --spawn $row" >&2
    # shellcheck disable=SC2086 # the row is a list of arguments
    if "$bin_dir/flo-loadtest" --spawn $row --max-secs "$max_secs" --json >"$json" 2>"$out_dir/row-$n.log"; then
        status=""
    else
        status=" (FAILED: exit $?)"
        failed=$((failed + 1))
        tail -5 "$out_dir/row-$n.log" >&2
    fi
    if jq -e . "$json" >/dev/null 2>&1; then
        figures=$(jq -r "$FIGURES" "$json")
        jq -e "$CLEAN" "$json" >/dev/null || status="$status (errors)"
        jq -e '.hit_time_limit' "$json" >/dev/null && status="$status (cut short at ${max_secs} s)"
    else
        figures="– | – | – | – | –"
    fi
    echo "   $figures$status" >&2
    table+=("| $what$status | \`$row\` | $figures |")
done

if [[ $n -eq 0 ]]; then
    echo "bench.sh: no row selected" >&2
    exit 2
fi
echo >&2
echo "== docs/benchmarks.md rows (binaries: $bin_dir${ops:+, --ops $ops})" >&2
echo "| workload | \`flo-loadtest --spawn ...\` | ops/s | p50 ms | p99 ms | server CPU per 1,000 ops | server peak RSS |"
echo "|---|---|---|---|---|---|---|"
printf '%s\n' "${table[@]}"
[[ -n ${FLO_BENCH_OUT:-} ]] && echo "JSON reports in $out_dir" >&2
exit $((failed > 0))
