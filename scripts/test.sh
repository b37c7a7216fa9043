#!/usr/bin/env bash
# Runs Tessera's whole test suite: fetches the default model on first use (the golden and
# end-to-end tests need it), then the Rust tests of every crate in release mode.
set -euo pipefail
cd "$(dirname "$0")/.."
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$PWD/models}"
cargo build --release --bin tessera
./target/release/tessera fetch-model
cargo test --workspace --release
