#!/usr/bin/env bash
# Scale-out benchmarks (docs/BENCHMARKS.md#scale-out), with `tessera bench` as the load:
#  1. the gateway hop: one replica, the same load straight to it and through smg
#     (round_robin over that one worker), alternated A/B/A/B (4 clients), and again with one
#     client and tiny requests (hop1);
#  2. many users with long system prompts over three replicas: 8 shared prefixes, TTFT with
#     smg's cache_aware routing vs round_robin (fresh replicas for each policy).
# Writes one JSON report per run into OUT (default: a temporary folder) and prints a summary.
# Needs smg (tests/scale/run.sh installs it into .venv/). Environment: TESSERA_BIN, SMG_BIN,
# TESSERA_MODEL (default: the default model), OUT, PORT_BASE (default 8700), PARTS (default
# "hop hop1 multi": which parts to run).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${TESSERA_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/tessera}"
SMG="${SMG_BIN:-$PWD/.venv/bin/smg}"
OUT="${OUT:-$(mktemp -d -t tessera-bench-scale-XXXXXX)}"
BASE="${PORT_BASE:-8700}"
MODEL_ARGS=()
[[ -n "${TESSERA_MODEL:-}" ]] && MODEL_ARGS=(--model "$TESSERA_MODEL")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_url() {
    for _ in $(seq 1 600); do curl -fsS -o /dev/null "$1" 2>/dev/null && return 0; sleep 0.5; done
    echo "never ready: $1" >&2; exit 1
}
replica() { # port threads kv
    "$BIN" serve "${MODEL_ARGS[@]}" --host 127.0.0.1 --port "$1" --threads "$2" --kv-memory "$3" \
        --max-seqs 32 >"$OUT/replica-$1.log" 2>&1 &
    PIDS+=($!)
    wait_url "http://127.0.0.1:$1/health"
}
gateway() { # port policy worker-urls...
    local port=$1 policy=$2; shift 2
    "$SMG" launch --host 127.0.0.1 --port "$port" --prometheus-host 127.0.0.1 \
        --prometheus-port $((port + 20)) --policy "$policy" --worker-urls "$@" \
        --health-check-interval-secs 1 --load-monitor-interval 1 --disable-tokenizer-autoload \
        --log-level warn >"$OUT/smg-$port-$policy.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 120); do
        n=$(curl -fsS "http://127.0.0.1:$port/workers" 2>/dev/null | grep -o '"is_healthy":true' | wc -l || true)
        [[ "$n" -ge $# ]] && return 0
        sleep 0.5
    done
    echo "smg never registered its workers" >&2; exit 1
}
stop_all() { cleanup; PIDS=(); }

PARTS="${PARTS:-hop hop1 multi}"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ " $PARTS " == *" hop "* ]]; then
# 1. The gateway hop.
replica $((BASE + 1)) 2 256MiB
gateway $((BASE + 2)) round_robin "http://127.0.0.1:$((BASE + 1))"
# A seed per run: prompts of the same lengths that no earlier run left in the prefix cache.
HOP=(-c 4 -n 32 --prompt-tokens 128 --output-tokens 32 --warmup 2 --no-progress)
for round in 1 2; do
    "$BIN" bench --url "http://127.0.0.1:$((BASE + 1))" "${HOP[@]}" --seed $((2 * round - 1)) \
        --json "$OUT/hop-direct-$round.json" >/dev/null
    "$BIN" bench --url "http://127.0.0.1:$((BASE + 2))" "${HOP[@]}" --seed $((2 * round)) \
        --json "$OUT/hop-smg-$round.json" >/dev/null
done
stop_all
fi
if [[ " $PARTS " == *" hop1 "* ]]; then
# 1b. The hop alone: one client, short prompts, 2 output tokens, so the hop is not lost in
# the time a loaded engine takes.
replica $((BASE + 1)) 2 256MiB
gateway $((BASE + 2)) round_robin "http://127.0.0.1:$((BASE + 1))"
HOP1=(-c 1 -n 60 --prompt-tokens 16 --output-tokens 2 --warmup 2 --no-progress)
for round in 1 2 3; do
    "$BIN" bench --url "http://127.0.0.1:$((BASE + 1))" "${HOP1[@]}" --seed $((10 + 2 * round)) \
        --json "$OUT/hop1-direct-$round.json" >/dev/null
    "$BIN" bench --url "http://127.0.0.1:$((BASE + 2))" "${HOP1[@]}" --seed $((11 + 2 * round)) \
        --json "$OUT/hop1-smg-$round.json" >/dev/null
done
stop_all
fi
if [[ " $PARTS " == *" multi "* ]]; then
# 2. Multi-prefix load over three replicas, fresh ones per policy.
MULTI=(-c 8 -n 128 --prompt-tokens 320 --shared-prefix-tokens 288 --prefixes 8 --output-tokens 8 --no-progress)
for policy in round_robin cache_aware; do
    urls=()
    for i in 1 2 3; do replica $((BASE + 10 + i)) 1 32MiB; urls+=("http://127.0.0.1:$((BASE + 10 + i))"); done
    gateway $((BASE + 20)) "$policy" "${urls[@]}"
    "$BIN" bench --url "http://127.0.0.1:$((BASE + 20))" "${MULTI[@]}" --json "$OUT/multi-$policy.json" >/dev/null
    for i in 1 2 3; do curl -fsS "http://127.0.0.1:$((BASE + 10 + i))/metrics" >"$OUT/multi-$policy-replica$i.prom"; done
    stop_all
done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "reports in $OUT"
