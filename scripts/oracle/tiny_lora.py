#!/usr/bin/env python3
"""Goldens for LoRA adapters on the tiny models, computed by llama.cpp.

Writes tests/goldens/tiny/lora_<arch>.json for each arch of model::testing::lora::TINY_LORA_ARCHS.
The tiny model and its adapter (`tiny-<arch>.gguf`, `tiny-<arch>-lora.gguf`: rank 8 on attn_q,
attn_v and ffn_down, alpha 16) come from our own generator
(`cargo run --release -p tessera-model --example write_tiny_models DIR`); llama.cpp reads both
through llama-cpp-python (`Llama(model_path, lora_path=..., lora_scale=...)`) at scales 1.0 and
0.5. The golden records both files' sha256; crates/model/tests/lora_goldens.rs refuses to compare
against a golden made from other bytes. CI never runs this: it only reads the JSON.

For each scale the golden holds llama.cpp's logits at every prompt position (the same prompt as
tiny_models.py) and 16 greedy tokens with the logits after each. Before writing, each run is
checked against the float64 reference of tiny_models.py with the adapter merged into the
weights in float64 (W + scale * alpha / rank * B @ A): a different reading of the adapter's
layout or scale would disagree by whole units.

Usage (from the repository root, with the oracle venv):
    "$ORACLE_VENV"/bin/python scripts/oracle/tiny_lora.py [--gguf-dir DIR] [--out DIR]
"""

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np
import llama_cpp
from gguf import GGUFReader
from gguf.quants import dequantize
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_models as tm  # noqa: E402

ARCHS = ["llama", "qwen2", "qwen3", "gemma3"]
SCALES = [1.0, 0.5]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(model, lora, scale):
    llm = Llama(model_path=model, lora_path=lora, lora_scale=scale, n_ctx=tm.N_CTX,
                n_threads=2, logits_all=True, verbose=False)
    tokens = tm.prompt_tokens(llm.n_vocab(), llm.token_bos())
    llm.eval(tokens)
    prompt_logits = [tm.row(llm.scores[i]) for i in range(len(tokens))]
    continuation, continuation_logits, margins = [], [], []
    last = np.array(llm.scores[len(tokens) - 1])
    for _ in range(tm.N_CONTINUATION):
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        token = int(np.argmax(last))
        continuation.append(token)
        llm.eval([token])
        last = np.array(llm.scores[llm.n_tokens - 1])
        continuation_logits.append(tm.row(last))
    return tokens, prompt_logits, continuation, continuation_logits, min(margins)


def merger(lora, scale):
    """An `adjust` for tm.reference_logits: the adapter added to the weights in float64."""
    reader = GGUFReader(lora)
    alpha = float(reader.fields["adapter.lora.alpha"].contents())
    ab = {t.name: np.array(dequantize(t.data, t.tensor_type), dtype=np.float64)
          for t in reader.tensors}

    def adjust(tensors):
        for name, a in ab.items():
            if not name.endswith(".lora_a"):
                continue
            base = name[: -len(".lora_a")]
            b = ab[base + ".lora_b"]
            rank = b.shape[1]
            factor = scale * alpha / rank if alpha else scale
            tensors[base] = tensors[base] + factor * (b @ a)
    return adjust


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-dir", help="read tiny-<arch>.gguf and tiny-<arch>-lora.gguf from here")
    ap.add_argument("--out", default=os.path.join(tm.repo_root(), "tests", "goldens", "tiny"))
    ap.add_argument("--archs", nargs="+", default=ARCHS, choices=ARCHS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gguf_dir = args.gguf_dir or tmp
        if not args.gguf_dir:
            tm.write_models(gguf_dir)
        for arch in args.archs:
            model = os.path.join(gguf_dir, f"tiny-{arch}.gguf")
            lora = os.path.join(gguf_dir, f"tiny-{arch}-lora.gguf")
            golden = {"sha256": sha256(model), "lora_sha256": sha256(lora),
                      "llama_cpp_python": llama_cpp.__version__}
            for scale in SCALES:
                tokens, pl, cont, cl, margin = run(model, lora, scale)
                ref = tm.reference_logits(model, tokens + cont, merger(lora, scale))
                diff = float(np.abs(ref - np.array(pl + cl)).max())
                print(f"{arch} scale {scale}: max |llama.cpp - float64 reference| = {diff:.2e}, "
                      f"min greedy margin {margin:.3f}, continuation {cont}")
                if diff > tm.REFERENCE_TOL:
                    sys.exit(f"{arch}: llama.cpp with the adapter disagrees with the reference")
                if margin < tm.MIN_MARGIN:
                    print(f"warning: {arch} scale {scale}: a greedy step is a near-tie",
                          file=sys.stderr)
                key = f"scale_{scale}"
                golden["prompt"] = tokens
                golden[f"{key}_prompt_logits"] = pl
                golden[f"{key}_continuation"] = cont
                golden[f"{key}_continuation_logits"] = cl
                golden[f"{key}_min_greedy_margin"] = round(margin, tm.DECIMALS)
            os.makedirs(args.out, exist_ok=True)
            out = os.path.join(args.out, f"lora_{arch}.json")
            with open(out, "w", encoding="utf-8") as f:
                f.write(tm.dump(golden))
            print(out)


if __name__ == "__main__":
    main()
