#!/usr/bin/env bash
# Runs Tessera's whole test suite: fetches the default model on first use (the golden and
# end-to-end tests need it), runs the Rust tests of every crate in release mode, then the
# end-to-end tests (the official `openai` client, curl, a Prometheus parser, an OTLP receiver
# and headless Chromium against `tessera serve`; tests/e2e/run.sh installs what they need).
set -euo pipefail
cd "$(dirname "$0")/.."
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$PWD/models}"
cargo build --release --bin tessera
BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/tessera"
"$BIN" fetch-model
cargo test --workspace --release
# The golden outputs again on the AVX2 kernels (the CPU's best ISA ran above).
TESSERA_ISA=avx2 cargo test --release -p tessera-model --test golden_gemma3
TESSERA_BIN="$BIN" tests/e2e/run.sh
