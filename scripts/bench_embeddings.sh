#!/usr/bin/env bash
# Embedding throughput of Tessera and llama.cpp's llama-server on one embedding model, under the
# same closed-loop load: each server is started in turn on a loopback port, and
# `tessera bench --endpoint embeddings` sends it CLIENTS concurrent clients' requests, each of
# TEXTS texts of TOKENS words (about as many tokens), drawn from one seed, so both servers get
# the same requests. Then a Markdown table gives each server's embeddings/s, prompt tokens/s and
# latency percentiles, and the ratios to llama-server.
#
# Both servers read the GGUF file's own weights (nomic-embed-text-v1.5: F16), 2 threads, the
# file's pooling, L2-normalised vectors. llama.cpp multiplies them with f16-rounded activations;
# Tessera as its --dtype says.
#
# Usage: scripts/bench_embeddings.sh [GGUF] [OUT_DIR]
#   GGUF defaults to models/nomic-embed-text-v1.5.f16.gguf (`tessera fetch-model
#   nomic-embed-text-v1.5`); OUT_DIR to ./embeddings-<model stem>; it gets NAME.json and
#   NAME.log per server, and table.md.
# Environment:
#   TESSERA_BIN        tessera binary (default target/release/tessera, under CARGO_TARGET_DIR if set)
#   TESSERA_PEERS_DIR  where scripts/peers/ built the peers (default ./peers)
#   LLAMA_CPP_DIR      directory holding llama-server (default $TESSERA_PEERS_DIR/llama.cpp/native)
#   SERVERS            which to run, in order (default "tessera llama-np16"): tessera (its default
#                      --dtype auto: BF16 arithmetic where the CPU has AVX-512 BF16),
#                      tessera-f32 / tessera-bf16 (--dtype float32 / bfloat16), llama-npN
#   PORT               loopback port, 8700-8799 (default 8712)
#   CLIENTS            concurrent clients (default 64)
#   REQUESTS           requests per server (default 192)
#   TEXTS, TOKENS      texts per request and words per text, N or MIN-MAX (default 1-16, 10-500)
#   CTX_PER_SLOT       llama-server context per slot (default 2048, the model's context)
#   BENCH_ARGS         extra arguments for every `tessera bench` run
#   STARTUP_TIMEOUT    seconds to wait for a server's /health (default 300)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -le 2 && "${1:-}" != -h && "${1:-}" != --help ]] || usage
REPO="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/peers/servers.sh
source "$REPO/scripts/peers/servers.sh"
model_and_out "${1:-${TESSERA_MODELS_DIR:-$REPO/models}/nomic-embed-text-v1.5.f16.gguf}" \
  "${2:-}" embeddings

SERVERS="${SERVERS:-tessera llama-np16}"
PORT="${PORT:-8712}"
CLIENTS="${CLIENTS:-64}"
REQUESTS="${REQUESTS:-192}"
TEXTS="${TEXTS:-1-16}"
TOKENS="${TOKENS:-10-500}"
CTX_PER_SLOT="${CTX_PER_SLOT:-2048}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-300}"

check_port_and_bin

BENCH=(--url "$URL" --endpoint embeddings -c "$CLIENTS" -n "$REQUESTS"
       --texts-per-request "$TEXTS" --text-tokens "$TOKENS" --warmup 2)
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
[[ -n "${BENCH_ARGS:-}" ]] && BENCH+=($BENCH_ARGS)

DONE=()
FAILED=()
# run NAME CMD...: start the server, run the load, stop it. A server that does not come up or a
# run that fails is reported and skipped; the others still run.
run() {
  local name="$1"; shift
  if ! start_server "$name" "$@"; then
    stop_server
    FAILED+=("$name")
    return 0
  fi
  echo "== $name: load from $(date -u '+%H:%M:%S'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BIN" bench "${BENCH[@]}" --label "$name" --json "$OUT/$name.json" --no-progress \
    >"$OUT/$name.bench.txt" 2>&1 &
  BENCH_PID=$!
  local ok=0
  wait "$BENCH_PID" && ok=1
  BENCH_PID=""
  cat "$OUT/$name.bench.txt"
  if ((ok)); then DONE+=("$name"); else FAILED+=("$name"); fi
  stop_server
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): $STEM on $CPU ($(nproc) cores; $ISA)"
for s in $SERVERS; do
  case "$s" in
    tessera) run tessera "$BIN" serve --model "$GGUF" --host 127.0.0.1 --port "$PORT" ;;
    tessera-f32|tessera-bf16)
      run "$s" "$BIN" serve --model "$GGUF" --dtype "$([[ $s == *f32 ]] && echo float32 || echo bfloat16)" \
        --host 127.0.0.1 --port "$PORT" ;;
    llama-np*)
      np="${s#llama-np}"
      [[ -x "$LLAMA_DIR/llama-server" ]] || {
        echo "error: no llama-server in $LLAMA_DIR (set LLAMA_CPP_DIR)" >&2; exit 1; }
      # Embedding inputs are encoded whole: the physical batch must hold the longest one.
      run "$s" "$LLAMA_DIR/llama-server" -m "$GGUF" --embeddings -t 2 -np "$np" \
        -c "$((np * CTX_PER_SLOT))" -b "$CTX_PER_SLOT" -ub "$CTX_PER_SLOT" \
        --host 127.0.0.1 --port "$PORT" ;;
    *) echo "error: unknown server '$s' (tessera, tessera-f32, tessera-bf16, llama-npN)" >&2; exit 1 ;;
  esac
done

((${#FAILED[@]} == 0)) || echo "warning: no result for: ${FAILED[*]}" >&2
((${#DONE[@]} > 0)) || { echo "error: no server was measured" >&2; exit 1; }
{
  echo "$STEM, $CLIENTS clients, $REQUESTS requests of $TEXTS texts of $TOKENS words;"
  echo "CPU: $CPU, $(nproc) cores ($ISA)."
  echo
  python3 - "$OUT" "${DONE[@]}" <<'EOF'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(f"{out}/{n}.json"))["results"] for n in names}
base = next((runs[n] for n in names if n.startswith("llama")), None)
print("| server | embeddings/s | prompt tokens/s | latency p50 / p90 / p99 (ms) | failed |"
      + (" vs llama-server: embeddings/s, p99 |" if base else ""))
print("|---|---|---|---|---|" + ("---|" if base else ""))
for n in names:
    r = runs[n]
    lat = r["latency_ms"]
    row = (f"| {n} | {r['embeddings_per_s']:.2f} | {r['prompt_tokens_per_s']:.0f} | "
           f"{lat['p50']:.0f} / {lat['p90']:.0f} / {lat['p99']:.0f} | {r['requests_failed']} |")
    if base:
        row += (f" {r['embeddings_per_s'] / base['embeddings_per_s']:.2f}x, "
                f"{lat['p99'] / base['latency_ms']['p99']:.2f}x |")
    print(row)
EOF
} | tee "$OUT/table.md"
