"""Tokenizer goldens computed with llama.cpp (through llama-cpp-python).

1. A real model's vocabulary: Gemma 3 270M (SentencePiece, the default) -> gemma3_270m.json, or
   with --model-name another entry of oracle_common.MODELS (Qwen2.5-Coder's and SmolLM2's
   byte-level BPE, gpt-oss's o200k vocabulary as scripts/fetch_o200k_vocab.py writes it)
   -> <tokenizer stem>.json. The other models also get EXTRA_TEXTS (their own chat-format
   strings; gpt-oss also GPT_OSS_TEXTS); Gemma's texts are the original list.
2. Only with the default model: a synthetic byte-level BPE vocabulary (-> bpe_synthetic.json):
   merges are learned here from the golden texts, written into a tiny GGUF once per
   pre-tokenizer (default, gpt-2, llama-bpe, qwen2) and tokenized by llama.cpp. The JSON holds
   the vocabulary itself, so the Rust test needs no GGUF file for this part.

For each text this records the token ids llama.cpp produces with add_bos=True (BOS only when the
model's add_bos_token is true; `add_bos` in the header says which) and
  - special=False (control-token strings are plain text), and
  - special=True (control-token strings become their tokens),
plus llama.cpp's detokenization of each id list without the BOS (special=False, so control
tokens are hidden). Only the vocabulary is loaded (vocab_only=True); no weights are read.

The texts cover English prose, code (indentation, tabs, CRLF), runs of spaces and newlines,
leading/trailing spaces, numbers, CJK, Arabic, Hebrew, Devanagari, Cyrillic, emoji (including
ZWJ sequences), accented Latin, control characters, special-token strings and one long text
made of all of them, so the golden test also exercises a multi-thousand-token input, plus
150 seeded random mixtures of those character classes and special-token strings.

Usage: python tokenizer_goldens.py [--model-name NAME] [--model PATH] [--out PATH] [--bpe-out PATH]
Run with the oracle venv (scripts/oracle/README.md): "$ORACLE_VENV"/bin/python scripts/oracle/tokenizer_goldens.py
"""

import argparse
import collections
import ctypes
import hashlib
import json
import random
import re
import tempfile
from pathlib import Path

import gguf
import numpy as np

import llama_cpp
from llama_cpp import Llama
from oracle_common import MODELS, add_model_args, model_path

REPO = Path(__file__).resolve().parents[2]
GOLDEN_DIR = REPO / "crates/tokenizer/tests/goldens"
DEFAULT_BPE_OUT = GOLDEN_DIR / "bpe_synthetic.json"
BPE_PRES = ["default", "gpt-2", "llama-bpe", "qwen2"]
N_MERGES = 1500

TEXTS = [
    ("hello", "Hello, world!"),
    ("prose", "It is a truth universally acknowledged, that a single man in possession of a good "
              "fortune, must be in want of a wife. However little known the feelings or views of "
              "such a man may be on his first entering a neighbourhood, this truth is so well fixed."),
    ("python", "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\n"
               "print([fib(i) for i in range(10)])\n"),
    ("c_tabs", "int main(void) {\n\tfor (int i = 0; i < 10; i++) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n"
               "\treturn 0;\n}\r\n"),
    ("spaces", "a  b   c    d     e                                          f"),
    ("leading_spaces", "   leading spaces"),
    ("trailing_spaces", "trailing spaces   "),
    ("one_leading_space", " single leading space"),
    ("newlines", "\n\nnewlines\n\n\nmany\n"),
    ("numbers", "3.14159 2,718 1234567890 0x1F -42 1e-9 $1,000,000.00 10% 2024-01-31"),
    ("chinese", "你好，世界！今天天气很好。我们去公园散步吧。"),
    ("japanese", "こんにちは、世界。カタカナとひらがなと漢字。"),
    ("korean", "안녕하세요 세계, 반갑습니다."),
    ("arabic", "مرحبا بالعالم. كيف حالك اليوم؟"),
    ("hebrew", "שלום עולם"),
    ("hindi", "नमस्ते दुनिया, आप कैसे हैं?"),
    ("russian", "Привет, мир! Как дела? Съешь же ещё этих мягких французских булок."),
    ("emoji", "I love 🦀 and 🚀! Family: 👨‍👩‍👧‍👦 Flag: 🏳️‍🌈 Skin: 👍🏽 😀😃😄"),
    ("accents", "Ça va? Größe, naïve café, señor, øre, Łódź, Ångström, crème brûlée."),
    ("empty", ""),
    ("chat_template", "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"),
    ("bos_string", "<bos>text that contains the bos string<eos>"),
    ("html", "<table><tr><td>cell</td></tr></table><div class=\"x\">hi</div>"),
    ("eos_like", "</s> inside text and <|endoftext|> too"),
    ("math_unicode", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ∮ E⋅da = Q, n → ∞, ∑ f(i) = ∏ g(i), x² + y³ ≤ ½"),
    ("control_chars", "bell\u0007 nul-ish\u0001 del\u007f private\ue000 bom\ufeff zwsp\u200b end"),
    ("url_email", "https://example.com/path?q=1&r=2#frag user.name+tag@example.org"),
    ("json", "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}, \"s\": \"\\u00e9\"}"),
    ("mixed_whitespace", "\t\t tab\r\nCRLF\r\n \u00a0nbsp\u3000ideographic\u2003em \u000bvt\u000cff"),
    ("long_words", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("repeats", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!!!!!!!!!!??????........----____===="),
    ("unused_tokens", "<unused0><start_of_image><end_of_image><mask>[multimodal]<pad>"),
    ("markdown", "# Title\n\n- item 1\n- item 2\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n"),
]


# Texts added for the models other than Gemma: their chat-format and end-of-text strings.
EXTRA_TEXTS = [
    ("chatml", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
               "<|im_start|>assistant\n"),
    ("endoftext", "first document<|endoftext|>second document<|endoftext|>"),
    ("fim", "<|fim_prefix|>def add(a, b):\n<|fim_suffix|>\n    return c<|fim_middle|>"),
    ("code_indent", "class A:\n    def f(self):\n        if x:\n            return [i ** 2 for i in range(3)]\n"),
]


# Texts added for gpt-oss's o200k vocabulary: harmony messages (whose markers llama.cpp parses
# even without special parsing) and what the gpt-4o pattern splits differently from the others
# (case changes inside words, contractions of either case kept on their word, combining marks,
# slashes after symbols).
GPT_OSS_TEXTS = [
    ("harmony", "<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>What is 2+2?"
                "<|end|><|start|>assistant<|channel|>analysis<|message|>Simple sum.<|end|>"
                "<|start|>assistant<|channel|>final<|message|>2+2 = 4.<|return|>"),
    ("harmony_tool", "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                     "<|message|>{\"city\": \"Paris\"}<|call|>"),
    ("o200k_specials", "<|startoftext|>a<|endoftext|>b<|endofprompt|>c<|reserved_200000|>d<|reserved_201087|>"),
    ("case_changes", "CamelCaseXMLParser getHTTPResponseCode iPhone McDONALD'S ŁódźKRAKÓW 日本語ABCです éA"),
    ("contractions", "I'M don't we'LL it's THEY'RE you've I'd 'tis O'Neil x's' rock'n'roll"),
    ("digit_groups", "1234567 12 123456 1,2345.678 ٣٤٥٦ Ⅻ½² 3.14159e-10 0x7fffffff"),
    ("whitespace_runs", "a  \n\n  b x.\n\ny end \u2003\u2003z \r\n\r\n w\t\t\tq    "),
    ("combining_marks", "e\u0301cole Ame\u0301lie na\u0308ive \u0915\u093f\u0924\u093e\u092c \u0e20\u0e32\u0e29\u0e32"),
    ("slashes", "src/main.rs //comment a-/\n/x ../../etc/passwd http://a.b/c?d=e </div>\n"),
]

# Texts added for WordPiece (BERT) vocabularies: what its normalisation and splitting touch.
BERT_TEXTS = [
    ("bert_accents", "Résumé naïve Ångström façade jalapeño Zürich ÉCOLE Ørsted İstanbul straße"),
    ("bert_punct", "Hello!!! (world) [test] {x} a-b_c d/e 'quoted' \"dq\" ... — – “smart” ‘q’ «g» ¿qué? ¡sí!"),
    ("bert_symbols", "a+b=c <tag> x^2 `code` a|b ~tilde $5 #hash @at &amp; 100% *star* \\back"),
    ("bert_numbers", "In 2024, 3.5% of 1,000,000 = 35,000; pi≈3.14159; tel +1-555-0100; 1st 2nd 3rd"),
    ("bert_cjk", "我爱自然语言处理。東京は日本の首都です。한국어 텍스트도 있습니다。"),
    ("bert_long_word", "a" * 300),
    ("bert_long_words", "supercalifragilisticexpialidocious" * 5 + " " + "x" * 1000),
    ("bert_unknown", "🦀 ⚙ ☃ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u0378 \U000e0001"),
    ("bert_specials", "[CLS] text [SEP] with [MASK] and [UNK] [PAD] [unused5]"),
    ("bert_case", "HeLLo WoRLD ΣΊΣΥΦΟΣ ДОБРЫЙ ДЕНЬ ǅungla"),
    ("bert_search_prefix", "search_query: What is TSNE?"),
    ("bert_whitespace", "  tabs\tand\nnewlines\r\n\u00a0nbsp\u2003em\u3000ideo  "),
]

# Building blocks of the seeded random texts: they mix classes that are tokenized differently
# (runs of spaces, newlines, CJK, combining marks, emoji, special-token strings, contractions).
FUZZ_POOLS = [
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    list("0123456789"),
    list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    [" ", "  ", "   ", "    ", "\n", "\n\n", "\t", "\r\n", "\r", " \n ", "\u00a0", "\u2003", "\u3000",
     "\u000b", "\u0085"],
    list("你好世界天气漢字カタカナひらがな한국어"),
    ["😀", "🦀", "👨\u200d👩\u200d👧", "🏳️\u200d🌈", "👍🏽"],
    ["\u0301", "e\u0301", "é", "ß", "Ł", "ø", "Ж", "ы", "ا", "ل", "ש", "न", "\u093f", "٣", "Ⅻ", "½", "²"],
    ["<start_of_turn>", "<end_of_turn>", "<bos>", "<eos>", "</s>", "<td>", "<unused5>", "<0x41>", "\u2581",
     "<|end|>", "<|im_end|>", "<mask>", "[multimodal]", "<table>"],
    ["'s", "'S", "'ll", "'LL", "'re", "'ve", "'d", "'m", "'t", "n't"],
    ["the", " the", "hello", " world", "Hello", "ing", " and", "tokenizer", "\u200b", "\ufeff", "\ue000",
     "\u0000", "\u0007"],
]
N_FUZZ = 150


def fuzz_texts(seed=20261129, n=N_FUZZ):
    rng = random.Random(seed)
    texts = []
    for i in range(n):
        parts = [rng.choice(rng.choice(FUZZ_POOLS)) for _ in range(rng.randint(1, 30))]
        texts.append((f"fuzz{i}", "".join(parts)))
    return texts


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_cases(path, header, cases):
    """One case per line: readable diffs without one line per id."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in header.items():
            f.write(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write(' "cases": [\n')
        compact = (",", ":")
        f.write(",\n".join(" " + json.dumps(c, ensure_ascii=False, separators=compact) for c in cases))
        f.write("\n ]\n}\n")
    json.load(open(path, encoding="utf-8"))  # the hand-assembled file must parse
    print(f"wrote {len(cases)} cases to {path}")


def all_texts(extra=()):
    texts = list(TEXTS) + list(extra)
    texts.append(("long_mixed", "\n\n".join(t for _, t in TEXTS) * 3))
    return texts + fuzz_texts()


def piece(llm, token, special):
    """llama.cpp's text of one token (llama_token_to_piece, lstrip 0). Called directly: the
    binding's detokenize() uses a 32-byte buffer and drops longer pieces (runs of spaces)."""
    size = 64
    while True:
        buf = (ctypes.c_char * size)()
        n = llama_cpp.llama_token_to_piece(llm._model.vocab, llama_cpp.llama_token(token), buf, size, 0, special)
        if n >= 0:
            return bytes(buf[:n])
        size = -n


def tokenize_cases(llm, texts):
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(llm._model.vocab))
    cases = []
    for name, text in texts:
        case = {"name": name, "text": text}
        for key, special in (("ids", False), ("ids_special", True)):
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            case[key] = ids
            body = ids[1:] if add_bos and ids and ids[0] == llm.token_bos() else ids
            # Token by token: llama-cpp-python's detokenize() drops a leading space after a
            # leading BOS on its own, which is not llama.cpp's behaviour.
            detok = b"".join(piece(llm, t, False) for t in body)
            case["detok" if key == "ids" else "detok_special"] = detok.decode("utf-8", errors="replace")
        cases.append(case)
    return cases


def model_goldens(model, out_path, extra_texts):
    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    header = {
        "generator": "scripts/oracle/tokenizer_goldens.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model": Path(model).name,
        "model_sha256": sha256(model),
        "n_vocab": llm.n_vocab(),
        "bos": llm.token_bos(),
        "eos": llm.token_eos(),
        "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(llm._model.vocab)),
        "sep": llama_cpp.llama_vocab_sep(llm._model.vocab),
        "add_sep": bool(llama_cpp.llama_vocab_get_add_sep(llm._model.vocab)),
    }
    write_cases(out_path, header, tokenize_cases(llm, all_texts(extra_texts)))


def byte_alphabet():
    """GPT-2's byte -> printable char map."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shifted = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + shifted)
            shifted += 1
    return table


def learn_merges(texts, n_merges):
    """Plain BPE training over byte-level words (split loosely; llama.cpp does the real split)."""
    alphabet = byte_alphabet()
    words = collections.Counter()
    for _, text in texts:
        for w in re.findall(r" ?\w+| ?[^\w\s]+|\s+", text):
            words[tuple(alphabet[b] for b in w.encode("utf-8"))] += 1
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, n in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        # Most frequent pair; ties broken by the pair text so the result is reproducible.
        (a, b), _ = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        merges.append((a, b))
        merged = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


def bpe_vocab(texts):
    alphabet = byte_alphabet()
    tokens = [alphabet[b] for b in range(256)]
    types = [1] * 256
    merges = learn_merges(texts, N_MERGES)
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
            types.append(1)
    # Whole words without merges (LLaMA 3 emits such words directly), then special tokens.
    extra = [("Pneumonoultramicroscopicsilicovolcanoconiosis", 1), ("Ġantidisestablishmentarianism", 1),
             ("<|begin_of_text|>", 3), ("<|end|>", 3), ("<|im_end|>", 3), ("<start_of_turn>", 3),
             ("<end_of_turn>", 3), ("<td>", 4), ("</td>", 4)]
    for t, ty in extra:
        if t not in tokens:
            tokens.append(t)
            types.append(ty)
    return tokens, types, [f"{a} {b}" for a, b in merges]


def bpe_goldens(out_path):
    # The long text stays out: four pre-tokenizers would quadruple it.
    texts = [t for t in all_texts() if t[0] != "long_mixed"]
    texts.append(("contractions", "I'M don't we'LL it's THEY'RE you've I'd 'tis"))
    texts.append(("digit_groups", "1234567 12 123456 1,2345.678 ٣٤٥ Ⅻ"))
    texts.append(("whitespace_runs", "a  \n\n  b x.\n\ny end \u2003\u2003z \r\n\r\n w"))
    tokens, types, merges = bpe_vocab(texts)
    bos = tokens.index("<|begin_of_text|>")
    eos = tokens.index("<|end|>")
    header = {
        "generator": "scripts/oracle/tokenizer_goldens.py",
        "llama_cpp_python": llama_cpp.__version__,
        "tokens": tokens,
        "token_types": types,
        "merges": merges,
        "bos": bos,
        "eos": eos,
    }
    # One case per text, with ids keyed by pre-tokenizer name.
    cases = [{"name": name, "text": text, "ids": {}, "ids_special": {}} for name, text in texts]
    with tempfile.TemporaryDirectory() as tmp:
        for pre in BPE_PRES:
            path = str(Path(tmp) / f"bpe-{pre}.gguf")
            w = gguf.GGUFWriter(path, "llama")
            w.add_context_length(128)
            w.add_embedding_length(8)
            w.add_block_count(1)
            w.add_feed_forward_length(8)
            w.add_head_count(1)
            w.add_layer_norm_rms_eps(1e-6)
            w.add_tokenizer_model("gpt2")
            w.add_tokenizer_pre(pre)
            w.add_token_list(tokens)
            w.add_token_types(types)
            w.add_token_merges(merges)
            w.add_bos_token_id(bos)
            w.add_eos_token_id(eos)
            w.add_tensor("token_embd.weight", np.zeros((len(tokens), 8), dtype=np.float32))
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
            llm = Llama(model_path=path, vocab_only=True, verbose=False)
            for case, (_, text) in zip(cases, texts):
                raw = text.encode("utf-8")
                case["ids"][pre] = llm.tokenize(raw, add_bos=True, special=False)
                case["ids_special"][pre] = llm.tokenize(raw, add_bos=True, special=True)
    write_cases(out_path, header, cases)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--out", default=None, help="default: crates/tokenizer/tests/goldens/<stem>.json")
    ap.add_argument("--bpe-out", default=str(DEFAULT_BPE_OUT))
    args = ap.parse_args()
    spec = MODELS[args.model_name]
    model = args.model or model_path(args.model_name)
    out = args.out or str(GOLDEN_DIR / f"{spec['tokenizer_stem']}.json")
    is_gemma = args.model_name == "gemma3"
    is_bert = args.model_name == "nomic-embed-text-v1.5"
    extra = EXTRA_TEXTS + GPT_OSS_TEXTS if args.model_name == "gpt-oss-o200k" else EXTRA_TEXTS
    model_goldens(model, out, [] if is_gemma else BERT_TEXTS if is_bert else extra)
    if is_gemma:
        bpe_goldens(args.bpe_out)


if __name__ == "__main__":
    main()
