"""Fixtures for the end-to-end tests: where the server is, its key, and clients for it.

The server is started by tests/e2e/run.sh, which sets TESSERA_URL and TESSERA_API_KEY.
"""

import json
import os
import subprocess

import openai
import pytest


@pytest.fixture(scope="session")
def base_url():
    url = os.environ.get("TESSERA_URL")
    if not url:
        pytest.skip("TESSERA_URL is not set: run tests/e2e/run.sh")
    return url.rstrip("/")


@pytest.fixture(scope="session")
def api_key():
    return os.environ.get("TESSERA_API_KEY", "")


@pytest.fixture(scope="session")
def client(base_url, api_key):
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=api_key or "none", max_retries=0)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id


def curl(*args, check=True):
    """Runs curl; returns (http status, body text)."""
    out = subprocess.run(
        ["curl", "-sS", "-w", "\n%{http_code}", *args],
        check=check,
        capture_output=True,
        text=True,
        timeout=120,
    )
    body, _, status = out.stdout.rpartition("\n")
    return int(status), body


def curl_json(url, api_key, payload, *extra):
    """POSTs JSON with curl; returns (status, parsed body)."""
    auth = ["-H", f"Authorization: Bearer {api_key}"] if api_key else []
    status, body = curl(
        "-X", "POST", url, "-H", "Content-Type: application/json", *auth, "-d", json.dumps(payload), *extra
    )
    return status, json.loads(body)
