#!/usr/bin/env bash
# Tracing overhead: throughput and ITL p99 of two identical servers, one exporting a span per
# request over OTLP to a running collector (tests/e2e/otlp_receiver.py), one without traces,
# loaded alternately with the same `tessera bench` run (one server at a time). Besides the
# bench figures it reports each server's CPU time (user + system, from /proc) per 1,000 output
# tokens, which other work on a shared machine disturbs less than wall-clock rates.
#
# Usage: scripts/bench_tracing.sh [ROUNDS]   (default 3 rounds per server)
# Environment: TESSERA_BIN (default: target/release/tessera), TESSERA_MODEL (GGUF file),
# BENCH_ARGS (default: -c 16 -n 64 --prompt-tokens 250 --output-tokens 128).
# Needs .venv with opentelemetry-proto (tests/e2e/run.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS="${1:-3}"
BIN="${TESSERA_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/tessera}"
BENCH_ARGS="${BENCH_ARGS:--c 16 -n 64 --prompt-tokens 250 --output-tokens 128}"
MODEL_ARGS=()
if [[ -n "${TESSERA_MODEL:-}" ]]; then
    MODEL_ARGS=(--model "$TESSERA_MODEL")
fi
OUT="$(mktemp -d -t tessera-bench-tracing-XXXXXX)"
free_port() { .venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
COLLECTOR_PORT="$(free_port)"
ON_PORT="$(free_port)"
OFF_PORT="$(free_port)"

.venv/bin/python tests/e2e/otlp_receiver.py "$COLLECTOR_PORT" >"$OUT/spans.jsonl" 2>"$OUT/collector.log" &
PIDS=($!)
"$BIN" serve "${MODEL_ARGS[@]}" --port "$ON_PORT" --kv-memory 256MiB \
    --otlp-traces-endpoint "http://127.0.0.1:$COLLECTOR_PORT" >"$OUT/on.log" 2>&1 &
PIDS+=($!)
ON_PID=$!
"$BIN" serve "${MODEL_ARGS[@]}" --port "$OFF_PORT" --kv-memory 256MiB >"$OUT/off.log" 2>&1 &
PIDS+=($!)
OFF_PID=$!
# CPU seconds (user + system) a process has used so far.
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
for port in "$ON_PORT" "$OFF_PORT"; do
    for _ in $(seq 1 600); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/health" 2>/dev/null && break
        sleep 0.5
    done
done

for round in $(seq 1 "$ROUNDS"); do
    for side in on off; do
        port="$ON_PORT" pid="$ON_PID"
        [[ $side == off ]] && port="$OFF_PORT" pid="$OFF_PID"
        before="$(cpu_s "$pid")"
        # shellcheck disable=SC2086
        "$BIN" bench --url "http://127.0.0.1:$port" $BENCH_ARGS --warmup 2 --seed "$round" \
            --no-progress --json "$OUT/$side-$round.json" >/dev/null
        awk -v a="$(cpu_s "$pid")" -v b="$before" 'BEGIN { print a - b }' >"$OUT/$side-$round.cpu"
        echo "round $round, tracing $side: done" >&2
    done
done
sleep 6 # one more export interval, so the collector has every span

.venv/bin/python - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
runs = {side: [json.load(open(f"{out}/{side}-{r}.json"))["results"] for r in range(1, rounds + 1)]
        for side in ("on", "off")}
for side in runs:
    for r, x in enumerate(runs[side], 1):
        # Warm-up tokens are in the CPU time too: 2 requests of the same length.
        tokens = x["output_tokens_total"] * (x["requests_ok"] + 2) / max(x["requests_ok"], 1)
        x["cpu_per_1k"] = float(open(f"{out}/{side}-{r}.cpu").read()) * 1000 / tokens
spans = sum(1 for _ in open(f"{out}/spans.jsonl"))
print(f"{'round':>5} {'tracing':>7} {'output tok/s':>13} {'ITL p99 ms':>11} {'TTFT p50 ms':>12}"
      f" {'CPU s/1k tok':>12} {'failed':>6}")
for r in range(rounds):
    for side in ("on", "off"):
        x = runs[side][r]
        print(f"{r + 1:>5} {side:>7} {x['output_tokens_per_s']:>13.1f} {x['itl_ms']['p99']:>11.1f}"
              f" {x['ttft_ms']['p50']:>12.1f} {x['cpu_per_1k']:>12.3f} {x['requests_failed']:>6}")
med = {side: (statistics.median(x["output_tokens_per_s"] for x in runs[side]),
              statistics.median(x["itl_ms"]["p99"] for x in runs[side])) for side in runs}
print(f"median throughput: on {med['on'][0]:.1f} tok/s, off {med['off'][0]:.1f} tok/s, "
      f"on/off {med['on'][0] / med['off'][0]:.3f}")
print(f"median ITL p99: on {med['on'][1]:.1f} ms, off {med['off'][1]:.1f} ms, "
      f"on/off {med['on'][1] / med['off'][1]:.3f}")
cpu = {side: statistics.median(x["cpu_per_1k"] for x in runs[side]) for side in runs}
print(f"median CPU per 1k output tokens: on {cpu['on']:.3f} s, off {cpu['off']:.3f} s, "
      f"on/off {cpu['on'] / cpu['off']:.3f}")
print(f"spans received by the collector: {spans}")
EOF
