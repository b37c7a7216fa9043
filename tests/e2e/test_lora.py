"""LoRA adapters through the official `openai` client and curl, on Qwen2.5-Coder-0.5B.

A server of its own (`--lora sql=ADAPTER`, an API key) on qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
from TESSERA_MODELS_DIR (or TESSERA_QWEN05_MODEL). The adapter is the one of the LoRA goldens
(tests/goldens/qwen2.5-coder-0.5b_lora_greedy.json): `model::testing::lora::real_lora_gguf` with
its default seed and strength, written into the test's temporary directory by
`cargo run --release -p tessera-model --example write_real_lora` (so cargo must be on PATH, as
for tests/e2e/run.sh's build). It changes the model's greedy output.
"""

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest

from conftest import Server, curl, curl_json

REPO = Path(__file__).resolve().parents[2]
MODEL_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
KEY = f"lora-{os.getpid()}"
PROMPT = "def fibonacci(n):"


def qwen_model():
    path = Path(os.environ.get("TESSERA_QWEN05_MODEL")
                or Path(os.environ.get("TESSERA_MODELS_DIR", "models")) / MODEL_FILE)
    if not path.is_file():
        pytest.fail(f"{path} is missing: the LoRA tests need {MODEL_FILE} "
                    "(`tessera fetch-model`, or set TESSERA_MODELS_DIR)")
    return path


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora")
    model = qwen_model()
    adapter = tmp / "qwen-lora.gguf"
    subprocess.run(
        ["cargo", "run", "--quiet", "--release", "-p", "tessera-model", "--example",
         "write_real_lora", "--", str(model), str(adapter)],
        check=True, cwd=REPO, timeout=1800,
    )
    server = Server(tmp, "--lora", f"sql={adapter}", "--max-loras", "2", "--api-key", KEY,
                    model_path=str(model))
    yield server, adapter
    server.stop()


@pytest.fixture(scope="module")
def lora_client(lora_server):
    server, _ = lora_server
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def complete(client, model, **extra):
    r = client.completions.create(model=model, prompt=PROMPT, max_tokens=24, temperature=0,
                                  **extra)
    return r.choices[0].text


def curl_post(url, key, payload):
    """POSTs JSON with curl; returns (status, body text): the load and unload endpoints answer
    success in plain text, as vLLM's do."""
    auth = ["-H", f"Authorization: Bearer {key}"] if key else []
    return curl("-X", "POST", url, "-H", "Content-Type: application/json", *auth,
                "-d", json.dumps(payload))


def base_id(client):
    return next(m.id for m in client.models.list().data if getattr(m, "parent", None) is None)


def test_adapter_by_name_differs_from_base_and_equals_lora_field(lora_client):
    base = base_id(lora_client)
    plain = complete(lora_client, base)
    by_name = complete(lora_client, "sql")
    assert by_name != plain, "the adapter does not change the greedy output"
    by_field = complete(lora_client, base, extra_body={"lora": [{"id": 0, "scale": 1.0}]})
    assert by_field == by_name
    assert complete(lora_client, base) == plain, "the base is unchanged after adapter requests"


def test_models_lists_the_adapter_with_its_parent(lora_client):
    models = lora_client.models.list().data
    base = base_id(lora_client)
    sql = [m for m in models if m.id == "sql"]
    assert len(sql) == 1, [m.id for m in models]
    assert sql[0].parent == base


def test_load_and_unload_through_the_client_and_curl(lora_server, lora_client):
    server, adapter = lora_server
    by_name = complete(lora_client, "sql")
    # The openai client: load under a new name, use it, unload it.
    r = lora_client.post("/load_lora_adapter", cast_to=str,
                         body={"lora_name": "late", "lora_path": str(adapter)})
    assert "late" in r, r  # a non-2xx status raises
    assert "late" in [m.id for m in lora_client.models.list().data]
    assert complete(lora_client, "late") == by_name, "the same file at the same scale"
    lora_client.post("/unload_lora_adapter", cast_to=str, body={"lora_name": "late"})
    with pytest.raises(openai.NotFoundError) as e:
        complete(lora_client, "late")
    assert e.value.body["param"] == "model"
    # curl: without the key it is refused; with it, load, use and unload.
    url = f"{server.url}/v1/load_lora_adapter"
    payload = {"lora_name": "curl", "lora_path": str(adapter)}
    status, _ = curl_post(url, None, payload)
    assert status == 401
    status, text = curl_post(url, KEY, payload)
    assert status == 200 and "curl" in text, text
    assert complete(lora_client, "curl") == by_name
    status, text = curl_post(f"{server.url}/v1/unload_lora_adapter", KEY, {"lora_name": "curl"})
    assert status == 200, text
    status, body = curl_json(f"{server.url}/v1/unload_lora_adapter", KEY, {"lora_name": "curl"})
    assert status == 404 and body["error"]["param"] == "lora_name", body


def test_unknown_adapter_is_a_404_naming_model(lora_server, lora_client):
    with pytest.raises(openai.NotFoundError) as e:
        complete(lora_client, "no-such-adapter")
    assert e.value.status_code == 404
    assert e.value.body["param"] == "model"
    assert "no-such-adapter" in e.value.body["message"]
    server, _ = lora_server
    status, body = curl_json(f"{server.url}/v1/completions", KEY,
                             {"model": "no-such-adapter", "prompt": PROMPT, "max_tokens": 2})
    assert status == 404 and body["error"]["param"] == "model", body


def test_bad_adapter_path_is_a_4xx_naming_the_file(lora_server, lora_client, tmp_path):
    server, _ = lora_server
    missing = tmp_path / "missing-adapter.gguf"
    with pytest.raises(openai.BadRequestError) as e:
        lora_client.post("/load_lora_adapter", cast_to=str,
                         body={"lora_name": "bad", "lora_path": str(missing)})
    assert e.value.body["param"] == "lora_path"
    assert "missing-adapter.gguf" in e.value.body["message"]
    not_gguf = tmp_path / "not-an-adapter.gguf"
    not_gguf.write_bytes(b"this is not a GGUF file")
    status, body = curl_json(f"{server.url}/v1/load_lora_adapter", KEY,
                             {"lora_name": "bad", "lora_path": str(not_gguf)})
    assert 400 <= status < 500, body
    assert body["error"]["param"] == "lora_path"
    assert "not-an-adapter.gguf" in body["error"]["message"], body
