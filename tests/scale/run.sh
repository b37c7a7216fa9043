#!/usr/bin/env bash
# Scale-out tests: three `tessera serve` replicas on loopback behind the real Shepherd Model
# Gateway (`smg` 1.13.0 from PyPI): registration and load polls, prefix-cache hit rate with
# cache_aware vs round_robin routing, a replica killed with SIGKILL and one drained with
# SIGTERM under load (tests/scale/test_gateway.py says what each asserts).
#
# Installs smg, pytest and httpx into .venv/ (git-ignored, shared with tests/e2e) when they
# are missing. Environment: TESSERA_BIN (skip the build and use this binary), TESSERA_MODEL
# (a GGUF file; default: the default model), CARGO_TARGET_DIR (honoured).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$PWD"
export TESSERA_MODELS_DIR="${TESSERA_MODELS_DIR:-$ROOT/models}"
if [[ -z "${TESSERA_BIN:-}" ]]; then
    cargo build --release --bin tessera
    TESSERA_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/tessera"
fi
export TESSERA_BIN
VENV="$ROOT/.venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import pytest, httpx" 2>/dev/null \
    || [[ "$("$VENV/bin/python" -c 'from importlib.metadata import version; print(version("smg"))' 2>/dev/null)" != "1.13.0" ]]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check smg==1.13.0 pytest httpx
fi
export SMG_BIN="$VENV/bin/smg"
exec "$VENV/bin/python" -m pytest -q -s -p no:cacheprovider --rootdir tests/scale tests/scale "$@"
