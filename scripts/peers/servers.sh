# Shared by the benchmark scripts that start servers in turn (bench_goodput.sh,
# bench_embeddings.sh, bench_lora.sh); sourced, not run, after REPO (the repository) is set.
# Sets BIN, PEERS and LLAMA_DIR from the environment, CPU and ISA (the CPU's name and its vector
# extensions, for the tables), and traps EXIT to stop the server and the bench still running.
# model_and_out sets GGUF, STEM and OUT; check_port_and_bin sets URL. start_server needs OUT, URL
# and STARTUP_TIMEOUT (seconds).

BIN="${TESSERA_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/tessera}"
PEERS="${TESSERA_PEERS_DIR:-./peers}"
LLAMA_DIR="${LLAMA_CPP_DIR:-$PEERS/llama.cpp/native}"

# model_and_out FILE DIR PREFIX: GGUF (FILE made absolute; an error if it is no file), STEM (its
# name without .gguf) and OUT (DIR, or ./PREFIX-STEM when DIR is empty; created, made absolute).
model_and_out() {
  [[ -f "$1" ]] || { echo "error: no such model file: $1" >&2; exit 1; }
  GGUF="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
  STEM="$(basename "$GGUF" .gguf)"
  OUT="${2:-./$3-$STEM}"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
}

# check_port_and_bin: PORT in 8700-8799, an executable tessera at BIN, and nothing listening on
# the port yet; sets URL.
check_port_and_bin() {
  if ! [[ "$PORT" =~ ^[0-9]+$ ]] || ((PORT < 8700 || PORT > 8799)); then
    echo "error: PORT must be in 8700-8799, got $PORT" >&2; exit 1
  fi
  [[ -x "$BIN" ]] || { echo "error: no tessera binary at $BIN (set TESSERA_BIN)" >&2; exit 1; }
  URL="http://127.0.0.1:$PORT"
  if curl -s -o /dev/null "$URL/health"; then
    echo "error: something already listens on $URL" >&2; exit 1
  fi
}

SERVER_PGID=""
BENCH_PID=""
stop_bench() {
  if [[ -n "$BENCH_PID" ]]; then
    kill -TERM "$BENCH_PID" 2>/dev/null || true
    wait "$BENCH_PID" 2>/dev/null || true
    BENCH_PID=""
  fi
}
stop_server() {
  if [[ -n "$SERVER_PGID" ]]; then
    kill -TERM -- "-$SERVER_PGID" 2>/dev/null || true
    for _ in $(seq 1 60); do
      kill -0 -- "-$SERVER_PGID" 2>/dev/null || break
      sleep 0.5
    done
    kill -KILL -- "-$SERVER_PGID" 2>/dev/null || true
    wait "$SERVER_PGID" 2>/dev/null || true
    SERVER_PGID=""
  fi
}
trap 'stop_bench; stop_server' EXIT
trap 'exit 130' INT TERM

# start_server NAME CMD...: the server in its own process group (so that stopping it stops
# every process it spawned), its output in OUT/NAME.log; then wait for GET /health to answer 200.
start_server() {
  local name="$1"; shift
  setsid "$@" >"$OUT/$name.log" 2>&1 &
  SERVER_PGID=$!
  # setsid makes the server its own process group's leader (it only forks when it already leads
  # one, which a background job of a non-interactive shell never does); wait for it to have.
  local i
  for i in $(seq 1 50); do
    [[ "$(ps -o pgid= -p "$SERVER_PGID" | tr -d ' ')" == "$SERVER_PGID" ]] && break
    if ((i == 50)); then
      echo "error: $name (pid $SERVER_PGID) did not become its own process group" >&2
      kill -TERM "$SERVER_PGID" 2>/dev/null || true
      SERVER_PGID=""
      return 1
    fi
    sleep 0.1
  done
  local start=$SECONDS
  until curl -sf -o /dev/null "$URL/health"; do
    if ! kill -0 "$SERVER_PGID" 2>/dev/null; then
      echo "error: $name exited while starting; last lines of $OUT/$name.log:" >&2
      tail -n 20 "$OUT/$name.log" >&2
      return 1
    fi
    if ((SECONDS - start > STARTUP_TIMEOUT)); then
      echo "error: $name did not answer $URL/health within $STARTUP_TIMEOUT s" >&2
      return 1
    fi
    sleep 1
  done
  echo "== $name up in $((SECONDS - start)) s"
}

CPU="$(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//')"
ISA="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' |
  grep -x -E 'avx2|fma|f16c|avx512f|avx512bw|avx512vl|avx512_vnni|avx512_bf16|avx_vnni|amx_tile|amx_int8|amx_bf16' |
  tr '\n' ' ' | sed 's/ $//')"
