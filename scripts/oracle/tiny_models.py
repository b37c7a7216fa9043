#!/usr/bin/env python3
"""Goldens for the tiny Llama-family models, computed by llama.cpp.

Writes tests/goldens/tiny/<arch>.json for every tiny architecture. The GGUF files are produced
by our own generator (`cargo run --release -p tessera-model --example write_tiny_models DIR`)
and read here by llama.cpp through llama-cpp-python, so both sides see the same bytes; the
golden records their sha256, and crates/model/tests/llama_family.rs refuses to compare against
a golden made from different bytes. CI never runs this: it only reads the JSON.

For each model the golden holds:
  - prompt: BOS + 24 fixed token ids, and llama.cpp's logits at every prompt position;
  - continuation: 16 greedy tokens, fed back one at a time, and the logits after each of them
    (so the single-token decode path is checked as well as the batched prompt);
  - tokenizer: llama.cpp's ids for a fixed text (exercises byte fallback on the tiny vocab).

Usage (from the repository root, with the oracle venv):
    /work/tmp/oracle/bin/python scripts/oracle/tiny_models.py [--gguf-dir DIR] [--out DIR]
--gguf-dir skips the cargo step and reads tiny-<arch>.gguf files already written to DIR.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

ARCHS = ["llama", "qwen2", "qwen3", "gemma3"]
N_PROMPT = 24
N_CONTINUATION = 16
N_CTX = 256
TEXT = "Hello world, the tiny model: naïve 🙂!"
# Logits are written with this many decimals: far below any tolerance worth testing.
DECIMALS = 5
# Below this gap between the top two logits, a greedy step is a coin toss between
# implementations that differ by rounding; the generator's seed is chosen to avoid it.
MIN_MARGIN = 0.05


def repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_models(dest):
    cmd = ["cargo", "run", "--release", "-q", "-p", "tessera-model",
           "--example", "write_tiny_models", "--", dest]
    subprocess.run(cmd, check=True, cwd=repo_root())


def prompt_tokens(n_vocab, bos):
    # Spread over the whole vocabulary (byte tokens and pieces), never a control token.
    return [bos] + [(7 * i * i + 13 * i + 5) % (n_vocab - 3) + 3 for i in range(N_PROMPT)]


def row(values):
    return [round(float(v), DECIMALS) for v in values]


def run_arch(path):
    with open(path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    llm = Llama(model_path=path, n_ctx=N_CTX, n_threads=2, logits_all=True, verbose=False)
    n_vocab = llm.n_vocab()
    tokens = prompt_tokens(n_vocab, llm.token_bos())
    llm.eval(tokens)
    prompt_logits = [row(llm.scores[i]) for i in range(len(tokens))]

    continuation, continuation_logits, margins = [], [], []
    last = np.array(llm.scores[len(tokens) - 1])
    for _ in range(N_CONTINUATION):
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        token = int(np.argmax(last))
        continuation.append(token)
        llm.eval([token])
        last = np.array(llm.scores[llm.n_tokens - 1])
        continuation_logits.append(row(last))

    text_tokens = llm.tokenize(TEXT.encode("utf-8"), add_bos=True, special=False)
    return {
        "sha256": sha,
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": n_vocab,
        "prompt": tokens,
        "prompt_logits": prompt_logits,
        "continuation": continuation,
        "continuation_logits": continuation_logits,
        "min_greedy_margin": round(min(margins), DECIMALS),
        "text": TEXT,
        "text_tokens": list(text_tokens),
    }


def dump(golden):
    """JSON with one logits row per line, so diffs stay readable."""
    lines = ["{"]
    items = list(golden.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i + 1 < len(items) else ""
        if key.endswith("_logits"):
            rows = ",\n".join("    " + json.dumps(r) for r in value)
            lines.append(f'  "{key}": [\n{rows}\n  ]{comma}')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf-dir", help="read existing tiny-<arch>.gguf files from here")
    ap.add_argument("--out", default=os.path.join(repo_root(), "tests", "goldens", "tiny"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        gguf_dir = args.gguf_dir or tmp
        if not args.gguf_dir:
            write_models(gguf_dir)
        os.makedirs(args.out, exist_ok=True)
        for arch in ARCHS:
            golden = run_arch(os.path.join(gguf_dir, f"tiny-{arch}.gguf"))
            out = os.path.join(args.out, f"{arch}.json")
            with open(out, "w", encoding="utf-8") as f:
                f.write(dump(golden))
            print(f"{out}: continuation {golden['continuation']}, "
                  f"min greedy margin {golden['min_greedy_margin']}")
            if golden["min_greedy_margin"] < MIN_MARGIN:
                print(f"warning: {arch}: a greedy step is a near-tie; pick another seed",
                      file=sys.stderr)


if __name__ == "__main__":
    main()
