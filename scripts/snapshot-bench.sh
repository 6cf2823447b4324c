#!/usr/bin/env bash
# Usage: scripts/snapshot-bench.sh KV_MIB VALUE_BYTES
#
# One row of the snapshot table in docs/benchmarks.md: a one-shard release server gets
# KV_MIB MiB of KV values (VALUE_BYTES each, one key per value, flo-loadtest kv-put) and
# takes one snapshot of them (--snapshot-bytes at KV_MIB + 1/32 + 4 MiB of log; puts of one more
# key make it fall due after the load); the script prints the shard's pause for the image, the time the
# writer took, the file's size and the server's peak RSS, then kills the server (-9) and
# times a restart from the snapshot (start to ready), with its start-up progress lines.
#
# Environment:
#   FLO_BENCH_BIN_DIR   where flo and flo-loadtest are (default: $CARGO_TARGET_DIR/release,
#                       else target/release); build them with
#                       `cargo build --release -p flo -p flo-loadtest`
#   FLO_BENCH_DIR       the data directory's parent (default: a temporary directory, removed)
set -euo pipefail
mib=${1:?usage: snapshot-bench.sh KV_MIB VALUE_BYTES}
value=${2:?usage: snapshot-bench.sh KV_MIB VALUE_BYTES}
bin=${FLO_BENCH_BIN_DIR:-${CARGO_TARGET_DIR:-target}/release}
work=${FLO_BENCH_DIR:-$(mktemp -d)}
[[ -n "${FLO_BENCH_DIR:-}" ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
data="$work/data"
rm -rf "$data"
port=$((20000 + RANDOM % 20000))
addr="127.0.0.1:$port"
ops=$((mib * 1048576 / value))

start_server() {
    rm -f "$work/server.log"
    touch "$work/server.log"
    "$bin/flo" server --listen "$addr" --http off --data-dir "$data" --shards 1 \
        --snapshot-bytes $(((mib + mib / 32 + 4) * 1048576)) >"$work/server.log" 2>&1 &
    pid=$!
    until grep -q listening "$work/server.log"; do
        kill -0 "$pid" || { cat "$work/server.log"; exit 1; }
        sleep 0.05
    done
}

shard() { # the first shard's field $1 from flo status --json
    "$bin/flo" --addr "$addr" --json status |
        python3 -c "import json,sys; print(json.load(sys.stdin)['shards'][0]['$1'])"
}

start_server
"$bin/flo-loadtest" --workload kv-put --addr "$addr" --ops "$ops" --keys "$ops" \
    --value-bytes "$value" --connections 4 --pipeline 16 --json >"$work/load.json"
# Puts of one more key (1 MiB of log at a time) until the snapshot was taken and written.
until [[ "$(shard snapshot_lsn)" != 0 && -n "$(ls "$data"/shard-000/*.snap 2>/dev/null)" ]]; do
    "$bin/flo-loadtest" --workload kv-put --addr "$addr" --namespace pad --ops 256 --keys 1 \
        --value-bytes 3000 --connections 1 --pipeline 1 --json >/dev/null
    sleep 0.5
done
snap=$(ls "$data"/shard-000/*.snap | tail -1)
echo "kv: $ops values of $value bytes ($((ops * value)) bytes), keys $(shard kv_keys)"
echo "snapshot: pause $(shard snapshot_pause_ms) ms, write $(shard snapshot_write_ms) ms, file $(stat -c %s "$snap") bytes"
echo "server peak RSS: $(grep VmHWM /proc/$pid/status)"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
started=$(date +%s.%N)
start_server
ready=$(date +%s.%N)
echo "restart to ready: $(python3 -c "print(round($ready - $started, 2))") s"
grep -E 'starting:|loading' "$work/server.log" || true
kill -TERM "$pid"
wait "$pid" 2>/dev/null || true
