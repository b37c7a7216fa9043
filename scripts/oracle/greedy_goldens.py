"""Greedy-decoding goldens for a real model (Gemma 3 270M by default), computed with llama.cpp
(through llama-cpp-python).

For each prompt this records the prompt's token ids (as llama.cpp tokenizes with add_bos=True,
special=False: BOS + text when the model's add_bos_token says so, the text alone otherwise) and a 64-token greedy continuation. For every generated step it
records the chosen id, the top-5 (id, logprob) and the logprob gap between the top two candidates,
so that a reimplementation can tell a real divergence from a near-tie flipped by rounding.
For every prompt it also dumps the first 16 raw logits and the top-20 (id, logit) at the last
prompt position.

Procedure (the ordinary way): the whole prompt is evaluated in one llama_decode call (n_batch =
n_ubatch >= longest prompt), only the last position's logits are requested, then each chosen token
is fed back alone. Logprobs are log-softmax of the float32 logits computed in float64.
The greedy choice is argmax of the logits (first index on ties), with no penalties, and decoding does
not stop at end-of-generation tokens: every prompt gets exactly 64 steps.

For three prompts (a short one, the code one and the longest) the sequence is cross-checked against
llama-cpp-python's own `create_completion(prompt, max_tokens=64, temperature=0)`; the outcome is
written to the JSON.

Usage: python greedy_goldens.py [--model-name NAME] [--model PATH] [--text PATH] [--out PATH]
                                [--no-variants] [--prompts NAME,NAME,...]
NAME is a key of oracle_common.MODELS (default gemma3); the output defaults to
tests/goldens/<stem>_greedy.json.
"""

import argparse
import re
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama
from oracle_common import MODELS, add_model_args, disable_extra_buffer_types, model_path, sha256, write_json

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = REPO / "tests/data/pride_and_prejudice_ch1-7.txt"

N_GENERATE = 64
TOP_K = 5
DEBUG_TOP = 20
DEBUG_FIRST = 16

SETTINGS = {
    "n_ctx": 2048,
    "n_batch": 2048,
    "n_ubatch": 2048,
    "n_threads": 2,
    "n_threads_batch": 2,
    "flash_attn": False,
    "type_k": "f16",
    "type_v": "f16",
    "swa_full": True,
    "logits_all": False,
    "n_gpu_layers": 0,
    "seed": 0,
}
KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}
# (flash attention, K/V cache type) of the reruns that measure sensitivity to kernel rounding
VARIANTS = [(True, "f16"), (False, "f32")]

SHORT_PROMPTS = [
    ("english_prose", "The old lighthouse keeper climbed the spiral stairs every evening, and"),
    (
        "python_code",
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    ),
    ("numbered_list", "Here are five simple tips for sleeping better:\n\n1."),
    ("french", "La ville de Paris est connue dans le monde entier pour"),
    ("german", "Die Geschichte der deutschen Sprache beginnt im frühen Mittelalter, als"),
    ("chinese", "中国的首都是北京。北京有很多著名的景点，比如"),
    ("japanese", "日本の四季はそれぞれ美しい。春には"),
    (
        "math_word_problem",
        "Question: A farmer has 12 cows and buys 7 more. Each cow gives 8 liters of milk per day. "
        "How many liters of milk does the farmer get per day?\nAnswer:",
    ),
    ("capital_fact", "The capital of France is"),
    ("single_word", "Hello"),
]

# (name, line the excerpt starts at, target token count incl. BOS, text appended to the excerpt)
LONG_PROMPTS = [
    (
        "long_700",
        "PRIDE AND PREJUDICE",
        700,
        "\n\nQuestion: Who has taken Netherfield Park, and how much does he earn a year?\nAnswer:",
    ),
    (
        "long_1100",
        "Chapter 3",
        1100,
        "\n\nQuestion: What did Mr. Darcy say about Elizabeth at the ball?\nAnswer:",
    ),
    (
        "long_1600",
        "Chapter 5",
        1600,
        "\n\nSummarize the passage above in three sentences.\nSummary:",
    ),
]


# a sentence ends at . ! or ? (and a closing quote) before whitespace, except after a title
SENTENCE_END = re.compile(r'(?<!Mr)(?<!Mrs)(?<!Dr)(?<!St)[.!?]"?(?=\s)')


def build_long_prompt(llm: Llama, text: str, start: str, target: int, tail: str) -> str:
    """Excerpt from the line `start` on, cut at the last sentence end such that
    BOS + excerpt + tail is at most `target` tokens, followed by `tail`."""
    first = re.search("^" + re.escape(start) + "$", text, re.M).start()
    best = None
    for m in SENTENCE_END.finditer(text, first):
        candidate = text[first : m.end()] + tail
        if len(tokenize(llm, candidate)) > target:
            break
        best = candidate
    if best is None:
        raise SystemExit(f"no excerpt from {start!r} fits in {target} tokens")
    return best


def tokenize(llm: Llama, text: str) -> list:
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)


def last_logits(llm: Llama) -> np.ndarray:
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).copy()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def top_by(values: np.ndarray, k: int) -> list:
    # stable sort on -value: ties keep the lower id first, like llama.cpp's greedy argmax
    order = np.argsort(-values, kind="stable")[:k]
    return [int(i) for i in order]


def run_prompt(llm: Llama, name: str, text: str) -> dict:
    ids = tokenize(llm, text)
    llm.reset()
    llm.eval(ids)
    logits = last_logits(llm)
    top20 = top_by(logits, DEBUG_TOP)
    debug = {
        "first16_logits": [float(v) for v in logits[:DEBUG_FIRST]],
        "top20_logits": [[i, float(logits[i])] for i in top20],
    }
    steps = []
    for _ in range(N_GENERATE):
        lp = log_softmax(logits)
        top = top_by(logits, TOP_K)
        chosen = int(np.argmax(logits))
        assert chosen == top[0], "argmax and stable sort disagree: this is a bug"
        steps.append(
            {
                "id": chosen,
                "top5": [[i, float(lp[i])] for i in top],
                "gap": float(lp[top[0]] - lp[top[1]]),
            }
        )
        llm.eval([chosen])
        logits = last_logits(llm)
    generated = [s["id"] for s in steps]
    eog = [k for k, t in enumerate(generated) if llama_cpp.llama_vocab_is_eog(llm._model.vocab, t)]
    return {
        "name": name,
        "prompt": text,
        "prompt_ids": ids,
        "n_prompt_tokens": len(ids),
        "generated_ids": generated,
        "generated_text": llm.detokenize(generated).decode("utf-8", errors="replace"),
        "first_eog_step": eog[0] if eog else None,
        "min_gap": min(s["gap"] for s in steps),
        "steps": steps,
        "last_prompt_position": debug,
    }


def check_create_completion(llm: Llama, case: dict) -> dict:
    """Compare our loop with llama-cpp-python's create_completion(temperature=0)."""
    llm.reset()
    out = llm.create_completion(case["prompt"], max_tokens=N_GENERATE, temperature=0)
    text = out["choices"][0]["text"]
    n_prompt = case["n_prompt_tokens"]
    # create_completion feeds back every generated token but the last, so its context holds
    # the prompt followed by the first n-1 generated ids.
    evaluated = [int(t) for t in llm.input_ids[: llm.n_tokens]]
    fed_back = evaluated[n_prompt:]
    expected_text = case["generated_text"]
    stop_at = case["first_eog_step"]
    if stop_at is not None:
        expected_text = llm.detokenize(case["generated_ids"][:stop_at]).decode("utf-8", "replace")
    return {
        "prompt": case["name"],
        "call": f"create_completion(prompt, max_tokens={N_GENERATE}, temperature=0)",
        "prompt_ids_match": evaluated[:n_prompt] == case["prompt_ids"],
        "text_match": text == expected_text,
        "ids_match": fed_back == case["generated_ids"][: len(fed_back)],
        "n_ids_compared": len(fed_back),
        "finish_reason": out["choices"][0]["finish_reason"],
    }


def make_llama(model: str, flash_attn: bool, type_kv: str) -> Llama:
    return Llama(
        model_path=model,
        n_ctx=SETTINGS["n_ctx"],
        n_batch=SETTINGS["n_batch"],
        n_ubatch=SETTINGS["n_ubatch"],
        n_threads=SETTINGS["n_threads"],
        n_threads_batch=SETTINGS["n_threads_batch"],
        flash_attn=flash_attn,
        type_k=KV_TYPES[type_kv],
        type_v=KV_TYPES[type_kv],
        swa_full=SETTINGS["swa_full"],
        logits_all=SETTINGS["logits_all"],
        n_gpu_layers=SETTINGS["n_gpu_layers"],
        seed=SETTINGS["seed"],
        verbose=False,
    )


def add_variants(model: str, cases: list) -> list:
    """Rerun every prompt with each variant setting; record its ids and how long it agrees."""
    summary = []
    for flash_attn, type_kv in VARIANTS:
        llm = make_llama(model, flash_attn, type_kv)
        full = 0
        for case in cases:
            ids = run_prompt(llm, case["name"], case["prompt"])["generated_ids"]
            same = next((k for k, (x, y) in enumerate(zip(ids, case["generated_ids"])) if x != y), len(ids))
            full += same == len(ids)
            # the headline's top-1/top-2 gap where the variant first chose differently
            gap = case["steps"][same]["gap"] if same < len(ids) else None
            case.setdefault("variants", []).append(
                {
                    "flash_attn": flash_attn,
                    "type_kv": type_kv,
                    "same_prefix": same,
                    "headline_gap_at_divergence": gap,
                    "generated_ids": ids,
                }
            )
            print(f"variant fa={flash_attn} kv={type_kv} {case['name']}: same for {same} steps")
        llm.close()
        summary.append(
            {"flash_attn": flash_attn, "type_kv": type_kv, "cases_identical_for_all_steps": full}
        )
    return summary


def main() -> None:
    ap = argparse.ArgumentParser()
    add_model_args(ap)
    ap.add_argument("--text", default=str(DEFAULT_TEXT))
    ap.add_argument("--out", default=None, help="default: tests/goldens/<stem>_greedy.json")
    ap.add_argument("--no-variants", action="store_true", help="skip the flash-attention and f32 K/V reruns")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt names to run (default: all)")
    args = ap.parse_args()
    spec = MODELS[args.model_name]
    args.model = args.model or model_path(args.model_name)
    if args.no_extra_bufts:
        disable_extra_buffer_types()
        SETTINGS["use_extra_bufts"] = False
    args.out = args.out or str(REPO / "tests/goldens" / f"{spec['stem']}_greedy.json")

    llm = make_llama(args.model, SETTINGS["flash_attn"], SETTINGS["type_k"])
    text = Path(args.text).read_text(encoding="utf-8")
    wanted = set(args.prompts.split(",")) if args.prompts else None
    prompts = [p for p in SHORT_PROMPTS if wanted is None or p[0] in wanted]
    for name, start, target, tail in LONG_PROMPTS:
        if wanted is None or name in wanted:
            prompts.append((name, build_long_prompt(llm, text, start, target, tail)))

    cases = []
    for name, prompt in prompts:
        case = run_prompt(llm, name, prompt)
        print(f"{name}: {case['n_prompt_tokens']} prompt tokens, min gap {case['min_gap']:.4f}")
        cases.append(case)
    if max(c["n_prompt_tokens"] for c in cases) + N_GENERATE > SETTINGS["n_ctx"]:
        raise SystemExit("n_ctx too small for the longest prompt")
    if max(c["n_prompt_tokens"] for c in cases) > SETTINGS["n_ubatch"]:
        raise SystemExit("a prompt would not be evaluated in one batch")

    checks = [check_create_completion(llm, cases[i]) for i in sorted({0, min(1, len(cases) - 1), len(cases) - 1})]
    for c in checks:
        print("create_completion check:", c)
    llm.close()
    variants = None if args.no_variants else add_variants(args.model, cases)

    golden = {
        "description": f"Greedy continuations of {spec['title']} computed by llama.cpp on CPU",
        "model": {"file": Path(args.model).name, "sha256": sha256(args.model)},
        "oracle": {
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "settings": SETTINGS,
        },
        "procedure": (
            "prompt_ids = tokenize(prompt, add_bos=True, special=False). Clear the KV cache, evaluate "
            "all prompt_ids in ONE llama_decode call (positions 0..n-1, logits only for the last "
            "position). Then for 64 steps: logprobs = log_softmax(float64(logits)); id = argmax(logits) "
            "(lowest id on ties); record id, top5 [(id, logprob)] by descending logit and "
            "gap = logprob(top1) - logprob(top2); feed id alone at the next position. No penalties, no "
            "stop at end-of-generation tokens. last_prompt_position holds the raw float32 logits after "
            "the prompt: the first 16 values (ids 0..15) and the top 20 (id, logit). Each case's "
            "variants[] reruns the same procedure with flash attention on, or with an f32 K/V cache, "
            "and gives the ids and the number of leading steps equal to the headline ids: how far "
            "kernel-level rounding alone can move a greedy continuation."
        ),
        "n_generate": N_GENERATE,
        "create_completion_check": checks,
        "create_completion_matched": all(c["ids_match"] and c["text_match"] for c in checks),
        "variants_summary": variants,
        "cases": cases,
    }
    write_json(args.out, golden)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
