"""Perplexity golden for a real model (Gemma 3 270M by default), computed as
`llama-perplexity -c 512` computes it.

The procedure (mirrors llama.cpp tools/perplexity/perplexity.cpp, function `perplexity`, with
ppl_stride = 0; re-implemented here, not copied):

1. Read the text file; if it ends with "\\n", drop that one final "\\n" (llama.cpp's -f option does).
2. tokens = tokenize(text, add_bos=True, special=False): BOS then the text when the model's
   add_bos_token is true (Gemma: BOS id 2), the text alone when it is false (Qwen2.5).
3. n_ctx = 512; n_chunk = len(tokens) // n_ctx (whole chunks only; the tail is unused), or the
   first --chunks of them.
4. For chunk c in 0..n_chunk: window = tokens[c*512 : (c+1)*512] with window[0] replaced by BOS
   (only when add_bos_token is true, as perplexity.cpp does);
   clear the KV cache; decode the window in ONE batch at positions 0..511, requesting logits only
   at positions >= first = n_ctx/2 = 256.
5. For j in 256..510 (255 positions per chunk): logits = float32 logits at position j;
   nll_j = max + log(sum_i exp(logits_i - max)) - logits[window[j+1]], with exp in float32 and the
   sum in float64 (as perplexity.cpp's log_softmax). Accumulate nll += nll_j and nll2 += nll_j**2
   in float64, count += 1.
6. mean = nll / count; PPL = exp(mean). The "+/-" estimate: var = nll2/count - mean**2;
   se = sqrt(var / (count - 1)); ppl_error = se * PPL.

llama-perplexity's default n_batch = 2048 packs 4 chunks as 4 independent sequences into one decode;
each sequence only attends to itself, so evaluating one chunk per decode (as here) is the same
computation. The headline run has flash attention off and an f16 K/V cache (the settings of the
greedy goldens). Two variants follow, flash attention on (what llama-perplexity picks by default on
CPU) and an f32 K/V cache, to show how much the figures move with kernel-level rounding alone.

Usage: python perplexity.py [--model-name NAME] [--model PATH] [--text PATH] [--out PATH]
                            [--chunks N]
NAME is a key of oracle_common.MODELS (default gemma3); the output defaults to
tests/goldens/<stem>_perplexity.json.
"""

import argparse
import math
from pathlib import Path

import llama_cpp
import numpy as np
from llama_cpp import Llama
from oracle_common import MODELS, add_model_args, disable_extra_buffer_types, model_path, sha256, write_json

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = REPO / "tests/data/pride_and_prejudice_ch1-7.txt"

N_CTX = 512
FIRST = N_CTX // 2
N_THREADS = 2
PER_TOKEN_CHUNKS = 2  # per-token NLLs are dumped for this many leading chunks


# (flash attention, K/V cache type): the headline run first, then two variants that show how far
# kernel-level rounding alone moves the figure.
CONFIGS = [(False, "f16"), (True, "f16"), (False, "f32")]
KV_TYPES = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32}


def make_llama(model: str, flash_attn: bool, type_kv: str) -> Llama:
    return Llama(
        model_path=model,
        n_ctx=N_CTX,
        n_batch=N_CTX,
        n_ubatch=N_CTX,
        n_threads=N_THREADS,
        n_threads_batch=N_THREADS,
        flash_attn=flash_attn,
        type_k=KV_TYPES[type_kv],
        type_v=KV_TYPES[type_kv],
        n_gpu_layers=0,
        verbose=False,
    )


def decode_window(llm: Llama, window: list) -> np.ndarray:
    """Decode one window at positions 0..len-1 in one batch; return logits for positions >= FIRST."""
    ctx = llm.ctx
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    n = len(window)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    try:
        for k, tok in enumerate(window):
            batch.token[k] = tok
            batch.pos[k] = k
            batch.n_seq_id[k] = 1
            batch.seq_id[k][0] = 0
            batch.logits[k] = 1 if k >= FIRST else 0
        batch.n_tokens = n
        rc = llama_cpp.llama_decode(ctx, batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode failed with {rc}")
        n_vocab = llm.n_vocab()
        rows = [
            np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, k), shape=(n_vocab,)).copy()
            for k in range(FIRST, n)
        ]
    finally:
        llama_cpp.llama_batch_free(batch)
    return np.stack(rows)


def token_nll(logits: np.ndarray, target: int) -> float:
    """-log p(target), as perplexity.cpp's log_softmax: float32 exp, float64 sum."""
    mx = logits.max()
    sum_exp = float(np.exp(logits - mx, dtype=np.float32).sum(dtype=np.float64))
    return -(float(logits[target] - mx) - math.log(sum_exp))


def run(model: str, tokens: list, bos, n_chunk: int, flash_attn: bool, type_kv: str) -> dict:
    """`bos` replaces each window's first token; None (a model without add_bos_token) keeps it."""
    llm = make_llama(model, flash_attn, type_kv)
    nll = nll2 = 0.0
    count = 0
    chunks = []
    for c in range(n_chunk):
        window = list(tokens[c * N_CTX : (c + 1) * N_CTX])
        if bos is not None:
            window[0] = bos
        out = decode_window(llm, window)
        per_token = []
        for j in range(FIRST, N_CTX - 1):
            v = token_nll(out[j - FIRST], window[j + 1])
            per_token.append(v)
            nll += v
            nll2 += v * v
            count += 1
        entry = {
            "chunk": c,
            "nll_sum": math.fsum(per_token),
            "n_scored": len(per_token),
            "cumulative_ppl": math.exp(nll / count),
        }
        if c < PER_TOKEN_CHUNKS:
            entry["per_token_nll"] = per_token
        chunks.append(entry)
        print(f"[{c + 1}]{math.exp(nll / count):.4f}", flush=True)
    mean = nll / count
    ppl = math.exp(mean)
    var = nll2 / count - mean * mean
    err = math.sqrt(var / (count - 1)) * ppl if var > 0 else None
    llm.close()
    return {
        "flash_attn": flash_attn,
        "type_kv": type_kv,
        "ppl": ppl,
        "ppl_error": err,
        "mean_nll": mean,
        "n_chunks": n_chunk,
        "n_scored_tokens": count,
        "chunks": chunks,
    }


def variant_differences(runs: list) -> list:
    """Per-token |NLL difference| between the headline run and each variant, over the chunks
    whose per-token NLLs are dumped: what a correct reimplementation may differ by."""
    base = [v for c in runs[0]["chunks"] if "per_token_nll" in c for v in c["per_token_nll"]]
    out = []
    for r in runs[1:]:
        other = [v for c in r["chunks"] if "per_token_nll" in c for v in c["per_token_nll"]]
        d = np.abs(np.array(base) - np.array(other))
        out.append(
            {
                "flash_attn": r["flash_attn"],
                "type_kv": r["type_kv"],
                "ppl_diff": r["ppl"] - runs[0]["ppl"],
                "per_token_abs_nll_diff_mean": float(d.mean()),
                "per_token_abs_nll_diff_p99": float(np.percentile(d, 99)),
                "per_token_abs_nll_diff_max": float(d.max()),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    add_model_args(ap)
    ap.add_argument("--text", default=str(DEFAULT_TEXT))
    ap.add_argument("--out", default=None, help="default: tests/goldens/<stem>_perplexity.json")
    ap.add_argument("--chunks", type=int, default=None, help="score only the first N chunks")
    args = ap.parse_args()
    spec = MODELS[args.model_name]
    args.model = args.model or model_path(args.model_name)
    if args.no_extra_bufts:
        disable_extra_buffer_types()
    args.out = args.out or str(REPO / "tests/goldens" / f"{spec['stem']}_perplexity.json")

    text = Path(args.text).read_text(encoding="utf-8")
    if text.endswith("\n"):
        text = text[:-1]
    vocab = Llama(model_path=args.model, vocab_only=True, verbose=False)
    tokens = vocab.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab._model.vocab))
    bos = vocab.token_bos() if add_bos else None
    if len(tokens) < 2 * N_CTX:
        raise SystemExit("text too short: llama-perplexity needs at least 2*n_ctx tokens")
    n_chunks_in_text = len(tokens) // N_CTX
    n_chunk = min(args.chunks or n_chunks_in_text, n_chunks_in_text)

    runs = [run(args.model, tokens, bos, n_chunk, fa, kv) for fa, kv in CONFIGS]
    main_run = runs[0]
    for r in runs:
        print(f"PPL = {r['ppl']:.4f} +/- {r['ppl_error']:.5f} (flash attn {r['flash_attn']}, KV {r['type_kv']})")
    diffs = variant_differences(runs)

    try:
        text_name = str(Path(args.text).resolve().relative_to(REPO))
    except ValueError:
        text_name = args.text
    if add_bos:
        bos_note, window_note = f"(starts with BOS id {bos})", " with window[0] := BOS"
    else:
        bos_note = "(no BOS: the model's add_bos_token is false)"
        window_note = " (window[0] kept: no BOS without add_bos_token)"
    chunks_note = "len(tokens) // 512"
    if n_chunk < n_chunks_in_text:
        chunks_note = f"the first {n_chunk} of the len(tokens) // 512 = {n_chunks_in_text} chunks"
    golden = {
        "description": f"Perplexity of {spec['title']} on an English text, as llama-perplexity -c 512",
        "model": {"file": Path(args.model).name, "sha256": sha256(args.model)},
        "text": {"file": text_name, "sha256": sha256(args.text), "n_tokens": len(tokens)},
        "oracle": {
            "llama_cpp_python": llama_cpp.__version__,
            "system_info": llama_cpp.llama_print_system_info().decode().strip(),
            "settings": {
                "n_ctx": N_CTX,
                "n_batch": N_CTX,
                "n_ubatch": N_CTX,
                "n_threads": N_THREADS,
                "type_k": "f16 (headline run; see runs)",
                "type_v": "f16 (headline run; see runs)",
                "n_gpu_layers": 0,
                "flash_attn": "off (headline run; see runs)",
                **({"use_extra_bufts": False} if args.no_extra_bufts else {}),
            },
        },
        "procedure": (
            "text = file contents minus one trailing '\\n'. tokens = tokenize(text, add_bos=True, "
            f"special=False) {bos_note}. n_ctx = 512, first = 256, n_chunks = {chunks_note}. "
            f"For each chunk c: window = tokens[512c : 512c+512]{window_note}; fresh KV cache; "
            "evaluate the window in one batch at positions 0..511. For j = 256..510: "
            "nll_j = logsumexp(logits_j) - logits_j[window[j+1]] (float32 logits, exp in float32, sum in "
            "float64); 255 scored tokens per chunk. PPL = exp(sum nll / count). ppl_error = PPL * "
            "sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)). chunks[].nll_sum and cumulative_ppl "
            "allow checking a prefix of the chunks; per_token_nll is given for the first chunks."
        ),
        "n_ctx": N_CTX,
        "first_scored_position": FIRST,
        "n_tokens": len(tokens),
        "n_chunks": main_run["n_chunks"],
        "n_scored_tokens": main_run["n_scored_tokens"],
        "ppl": main_run["ppl"],
        "ppl_error": main_run["ppl_error"],
        "ppl_flash_attn_on": runs[1]["ppl"],
        "ppl_kv_f32": runs[2]["ppl"],
        "variant_differences": diffs,
        "runs": runs,
    }
    write_json(args.out, golden)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
