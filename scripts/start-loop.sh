#!/usr/bin/env bash
# Usage: scripts/start-loop.sh STARTS [--shards N] [--debug]
#
# Starts and stops a server STARTS times on one data directory (a KV write each time, so
# the log grows; every 10th stop is a kill -9), and reports how long each start took to
# print its ready line. A start not ready within 15 s is a hang (the server itself gives
# up after 20 s without progress): the script saves what each
# thread was doing (kernel wait channel and stack, and gdb's backtraces when gdb is there)
# to hang-<N>.txt in the working directory, kills it, and goes on. Prints the counts and
# the slowest starts, and the starts the server had to wake (a stall it got over, see
# shards/runtime/src/kick.rs); exits 1 if any start hung or failed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

starts=${1:?usage: scripts/start-loop.sh STARTS [--shards N] [--debug]}
shift
shards=2
profile=release
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) shards=$2; shift 2 ;;
        --debug) profile=debug; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

ulimit -l unlimited 2>/dev/null || true
if [ "$profile" = release ]; then
    cargo build --release -p flo >&2
else
    cargo build -p flo >&2
fi
flo="${FLO_BIN:-$PWD/target/$profile/flo}"
work=$(mktemp -d)
trap 'kill -9 "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
data="$work/data"
times="$work/times"
: > "$times"
hangs=0
failures=0
kicks=0

dump_threads() { # pid out
    local pid=$1 out=$2
    {
        echo "# start $i: not ready after 15 s"
        cat "$work/err" 2>/dev/null | tail -20
        for t in /proc/"$pid"/task/*; do
            echo "## thread $(cat "$t/comm" 2>/dev/null) ($(basename "$t")) wchan=$(cat "$t/wchan" 2>/dev/null)"
            cat "$t/stack" 2>/dev/null || true
        done
        if command -v gdb >/dev/null; then
            timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt 30" 2>&1 || true
        fi
    } > "$out"
}

for i in $(seq 1 "$starts"); do
    # A fresh file: the background start truncates it only when it runs, and a read of
    # the last server's ready line would be a wrong address.
    rm -f "$work/out" "$work/err"
    begin=$(date +%s%N)
    "$flo" server --data-dir "$data" --listen 127.0.0.1:0 --http off --shards "$shards" \
        --io-memory-mb 2 > "$work/out" 2> "$work/err" &
    pid=$!
    ready=""
    addr=""
    deadline=$(( $(date +%s) + 15 ))
    while [ "$(date +%s)" -lt "$deadline" ]; do
        addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9][0-9]*\) .*/\1/p' "$work/out" 2>/dev/null | head -1 || true)
        if [ -n "$addr" ]; then
            ready=yes
            break
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            break
        fi
        sleep 0.01
    done
    if [ -z "$ready" ]; then
        if kill -0 "$pid" 2>/dev/null; then
            hangs=$((hangs + 1))
            dump_threads "$pid" "hang-$i.txt"
            echo "start $i: HANG (threads in hang-$i.txt)" >&2
            kill -9 "$pid" 2>/dev/null || true
        else
            failures=$((failures + 1))
            echo "start $i: FAILED: $(tail -3 "$work/err")" >&2
        fi
        wait "$pid" 2>/dev/null || true
        continue
    fi
    end=$(date +%s%N)
    echo "$i $(( (end - begin) / 1000000 ))" >> "$times"
    if ! "$flo" --addr "$addr" kv put "start-$i" "$i" > /dev/null 2> "$work/cli"; then
        failures=$((failures + 1))
        alive=no
        kill -0 "$pid" 2>/dev/null && alive=yes
        echo "start $i: a put right after the ready line failed (server alive: $alive): $(cat "$work/cli")" >&2
        echo "  ready line: $(head -1 "$work/out")" >&2
        echo "  server stderr: $(tail -5 "$work/err")" >&2
        ss -ltnp 2>/dev/null | grep ":${addr##*:} " >&2 || echo "  nothing listens on $addr" >&2
    fi
    if [ $((i % 10)) -eq 0 ]; then
        kill -9 "$pid"
    else
        kill -TERM "$pid"
    fi
    wait "$pid" 2>/dev/null || true
    # Read once the server is gone: its stderr is written by a thread of its own, and may
    # not be out yet when the ready line is.
    if grep -q "woke .* shard threads" "$work/err"; then
        kicks=$((kicks + 1))
        echo "start $i: stalled, woken: $(grep -m1 "woke .* shard threads" "$work/err")" >&2
    fi
    if [ $((i % 100)) -eq 0 ]; then
        echo "$i starts, $hangs hangs, $failures failures" >&2
    fi
done

count=$(wc -l < "$times")
echo "starts: $starts, ready: $count, hangs: $hangs, failures: $failures, stalls woken: $kicks"
if [ "$count" -gt 0 ]; then
    sort -k2 -n "$times" | awk '{ s += $2; a[NR] = $2 } END {
        p = int(NR * 0.99) + 1; if (p > NR) p = NR
        printf "start to ready: mean %.0f ms, median %d ms, p99 %d ms, max %d ms\n",
            s / NR, a[int(NR / 2) + 1], a[p], a[NR] }'
    echo "slowest starts (start, ms):"
    sort -k2 -n -r "$times" | head -5
fi
[ "$hangs" -eq 0 ] && [ "$failures" -eq 0 ]
