#!/usr/bin/env bash
# Chaos soak: `tessera serve` on a KV pool small enough to force preemption, driven by
# scripts/soak.py (Python standard library only): mixed requests at 32 concurrent, 10%
# malformed, 10% of clients disconnecting at a random moment, some reading slowly. Checks no
# 5xx (nor other failure) on valid requests, greedy outputs equal to the same requests run
# alone, no KV tile in use and no file descriptor left once idle, and reports the resident
# memory drift after warm-up; then stops the server with SIGTERM and checks that it exits 0.
#
# Usage: scripts/soak.sh [--requests N] [--concurrency C] [--seed S]   (default 10000 at 32)
# Not part of the default test run (about 15 minutes on 2 cores); tests/e2e/run.sh runs a
# short one (SOAK_REQUESTS=300).
#
# Environment: TESSERA_BIN (skip the build), TESSERA_MODEL (a GGUF file; default: the default
# model), SOAK_KV_MEMORY (default 24MiB), SOAK_LOG (keep the server log there),
# CARGO_TARGET_DIR (honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$ROOT/models}"

if [[ -z "${TESSERA_BIN:-}" ]]; then
    cargo build --release --bin tessera
    TESSERA_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera"
fi
PYTHON="python3"
[[ -x "$ROOT/.venv/bin/python" ]] && PYTHON="$ROOT/.venv/bin/python"

PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
LOG="${SOAK_LOG:-$(mktemp -t tessera-soak-XXXXXX.log)}"
MODEL_ARGS=()
if [[ -n "${TESSERA_MODEL:-}" ]]; then
    MODEL_ARGS=(--model "$TESSERA_MODEL")
fi
RUST_LOG="${RUST_LOG:-warn}" "$TESSERA_BIN" serve "${MODEL_ARGS[@]}" --host 127.0.0.1 --port "$PORT" \
    --kv-memory "${SOAK_KV_MEMORY:-24MiB}" --max-seqs 32 --shutdown-timeout 10 >"$LOG" 2>&1 &
PID=$!
cleanup() {
    if kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

for _ in $(seq 1 600); do
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "tessera serve exited during startup:" >&2
        cat "$LOG" >&2
        exit 1
    fi
    curl -fsS -o /dev/null "http://127.0.0.1:$PORT/health" 2>/dev/null && break
    sleep 0.5
done

set +e
"$PYTHON" "$ROOT/scripts/soak.py" --port "$PORT" --pid "$PID" "$@"
status=$?
set -e

kill -TERM "$PID"
set +e
wait "$PID"
server_status=$?
set -e
if [[ $server_status -ne 0 ]]; then
    echo "tessera serve exited with $server_status after SIGTERM" >&2
    status=1
fi
if [[ $status -ne 0 ]]; then
    echo "soak failed; server log: $LOG" >&2
    tail -n 30 "$LOG" >&2
elif [[ -z "${SOAK_LOG:-}" ]]; then
    rm -f "$LOG"
fi
exit "$status"
