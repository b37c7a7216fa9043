#!/usr/bin/env bash
# End-to-end tests: real clients (the official `openai` and `anthropic` packages, curl,
# prometheus_client's parser, an OTLP receiver on opentelemetry-proto, headless Chromium driven by
# Playwright, a ZeroMQ subscriber on pyzmq decoding KV events with msgspec, schemathesis fuzzing
# against /openapi.json) against `tessera serve` on the default model.
#
# Builds the release binary, installs what the tests need when it is missing (Debian's chromium
# as root; the Python packages into .venv/, git-ignored), starts the server on a free port with
# an API key, waits for /health, runs pytest (some tests start servers of their own with other
# flags, from TESSERA_BIN), runs a short chaos soak (scripts/soak.sh --requests 300, on a server
# of its own), then stops the server with SIGTERM and checks that it exits 0 (graceful
# shutdown).
#
# Environment: TESSERA_BIN (skip the build and use this binary), TESSERA_MODEL (a GGUF file;
# default: the default model, fetched on first use), CARGO_TARGET_DIR (honoured). The tool-calling
# tests (test_tools.py, test_anthropic.py's tools round trip) start servers of their own on
# qwen2.5-coder-0.5b-instruct-q4_k_m.gguf and qwen2.5-coder-1.5b-instruct-q4_k_m.gguf from
# TESSERA_MODELS_DIR, and fail when they are missing; test_lora.py starts one on the 0.5B model
# with a LoRA adapter it writes with `cargo run --example write_real_lora` (cargo on PATH).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$ROOT/models}"

if [[ -z "${TESSERA_BIN:-}" ]]; then
    cargo build --release --bin tessera
    TESSERA_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera"
fi
export TESSERA_BIN

# The playground test drives Debian's chromium (Playwright never downloads a browser here).
if [[ ! -x /usr/bin/chromium ]]; then
    if [[ "$(id -u)" == 0 ]]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    else
        echo "warning: /usr/bin/chromium is missing (apt-get install chromium); the playground test will fail" >&2
    fi
fi

VENV="$ROOT/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import openai, anthropic, pytest, prometheus_client, playwright, opentelemetry.proto, zmq, msgspec, jsonschema, pydantic, schemathesis, openapi_spec_validator" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        openai anthropic==2.17.0 pytest prometheus_client playwright opentelemetry-proto pyzmq msgspec jsonschema pydantic \
        schemathesis==4.32.5 openapi-spec-validator==0.9.0
fi

PORT="$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
API_KEY="e2e-$RANDOM$RANDOM"
LOG="$(mktemp -t tessera-e2e-XXXXXX.log)"
MODEL_ARGS=()
if [[ -n "${TESSERA_MODEL:-}" ]]; then
    MODEL_ARGS=(--model "$TESSERA_MODEL")
fi

RUST_LOG="${RUST_LOG:-info}" "$TESSERA_BIN" serve "${MODEL_ARGS[@]}" --host 127.0.0.1 --port "$PORT" \
    --api-key "$API_KEY" --kv-memory 128MiB --max-seqs 16 --shutdown-timeout 10 >"$LOG" 2>&1 &
PID=$!
cleanup() {
    if kill -0 "$PID" 2>/dev/null; then
        kill -KILL "$PID" 2>/dev/null || true
    fi
}
trap cleanup EXIT

BASE="http://127.0.0.1:$PORT"
for _ in $(seq 1 600); do
    if ! kill -0 "$PID" 2>/dev/null; then
        echo "tessera serve exited during startup:" >&2
        cat "$LOG" >&2
        exit 1
    fi
    if curl -fsS -o /dev/null "$BASE/health" 2>/dev/null; then
        break
    fi
    sleep 0.5
done
if ! curl -fsS -o /dev/null "$BASE/health"; then
    echo "the server never became healthy:" >&2
    cat "$LOG" >&2
    exit 1
fi

set +e
# TESSERA_BIN lets tests start a second, differently configured server (small KV pool,
# served names, CORS origins).
TESSERA_URL="$BASE" TESSERA_API_KEY="$API_KEY" TESSERA_BIN="$TESSERA_BIN" \
    "$VENV/bin/python" -m pytest -q tests/e2e "$@"
status=$?
# A short chaos soak on a server of its own (the full one is scripts/soak.sh alone).
TESSERA_BIN="$TESSERA_BIN" scripts/soak.sh --requests "${SOAK_REQUESTS:-300}" \
    --max-anon-drift-mib 16 || status=1
set -e

# Graceful shutdown: a request in flight when SIGTERM arrives still completes and the process
# exits 0 (the refusals while draining are tested in crates/server/tests/worker.rs and
# tests/scale/).
INFLIGHT="$(mktemp -t tessera-e2e-stream-XXXXXX)"
curl -sS -N -X POST "$BASE/v1/completions" -H "Content-Type: application/json" \
    -H "Authorization: Bearer $API_KEY" \
    -d '{"prompt": "Once upon a time", "max_tokens": 48, "ignore_eos": true, "stream": true}' \
    >"$INFLIGHT" 2>&1 &
CURL_PID=$!
for _ in $(seq 1 100); do
    grep -q '"text_completion"' "$INFLIGHT" && break
    sleep 0.1
done
kill -TERM "$PID"
set +e
wait "$PID"
server_status=$?
wait "$CURL_PID"
set -e
if [[ $server_status -ne 0 ]]; then
    echo "tessera serve exited with $server_status after SIGTERM; its log:" >&2
    cat "$LOG" >&2
    exit 1
fi
if ! grep -q '"finish_reason":"length"' "$INFLIGHT" || ! grep -q 'data: \[DONE\]' "$INFLIGHT"; then
    echo "the request in flight at SIGTERM did not complete:" >&2
    cat "$INFLIGHT" >&2
    exit 1
fi
echo "graceful shutdown: in-flight request completed, server exited 0"
rm -f "$INFLIGHT"
if [[ $status -ne 0 ]]; then
    echo "server log:" >&2
    tail -n 50 "$LOG" >&2
fi
rm -f "$LOG"
exit "$status"
