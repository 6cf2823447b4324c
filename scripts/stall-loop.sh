#!/usr/bin/env bash
# Usage: scripts/stall-loop.sh [RUNS]
#
# Hunts the long run-time stalls (README, Known gaps; docs/crash-loop.md, Findings): RUNS
# times (40) it runs the kv-put and worker workloads of `flo-loadtest --spawn` side by side
# (each against a server of its own, as loadtest/tests/smoke.rs does). A server whose
# workload has not finished after 8 s (they take 1-2 s) is dumped to
# target/stall-loop/hang-RUN-PID.txt: its threads (state, CPU, wait channel, CPU time),
# kernel stacks, the system calls of its running threads for a second (strace), its
# io_uring rings (fdinfo), pressure, the kernel log's tail and gdb backtraces.
# Load the machine beside it: stalls were seen with both cores busy.
#
# Environment:
#   FLO_BIN_DIR   take flo and flo-loadtest from here instead of building (debug) this checkout
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
runs=${1:-40}
if [[ -n ${FLO_BIN_DIR:-} ]]; then
    B=$FLO_BIN_DIR
else
    cargo build -p flo -p flo-loadtest || exit 1
    B=$PWD/target/debug
fi
out=$PWD/target/stall-loop
mkdir -p "$out"
ulimit -l unlimited 2>/dev/null || true

dump() {
    local lt=$1 tag=$2 pid
    pid=$(pgrep -P "$lt" -x flo | head -1)
    [[ -z $pid ]] && { echo "no server under $lt"; return; }
    local file=$out/hang-$tag.txt
    {
        echo "server pid $pid"; date -u
        for t in /proc/$pid/task/*; do
            echo "$(basename "$t") $(cat "$t/comm") $(awk '{print $3, "cpu", $39}' "$t/stat") $(cat "$t/wchan") utime+stime $(awk '{print $14+$15}' "$t/stat")"
        done
        for t in /proc/$pid/task/*; do
            [[ $(awk '{print $3}' "$t/stat") == R ]] || continue
            local tid; tid=$(basename "$t")
            echo "== kernel stacks of $tid (5 samples)"
            for _ in 1 2 3 4 5; do cat "$t/stack"; echo --; sleep 0.05; done
            echo "== syscall of $tid: $(cat "$t/syscall")"
            echo "== strace of $tid for 1 s"
            timeout 1 strace -p "$tid" -T 2>&1 | head -60
        done
        for fd in /proc/$pid/fd/*; do
            [[ $(readlink "$fd") == *io_uring* ]] || continue
            echo "== fdinfo $(basename "$fd")"; head -40 "/proc/$pid/fdinfo/$(basename "$fd")"
        done
        for t in /proc/$pid/task/*; do
            echo "$(basename "$t") $(cat "$t/comm") utime+stime $(awk '{print $14+$15}' "$t/stat") (later)"
        done
        cat /proc/pressure/io /proc/pressure/cpu
        dmesg 2>/dev/null | tail -20
        timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt 12' 2>&1 | grep -E '^Thread|^#[0-9]+ ' | cut -c1-200
    } > "$file" 2>&1
    echo "dumped $file"
}

stalls=0
for i in $(seq 1 "$runs"); do
    "$B/flo-loadtest" --spawn --flo-bin "$B/flo" --shards 2 --max-secs 60 --json --workload kv-put \
        --ops 3000 --connections 2 --pipeline 16 > "$out/kv.out" 2> "$out/kv.err" & kv=$!
    "$B/flo-loadtest" --spawn --flo-bin "$B/flo" --shards 2 --max-secs 60 --json --workload worker \
        --ops 2000 --connections 2 --pipeline 16 --workers 3 --await-batch 16 > "$out/w.out" 2> "$out/w.err" & w=$!
    sleep 8
    stalled=0
    for p in $kv $w; do
        if kill -0 "$p" 2>/dev/null; then stalled=1; dump "$p" "$i-$p"; fi
    done
    wait "$kv" "$w"
    if [[ $stalled == 1 ]]; then
        stalls=$((stalls + 1))
        echo "run $i stalled"; tail -3 "$out/kv.err" "$out/w.err"
    fi
done
echo "$runs runs, $stalls stalled"
