#!/usr/bin/env bash
# LoRA throughput: Tessera serving ADAPTERS LoRA adapters that each request chooses, against
# Tessera on the base model alone and against llama.cpp's llama-server -np 16 with the same
# adapters chosen per request, under the same closed-loop load. Each server is started in turn on
# a loopback port and `tessera bench` sends it CLIENTS clients' requests, REQUESTS in all, of
# ~PROMPT_TOKENS prompt and OUTPUT_TOKENS output tokens, from one seed, so every server gets the
# same prompts; with adapters, request i asks for adapter i mod ADAPTERS (by name from Tessera:
# `"model": NAME`; by id from llama-server: `"lora": [{"id": K, "scale": 1}]`). Then a Markdown
# table gives each run's output tok/s, its ratio to Tessera on the base model and to llama-server
# with the adapters, and the requests completed.
#
# The adapters are random rank-8 LoRAs of the model's attn_q, attn_v and ffn_down weights,
# written by `cargo run --release -p tessera-model --example write_real_lora -- GGUF OUT SEED`
# with seeds 1..ADAPTERS into OUT_DIR (same arguments, same bytes).
#
# Usage: scripts/bench_lora.sh GGUF [OUT_DIR]
#   OUT_DIR defaults to ./lora-<model stem>; it gets the adapters a.gguf, b.gguf, ..., and
#   NAME.json, NAME.bench.txt and NAME.log per server, and table.md.
# Environment:
#   TESSERA_BIN        tessera binary (default target/release/tessera, under CARGO_TARGET_DIR if set)
#   TESSERA_PEERS_DIR  where scripts/peers/ built the peers (default ./peers)
#   LLAMA_CPP_DIR      directory holding llama-server (default $TESSERA_PEERS_DIR/llama.cpp/native)
#   SERVERS            which to run, in order (default "tessera tessera-lora llama-np16-lora
#                      llama-np16"; tessera and llama-npN serve the base model only)
#   ADAPTERS           adapters, 1-8, named a, b, c, ... (default 4)
#   THREADS            threads of every server (default 2)
#   PORT               loopback port, 8700-8799 (default 8713)
#   CLIENTS            concurrent clients (default 16)
#   REQUESTS           requests per server (default 64)
#   PROMPT_TOKENS      prompt length (default 250)
#   OUTPUT_TOKENS      output tokens per request (default 128)
#   WARMUP             unmeasured requests before each run, one after another (default 4: with
#                      4 adapters, one on each)
#   SEED               seed of the prompts (default 0)
#   CTX_PER_SLOT       llama-server context per slot (default 1024; -c is -np times it)
#   BENCH_ARGS         extra arguments for every `tessera bench` run
#   STARTUP_TIMEOUT    seconds to wait for a server's /health (default 300)
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 && "$1" != -h && "$1" != --help ]] || usage
REPO="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=scripts/peers/servers.sh
source "$REPO/scripts/peers/servers.sh"
model_and_out "$1" "${2:-}" lora

SERVERS="${SERVERS:-tessera tessera-lora llama-np16-lora llama-np16}"
ADAPTERS="${ADAPTERS:-4}"
THREADS="${THREADS:-2}"
PORT="${PORT:-8713}"
CLIENTS="${CLIENTS:-16}"
REQUESTS="${REQUESTS:-64}"
PROMPT_TOKENS="${PROMPT_TOKENS:-250}"
OUTPUT_TOKENS="${OUTPUT_TOKENS:-128}"
WARMUP="${WARMUP:-4}"
SEED="${SEED:-0}"
CTX_PER_SLOT="${CTX_PER_SLOT:-1024}"
STARTUP_TIMEOUT="${STARTUP_TIMEOUT:-300}"

if ! [[ "$ADAPTERS" =~ ^[1-8]$ ]]; then
  echo "error: ADAPTERS must be in 1-8, got $ADAPTERS" >&2; exit 1
fi
check_port_and_bin

# The adapters: NAMES a,b,...; TESSERA_LORA --lora NAME=PATH ...; LLAMA_PATHS PATH,PATH,...
# (llama-server takes one --lora of comma-separated paths: a repeated flag is deprecated there).
[[ "$OUT" != *,* ]] || { echo "error: OUT_DIR must not contain a comma: $OUT" >&2; exit 1; }
NAMES=()
TESSERA_LORA=()
PATHS=()
echo "== writing $ADAPTERS adapters for $STEM into $OUT (cargo builds the example the first time)"
LETTERS=(a b c d e f g h)
for k in $(seq 1 "$ADAPTERS"); do
  name="${LETTERS[k - 1]}"
  (cd "$REPO" && cargo run --quiet --release -p tessera-model --example write_real_lora -- \
    "$GGUF" "$OUT/$name.gguf" "$k")
  NAMES+=("$name")
  TESSERA_LORA+=(--lora "$name=$OUT/$name.gguf")
  PATHS+=("$OUT/$name.gguf")
done
NAME_LIST="$(IFS=,; echo "${NAMES[*]}")"
LLAMA_PATHS="$(IFS=,; echo "${PATHS[*]}")"

BENCH=(--url "$URL" -c "$CLIENTS" -n "$REQUESTS" --prompt-tokens "$PROMPT_TOKENS"
       --output-tokens "$OUTPUT_TOKENS" --warmup "$WARMUP" --seed "$SEED")
# shellcheck disable=SC2206 # BENCH_ARGS is split on purpose
[[ -n "${BENCH_ARGS:-}" ]] && BENCH+=($BENCH_ARGS)

DONE=()
FAILED=()
# run NAME ADAPTER_FLAGS -- CMD...: start the server, run the load (with the bench flags before
# `--`), stop it. A server that does not come up or a run that fails is reported and skipped; the
# others still run.
run() {
  local name="$1"; shift
  local flags=()
  while [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  shift
  if ! start_server "$name" "$@"; then
    stop_server
    FAILED+=("$name")
    return 0
  fi
  if ((${#flags[@]} > 0)) && ! check_adapters "$name"; then
    stop_server
    FAILED+=("$name")
    return 0
  fi
  echo "== $name: load from $(date -u '+%H:%M:%S'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  "$BIN" bench "${BENCH[@]}" "${flags[@]}" --label "$name" --json "$OUT/$name.json" \
    --no-progress >"$OUT/$name.bench.txt" 2>&1 &
  BENCH_PID=$!
  local ok=0
  wait "$BENCH_PID" && ok=1
  BENCH_PID=""
  cat "$OUT/$name.bench.txt"
  if ((ok)); then DONE+=("$name"); else FAILED+=("$name"); fi
  stop_server
}

# check_adapters NAME: the server's GET /lora-adapters (llama-server's, which Tessera serves too)
# lists ADAPTERS adapters. (Their global scales do not matter here: every request names its
# adapter, and llama-server then runs the others at scale 0. llama-server's list shows scale 1
# even with --lora-init-without-apply, which only skips applying them at load.)
check_adapters() {
  local listed
  if ! listed="$(curl -sf "$URL/lora-adapters" |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)))')"; then
    echo "error: $1 did not answer GET /lora-adapters" >&2
    return 1
  fi
  if [[ "$listed" != "$ADAPTERS" ]]; then
    echo "error: $1 lists $listed LoRA adapters, expected $ADAPTERS" >&2
    return 1
  fi
  echo "== $1: $ADAPTERS adapters loaded"
}

llama() { # NAME NP ADAPTER_FLAGS -- LLAMA_FLAGS...
  local server="$LLAMA_DIR/llama-server"
  [[ -x "$server" ]] || { echo "error: no llama-server at $server (set LLAMA_CPP_DIR)" >&2; exit 1; }
  local name="$1" np="$2"; shift 2
  local flags=()
  while [[ "$1" != -- ]]; do flags+=("$1"); shift; done
  shift
  run "$name" "${flags[@]}" -- "$server" -m "$GGUF" -t "$THREADS" -np "$np" \
    -c "$((np * CTX_PER_SLOT))" --host 127.0.0.1 --port "$PORT" "$@"
}

TESSERA=("$BIN" serve --model "$GGUF" --threads "$THREADS" --host 127.0.0.1 --port "$PORT")
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'): $STEM on $CPU ($(nproc) cores; $ISA)"
echo "# tessera $("$BIN" --version 2>/dev/null || echo '?'); adapters $NAME_LIST"
for s in $SERVERS; do
  case "$s" in
    tessera) run tessera -- "${TESSERA[@]}" ;;
    tessera-lora)
      run tessera-lora --lora-names "$NAME_LIST" -- "${TESSERA[@]}" "${TESSERA_LORA[@]}" \
        --max-loras "$ADAPTERS" ;;
    llama-np*-lora)
      np="${s#llama-np}"; np="${np%-lora}"
      # Loaded at scale 0: only the requests' "lora" lists apply them.
      llama "$s" "$np" --lora-ids "$ADAPTERS" -- --lora "$LLAMA_PATHS" --lora-init-without-apply ;;
    llama-np*) llama "$s" "${s#llama-np}" -- ;;
    *) echo "error: unknown server '$s' (tessera, tessera-lora, llama-npN, llama-npN-lora)" >&2
       exit 1 ;;
  esac
done

((${#FAILED[@]} == 0)) || echo "warning: no result for: ${FAILED[*]}" >&2
((${#DONE[@]} > 0)) || { echo "error: no server was measured" >&2; exit 1; }
{
  echo "$STEM, $CLIENTS clients (closed loop), $REQUESTS requests of ~$PROMPT_TOKENS prompt and"
  echo "$OUTPUT_TOKENS output tokens, $THREADS threads per server; CPU: $CPU, $(nproc) cores ($ISA)."
  echo
  python3 - "$OUT" "${DONE[@]}" <<'EOF'
import json, sys
out, names = sys.argv[1], sys.argv[2:]
runs = {n: json.load(open(f"{out}/{n}.json")) for n in names}
def tok_s(n):
    return runs[n]["results"]["output_tokens_per_s"] if n in runs else None
base = tok_s("tessera")
llama_lora = next((tok_s(n) for n in names if n.startswith("llama") and n.endswith("-lora")), None)
def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"
print("| server | adapters | output tok/s | vs Tessera base | vs llama-server LoRA |"
      " requests ok / sent | output tok/s per adapter |")
print("|---|---|---|---|---|---|---|")
for n in names:
    c, r = runs[n]["config"], runs[n]["results"]
    server = "Tessera" if n.startswith("tessera") else "llama-server -np " + n.split("-")[1][2:]
    a = c.get("adapters")
    adapters = f"{len(a['names'])}, by \"{a['by']}\"" if a else "none"
    per = ", ".join(f"{p['adapter']} {p['output_tokens_per_s']:.1f}"
                    for p in r.get("per_adapter", [])) or "-"
    sent = r["requests_ok"] + r["requests_failed"]
    t = r["output_tokens_per_s"]
    print(f"| {server} | {adapters} | {t:.2f} | {ratio(t, base)} | {ratio(t, llama_lora)} |"
          f" {r['requests_ok']} / {sent} | {per} |")
lora = tok_s("tessera-lora")
print()
for goal, a, b, need in (("Tessera with adapters / Tessera base", lora, base, 0.85),
                         ("Tessera with adapters / llama-server with adapters",
                          lora, llama_lora, 2.0)):
    verdict = "not measured" if a is None or not b else ("met" if a / b >= need else "not met")
    print(f"- {goal}: {ratio(a, b)} (goal >= {need}x: {verdict})")
failed = [n for n in names if runs[n]["results"]["requests_failed"]]
if failed:
    print(f"- requests failed in: {', '.join(failed)} (see NAME.bench.txt)")
EOF
} | tee "$OUT/table.md"
