#!/usr/bin/env bash
# Build llama.cpp's llama-server, llama-bench and llama-embedding (CPU only) from the
# llama.cpp tree vendored in the llama-cpp-python sdist, twice: a native build (every ISA
# extension of this CPU) into DEST/native and an AVX2-only build (AVX-512 off) into DEST/avx2.
#
# AMX: on a CPU with AMX, llama.cpp 0c1e570's AMX matmul (which -DGGML_NATIVE=ON turns on)
# segfaults at the first prompt (ldtilecfg in a worker thread, ggml_backend_amx_mul_mat;
# llama.cpp issue 20824). There the native build is -DGGML_NATIVE=OFF with every other ISA
# option this CPU has (AVX-512 F/BW/VL, VBMI, VNNI, BF16, AVX-VNNI, FMA, F16C, BMI2) and AMX
# off; NATIVE_AMX=1 builds -DGGML_NATIVE=ON anyway.
#
# Usage: scripts/peers/build_llama_cpp.sh [DEST]
#   DEST defaults to $TESSERA_PEERS_DIR/llama.cpp, or ./peers/llama.cpp.
# Env:   LLAMA_CPP_PYTHON_VERSION (default 0.3.36), JOBS (default 2),
#        BUILDS (default "native avx2": which of the two builds to make), NATIVE_AMX (see above).
# Needs: python3 (to download the sdist from PyPI), cmake, a C++ compiler. If cmake or g++ is
#        missing: apt-get update && apt-get install -y cmake g++
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
BUILDS="${BUILDS:-native avx2}"
DEST="${1:-${TESSERA_PEERS_DIR:-./peers}/llama.cpp}"
mkdir -p "$DEST"
DEST="$(cd "$DEST" && pwd)"

for tool in cmake c++ python3; do
  command -v "$tool" >/dev/null || { echo "error: $tool not found (apt-get install -y cmake g++ python3)" >&2; exit 1; }
done

SRC_PARENT="$DEST/src"
SRC="$SRC_PARENT/llama_cpp_python-$VERSION"
if [[ ! -f "$SRC/vendor/llama.cpp/CMakeLists.txt" ]]; then
  mkdir -p "$SRC_PARENT"
  # Straight from PyPI's index, sha256-checked (`pip download --no-binary :all:` would build
  # cmake from source first, just to read the sdist's metadata).
  sdist="$SRC_PARENT/llama_cpp_python-$VERSION.tar.gz"
  python3 - "$VERSION" "$sdist" "$(cd "$(dirname "$0")/.." && pwd)" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[3])
from fetch_llama_cpp_files import sdist_bytes
with open(sys.argv[2], "wb") as out:
    out.write(sdist_bytes(f"llama-cpp-python=={sys.argv[1]}"))
PYEOF
  tar -xzf "$sdist" -C "$SRC_PARENT"
fi
LLAMA="$SRC/vendor/llama.cpp"
[[ -f "$LLAMA/CMakeLists.txt" ]] || { echo "error: no llama.cpp tree at $LLAMA" >&2; exit 1; }

COMMON=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF
        -DGGML_VULKAN=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON)
TARGETS=(llama-server llama-bench llama-embedding)

build() {
  local name="$1"; shift
  local bdir="$DEST/build-$name"
  echo "== configuring $name: $*"
  cmake -S "$LLAMA" -B "$bdir" "${COMMON[@]}" "$@"
  local start=$SECONDS
  cmake --build "$bdir" --config Release -j "$JOBS" --target "${TARGETS[@]}"
  mkdir -p "$DEST/$name"
  for t in "${TARGETS[@]}"; do cp "$bdir/bin/$t" "$DEST/$name/"; done
  echo "== $name built in $((SECONDS - start)) s into $DEST/$name"
  "$DEST/$name/llama-server" --version 2>&1 | tail -n 2
}

# The native build's options: -DGGML_NATIVE=ON, or on an AMX CPU this CPU's ISA options spelled
# out (AMX off).
native_options() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | sed 's/^[^:]*://') "
  if [[ "$flags" != *" amx_tile "* || "${NATIVE_AMX:-0}" == 1 ]]; then
    echo -DGGML_NATIVE=ON
    return
  fi
  local opts=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  has() { [[ "$flags" == *" $1 "* ]] && echo ON || echo OFF; }
  opts+=(-DGGML_AVX="$(has avx)" -DGGML_AVX2="$(has avx2)" -DGGML_FMA="$(has fma)"
         -DGGML_F16C="$(has f16c)" -DGGML_BMI2="$(has bmi2)" -DGGML_AVX_VNNI="$(has avx_vnni)")
  if [[ "$(has avx512f)$(has avx512bw)$(has avx512vl)" == ONONON ]]; then
    opts+=(-DGGML_AVX512=ON -DGGML_AVX512_VBMI="$(has avx512vbmi)"
           -DGGML_AVX512_VNNI="$(has avx512_vnni)" -DGGML_AVX512_BF16="$(has avx512_bf16)")
  else
    opts+=(-DGGML_AVX512=OFF)
  fi
  echo "${opts[@]}"
}

for b in $BUILDS; do
  case "$b" in
    # shellcheck disable=SC2046 # one word per option
    native) build native $(native_options) ;;
    avx2)   build avx2 -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
                  -DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF \
                  -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF \
                  -DGGML_AMX_BF16=OFF ;;
    *) echo "error: unknown build '$b' (native, avx2)" >&2; exit 1 ;;
  esac
done
