#!/usr/bin/env bash
# 16 concurrent clients on every model: `tessera serve` and `llama-server -np 16` in turn, driven
# by the same `tessera bench` load (closed loop, ~250-token prompts, 128 output tokens, streaming,
# 32 requests, 2 warm-ups). Prints each server's summary line per model and its peak resident
# memory (the server process's VmHWM, what `/usr/bin/time -f %M` reports, read before it stops).
#
# Usage: scripts/bench_models_server.sh LLAMA_SERVER [MODELS_DIR]
# Environment: TESSERA_BIN (default target/release/tessera); MODELS (file stems); LLAMA_CTX
# (llama-server -c, default 16384); BENCH_TIMEOUT (seconds per request, default 600); TESSERA_ARGS (more `tessera serve` flags, split on spaces,
# e.g. "--max-itl-slowdown 0 --max-batch-tokens 512"); SKIP_LLAMA=1 (Tessera only).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_SERVER="$1"
DIR="${2:-models}"
BIN="${TESSERA_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/tessera}"
MODELS="${MODELS:-gemma-3-270m-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m qwen2.5-coder-1.5b-instruct-q4_k_m smollm2-135m-instruct-q4_1}"
PORT=8531
LOAD=(-c 16 -n 32 --prompt-tokens 250 --output-tokens 128 --warmup 2 --no-progress
    --timeout "${BENCH_TIMEOUT:-600}")
wait_up() {
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
        sleep 0.5
    done
    echo "server on $PORT did not come up" >&2
    return 1
}
run() { # NAME, then the server command
    local name=$1
    shift
    "$@" >/tmp/bench-models-server-$name.log 2>&1 &
    local pid=$!
    wait_up
    echo "== $name $(cut -d' ' -f1-3 /proc/loadavg)"
    # A run in which no request finishes in time is reported, not fatal: the server is stopped
    # and the next one runs.
    "$BIN" bench --url "http://127.0.0.1:$PORT" "${LOAD[@]}" 2>&1 | grep -v '^ *[0-9]*: \|^  *at ' | tail -n 14 || true
    echo "peak RSS $(awk '/^VmHWM/ {printf "%.0f MiB", $2 / 1024}' "/proc/$pid/status")"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC')"
for m in $MODELS; do
    # shellcheck disable=SC2086 # TESSERA_ARGS is a list of flags
    run "tessera-$m" "$BIN" serve --model "$DIR/$m.gguf" --port "$PORT" ${TESSERA_ARGS:-}
    if [[ "${SKIP_LLAMA:-0}" != 1 ]]; then
        run "llama-$m" "$LLAMA_SERVER" -m "$DIR/$m.gguf" -t 2 -np 16 -c "${LLAMA_CTX:-16384}" --port "$PORT"
    fi
done
