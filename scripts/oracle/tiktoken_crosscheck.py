"""Cross-check of the gpt-oss tokenizer golden against OpenAI's tiktoken (o200k_harmony).

The golden (crates/tokenizer/tests/goldens/gpt-oss-o200k.json) is llama.cpp's tokenization with
the vocabulary scripts/fetch_o200k_vocab.py writes. This script checks that vocabulary and
llama.cpp's tokenization against tiktoken, the reference implementation:
  1. the GGUF's token strings, mapped back to bytes, rebuild o200k_base.tiktoken byte for byte
     (its sha256 is the one tiktoken pins), so the file holds exactly OpenAI's ranks;
  2. tiktoken, given that file through its cache (no network), encodes every golden text with
     all special tokens allowed; the ids are compared with the golden's `ids_special`.
Differences are expected only where llama.cpp's gpt-4o split differs from the real pattern:
llama.cpp approximates the case classes and does not count combining marks (\p{M}, e.g. the
U+FE0F of emoji, Devanagari vowel signs) as letters. Each differing text is listed with its
marks; a difference in a text without one fails the script.

Needs: pip install tiktoken gguf (any venv; tiktoken is not needed by the repository's tests).
Usage: python scripts/oracle/tiktoken_crosscheck.py [--model PATH] [--golden PATH]
"""

import argparse
import base64
import hashlib
import json
import os
import sys
import tempfile
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "crates/tokenizer/tests/goldens/gpt-oss-o200k.json"
RANKS_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
RANKS_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
N_RANKS = 199998


def models_dir() -> Path:
    env = os.environ.get("TESSERA_MODELS_DIR")
    return Path(env) if env else REPO / "models"


def byte_decoder() -> dict:
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shifted = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(0x100 + shifted)] = b
            shifted += 1
    return table


def ranks_file_from_gguf(path: Path) -> bytes:
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields["tokenizer.ggml.tokens"]
    tokens = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
    dec = byte_decoder()
    lines = []
    for rank, text in enumerate(tokens[:N_RANKS]):
        raw = bytes(dec[c] for c in text)
        lines.append(base64.b64encode(raw) + b" " + str(rank).encode())
    return b"\n".join(lines) + b"\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(models_dir() / "gpt-oss-o200k-vocab.gguf"))
    ap.add_argument("--golden", default=str(GOLDEN))
    args = ap.parse_args()

    data = ranks_file_from_gguf(Path(args.model))
    got = hashlib.sha256(data).hexdigest()
    print(f"o200k_base.tiktoken rebuilt from the GGUF: sha256 {got} "
          f"({'equal to' if got == RANKS_SHA256 else 'DIFFERENT from'} tiktoken's)")
    if got != RANKS_SHA256:
        return 1

    with tempfile.TemporaryDirectory() as cache:
        # tiktoken looks a file up in its cache under the sha1 of its URL.
        key = hashlib.sha1(RANKS_URL.encode()).hexdigest()
        Path(cache, key).write_bytes(data)
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        import tiktoken

        enc = tiktoken.get_encoding("o200k_harmony")
        golden = json.loads(Path(args.golden).read_text(encoding="utf-8"))
        differ = []
        for case in golden["cases"]:
            ids = enc.encode(case["text"], allowed_special="all")
            if ids != case["ids_special"]:
                differ.append(case)
    n = len(golden["cases"])
    print(f"tiktoken {tiktoken.__version__}: {n - len(differ)} of {n} golden texts give llama.cpp's ids")
    unexplained = 0
    for case in differ:
        marks = sorted({c for c in case["text"] if unicodedata.category(c).startswith("M")})
        why = f"combining marks {[f'U+{ord(c):04X}' for c in marks]}" if marks else "UNEXPLAINED"
        unexplained += not marks
        print(f"  {case['name']} ({why}): {case['text'][:60]!r}")
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
