#!/usr/bin/env bash
# Usage: scripts/soak.sh OPS [SERVER-ARG...]
#
# Drives OPS 3-step workflow runs (`flo-loadtest --workload workflow`) against a server of
# its own on a temporary data directory, and every 10 s prints the elapsed time, the runs
# finished so far (archived, from `flo status`), the server's resident memory and the data
# directory's bytes on disk. At the end: the whole run's throughput, log bytes per run, then
# a graceful stop and the time a restart takes until the server is ready.
#
#   SERVER-ARG...   extra `flo server` arguments (e.g. --shards 2)
#
# Environment:
#   FLO_BENCH_BIN_DIR   take flo and flo-loadtest from here instead of building this checkout
#   FLO_SOAK_ADDR       where the server listens (default 127.0.0.1:9566)
#   FLO_SOAK_DIR        keep the data directory here (default: a temporary one, removed)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}
ops=$1
shift
addr=${FLO_SOAK_ADDR:-127.0.0.1:9566}
if [[ -n ${FLO_BENCH_BIN_DIR:-} ]]; then
    bin=$FLO_BENCH_BIN_DIR
else
    cargo build --release -p flo -p flo-loadtest
    bin=$PWD/target/release
fi
work=$(mktemp -d -t flo-soak.XXXXXX)
data=${FLO_SOAK_DIR:-$work/data}
server_pid=""
load_pid=""
cleanup() {
    for pid in $load_pid $server_pid; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ulimit -l unlimited 2>/dev/null || true

start_server() {
    : >"$work/server.log"
    "$bin/flo" server --listen "$addr" --http off --data-dir "$data" "$@" >"$work/server.log" 2>&1 &
    server_pid=$!
    local t0
    t0=$(date +%s%N)
    until grep -q "listening on" "$work/server.log"; do
        kill -0 "$server_pid" 2>/dev/null || {
            cat "$work/server.log" >&2
            exit 1
        }
        sleep 0.02
    done
    ready_ms=$((($(date +%s%N) - t0) / 1000000))
}

rss_mb() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$server_pid/status"; }
finished() {
    "$bin/flo" --addr "$addr" status --json |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print(sum(s.get("archived_runs",0) for s in d["shards"]))'
}

start_server "$@"
echo "server pid $server_pid, rss $(rss_mb) MB at start"
"$bin/flo-loadtest" --addr "$addr" --workload workflow --ops "$ops" --connections 4 \
    --pipeline 128 --max-secs 86400 --json >"$work/load.json" 2>"$work/load.log" &
load_pid=$!
t0=$(date +%s)
printf "%8s %12s %14s %10s %10s %10s\n" "ELAPSED" "ARCHIVED" "WF RUNS DONE" "RUNS/S" "RSS MB" "DISK MB"
prev=0
rates=()
# `kill -0` still finds the generator once it exited (until `wait`): look at its state.
running() { [[ -e /proc/$load_pid ]] && ! grep -q '^State:.*Z' "/proc/$load_pid/status" 2>/dev/null; }
while running; do
    sleep 10
    archived=$(finished || echo 0)
    # Each workflow run retains one finished run: its steps run without action runs.
    runs=$archived
    rate=$(((runs - prev) / 10))
    prev=$runs
    running && rates+=("$rate")
    printf "%7ss %12s %14s %10s %10s %10s\n" "$(($(date +%s) - t0))" "$archived" "$runs" \
        "$rate" "$(rss_mb)" "$(du -sm "$data" | cut -f1)"
done
load_rc=0
wait "$load_pid" || load_rc=$?
load_pid=""
if [[ $load_rc -ne 0 ]]; then
    echo "soak.sh: flo-loadtest failed ($load_rc):" >&2
    tail -20 "$work/load.log" >&2
fi
python3 - "$work/load.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("loadtest:", json.dumps({k: d[k] for k in ("ops", "elapsed_s", "ops_per_s", "errors", "latency_ms", "hit_time_limit") if k in d}))
PY
# The slowest full 10 s window (the last, partial one left out).
slowest=$(printf "%s\n" "${rates[@]}" | sort -n | head -1)
echo "slowest 10 s window: ${slowest:-?} workflow runs/s"
runs=$(finished)
disk=$(du -sb "$data" | cut -f1)
echo "finished workflow runs: $runs; rss $(rss_mb) MB; disk $((disk / 1048576)) MB; $((disk / (runs > 0 ? runs : 1))) bytes per workflow run"
"$bin/flo" --addr "$addr" status --json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["shards"]:
    print("shard %d: snapshot at LSN %d, its image paused the shard %d ms, writing it took %d ms; run index %.0f MB for %d runs" % (
        s["shard"], s.get("snapshot_lsn", 0), s.get("snapshot_pause_ms", 0), s.get("snapshot_write_ms", 0),
        s.get("run_index_bytes", 0) / 1e6, s.get("archived_runs", 0)))'
kill -TERM "$server_pid"
wait "$server_pid" || true
# Another port: the stopped server's connections linger in TIME_WAIT on this one.
addr=${addr%:*}:$((${addr##*:} + 1))
start_server "$@"
echo "restart to ready: ${ready_ms} ms; rss after restart $(rss_mb) MB"
