#!/usr/bin/env python3
"""Writes a random LoRA adapter for a real GGUF model, for LoRA goldens against llama.cpp.

The adapter is in llama.cpp's format (general.type = adapter, adapter.type = lora,
adapter.lora.alpha; <weight>.lora_a with GGUF dims [d_in, rank] and <weight>.lora_b with
[rank, d_out], F32), on attn_q, attn_v and ffn_down of every layer by default, rank 8, alpha 16.
Values are seeded normal draws (numpy's PCG64), so the same arguments write the same bytes.

Strength: A ~ N(0, 1/d_in), and B is scaled per weight so that scale * alpha / rank * B @ A has
an RMS of `--strength` times the base weight's own RMS (measured on the dequantized weight);
the default 0.5 changes a model's greedy output within a few tokens. `--check` asks llama.cpp
for a greedy continuation with and without the adapter and says whether they differ.

The output must be written outside the repository (weights are never committed).

Usage (with the oracle venv):
    "$ORACLE_VENV"/bin/python scripts/oracle/qwen_lora_adapter.py --out DIR/qwen-lora.gguf \
        [--model-name qwen2.5-coder-0.5b | --model PATH] [--seed 0] [--strength 0.5] [--check]
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter
from gguf.quants import dequantize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402

TARGETS = ["attn_q", "attn_v", "ffn_down"]
CHECK_PROMPT = "def fibonacci(n):"
CHECK_TOKENS = 32


def field_str(reader, key):
    return str(reader.fields[key].contents())


def write_adapter(model, out, rank, alpha, strength, seed, targets):
    reader = GGUFReader(model)
    arch = field_str(reader, "general.architecture")
    rng = np.random.default_rng(seed)
    w = GGUFWriter(out, arch)  # writes general.architecture
    w.add_string("general.type", "adapter")
    w.add_string("general.name", f"random rank-{rank} LoRA (seed {seed})")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", alpha)
    factor = alpha / rank
    n = 0
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) != 4 or parts[0] != "blk" or parts[2] not in targets or parts[3] != "weight":
            continue
        d_in, d_out = int(t.shape[0]), int(t.shape[1])  # GGUF order
        base = np.array(dequantize(t.data, t.tensor_type), dtype=np.float64)
        w_rms = float(np.sqrt(np.mean(base * base)))
        a = rng.normal(0.0, 1.0 / np.sqrt(d_in), size=(rank, d_in))
        # RMS of B @ A is sqrt(rank) * sigma_b / sqrt(d_in) * sqrt(d_in) = sqrt(rank) * sigma_b.
        sigma_b = strength * w_rms / (factor * np.sqrt(rank))
        b = rng.normal(0.0, sigma_b, size=(d_out, rank))
        # numpy (rows, cols) is GGUF [cols, rows]: A is [d_in, rank], B is [rank, d_out].
        w.add_tensor(f"{t.name}.lora_a", a.astype(np.float32), raw_dtype=GGMLQuantizationType.F32)
        w.add_tensor(f"{t.name}.lora_b", b.astype(np.float32), raw_dtype=GGMLQuantizationType.F32)
        n += 1
    if n == 0:
        sys.exit(f"{model}: no tensor among {targets}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{out}: {n} weights of {arch}, rank {rank}, alpha {alpha}, strength {strength}")


def check(model, out):
    from llama_cpp import Llama

    def greedy(lora):
        llm = Llama(model_path=model, lora_path=lora, n_ctx=256, n_threads=2, verbose=False)
        r = llm(CHECK_PROMPT, max_tokens=CHECK_TOKENS, temperature=0.0)
        return r["choices"][0]["text"]

    base, adapted = greedy(None), greedy(out)
    print(f"base:    {base!r}\nadapted: {adapted!r}")
    if base == adapted:
        sys.exit("the adapter does not change the greedy output: raise --strength")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    oc.add_model_args(ap)
    ap.add_argument("--out", required=True, help="adapter path, outside the repository")
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--strength", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--targets", nargs="+", default=TARGETS)
    ap.add_argument("--check", action="store_true", help="compare greedy output in llama.cpp")
    ap.set_defaults(model_name="qwen2.5-coder-0.5b")
    args = ap.parse_args()
    model = args.model or oc.model_path(args.model_name)
    repo = Path(__file__).resolve().parents[2]
    if Path(args.out).resolve().is_relative_to(repo):
        sys.exit("--out must be outside the repository: adapter weights are never committed")
    write_adapter(model, args.out, args.rank, args.alpha, args.strength, args.seed, args.targets)
    if args.check:
        if args.no_extra_bufts:
            oc.disable_extra_buffer_types()
        check(model, args.out)


if __name__ == "__main__":
    main()
