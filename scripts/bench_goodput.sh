#!/usr/bin/env bash
# Goodput of Tessera, llama.cpp's llama-server and vLLM's CPU backend on one model, under the
# same open-loop load: each server is started in turn the way its users start it, on a loopback
# port, and `tessera bench --find-capacity` searches the highest Poisson arrival rate whose
# requests meet the goodput objectives (TTFT and TPOT); then one chart draws every server's
# search, and a Markdown table gives each server's capacity and its TTFT / TPOT p90 there.
#
# Tessera and llama.cpp run the GGUF's quantized weights; vLLM's CPU backend cannot run GGUF, so
# it serves the BF16 checkpoint unpacked from the same GGUF (scripts/peers/gguf_to_bf16.py).
#
# Usage: scripts/bench_goodput.sh GGUF [OUT_DIR]
#   OUT_DIR defaults to ./goodput-<model stem>; it gets NAME.json, NAME.svg and NAME.log per
#   server, capacity.svg and table.md.
# Environment:
#   TESSERA_BIN        tessera binary (default target/release/tessera, under CARGO_TARGET_DIR if set)
#   TESSERA_PEERS_DIR  where scripts/peers/ built the peers (default ./peers)
#   LLAMA_CPP_DIR      directory holding llama-server (default $TESSERA_PEERS_DIR/llama.cpp/native)
#   VLLM_VENV          vLLM CPU venv (default $TESSERA_PEERS_DIR/vllm)
#   BF16_DIR           BF16 checkpoint for vLLM (default $TESSERA_PEERS_DIR/bf16/<model stem>)
#   SERVERS            which to run, in order (default "tessera-slo tessera llama-np16 llama-np32
#                      vllm"; tessera-slo is Tessera told the same targets, --slo-ttft-ms /
#                      --slo-tpot-ms, which its scheduler then aims at; tessera-slo-bf16 is the
#                      same on the BF16 weights vLLM serves, as a GGUF: BF16_GGUF)
#   BF16_GGUF          BF16 GGUF for tessera-slo-bf16 (default $TESSERA_PEERS_DIR/bf16/<stem>-bf16.gguf,
#                      written from GGUF by the to_bf16 example when missing)
#   PORT               loopback port, 8700-8799 (default 8711)
#   TTFT_MS, TPOT_MS   goodput objectives (default 2000; TPOT 100, or 150 for a 1.5B model)
#   CTX_PER_SLOT       llama-server context per slot, and vLLM's --max-model-len (default 2048:
#                      the chat dataset's longest prompt, 1024, plus its longest output, 512)
#   VLLM_CPU_KVCACHE_SPACE (GiB, default 4), VLLM_CPU_OMP_THREADS_BIND (default 0-1)
#   VLLM_LD_PRELOAD    LD_PRELOAD for vLLM (default, as vLLM's CPU guide: tcmalloc and the venv's
#                      libiomp5.so, when both are found)
#   CAPACITY_DURATION  seconds per probed rate, passed as --capacity-duration (default: bench's)
#   MAX_IN_FLIGHT      an in-flight cap for the probes, passed as --max-concurrency (default:
#                      none, every arrival is sent when it arrives)
#   BENCH_ARGS         extra arguments for every `tessera bench` run
#   STARTUP_TIMEOUT    seconds to wait for a server's /health (default 900)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && "$1" != -h && "$1" != --help ]] || usage
REPO="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/peers/servers.sh
source "$REPO/scripts/peers/servers.sh"
model_and_out "$1" "${2:-}" goodput

VENV="${VLLM_VENV:-$PEERS/vllm}"
BF16="${BF16_DIR:-$PEERS/bf16/$STEM}"
SERVERS="${SERVERS:-tessera-slo tessera llama-np16 llama-np32 vllm}"
PORT="${PORT:-8711}"
TTFT_MS="${TTFT_MS:-2000}"
if [[ -z "${TPOT_MS:-}" ]]; then
  if [[ "$STEM" == *1.5b* ]]; then TPOT_MS=150; else TPOT_MS=100; fi
fi
CTX_PER_SLOT="${CTX_PER_SLOT:-2048}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-900}"
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-4}"
export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-0-1}"

check_port_and_bin

BENCH=(--url "$URL" --endpoint completions --dataset chat
       --goodput "ttft:$TTFT_MS" "tpot:$TPOT_MS" --find-capacity)
[[ -n "${MAX_IN_FLIGHT:-}" ]] && BENCH+=(--max-concurrency "$MAX_IN_FLIGHT")
[[ -n "${CAPACITY_DURATION:-}" ]] && BENCH+=(--capacity-duration "$CAPACITY_DURATION")
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
[[ -n "${BENCH_ARGS:-}" ]] && BENCH+=($BENCH_ARGS)

# run NAME CMD...: start the server, search its capacity, stop it. A server that does not come
# up or a search that fails is reported and skipped; the others still run.
DONE=()
FAILED=()
run() {
  local name="$1"; shift
  local start=$SECONDS
  if ! start_server "$name" "$@"; then
    stop_server
    FAILED+=("$name")
    return 0
  fi
  echo "== $name: search from $(date -u '+%H:%M:%S'), load $(cut -d' ' -f1-3 /proc/loadavg)"
  # In the background, so that a signal reaches the traps at once (bash runs a trap only once
  # its foreground command has ended; `wait` returns on a signal).
  : >"$OUT/$name.bench.txt"
  "$BIN" bench "${BENCH[@]}" --label "$name" --json "$OUT/$name.json" \
    --chart "$OUT/$name.svg" --no-progress >"$OUT/$name.bench.txt" 2>&1 &
  BENCH_PID=$!
  tail -n +1 -f --pid="$BENCH_PID" "$OUT/$name.bench.txt" &
  local tail_pid=$! ok=0
  wait "$BENCH_PID" && ok=1
  BENCH_PID=""
  wait "$tail_pid" || true
  if ((ok)); then
    DONE+=("$name")
  else
    echo "error: the capacity search against $name failed (see $OUT/$name.bench.txt)" >&2
    FAILED+=("$name")
  fi
  stop_server
  echo "== $name done in $((SECONDS - start)) s"
}

llama() { # NP
  local server="$LLAMA_DIR/llama-server"
  [[ -x "$server" ]] || { echo "error: no llama-server at $server (set LLAMA_CPP_DIR)" >&2; exit 1; }
  run "llama-np$1" "$server" -m "$GGUF" -t 2 -np "$1" -c "$(($1 * CTX_PER_SLOT))" \
    --host 127.0.0.1 --port "$PORT"
}

vllm() {
  [[ -x "$VENV/bin/python" ]] || { echo "error: no vLLM venv at $VENV (set VLLM_VENV)" >&2; exit 1; }
  [[ -f "$BF16/config.json" ]] || {
    echo "error: no BF16 checkpoint at $BF16 (scripts/peers/gguf_to_bf16.py $GGUF $BF16)" >&2; exit 1; }
  local preload="${VLLM_LD_PRELOAD-}"
  if [[ -z "${VLLM_LD_PRELOAD+set}" ]]; then
    local tcmalloc
    tcmalloc="$(ls /usr/lib/*/libtcmalloc_minimal.so.4 2>/dev/null | head -n 1 || true)"
    if [[ -n "$tcmalloc" && -f "$VENV/lib/libiomp5.so" ]]; then
      preload="$tcmalloc:$(cd "$VENV/lib" && pwd)/libiomp5.so"
    fi
  fi
  echo "== vllm: LD_PRELOAD=${preload:-(none)}"
  run vllm env LD_PRELOAD="$preload" "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$BF16" \
    --served-model-name "$STEM" --dtype bfloat16 --max-model-len "$CTX_PER_SLOT" \
    --host 127.0.0.1 --port "$PORT"
}

bf16_gguf() { # the BF16 GGUF tessera-slo-bf16 serves, written when missing
  local f="${BF16_GGUF:-$PEERS/bf16/$STEM-bf16.gguf}"
  if [[ ! -f "$f" ]]; then
    mkdir -p "$(dirname "$f")"
    (cd "$REPO" && cargo run --release -q -p tessera-model --example to_bf16 -- "$GGUF" "$f") >&2
  fi
  echo "$f"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): $STEM on $CPU ($(nproc) cores; $ISA)"
echo "# tessera $("$BIN" --version 2>/dev/null || echo '?'); objectives TTFT <= $TTFT_MS ms, TPOT <= $TPOT_MS ms"

for s in $SERVERS; do
  case "$s" in
    tessera) run tessera "$BIN" serve --model "$GGUF" --host 127.0.0.1 --port "$PORT" ;;
    tessera-slo) run tessera-slo "$BIN" serve --model "$GGUF" --host 127.0.0.1 --port "$PORT" \
        --slo-ttft-ms "$TTFT_MS" --slo-tpot-ms "$TPOT_MS" ;;
    tessera-slo-bf16) run tessera-slo-bf16 "$BIN" serve --model "$(bf16_gguf)" --host 127.0.0.1 \
        --port "$PORT" --slo-ttft-ms "$TTFT_MS" --slo-tpot-ms "$TPOT_MS" ;;
    tessera-slo-1024) run tessera-slo-1024 "$BIN" serve --model "$GGUF" --host 127.0.0.1 \
        --port "$PORT" --slo-ttft-ms "$TTFT_MS" --slo-tpot-ms "$TPOT_MS" --max-batch-tokens 1024 ;;
    llama-np*) llama "${s#llama-np}" ;;
    vllm) vllm ;;
    *) echo "error: unknown server '$s' (tessera, tessera-slo, tessera-slo-bf16, tessera-slo-1024, llama-npN, vllm)" >&2; exit 1 ;;
  esac
done

QUANT="$(echo "$STEM" | grep -o -i -E '(q[0-9]_[0-9a-z_]+|f16|bf16|f32)$' | tr '[:lower:]' '[:upper:]' || true)"
((${#FAILED[@]} == 0)) || echo "warning: no result for: ${FAILED[*]}" >&2
((${#DONE[@]} > 0)) || { echo "error: no server was measured" >&2; exit 1; }
PLOTS=()
TABLE=()
for name in "${DONE[@]}"; do
  PLOTS+=(--plot "$OUT/$name.json")
  if [[ "$name" == vllm ]]; then
    TABLE+=(--run "$OUT/$name.json" "BF16, unpacked from the ${QUANT:-GGUF} file")
  elif [[ "$name" == *-bf16 ]]; then
    TABLE+=(--run "$OUT/$name.json" "BF16 (GGUF), from the ${QUANT:-GGUF} file by to_bf16")
  else
    TABLE+=(--run "$OUT/$name.json" "${QUANT:-GGUF} (GGUF)")
  fi
done
"$BIN" bench "${PLOTS[@]}" --chart "$OUT/capacity.svg"
echo "== chart: $OUT/capacity.svg"

{
  echo "$STEM, open-loop chat load, goodput TTFT <= $TTFT_MS ms and TPOT <= $TPOT_MS ms;"
  echo "CPU: $CPU, $(nproc) cores ($ISA)."
  echo
  python3 "$REPO/scripts/peers/goodput_table.py" "${TABLE[@]}"
} | tee "$OUT/table.md"
