"""/openapi.json: a valid OpenAPI 3.1 document (openapi-spec-validator), and the server fuzzed
against it with schemathesis: no 5xx, and every response's status code, content type and body
as the document says.

The data checks (positive_data_acceptance, negative_data_rejection) are left out: part of what
validation refuses depends on the loaded model or on field combinations JSON Schema does not
state (Gemma's template wants alternating roles, one structured-output field per request, token
ids within the vocabulary), and JSON Schema calls 2.0 an integer where the server wants 2; see
docs/RELIABILITY.md.

The fuzzed server is one of its own, with an API key, a 64 MiB KV pool and
`--max-tokens-limit 4` (published as the `maximum` of the token-count fields), so the generated
requests stay cheap: the whole run takes a few minutes on two cores.
"""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from openapi_spec_validator import validate

from conftest import Server

# Test cases per operation and phase: enough to reach every field of every body with valid and
# invalid values, bounded so the run stays within a few minutes.
MAX_EXAMPLES = int(os.environ.get("SCHEMATHESIS_MAX_EXAMPLES", "20"))
SEED = os.environ.get("SCHEMATHESIS_SEED", "1717")
CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
]


def _get_json(url, key=None):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("application/json")
        return json.loads(r.read())


def test_the_document_is_valid_openapi_and_open_like_health(base_url):
    # The shared server has an API key: /openapi.json is read without it, like /health.
    spec = _get_json(f"{base_url}/openapi.json")
    validate(spec)
    assert spec["openapi"].startswith("3.1")
    paths = spec["paths"]
    for path in ["/v1/chat/completions", "/chat/completions", "/v1/completions", "/v1/responses",
                 "/v1/responses/{id}", "/v1/models", "/v1/models/{id}", "/tokenize", "/detokenize",
                 "/v1/completions/render", "/v1/chat/completions/render", "/health", "/metrics",
                 "/version", "/v1/loads", "/server_info", "/get_server_info", "/model_info",
                 "/get_model_info", "/openapi.json", "/"]:
        assert path in paths, path
    chat = paths["/v1/chat/completions"]["post"]
    # Either key scheme: `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic).
    assert chat["security"] == [{"bearer": []}, {"x_api_key": []}]
    assert set(chat["responses"]) >= {"200", "400", "401", "404", "413", "429", "500", "503"}
    assert "text/event-stream" in chat["responses"]["200"]["content"]
    assert paths["/health"]["get"]["security"] == []


def test_schemathesis_finds_no_server_error_and_no_response_off_the_document(tmp_path):
    key = f"fuzz-{os.getpid()}"
    server = Server(tmp_path, "--api-key", key, "--max-tokens-limit", "4", kv_memory="64MiB")
    try:
        spec = _get_json(f"{server.url}/openapi.json")
        caps = spec["components"]["schemas"]["ChatCompletionRequest"]["properties"]["max_tokens"]
        assert caps["maximum"] == 4, caps
        schemathesis = Path(sys.executable).with_name("schemathesis")
        cmd = [
            str(schemathesis), "run", f"{server.url}/openapi.json",
            "--checks", ",".join(CHECKS),
            "--max-examples", str(MAX_EXAMPLES),
            "--seed", SEED,
            "--header", f"Authorization: Bearer {key}",
            "--request-timeout", "120",
            "--generation-database", "none",
            "--phases", "examples,coverage,fuzzing",
            "--no-color",
        ]
        started = time.monotonic()
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=900)
        took = time.monotonic() - started
        print(out.stdout[-6000:])
        print(f"schemathesis: {took:.0f} s")
        assert out.returncode == 0, (
            f"schemathesis failed (exit {out.returncode}):\n{out.stdout[-20000:]}\n{out.stderr[-4000:]}"
            f"\nserver log tail:\n{server.log_path.read_text()[-4000:]}"
        )
    finally:
        assert server.stop() == 0
