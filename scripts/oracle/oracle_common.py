"""Helpers shared by the oracle scripts: the models they cover, file hashing and a diff-friendly
JSON layout."""

import hashlib
import json
import os
from pathlib import Path

# A value whose compact form fits in this many characters is written on one line.
INLINE_WIDTH = 250


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _is_flat(value) -> bool:
    """A list of scalars, or of short lists of scalars (e.g. [id, logprob] pairs)."""
    if not isinstance(value, list):
        return False
    return all(
        not isinstance(x, (list, dict))
        or (isinstance(x, list) and all(not isinstance(y, (list, dict)) for y in x))
        for x in value
    )


def _format(value, indent: int) -> str:
    text = _compact(value)
    if len(text) <= INLINE_WIDTH or _is_flat(value) or not isinstance(value, (list, dict)):
        return text
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{_compact(k)}: {_format(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + _format(v, indent + 1) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write_json(path, value) -> None:
    """Pretty JSON that keeps short values and flat lists (token ids, top-k pairs) on one line."""
    Path(path).write_text(_format(value, 0) + "\n", encoding="utf-8")


# The real models the goldens cover, by the name every oracle script takes as `--model-name`.
# `file` is the canonical file name (as `tessera fetch-model` writes it); `stem` names the
# golden files: tests/goldens/<stem>_greedy.json, <stem>_perplexity.json,
# <stem>_chat_template.json and crates/tokenizer/tests/goldens/<tokenizer stem>.json.
MODELS = {
    "gemma3": {
        "file": "gemma-3-270m-q4_k_m.gguf",
        "title": "Gemma 3 270M (base, Q4_K_M)",
        "stem": "gemma3",
        "tokenizer_stem": "gemma3_270m",
    },
    "qwen2.5-coder-0.5b": {
        "file": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        "title": "Qwen2.5-Coder-0.5B-Instruct (qwen2, Q4_K_M)",
        "stem": "qwen2.5-coder-0.5b",
        "tokenizer_stem": "qwen2.5-coder-0.5b",
    },
    "qwen2.5-coder-1.5b": {
        "file": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "title": "Qwen2.5-Coder-1.5B-Instruct (qwen2, Q4_K_M)",
        "stem": "qwen2.5-coder-1.5b",
        "tokenizer_stem": "qwen2.5-coder-1.5b",
    },
    "smollm2-135m": {
        "file": "smollm2-135m-instruct-q4_1.gguf",
        "title": "SmolLM2-135M-Instruct (llama, Q4_1)",
        "stem": "smollm2-135m",
        "tokenizer_stem": "smollm2-135m",
    },
    "nomic-embed-text-v1.5": {
        "file": "nomic-embed-text-v1.5.f16.gguf",
        "title": "nomic-embed-text v1.5 (nomic-bert, F16, WordPiece)",
        "stem": "nomic-embed-text-v1.5",
        "tokenizer_stem": "nomic-embed-text-v1.5",
    },
    # Vocabulary only (scripts/fetch_o200k_vocab.py writes it): tokenizer goldens alone.
    "gpt-oss-o200k": {
        "file": "gpt-oss-o200k-vocab.gguf",
        "title": "gpt-oss's o200k_harmony vocabulary (gpt-4o pre-tokenizer, no weights)",
        "stem": "gpt-oss-o200k",
        "tokenizer_stem": "gpt-oss-o200k",
    },
}
DEFAULT_MODEL_NAME = "gemma3"


def models_dir() -> Path:
    """$TESSERA_MODELS_DIR, else <repo>/models (where `tessera fetch-model` puts them)."""
    env = os.environ.get("TESSERA_MODELS_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "models"


def model_path(name: str) -> str:
    return str(models_dir() / MODELS[name]["file"])


def add_model_args(ap) -> None:
    """`--model-name` (which entry of MODELS) and `--model` (a path overriding its location)."""
    ap.add_argument("--model-name", default=DEFAULT_MODEL_NAME, choices=sorted(MODELS))
    ap.add_argument("--model", default=None, help="GGUF path (default: $TESSERA_MODELS_DIR/<file>)")
    ap.add_argument(
        "--no-extra-bufts",
        action="store_true",
        help="load weights without llama.cpp's extra buffer types (no repacking, no AMX)",
    )


def disable_extra_buffer_types() -> None:
    """Make every Llama() load its weights with `use_extra_bufts = false`.

    A llama-cpp-python 0.3.36 build made with GGML_NATIVE on a CPU with AMX (system_info shows
    AMX_INT8) crashes in llama_decode with its extra buffer types on; without them the weights
    stay in the file's layout and the plain ggml dot products run. Llama() has no argument for
    it, so the default model parameters are wrapped."""
    import llama_cpp
    import llama_cpp.llama as llama_module

    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    llama_cpp.llama_model_default_params = params
    llama_module.llama_cpp.llama_model_default_params = params
