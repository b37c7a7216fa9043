"""Tokenizer goldens for Gemma 3 270M, computed with llama.cpp (through llama-cpp-python).

For each text this records the token ids llama.cpp produces with add_bos=True and
  - special=False (control-token strings are plain text), and
  - special=True (control-token strings become their tokens),
plus llama.cpp's detokenization of each id list without the BOS (special=False, so control
tokens are hidden). Only the vocabulary is loaded (vocab_only=True); no weights are read.

The texts cover English prose, code (indentation, tabs, CRLF), runs of spaces and newlines,
leading/trailing spaces, numbers, CJK, Arabic, Hebrew, Devanagari, Cyrillic, emoji (including
ZWJ sequences), accented Latin, control characters, special-token strings and one long text
made of all of them, so the golden test also exercises a multi-thousand-token input.

Usage: python tokenizer_goldens.py [--model PATH] [--out PATH]
Run with the oracle venv: /work/tmp/oracle/bin/python scripts/oracle/tokenizer_goldens.py
"""

import argparse
import hashlib
import json
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = "/work/tmp/model/gemma-3-270m-q4_k_m.gguf"
DEFAULT_OUT = REPO / "crates/tokenizer/tests/goldens/gemma3_270m.json"

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


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    texts = list(TEXTS)
    texts.append(("long_mixed", "\n\n".join(t for _, t in TEXTS) * 3))

    cases = []
    for name, text in texts:
        case = {"name": name, "text": text}
        for key, special in (("ids", False), ("ids_special", True)):
            ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            case[key] = ids
            body = ids[1:] if ids and ids[0] == llm.token_bos() else ids
            detok = llm.detokenize(body, special=False)
            case["detok" if key == "ids" else "detok_special"] = detok.decode("utf-8", errors="replace")
        cases.append(case)

    out = {
        "generator": "scripts/oracle/tokenizer_goldens.py",
        "llama_cpp_python": llama_cpp.__version__,
        "model": Path(args.model).name,
        "model_sha256": sha256(args.model),
        "n_vocab": llm.n_vocab(),
        "bos": llm.token_bos(),
        "eos": llm.token_eos(),
        "add_bos": True,
        "cases": cases,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    # One case per line: readable diffs without one line per id.
    header = {k: v for k, v in out.items() if k != "cases"}
    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        for k, v in header.items():
            f.write(f" {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n")
        f.write(' "cases": [\n')
        lines = [" " + json.dumps(c, ensure_ascii=False) for c in cases]
        f.write(",\n".join(lines))
        f.write("\n ]\n}\n")
    json.load(open(args.out, encoding="utf-8"))  # the hand-assembled file must parse
    n_ids = sum(len(c["ids"]) for c in cases)
    print(f"wrote {len(cases)} cases ({n_ids} ids) to {args.out}")


if __name__ == "__main__":
    main()
