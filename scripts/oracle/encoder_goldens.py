#!/usr/bin/env python3
"""Encoder goldens computed by llama.cpp (through llama-cpp-python, embedding=True).

1. nomic-embed-text-v1.5 (the real F16 file) -> tests/goldens/nomic-embed-text-v1.5_embeddings.json:
   for each text, llama.cpp's token ids (add_special: [CLS] ... [SEP]; texts are raw, no
   "search_query: " prefix is added by llama.cpp) and its mean-pooled embedding (the file's
   pooling), L2-normalised here in float64 as llama-server does by default. Texts run from one
   word to the full 2,048-token context (excerpts of tests/data/pride_and_prejudice_ch1-7.txt cut
   at word boundaries to a target token count).
2. The tiny encoders of model::testing::encoders (written by
   `cargo run --release -p tessera-model --example write_tiny_models DIR`) ->
   tests/goldens/tiny/encoders.json: the bert reranker's rank scores for (query, document) pairs
   fed as [CLS] query [SEP] document [SEP] (token types: llama.cpp adds type 0 to every token),
   and the tiny nomic-bert's mean-pooled embeddings, plus llama.cpp's ids of a few texts on the
   tiny WordPiece vocabulary; and the tiny Qwen3 embedder's (a causal decoder read as an
   embedding model) last-token and mean-pooled embeddings.

Each input is decoded alone (one sequence per llama_decode). Floats are rounded to 7
significant digits.

Usage (repository root, oracle venv; see README.md):
    "$ORACLE_VENV"/bin/python scripts/oracle/encoder_goldens.py [--skip-nomic] [--skip-tiny]
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

from oracle_common import disable_extra_buffer_types, model_path, sha256, write_json

REPO = Path(__file__).resolve().parents[2]
AUSTEN = REPO / "tests/data/pride_and_prejudice_ch1-7.txt"
NOMIC_OUT = REPO / "tests/goldens/nomic-embed-text-v1.5_embeddings.json"
TINY_OUT = REPO / "tests/goldens/tiny/encoders.json"

SHORT_TEXTS = [
    ("one_word", "hello"),
    ("one_letter", "a"),
    ("empty", ""),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("query_prefix", "search_query: What is TSNE?"),
    ("document_prefix", "search_document: TSNE is a dimensionality reduction algorithm created by Laurens van Der Maaten"),
    ("question", "What is the capital of France?"),
    ("answer", "Paris is the capital and most populous city of France."),
    ("accents", "Résumé naïve Ångström façade jalapeño Zürich ÉCOLE"),
    ("punctuation", "Hello!!! (world) [test] {x} a-b_c d/e 'quoted' ... — “smart” ¿qué?"),
    ("numbers", "In 2024, 3.5% of 1,000,000 = 35,000; pi≈3.14159"),
    ("cjk", "我爱自然语言处理。東京は日本の首都です。"),
    ("korean", "한국어 텍스트 임베딩"),
    ("code", "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"),
    ("emoji", "I love 🦀 and 🚀!"),
    ("upper", "THIS IS ALL UPPER CASE TEXT"),
    ("long_word", "supercalifragilisticexpialidocious" * 3),
    ("repeat", "the " * 40),
    ("url", "https://example.com/path?q=1&r=2#frag user@example.org"),
    ("mixed_ws", "  tabs\tand\nnewlines\r\n\u00a0nbsp  "),
    ("specials", "[CLS] text [SEP] with [MASK]"),
    ("french", "Le chat est assis sur le tapis."),
    ("german", "Die Katze sitzt auf der Matte."),
    ("spanish", "El gato está sentado en la alfombra."),
    ("russian", "Кошка сидит на коврике."),
    ("math", "∑ f(i) = ∏ g(i), x² + y³ ≤ ½"),
    ("json", '{"key": [1, 2, 3], "nested": {"a": null}}'),
    ("single_punct", "?"),
]

# Austen excerpts: (first word, token count with [CLS] and [SEP]); short ones from different
# places of the text, long ones from its start, the last the full context.
EXCERPTS = [(300 * i, n) for i, n in enumerate(
    [8, 12, 16, 20, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192])]
EXCERPTS += [(0, 256), (0, 512), (0, 1024), (0, 2048)]


def rounded(values):
    return [float(f"{v:.7g}") for v in values]


def normalized(v):
    norm = math.sqrt(sum(float(x) * float(x) for x in v))
    return [float(x) / norm if norm > 0 else 0.0 for x in v]


def run_ids(llm, ids, n_out):
    """llama.cpp's pooled output of one sequence of token ids."""
    llm._batch.reset()
    llm._batch.add_sequence(ids, 0, True)
    llm._ctx.kv_cache_clear()
    llm._ctx.decode(llm._batch)
    llm._batch.reset()
    ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, 0)
    return [float(ptr[i]) for i in range(n_out)]


def tokens(llm, text):
    return llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)


def excerpt_texts(llm):
    """Word runs of the Austen text, each the longest (from its first word) whose token count is
    <= its target, then filled up to exactly the target with " a"."""
    words = AUSTEN.read_text(encoding="utf-8").split(" ")
    out = []
    for start, target in EXCERPTS:
        a, b = 1, min(len(words) - start, 4 * target)
        while a < b:
            mid = (a + b + 1) // 2
            if len(tokens(llm, " ".join(words[start:start + mid]))) <= target:
                a = mid
            else:
                b = mid - 1
        text = " ".join(words[start:start + a])
        # Each " a" is one more token: fill up to exactly the target.
        text += " a" * (target - len(tokens(llm, text)))
        assert len(tokens(llm, text)) == target, (start, target)
        out.append((f"austen_{start}_{target}", text))
    return out


def nomic_goldens(path):
    llm = Llama(model_path=path, embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048,
                n_threads=2, verbose=False)
    n_embd = llm.n_embd()
    cases = []
    for name, text in SHORT_TEXTS + excerpt_texts(llm):
        ids = tokens(llm, text)
        emb = normalized(run_ids(llm, ids, n_embd))
        case = {"name": name, "text": text, "n_tokens": len(ids)}
        if len(ids) <= 64:
            case["ids"] = ids
        case["embedding"] = rounded(emb)
        cases.append(case)
        print(f"{name}: {len(ids)} tokens", file=sys.stderr)
    write_json(NOMIC_OUT, {
        "generator": "scripts/oracle/encoder_goldens.py",
        "llama_cpp_python": llama_cpp.__version__,
        "system_info": llama_cpp.llama_print_system_info().decode(),
        "model": Path(path).name,
        "model_sha256": sha256(path),
        "pooling": "mean",
        "normalize": "l2",
        "n_embd": n_embd,
        "cases": cases,
    })
    print(f"wrote {len(cases)} cases to {NOMIC_OUT}")


PAIRS = [
    ("what is the capital of france?", "paris is the capital of france."),
    ("what is the capital of france?", "berlin is the capital of germany."),
    ("what is the capital of france?", "the cat sat on the mat."),
    ("tiny model", "hello world"),
    ("a dog", "a cat and a dog"),
    ("river city", "xyz 123"),
]
TINY_TEXTS = ["hello world", "What is the capital of France?", "The cat sat on the mat!",
              "Zebra 42 qux", "", "naïve café"]


def tiny_goldens(gguf_dir):
    out = {"generator": "scripts/oracle/encoder_goldens.py",
           "llama_cpp_python": llama_cpp.__version__}
    bert = str(Path(gguf_dir) / "tiny-bert.gguf")
    llm = Llama(model_path=bert, embedding=True, n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2,
                pooling_type=llama_cpp.LLAMA_POOLING_TYPE_RANK, verbose=False)
    cls, sep = llm.token_bos(), llama_cpp.llama_vocab_sep(llm._model.vocab)
    rerank = []
    for q, d in PAIRS:
        q_ids = llm.tokenize(q.encode(), add_bos=False, special=False)
        d_ids = llm.tokenize(d.encode(), add_bos=False, special=False)
        ids = [cls] + q_ids + [sep] + d_ids + [sep]
        rerank.append({"query": q, "document": d, "ids": ids,
                       "score": rounded(run_ids(llm, ids, 1))[0]})
    out["bert"] = {
        "model_sha256": sha256(bert),
        "tokenize": [{"text": t, "ids": tokens(llm, t)} for t in TINY_TEXTS],
        "rerank": rerank,
    }
    nomic = str(Path(gguf_dir) / "tiny-nomic-bert.gguf")
    llm = Llama(model_path=nomic, embedding=True, n_ctx=64, n_batch=64, n_ubatch=64, n_threads=2,
                verbose=False)
    embeds = []
    for t in TINY_TEXTS + [" ".join(["the cat sat on the mat"] * 10)]:
        ids = tokens(llm, t)
        embeds.append({"text": t, "ids": ids,
                       "embedding": rounded(normalized(run_ids(llm, ids, llm.n_embd())))})
    out["nomic-bert"] = {"model_sha256": sha256(nomic), "embeddings": embeds}
    out["qwen3-embed"] = decoder_embedder_goldens(Path(gguf_dir) / "tiny-qwen3-embed.gguf")
    write_json(TINY_OUT, out)
    print(f"wrote {TINY_OUT}")


def decoder_embedder_goldens(path):
    """The tiny Qwen3 embedder (qwen3.pooling_type = last): llama.cpp's last-token embedding of
    each text, tokenized as llama.cpp does (its BOS rule for the tiny vocabulary), each input
    alone; also a mean-pooled context, to check pooling over a causal decoder."""
    out = {"model_sha256": sha256(path)}
    for name, pooling in [("last", None), ("mean", llama_cpp.LLAMA_POOLING_TYPE_MEAN)]:
        kw = {} if pooling is None else {"pooling_type": pooling}
        llm = Llama(model_path=str(path), embedding=True, n_ctx=128, n_batch=128, n_ubatch=128,
                    n_threads=2, verbose=False, **kw)
        embeds = []
        for t in TINY_TEXTS[:4] + TINY_TEXTS[5:] + [" ".join(["the cat sat on the mat"] * 3)]:
            ids = tokens(llm, t)
            embeds.append({"text": t, "ids": ids,
                           "embedding": rounded(normalized(run_ids(llm, ids, llm.n_embd())))})
        out[name] = embeds
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="nomic GGUF (default: $TESSERA_MODELS_DIR/<file>)")
    ap.add_argument("--gguf-dir", default=None, help="tiny-*.gguf already written here")
    ap.add_argument("--skip-nomic", action="store_true")
    ap.add_argument("--skip-tiny", action="store_true")
    ap.add_argument("--no-extra-bufts", action="store_true",
                    help="load weights without llama.cpp's extra buffer types (see README.md)")
    args = ap.parse_args()
    if args.no_extra_bufts:
        disable_extra_buffer_types()
    if not args.skip_tiny:
        if args.gguf_dir:
            tiny_goldens(args.gguf_dir)
        else:
            with tempfile.TemporaryDirectory() as d:
                subprocess.run(["cargo", "run", "--release", "-q", "-p", "tessera-model",
                                "--example", "write_tiny_models", d], check=True, cwd=REPO)
                tiny_goldens(d)
    if not args.skip_nomic:
        nomic_goldens(args.model or model_path("nomic-embed-text-v1.5"))


if __name__ == "__main__":
    main()
