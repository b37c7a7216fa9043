#!/usr/bin/env bash
# Runs Tessera's whole test suite, the full tier (`cargo test --workspace --release` alone is the
# fast tier: no model, no network, no redis-server). Fetches the models and llama.cpp's official
# chat templates on first use (the golden and end-to-end tests need them), runs the Rust tests of
# every crate in release mode, then the end-to-end tests (the official `openai` client, curl, a
# Prometheus parser, an OTLP receiver and headless Chromium against `tessera serve`;
# tests/e2e/run.sh installs what they need), the scale-out tests (three replicas behind the
# Shepherd Model Gateway, tests/scale/run.sh) and the validation of the deployment files
# (scripts/validate_deploy.sh).
# Needs `redis-server` (installed here when missing, as root with apt): the Redis tier's tests
# start their own.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null && [[ -z "${TESSERA_REDIS_SERVER:-}" ]]; then
    # The Redis tier's tests start a real redis-server: install Debian's when we can.
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    else
        echo "scripts/test.sh: redis-server not found; the Redis tier's tests need it" \
            "(Debian: apt-get install redis-server, or set TESSERA_REDIS_SERVER)" >&2
        exit 1
    fi
fi
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$PWD/models}"
# The benchmark scripts' own tests (tests/scripts, standard library only) run them against fake
# binaries; scripts/bench_models.py reads peak memory through /usr/bin/time.
if [[ ! -x /usr/bin/time ]]; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq time >/dev/null
    else
        echo "scripts/test.sh: /usr/bin/time not found; tests/scripts needs it" \
            "(Debian: apt-get install time)" >&2
        exit 1
    fi
fi
python3 -m unittest discover -s tests/scripts

cargo build --release --bin tessera
BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/tessera"
"$BIN" fetch-model
# The other real models, by name (sha256-checked): SmolLM2 (llama, Q4_1, the smollm
# pre-tokenizer) and Qwen2.5-Coder-0.5B for their goldens (crates/*/tests/golden*.rs, smollm2.rs)
# and the structured-output and tool-calling end-to-end tests; Qwen2.5-Coder-1.5B for the
# tool-calling round trip (the 0.5B model never answers in text after a tool result);
# nomic-embed-text-v1.5 for the WordPiece tokenizer and encoder goldens.
for name in smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b nomic-embed-text-v1.5; do
    "$BIN" fetch-model "$name"
done
# llama.cpp's official chat templates, for their goldens (crates/server/tests/official_chat_templates.rs),
# and its vocabulary test files (crates/tokenizer/tests/llama_cpp_vocabs.rs): extracted from the
# llama-cpp-python sdist on PyPI (pip download) into models/chat-templates and
# models/llama-cpp-vocabs and checked against the sha256 of their manifests in tests/goldens.
if [[ ! -x .venv/bin/python ]]; then
    python3 -m venv .venv
fi
.venv/bin/python scripts/fetch_llama_cpp_files.py
# gpt-oss's o200k vocabulary as a vocabulary-only GGUF (crates/tokenizer/tests/goldens.rs), written
# into the models directory with gguf-py from the ranks the tiktoken-rs crate bundles (downloaded from
# crates.io, sha256-checked); never committed.
.venv/bin/python -m pip install --quiet --disable-pip-version-check gguf==0.19.0
.venv/bin/python scripts/fetch_o200k_vocab.py
# The full tier: the fast tier's tests plus those that read the real models fetched above
# (feature `real-models`) and those that start a real redis-server (feature `services`).
cargo test --workspace --release --features real-models,services
# The golden outputs again on the AVX2 kernels (the CPU's best ISA ran above).
TESSERA_ISA=avx2 cargo test --release -p tessera-model --features real-models --test golden_gemma3
TESSERA_BIN="$BIN" tests/e2e/run.sh
# Three replicas behind the real gateway (smg from PyPI): routing, a killed and a drained replica.
TESSERA_BIN="$BIN" tests/scale/run.sh
# The Dockerfiles and the Kubernetes manifests, against their schemas.
scripts/validate_deploy.sh
