"""Embeddings with the official `openai` client against the real nomic-embed-text-v1.5 (F16),
looked up in TESSERA_MODELS_DIR under its canonical name (or TESSERA_EMBED_MODEL): float and
base64 replies equal after decoding, llama.cpp's vectors of the same file (the committed
goldens) reproduced through HTTP, a batch of 256 inputs, an empty string, Matryoshka
dimensions, and 4xx answers naming the field."""

import base64
import json
import math
import os
import struct
from pathlib import Path

import openai
import pytest

from conftest import Server

NOMIC = "nomic-embed-text-v1.5.f16.gguf"
GOLDENS = Path(__file__).resolve().parents[1] / "goldens" / "nomic-embed-text-v1.5_embeddings.json"


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture(scope="module")
def nomic(tmp_path_factory):
    path = Path(os.environ.get("TESSERA_EMBED_MODEL") or Path(os.environ.get("TESSERA_MODELS_DIR", "models")) / NOMIC)
    if not path.is_file():
        pytest.fail(f"{path} is missing: fetch it with `tessera fetch-model nomic-embed-text-v1.5`")
    server = Server(tmp_path_factory.mktemp("embed"), model_path=str(path))
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=600)
    client.model_id = client.models.list().data[0].id
    yield server, client
    assert server.stop() == 0


def test_float_and_base64_are_the_same_vectors(nomic):
    _, client = nomic
    texts = ["search_query: what is a KV cache?", "search_document: tiles hold keys and values"]
    floats = client.embeddings.create(model=client.model_id, input=texts, encoding_format="float")
    # Asked for explicitly, the client hands the base64 text over as it came.
    b64 = client.embeddings.create(model=client.model_id, input=texts, encoding_format="base64")
    assert [d.index for d in floats.data] == [0, 1]
    for f, b in zip(floats.data, b64.data):
        assert len(f.embedding) == 768
        decoded = struct.unpack("<768f", base64.b64decode(b.embedding))
        # The JSON floats are the shortest texts of the same f32 values.
        assert struct.unpack("<768f", struct.pack("<768f", *f.embedding)) == decoded
        assert abs(sum(x * x for x in f.embedding) - 1.0) < 1e-4
    assert floats.usage.prompt_tokens > 10


def test_llama_cpp_s_vectors_of_the_same_file_come_back_through_http(nomic):
    server, _ = nomic
    golden = json.loads(GOLDENS.read_text())
    cases = sorted(golden["cases"], key=lambda c: c["n_tokens"])[:8]
    assert len(cases) == 8
    status, body = server.post("/v1/embeddings", {"input": [c["ids"] for c in cases]})
    assert status == 200, body
    for c, d in zip(cases, body["data"]):
        assert cosine(c["embedding"], d["embedding"]) >= 0.9999, c["name"]


def test_a_batch_of_256_an_empty_string_and_matryoshka_dimensions(nomic):
    server, client = nomic
    texts = [f"doc {i}" for i in range(256)]
    texts[7] = ""
    resp = client.embeddings.create(model=client.model_id, input=texts)
    assert len(resp.data) == 256
    assert [d.index for d in resp.data] == list(range(256))
    alone = client.embeddings.create(model=client.model_id, input=texts[42]).data[0].embedding
    assert cosine(alone, resp.data[42].embedding) > 0.99999
    full = client.embeddings.create(model=client.model_id, input="matryoshka", extra_body={"normalize": False})
    cut = client.embeddings.create(model=client.model_id, input="matryoshka", dimensions=256)
    head = full.data[0].embedding[:256]
    norm = math.sqrt(sum(x * x for x in head))
    assert len(cut.data[0].embedding) == 256
    assert max(abs(a - b / norm) for a, b in zip(cut.data[0].embedding, head)) < 1e-5


def test_bad_input_gets_a_4xx_naming_the_field(nomic):
    server, client = nomic
    for payload, param in [
        ({}, "input"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x", "dimensions": 1000}, "dimensions"),
        ({"input": [[1, 10**7]]}, "input"),
        ({"input": "x " * 3000}, "input"),
        ({"input": "x", "temperature": 0}, "temperature"),
    ]:
        status, body = server.post("/v1/embeddings", payload)
        assert status == 400, (payload, body)
        assert body["error"]["param"] == param, body
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=client.model_id, messages=[{"role": "user", "content": "hi"}], max_tokens=2)
