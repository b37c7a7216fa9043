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

Before writing, every golden is checked against an independent float64 numpy forward pass of
the same file (`reference_logits` below): if llama.cpp reads the generated metadata differently
from what we mean (a RoPE layout, gemma3's window pattern, a missing key it defaults), the two
disagree by whole units and the script stops. Agreement is ~1e-2, the f16 KV cache's rounding.

Usage (from the repository root, with the oracle venv):
    "$ORACLE_VENV"/bin/python scripts/oracle/tiny_models.py [--gguf-dir DIR] [--out DIR]
--gguf-dir skips the cargo step and reads tiny-<arch>.gguf files already written to DIR;
--archs picks the models (e.g. `--archs qwen3moe`; default: all, dense and MoE).
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
from gguf import GGUFReader
from gguf.quants import dequantize
from llama_cpp import Llama

ARCHS = ["llama", "qwen2", "qwen3", "gemma2", "gemma3", "olmo2", "granite", "phi3"]
# Mixture-of-experts tiny models (model::testing::TINY_MOE_ARCHS, written from their own seeds,
# model::testing::tiny_seed, chosen away from routing near-ties); read by llama_family.rs.
# granitemoe-shared is a granitemoe file with a shared expert (Granite MoE Shared).
MOE_ARCHS = ["qwen3moe", "qwen2moe", "granitemoe", "granitemoe-shared", "gpt-oss", "olmoe"]
N_PROMPT = 24
N_CONTINUATION = 16
N_CTX = 256
TEXT = "Hello world, the tiny model: naïve 🙂!"
# Logits are written with this many decimals: far below any tolerance worth testing.
DECIMALS = 5
# Below this gap between the top two logits, a greedy step is a coin toss between
# implementations that differ by rounding; the generator's seed is chosen to avoid it.
MIN_MARGIN = 0.05
# Largest accepted |llama.cpp - float64 reference|; llama.cpp's f16 KV cache alone costs ~1.6e-2.
REFERENCE_TOL = 0.05
# The MoE models' Q8_0 experts (gpt-oss: its last layer's MXFP4 experts) round activations to 8
# bits in the matmul (Tessera measured 4.8e-2 against the float64 reference, 1.0e-2 without
# Q8_0; llama.cpp 4.5e-2 on gpt-oss), so their bound is wider.
MOE_REFERENCE_TOL = 0.1


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


def read_gguf(path):
    """Scalar metadata (tokenizer arrays skipped) and tensors as float64, numpy row-major."""
    reader = GGUFReader(path)
    md = {f.name: f.contents() for f in reader.fields.values()
          if not f.name.startswith("tokenizer.")}
    # Quantized tensors (the MoE models' Q8_0 experts) come as raw blocks: dequantized here.
    tensors = {t.name: np.array(dequantize(t.data, t.tensor_type), dtype=np.float64)
               for t in reader.tensors}
    return md, tensors


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def yarn_freqs(freqs, base, factor, original, beta_fast=32.0, beta_slow=1.0):
    """YaRN as llama.cpp applies it (ggml_rope_ext with ext_factor 1): pair i keeps its
    frequency below corr(beta_fast), is divided by `factor` above corr(beta_slow), and mixed
    linearly in between; corr(b) = dims * ln(original / (2 pi b)) / (2 ln base)."""
    dims = 2 * len(freqs)
    corr = lambda b: dims * np.log(original / (b * 2 * np.pi)) / (2 * np.log(base))
    low, high = max(0.0, np.floor(corr(beta_fast))), min(dims - 1.0, np.ceil(corr(beta_slow)))
    ramp = 1 - np.clip((np.arange(len(freqs)) - low) / max(0.001, high - low), 0, 1)
    return freqs / factor * (1 - ramp) + freqs * ramp


def rope(x, pos, base, neox, factors=None, yarn=None):
    """x: [tokens, heads, head_dim]. NeoX rotates (i, i + d/2), the original Llama (2i, 2i+1);
    `factors` (LongRoPE) divide the frequencies; `yarn` (factor, original context) ramps them
    and scales cos and sin by 1 + 0.1 ln(factor)."""
    d = x.shape[-1]
    freqs = base ** (-np.arange(0, d, 2) / d)
    if factors is not None:
        freqs = freqs / factors
    mscale = 1.0
    if yarn is not None:
        freqs = yarn_freqs(freqs, base, *yarn)
        mscale = 1 + 0.1 * np.log(yarn[0])
    angles = pos[:, None] * freqs[None, :]
    cos, sin = mscale * np.cos(angles)[:, None, :], mscale * np.sin(angles)[:, None, :]
    first, second = (np.s_[..., : d // 2], np.s_[..., d // 2:]) if neox else \
        (np.s_[..., 0::2], np.s_[..., 1::2])
    a, b = x[first], x[second]
    y = np.empty_like(x)
    y[first], y[second] = a * cos - b * sin, a * sin + b * cos
    return y


def attention(q, k, v, window, scale, softcap=None, sinks=None):
    """Causal GQA attention; `window` limits a query at p to keys p-window+1..p; scores are
    scaled by `scale`, then (Gemma 2) soft-capped: softcap * tanh(s / softcap); `sinks`
    (gpt-oss), one logit per head, join each softmax's denominator as a key with no value."""
    n, n_heads, head_dim = q.shape
    group = n_heads // k.shape[1]
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    masked = (j > i) | ((i - j) >= window if window else False)
    out = np.empty_like(q)
    for h in range(n_heads):
        scores = q[:, h] @ k[:, h // group].T * scale
        if softcap:
            scores = softcap * np.tanh(scores / softcap)
        scores[masked] = -np.inf
        m = scores.max(1, keepdims=True)
        if sinks is not None:
            m = np.maximum(m, sinks[h])
        p = np.exp(scores - m)
        total = p.sum(1, keepdims=True) + (np.exp(sinks[h] - m) if sinks is not None else 0)
        out[:, h] = (p / total) @ v[:, h // group]
    return out.reshape(n, -1)


def moe_ffn(h, w, n_used, norm_topk):
    """Mixture of experts, token by token: softmax over all router logits, the top n_used
    (largest first), optionally renormalised to sum to one, SwiGLU experts, weighted sum; plus,
    if the layer has one, the shared expert, times the sigmoid of its gate if it has one
    (qwen2moe; Granite MoE Shared adds it as it is).
    Expert tensors read as [expert, out, in]."""
    logits = h @ w("ffn_gate_inp.weight").T
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    gate, up, down = w("ffn_gate_exps.weight"), w("ffn_up_exps.weight"), w("ffn_down_exps.weight")
    out = np.zeros_like(h)
    for i in range(len(h)):
        picked = np.argsort(-p[i], kind="stable")[:n_used]
        weights = p[i, picked] / (p[i, picked].sum() if norm_topk else 1.0)
        for e, wt in zip(picked, weights):
            g, u = gate[e] @ h[i], up[e] @ h[i]
            out[i] += wt * (down[e] @ (g / (1 + np.exp(-g)) * u))
    if w("ffn_gate_shexp.weight") is not None:
        g, u = h @ w("ffn_gate_shexp.weight").T, h @ w("ffn_up_shexp.weight").T
        shared = (g / (1 + np.exp(-g)) * u) @ w("ffn_down_shexp.weight").T
        if w("ffn_gate_inp_shexp.weight") is not None:
            gate = 1 / (1 + np.exp(-(h @ w("ffn_gate_inp_shexp.weight").reshape(-1))))
            shared = gate[:, None] * shared
        out += shared
    return out


def gpt_oss_moe(h, w, n_used, limit=7.0, alpha=1.702):
    """gpt-oss's experts, token by token: router logits plus their bias, the n_used largest
    (largest first) weighted by their own softmax; each expert's gate and up plus their
    biases, SwiGLU-OAI (gate clamped above at `limit`, up to +-limit, gate * sigmoid(alpha *
    gate) * (up + 1)), down plus its bias. Expert tensors read as [expert, out, in], biases as
    [expert, out]."""
    logits = h @ w("ffn_gate_inp.weight").T + w("ffn_gate_inp.bias")
    gate, up, down = w("ffn_gate_exps.weight"), w("ffn_up_exps.weight"), w("ffn_down_exps.weight")
    gb, ub, db = w("ffn_gate_exps.bias"), w("ffn_up_exps.bias"), w("ffn_down_exps.bias")
    out = np.zeros_like(h)
    for i in range(len(h)):
        picked = np.argsort(-logits[i], kind="stable")[:n_used]
        e = np.exp(logits[i, picked] - logits[i, picked].max())
        for ex, wt in zip(picked, e / e.sum()):
            g = np.minimum(gate[ex] @ h[i] + gb[ex], limit)
            u = np.clip(up[ex] @ h[i] + ub[ex], -limit, limit)
            out[i] += wt * (down[ex] @ (g / (1 + np.exp(-alpha * g)) * (u + 1)) + db[ex])
    return out


def reference_logits(path, tokens, adjust=None):
    """Float64 forward pass of a tiny model, written from the architectures' definitions.
    `adjust(tensors)`, if given, changes the weights first (tiny_lora.py merges an adapter)."""
    md, t = read_gguf(path)
    if adjust is not None:
        adjust(t)
    arch = md["general.architecture"]
    hp = lambda key, default=None: md.get(f"{arch}.{key}", default)
    n_layers, d_model = hp("block_count"), hp("embedding_length")
    n_heads, n_kv = hp("attention.head_count"), hp("attention.head_count_kv")
    head_dim, eps = hp("attention.key_length", d_model // n_heads), hp("attention.layer_norm_rms_epsilon")
    gemma = arch in ("gemma2", "gemma3")
    x = t["token_embd.weight"][tokens] * (np.sqrt(d_model) if gemma else 1.0)
    # Gemma 2: queries scaled by 1/sqrt(d_model / n_heads) in the 46-layer 27B, else as usual.
    scale = 1 / np.sqrt(d_model / n_heads if arch == "gemma2" and n_layers == 46 else head_dim)
    attn_cap = hp("attn_logit_softcapping", 50.0) if arch == "gemma2" else None
    # Granite: embeddings, attention scores and what joins the residual multiplied, logits divided.
    granite = arch in ("granite", "granitemoe")
    if granite:
        x = x * hp("embedding_scale")
        scale = hp("attention.scale")
    residual = hp("residual_scale") if granite else 1.0
    interleaved = arch in ("llama", "granite", "granitemoe")
    # Phi 3: LongRoPE's long factors past the original context (llama.cpp's choice at n_ctx 256),
    # and its attention factor on RoPE's cos and sin.
    factors, rope_gain, yarn = None, 1.0, None
    # gpt-oss: YaRN on every layer, queries scaled by 1/sqrt(rope dimensions) (= head_dim here).
    if hp("rope.scaling.type") == "yarn":
        yarn = (hp("rope.scaling.factor"), hp("rope.scaling.original_context_length"))
    if arch == "phi3":
        long = N_CTX > hp("rope.scaling.original_context_length")
        factors = t["rope_factors_long.weight" if long else "rope_factors_short.weight"]
        rope_gain = hp("rope.scaling.attn_factor", 1.0)
    pos = np.arange(len(tokens), dtype=np.float64)
    for layer in range(n_layers):
        w = lambda name: t.get(f"blk.{layer}.{name}")
        # OLMo 2 has no pre-norms (and post-norms, as Gemma).
        pre = (lambda y, name: rms_norm(y, w(name), eps)) if w("attn_norm.weight") is not None else (lambda y, _: y)
        post = gemma or arch == "olmo2"
        h = pre(x, "attn_norm.weight")
        if w("attn_qkv.weight") is not None:
            qkv = h @ w("attn_qkv.weight").T
            q, k, v = np.split(qkv, [n_heads * head_dim, (n_heads + n_kv) * head_dim], axis=1)
        else:
            q, k, v = (h @ w(f"attn_{c}.weight").T + (w(f"attn_{c}.bias") if w(f"attn_{c}.bias") is not None else 0)
                       for c in "qkv")
        whole_qk_norm = arch in ("olmo2", "olmoe")
        if whole_qk_norm:
            # One norm over all of Q and all of K, before the split into heads.
            q, k = rms_norm(q, w("attn_q_norm.weight"), eps), rms_norm(k, w("attn_k_norm.weight"), eps)
        q, k, v = q.reshape(len(tokens), n_heads, head_dim), k.reshape(len(tokens), n_kv, head_dim), \
            v.reshape(len(tokens), n_kv, head_dim)
        if w("attn_q_norm.weight") is not None and not whole_qk_norm:
            q, k = rms_norm(q, w("attn_q_norm.weight"), eps), rms_norm(k, w("attn_k_norm.weight"), eps)
        # Gemma 3: five sliding-window layers with RoPE base 10k to each global one; Gemma 2
        # and gpt-oss: every even layer slides, with the global base.
        if arch == "gemma3":
            local = (layer + 1) % 6 != 0
            base = 10_000.0 if local else hp("rope.freq_base")
        else:
            local = arch in ("gemma2", "gpt-oss") and layer % 2 == 0
            base = hp("rope.freq_base")
        q = rope(q, pos, base, not interleaved, factors, yarn) * rope_gain
        k = rope(k, pos, base, not interleaved, factors, yarn) * rope_gain
        window = hp("attention.sliding_window") if local else None
        a = attention(q, k, v, window, scale, attn_cap, w("attn_sinks.weight")) @ w("attn_output.weight").T
        if w("attn_output.bias") is not None:
            a = a + w("attn_output.bias")
        x = x + residual * (rms_norm(a, w("post_attention_norm.weight"), eps) if post else a)
        if arch == "gpt-oss":
            # llama.cpp stores gpt-oss's norm before the FFN as post_attention_norm.
            h = rms_norm(x, w("post_attention_norm.weight"), eps)
            x = x + gpt_oss_moe(h, w, hp("expert_used_count"))
            continue
        h = pre(x, "ffn_norm.weight")
        if w("ffn_gate_inp.weight") is not None:
            x = x + residual * moe_ffn(h, w, hp("expert_used_count"), norm_topk=arch in ("qwen3moe", "granitemoe"))
            continue
        if w("ffn_gate.weight") is None:
            # Phi 3: one projection, the gate's rows then the up's.
            gate, up = np.split(h @ w("ffn_up.weight").T, 2, axis=1)
        else:
            gate, up = h @ w("ffn_gate.weight").T, h @ w("ffn_up.weight").T
        if gemma:
            act = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3)))
        else:
            act = gate / (1 + np.exp(-gate))
        f = (act * up) @ w("ffn_down.weight").T
        x = x + residual * (rms_norm(f, w("post_ffw_norm.weight"), eps) if post else f)
    x = rms_norm(x, t["output_norm.weight"], eps)
    logits = x @ t.get("output.weight", t["token_embd.weight"]).T
    if arch == "gemma2":
        cap = hp("final_logit_softcapping", 30.0)
        logits = cap * np.tanh(logits / cap)
    if granite:
        logits = logits / hp("logit_scale")
    return logits


def check_reference(path, golden):
    ref = reference_logits(path, golden["prompt"] + golden["continuation"])
    ours = np.array(golden["prompt_logits"] + golden["continuation_logits"])
    diff = np.abs(ref - ours)
    worst = np.unravel_index(diff.argmax(), diff.shape)
    return float(diff.max()), worst


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
    ap.add_argument("--archs", nargs="+", default=ARCHS + MOE_ARCHS, choices=ARCHS + MOE_ARCHS,
                    help="which tiny models to run (default: all)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        gguf_dir = args.gguf_dir or tmp
        if not args.gguf_dir:
            write_models(gguf_dir)
        os.makedirs(args.out, exist_ok=True)
        for arch in args.archs:
            path = os.path.join(gguf_dir, f"tiny-{arch}.gguf")
            golden = run_arch(path)
            ref_diff, (row_i, tok) = check_reference(path, golden)
            print(f"{arch}: max |llama.cpp - float64 reference| = {ref_diff:.2e} "
                  f"(row {row_i}, token {tok})")
            if ref_diff > (MOE_REFERENCE_TOL if arch in MOE_ARCHS else REFERENCE_TOL):
                sys.exit(f"{arch}: llama.cpp disagrees with the float64 reference; "
                         "it reads the tiny file differently from what the generator means")
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
