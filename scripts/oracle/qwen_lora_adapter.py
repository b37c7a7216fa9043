#!/usr/bin/env python3
"""Writes a random LoRA adapter for a real GGUF model, for LoRA goldens against llama.cpp.

The bytes come from the Rust writer, `model::testing::lora::real_lora_gguf` (run as
`cargo run --release -p tessera-model --example write_real_lora MODEL OUT SEED STRENGTH`), so
the Rust tests regenerate the very adapter llama.cpp ran from its seed and strength and check
its sha256. The adapter is in llama.cpp's format (general.type = adapter, adapter.type = lora,
adapter.lora.alpha = 16; <weight>.lora_a with GGUF dims [d_in, rank] and <weight>.lora_b with
[rank, d_out], F32) on attn_q, attn_v and ffn_down of every layer, rank 8. A is uniform in
+-1/sqrt(d_in), B in +-strength/sqrt(rank) (SplitMix64 draws). `--check` asks llama.cpp for a
greedy continuation with and without the adapter and says whether they differ.

The output must be written outside the repository (weights are never committed).

Usage (from the repository root, with the oracle venv):
    "$ORACLE_VENV"/bin/python scripts/oracle/qwen_lora_adapter.py --out DIR/qwen-lora.gguf \
        [--model-name qwen2.5-coder-0.5b | --model PATH] [--seed 0] [--strength 0.2] [--check]
"""

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_common as oc  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHECK_PROMPT = "def fibonacci(n):"
CHECK_TOKENS = 32
# model::testing::lora::QWEN_LORA_SEED and QWEN_LORA_STRENGTH
DEFAULT_SEED = 0
DEFAULT_STRENGTH = 0.2


def write_adapter(model, out, seed, strength):
    """Runs the Rust writer (the bytes the Rust tests regenerate)."""
    cmd = ["cargo", "run", "--quiet", "--release", "-p", "tessera-model", "--example",
           "write_real_lora", "--", str(model), str(out), str(seed), repr(float(strength))]
    subprocess.run(cmd, check=True, cwd=REPO)


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
    ap.add_argument("--strength", type=float, default=DEFAULT_STRENGTH)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--check", action="store_true", help="compare greedy output in llama.cpp")
    ap.set_defaults(model_name="qwen2.5-coder-0.5b")
    args = ap.parse_args()
    model = args.model or oc.model_path(args.model_name)
    if Path(args.out).resolve().is_relative_to(REPO):
        sys.exit("--out must be outside the repository: adapter weights are never committed")
    write_adapter(model, args.out, args.seed, args.strength)
    if args.check:
        if args.no_extra_bufts:
            oc.disable_extra_buffer_types()
        check(model, args.out)


if __name__ == "__main__":
    main()
