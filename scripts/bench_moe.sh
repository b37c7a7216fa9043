#!/usr/bin/env bash
# Tessera against llama.cpp on full-size random-weight mixture-of-experts models (not run by CI).
#
# For each shape (qwen3-30b-a3b, gpt-oss-20b, olmoe-1b-7b) and each router (uniform, zipf: a
# router whose expert popularity over random tokens falls roughly as 1/rank, since random routing
# is not a trained model's), writes the file with the write_full_size_moe example if it is
# missing, then runs:
#   1. single-stream decode (tg128) and prefill (pp512), Tessera's `throughput` example against
#      llama-bench on the same file, 2 threads, with peak resident memory (scripts/bench_models.py);
#   2. 16 concurrent clients, `tessera serve` against `llama-server -np 16`, driven by
#      `tessera bench`, with each server's peak resident memory (scripts/bench_models_server.sh).
# Only one full-size file exists at a time when KEEP=0 (the default): each is deleted after its
# runs (qwen3-30b-a3b is about 17 GiB, gpt-oss-20b 11.5 GiB, olmoe-1b-7b 3.9 GiB). The files
# are written outside the repository; weights are never committed.
#
# Usage: scripts/bench_moe.sh [DIR]        (DIR: where the files go, default ./models-fullsize)
# Environment:
#   SHAPES    shapes to run (default: all three)      ROUTERS  (default: "uniform zipf")
#   LLAMA_DIR directory holding llama-bench and llama-server (default, as scripts/peers/servers.sh:
#             $LLAMA_CPP_DIR, else $TESSERA_PEERS_DIR/llama.cpp/native, else ./peers/llama.cpp/native)
#   TESSERA_MODELS_DIR  where the tokenizer source files are (qwen2.5-coder-0.5b-instruct-q4_k_m
#             and gpt-oss-o200k-vocab; default ./models)
#   ROUNDS    bench_models.py rounds (default 1)      SKIP_SERVER=1  single-stream runs only
#   KEEP=1    keep the written files                  LLAMA_CTX  llama-server -c (default 16384)
#   TESSERA_ARGS, SKIP_LLAMA  passed to scripts/bench_models_server.sh (more serve flags; Tessera only)
#   SKIP_SINGLE=1  the 16-client runs only
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${1:-./models-fullsize}"
SHAPES="${SHAPES:-qwen3-30b-a3b gpt-oss-20b olmoe-1b-7b}"
ROUTERS="${ROUTERS:-uniform zipf}"
LLAMA_DIR="${LLAMA_DIR:-${LLAMA_CPP_DIR:-${TESSERA_PEERS_DIR:-./peers}/llama.cpp/native}}"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}/release"
mkdir -p "$DIR"
for bin in "$LLAMA_DIR/llama-bench" "$LLAMA_DIR/llama-server"; do
    [[ -x "$bin" ]] || { echo "error: no $bin (set LLAMA_DIR)" >&2; exit 1; }
done
cargo build --release -p tessera-model --example write_full_size_moe --example throughput
cargo build --release --bin tessera
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); $(grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//')"
for shape in $SHAPES; do
    for router in $ROUTERS; do
        stem="$shape-$router"
        file="$DIR/$stem.gguf"
        if [[ ! -f "$file" ]]; then
            "$TARGET/examples/write_full_size_moe" "$shape" "$file.partial" --router "$router"
            mv "$file.partial" "$file"
        fi
        echo "== $stem: $(du -h "$file" | cut -f1)"
        [[ "${SKIP_SINGLE:-0}" == 1 ]] || scripts/bench_models.py --throughput "$TARGET/examples/throughput" \
            --llama-bench "$LLAMA_DIR/llama-bench" --models-dir "$DIR" --models "$stem" \
            --threads 2 --rounds "${ROUNDS:-1}" --llama-reps 1
        if [[ "${SKIP_SERVER:-0}" != 1 ]]; then
            TESSERA_BIN="$TARGET/tessera" MODELS="$stem" \
                scripts/bench_models_server.sh "$LLAMA_DIR/llama-server" "$DIR"
        fi
        [[ "${KEEP:-0}" == 1 ]] || rm -f "$file"
    done
done
