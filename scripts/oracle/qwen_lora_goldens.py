#!/usr/bin/env python3
"""Greedy goldens of Qwen2.5-Coder-0.5B with a random LoRA adapter, computed by llama.cpp.

The adapter comes from the Rust writer (`model::testing::lora::real_lora_gguf`, through
qwen_lora_adapter.py: rank 8, alpha 16, on attn_q, attn_v and ffn_down) with the seed and
strength of `QWEN_LORA_SEED` / `QWEN_LORA_STRENGTH`, written to a temporary directory (never
into the repository). llama.cpp runs it through llama-cpp-python
(`Llama(model_path, lora_path=..., lora_scale=...)`) at scales 1.0 and 0.5 with the settings
and procedure of greedy_goldens.py: for each prompt, 64 greedy steps with each step's id, top-5
(id, logprob) and top-1/top-2 gap, so a near-tie can be told from a real divergence. The base
model's continuations (no adapter) are recorded too, and the script fails unless the adapter
changes the greedy output of every prompt at scale 1.0.

The golden records the model's and the adapter's sha256 and the adapter's seed and strength;
crates/model/tests/lora_real.rs regenerates the adapter, checks its sha256 and compares.

Usage (from the repository root, with the oracle venv):
    "$ORACLE_VENV"/bin/python scripts/oracle/qwen_lora_goldens.py [--model PATH] [--out PATH]
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import greedy_goldens as gg  # noqa: E402
import oracle_common as oc  # noqa: E402
import qwen_lora_adapter as qa  # noqa: E402

MODEL_NAME = "qwen2.5-coder-0.5b"
SCALES = [1.0, 0.5]
PROMPT_NAMES = ["python_code", "english_prose", "math_word_problem", "capital_fact"]
RANK, ALPHA, TARGETS = 8, 16.0, ["attn_q", "attn_v", "ffn_down"]


def make_llama(model, lora, scale):
    s = gg.SETTINGS
    kv = gg.KV_TYPES[s["type_k"]]
    extra = {} if lora is None else {"lora_path": lora, "lora_scale": scale}
    return Llama(model_path=model, n_ctx=s["n_ctx"], n_batch=s["n_batch"],
                 n_ubatch=s["n_ubatch"], n_threads=s["n_threads"],
                 n_threads_batch=s["n_threads_batch"], flash_attn=s["flash_attn"],
                 type_k=kv, type_v=kv, logits_all=False, n_gpu_layers=0, seed=s["seed"],
                 verbose=False, **extra)


def run_all(model, lora, scale, prompts):
    llm = make_llama(model, lora, scale)
    cases = [gg.run_prompt(llm, name, text) for name, text in prompts]
    llm.close()
    return cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    oc.add_model_args(ap)
    ap.set_defaults(model_name=MODEL_NAME)
    stem = oc.MODELS[MODEL_NAME]["stem"]
    ap.add_argument("--out", default=str(qa.REPO / "tests/goldens" / f"{stem}_lora_greedy.json"))
    ap.add_argument("--seed", type=int, default=qa.DEFAULT_SEED)
    ap.add_argument("--strength", type=float, default=qa.DEFAULT_STRENGTH)
    args = ap.parse_args()
    model = args.model or oc.model_path(args.model_name)
    if args.no_extra_bufts:
        oc.disable_extra_buffer_types()
        gg.SETTINGS["use_extra_bufts"] = False
    prompts = [(n, t) for n, t in gg.SHORT_PROMPTS if n in PROMPT_NAMES]
    with tempfile.TemporaryDirectory() as tmp:
        lora = os.path.join(tmp, "qwen-lora.gguf")
        qa.write_adapter(model, lora, args.seed, args.strength)
        lora_sha = oc.sha256(lora)
        base = run_all(model, None, 1.0, prompts)
        by_scale = {}
        for scale in SCALES:
            cases = run_all(model, lora, scale, prompts)
            for b, c in zip(base, cases):
                same = b["generated_ids"] == c["generated_ids"]
                print(f"scale {scale} {c['name']}: min gap {c['min_gap']:.4f}, "
                      f"{'SAME as' if same else 'differs from'} the base: {c['generated_text']!r}")
                if same and scale == 1.0:
                    sys.exit(f"{c['name']}: the adapter does not change the greedy output")
                del c["last_prompt_position"]
            by_scale[str(scale)] = {"cases": cases}
    golden = {
        "description": f"Greedy continuations of {oc.MODELS[MODEL_NAME]['title']} with a random "
                       "LoRA adapter, computed by llama.cpp on CPU",
        "model": {"file": Path(model).name, "sha256": oc.sha256(model)},
        "adapter": {
            "writer": "model::testing::lora::real_lora_gguf",
            "seed": args.seed, "strength": args.strength, "rank": RANK, "alpha": ALPHA,
            "targets": TARGETS, "sha256": lora_sha,
        },
        "oracle": {
            "llama_cpp_python": llama_cpp.__version__,
            "call": "Llama(model_path, lora_path=adapter, lora_scale=scale, **settings)",
            "settings": gg.SETTINGS,
        },
        "procedure": "greedy_goldens.py's, per scale; base_generated_ids: without the adapter",
        "n_generate": gg.N_GENERATE,
        "base_generated_ids": {c["name"]: c["generated_ids"] for c in base},
        "scales": by_scale,
    }
    oc.write_json(args.out, golden)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
