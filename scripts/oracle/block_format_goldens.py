"""Dequantization goldens for the block formats MXFP4, IQ4_NL, IQ4_XS, Q2_K and Q3_K, computed
with gguf-py's `gguf.quants.dequantize` (numpy), which the Rust test
`crates/kernels/tests/block_goldens.rs` requires to be matched bit for bit.

For each type: seeded random blocks (every byte random, so every quant, scale and bit pattern
occurs), with the block's scale fields overwritten by finite f16 values of a realistic size
(MXFP4: exponent bytes over the subnormal, small, unit and large range), dequantized by gguf-py.
The JSON holds, per type, the raw blocks as hex and the f32 outputs as hex of their
little-endian bytes (exact bits, including the sign of zero).

No model or llama.cpp is needed, only `pip install gguf numpy` (see README.md).

Usage: python block_format_goldens.py [--out PATH] [--seed N]
Default output: crates/kernels/tests/goldens/block_formats.json (relative to the repository).
"""

import argparse
import json
from importlib.metadata import version
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "crates/kernels/tests/goldens/block_formats.json"

# type -> (elements per block, bytes per block, number of blocks)
TYPES = {
    "MXFP4": (T.MXFP4, 32, 17, 24),
    "IQ4_NL": (T.IQ4_NL, 32, 18, 16),
    "IQ4_XS": (T.IQ4_XS, 256, 136, 6),
    "Q2_K": (T.Q2_K, 256, 84, 6),
    "Q3_K": (T.Q3_K, 256, 110, 6),
}


def f16_bytes(rng: np.random.Generator, magnitude: float) -> bytes:
    """A finite f16 of about `magnitude`, either sign."""
    v = magnitude * rng.uniform(0.25, 1.0) * rng.choice([-1.0, 1.0])
    return np.array([v], dtype=np.float16).tobytes()


def set_scales(name: str, block: bytearray, i: int, rng: np.random.Generator) -> None:
    """Overwrites the scale fields of block `i` of type `name` with finite values."""
    if name == "MXFP4":
        # Subnormal halves (0, 1), small, around 1 (127) and large exponents.
        fixed = [0, 1, 2, 127, 128, 200]
        block[0] = fixed[i] if i < len(fixed) else int(rng.integers(100, 140))
    elif name == "IQ4_NL":
        block[0:2] = f16_bytes(rng, 0.01)
    elif name == "IQ4_XS":
        block[0:2] = f16_bytes(rng, 0.001)
    elif name == "Q2_K":
        block[80:82] = f16_bytes(rng, 0.01)
        block[82:84] = f16_bytes(rng, 0.01)
    elif name == "Q3_K":
        block[108:110] = f16_bytes(rng, 0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--seed", type=int, default=32)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    types = {}
    for name, (qtype, elems, nbytes, nblocks) in TYPES.items():
        raw = bytearray()
        for i in range(nblocks):
            block = bytearray(rng.integers(0, 256, size=nbytes, dtype=np.uint8).tobytes())
            set_scales(name, block, i, rng)
            raw += block
        data = np.frombuffer(bytes(raw), dtype=np.uint8).reshape(nblocks, nbytes)
        out = dequantize(data, qtype).astype(np.float32).reshape(-1)
        assert out.size == nblocks * elems, name
        assert np.all(np.isfinite(out)), name
        types[name] = {
            "ggml_type": int(qtype),
            "block_elements": elems,
            "block_bytes": nbytes,
            "blocks": nblocks,
            "blocks_hex": bytes(raw).hex(),
            "f32_le_hex": out.astype("<f4").tobytes().hex(),
        }
    doc = {
        "generator": "scripts/oracle/block_format_goldens.py",
        "reference": f"gguf-py {version('gguf')} gguf.quants.dequantize, numpy {np.__version__}",
        "seed": args.seed,
        "types": types,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
