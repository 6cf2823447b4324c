#!/usr/bin/env bash
# Usage: scripts/demo.sh
#
# A short tour of flo with its CLI: builds the release binaries, starts a server on a
# temporary data directory in the background, then stores and reads keys, registers a
# WebAssembly action (a WAT module written on the fly that echoes its input), invokes it,
# creates a one-step workflow that runs it, starts a run and waits for it, and stops the
# server with SIGTERM. Everything it made is removed at the end, whatever happens.
#
# Environment:
#   FLO_DEMO_ADDR   where the demo server listens (default 127.0.0.1:9555)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

addr=${FLO_DEMO_ADDR:-127.0.0.1:9555}
cargo build --release
flo_bin=$PWD/target/release/flo

work=$(mktemp -d -t flo-demo.XXXXXX)
server_pid=""
cleanup() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Each shard locks memory for its disk buffers (README: "Locked memory").
ulimit -l unlimited 2>/dev/null || true

"$flo_bin" server --listen "$addr" --http off --data-dir "$work/data" --shards 2 \
    >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 200); do
    grep -q "listening on" "$work/server.log" && break
    kill -0 "$server_pid" 2>/dev/null || {
        echo "demo.sh: the server did not start:" >&2
        cat "$work/server.log" >&2
        exit 1
    }
    sleep 0.1
done
grep -q "listening on" "$work/server.log" || {
    echo "demo.sh: the server did not report listening within 20 s:" >&2
    cat "$work/server.log" >&2
    exit 1
}
cat "$work/server.log"

# Prints a command line as one would type it.
say() {
    local line="\$" arg
    for arg in "$@"; do
        if [[ $arg =~ ^[A-Za-z0-9_./:@=+-]+$ ]]; then line+=" $arg"; else line+=" '$arg'"; fi
    done
    echo "$line"
}

# Runs the CLI against the demo server, showing the command and its output.
flo() {
    say flo "$@"
    "$flo_bin" --addr "$addr" "$@"
    echo
}

# Same, and keeps the output (a run id) in $out.
flo_capture() {
    say flo "$@"
    out=$("$flo_bin" --addr "$addr" "$@")
    echo "$out"
    echo
}

echo "--- the key-value store"
flo kv put greeting hello
flo kv get greeting
flo kv put greeting hi --if-version 1
flo --json kv get greeting
flo kv put session abc --ttl 60000
flo kv list

echo "--- a WebAssembly action: handle(ptr, len) returns its input, packed (ptr << 32 | len)"
cat >"$work/echo.wat" <<'WAT'
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "alloc") (param $size i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $size)))
    (local.get $p))
  (func (export "handle") (param $ptr i32) (param $len i32) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len)))))
WAT
cat "$work/echo.wat"
echo
flo action register echo --wasm "$work/echo.wat" --timeout 1000 --max-retries 2
flo action invoke echo '{"hello":"world"}' --wait
flo_capture action invoke echo '{"n":2}'
flo action status "$out"

echo "--- a one-step workflow that runs the action"
cat >"$work/echo-flow.yaml" <<'YAML'
kind: Workflow
name: echo-flow
version: "1"
start:
  run: "@actions/echo"
  transitions:
    success: flo.Completed
    failure: flo.Failed
YAML
cat "$work/echo-flow.yaml"
echo
flo validate workflow -f "$work/echo-flow.yaml"
flo workflow create -f "$work/echo-flow.yaml"
flo workflow start echo-flow '{"order":"ORD-1"}' --wait
flo workflow list-runs echo-flow
flo_capture workflow start echo-flow '{"order":"ORD-2"}'
flo workflow status "$out"
flo workflow history "$out"
flo status

echo "--- stopping the server (SIGTERM)"
kill -TERM "$server_pid"
wait "$server_pid" || true
server_pid=""
tail -n 1 "$work/server.log"
echo "demo done"
