#!/usr/bin/env python3
"""Write gpt-oss's tokenizer (OpenAI's o200k_harmony) as a vocabulary-only GGUF for the tokenizer
tests (crates/tokenizer/tests/goldens.rs, the `gpt_oss` rows).

No gpt-oss file reaches the test machines, so the vocabulary is rebuilt from its source: the
o200k_base ranks (`o200k_base.tiktoken`) as the `tiktoken-rs` crate bundles them. The crate is
downloaded from crates.io (version and sha256 pinned) and the file is checked against its sha256 (that of OpenAI's published file). The GGUF is
written as llama.cpp's convert_hf_to_gguf.py writes gpt-oss's tokenizer:
  - tokenizer.ggml.model `gpt2`, tokenizer.ggml.pre `gpt-4o`;
  - the 199,998 ranks as byte-level BPE token strings (GPT-2's byte alphabet), id = rank;
  - merges rebuilt from the ranks as transformers' TikTokenConverter does: for every token, each
    split into two halves that are both tokens, ordered by the token's rank, then by the halves'
    ranks (a BPE over these merges is tiktoken's byte-pair encoding);
  - o200k_harmony's special tokens at 199998..201087 (<|startoftext|>, <|endoftext|>,
    <|return|>, <|constrain|>, <|channel|>, <|start|>, <|end|>, <|message|>, <|call|>,
    <|endofprompt|> at 200018, <|reserved_N|> for the rest), all control tokens;
  - bos <|startoftext|>, eos <|return|>, padding <|endoftext|> (gpt-oss's tokenizer_config);
  - general.architecture `gpt-oss` with gpt-oss-20b's hyperparameters and no tensors, so
    llama.cpp loads it with vocab_only.
The file is never committed; its sha256 is checked after writing (gguf-py pinned by the caller).

Output: $TESSERA_MODELS_DIR/gpt-oss-o200k-vocab.gguf, else <repo>/models/... Nothing is done
when the file is there with the expected sha256.

Usage: python3 scripts/fetch_o200k_vocab.py   (a Python with gguf==0.19.0)
"""

import base64
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CRATE = "tiktoken-rs"
CRATE_VERSION = "0.12.1"
CRATE_SHA256 = "2aeff724640cfe13037336ddf35befdffd2909cbdb65cf041cc8a4cf8c584cfa"
RANKS_PATH = "assets/o200k_base.tiktoken"
RANKS_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
N_RANKS = 199998
N_VOCAB = 201088
OUT_NAME = "gpt-oss-o200k-vocab.gguf"
GGUF_SHA256 = "3e486dba028750741a64c7f096ba69dafcb68287b81178c09a11bc55728359cf"

# o200k_harmony's named special tokens; every other id from N_RANKS up is <|reserved_ID|>.
SPECIALS = {
    199998: "<|startoftext|>",
    199999: "<|endoftext|>",
    200002: "<|return|>",
    200003: "<|constrain|>",
    200005: "<|channel|>",
    200006: "<|start|>",
    200007: "<|end|>",
    200008: "<|message|>",
    200012: "<|call|>",
    200018: "<|endofprompt|>",
}
BOS, EOS, PAD = 199998, 200002, 199999


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def output_path() -> Path:
    env = os.environ.get("TESSERA_MODELS_DIR")
    return (Path(env) if env else REPO / "models") / OUT_NAME


def fetch_ranks() -> bytes:
    """o200k_base.tiktoken from the pinned crate's archive on crates.io (sha256-checked)."""
    url = f"https://static.crates.io/crates/{CRATE}/{CRATE}-{CRATE_VERSION}.crate"
    with urllib.request.urlopen(url, timeout=180) as response:
        crate = response.read()
    if digest(crate) != CRATE_SHA256:
        raise SystemExit(f"{url}: sha256 {digest(crate)}, expected {CRATE_SHA256}")
    with tarfile.open(fileobj=io.BytesIO(crate), mode="r:gz") as tar:
        member = tar.extractfile(f"{CRATE}-{CRATE_VERSION}/{RANKS_PATH}")
        if member is None:
            raise SystemExit(f"{url} holds no {RANKS_PATH}")
        data = member.read()
    if digest(data) != RANKS_SHA256:
        raise SystemExit(f"{CRATE} {CRATE_VERSION} {RANKS_PATH}: sha256 {digest(data)}, "
                         f"expected {RANKS_SHA256}")
    return data


def parse_ranks(data: bytes) -> dict:
    ranks = {}
    for line in data.decode("ascii").splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    if sorted(ranks.values()) != list(range(N_RANKS)):
        raise SystemExit(f"{RANKS_PATH}: ranks are not 0..{N_RANKS - 1}")
    return ranks


def byte_alphabet() -> dict:
    """GPT-2's byte -> printable char map (bytes_to_unicode)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, shifted = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + shifted)
            shifted += 1
    return table


def tokens_and_merges(ranks: dict):
    alphabet = byte_alphabet()

    def text(b: bytes) -> str:
        return "".join(alphabet[x] for x in b)

    by_rank = sorted(ranks, key=ranks.get)
    tokens = [text(b) for b in by_rank]
    merges = []
    for token in by_rank:
        splits = [(token[:i], token[i:]) for i in range(1, len(token))
                  if token[:i] in ranks and token[i:] in ranks]
        splits.sort(key=lambda s: (ranks[s[0]], ranks[s[1]]))
        merges.extend(f"{text(left)} {text(right)}" for left, right in splits)
    types = [1] * len(tokens)
    for i in range(N_RANKS, N_VOCAB):
        tokens.append(SPECIALS.get(i, f"<|reserved_{i}|>"))
        types.append(3)
    return tokens, types, merges


def write_gguf(path: Path, tokens, types, merges) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "gpt-oss")
    w.add_name("gpt-oss o200k_harmony vocabulary")
    # gpt-oss-20b's hyperparameters: llama.cpp reads them even with vocab_only.
    w.add_block_count(24)
    w.add_context_length(131072)
    w.add_embedding_length(2880)
    w.add_feed_forward_length(2880)
    w.add_head_count(64)
    w.add_head_count_kv(8)
    w.add_key_length(64)
    w.add_value_length(64)
    w.add_rope_freq_base(150000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(32)
    w.add_expert_used_count(4)
    w.add_expert_feed_forward_length(2880)
    w.add_sliding_window(128)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(32.0)
    w.add_rope_scaling_orig_ctx_len(4096)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_pad_token_id(PAD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    out = output_path()
    if out.is_file() and file_digest(out) == GGUF_SHA256:
        print(f"{out} up to date")
        return
    tokens, types, merges = tokens_and_merges(parse_ranks(fetch_ranks()))
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    write_gguf(part, tokens, types, merges)
    got = file_digest(part)
    if got != GGUF_SHA256:
        raise SystemExit(f"{part}: sha256 {got}, expected {GGUF_SHA256} "
                         f"(another gguf-py than 0.19.0?); the file is left for inspection")
    part.replace(out)
    print(f"wrote {out}: {len(tokens)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    sys.exit(main())
