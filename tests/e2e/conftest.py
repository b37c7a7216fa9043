"""Fixtures for the end-to-end tests: where the server is, its key, and clients for it.

The server is started by tests/e2e/run.sh, which sets TESSERA_URL and TESSERA_API_KEY.
"""

import json
import os
import socket
import subprocess
import tempfile
import time

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


ALIASES = ["tessera-e2e", "tessera-alias"]
ALLOWED_ORIGIN = "http://allowed.example"


@pytest.fixture(scope="session")
def small_server():
    """A second server: a 64 MiB KV pool, two served names, one allowed CORS origin and an API
    key. Yields (base URL, key); stopped with SIGTERM at the end."""
    binary = os.environ.get("TESSERA_BIN")
    if not binary:
        pytest.skip("TESSERA_BIN is not set: run tests/e2e/run.sh")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = f"small-{os.getpid()}"
    model = ["--model", os.environ["TESSERA_MODEL"]] if os.environ.get("TESSERA_MODEL") else []
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [binary, "serve", *model, "--port", str(port), "--kv-memory", "64MiB", "--api-key", key,
         "--served-model-name", *ALIASES, "--allowed-origins", ALLOWED_ORIGIN],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 300
        while time.time() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"the second server exited: {log.read()}")
            status, _ = curl(f"{base}/health", check=False)
            if status == 200:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the second server never became healthy")
        yield base, key
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


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


_HANDED_OUT = set()


def free_port():
    """A loopback port free now and not handed out before in this run (the kernel may give the
    same ephemeral port to two binds in a row once the first socket is closed)."""
    import socket

    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class Server:
    """Another `tessera serve` on a free port (for tests that need other flags or another model
    (`model_path`) than the shared server's), its stderr in a file; stopped with SIGTERM by
    `stop`."""

    def __init__(self, tmp_path, *flags, env=None, kv_memory="64MiB", model_path=None):
        import time
        import urllib.request

        binary = os.environ.get("TESSERA_BIN")
        if not binary:
            pytest.skip("TESSERA_BIN is not set: run tests/e2e/run.sh")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"tessera-{self.port}.log"
        model_path = model_path or os.environ.get("TESSERA_MODEL")
        model = ["--model", model_path] if model_path else []
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [binary, "serve", *model, "--host", "127.0.0.1", "--port", str(self.port), "--kv-memory", kv_memory,
             "--max-seqs", "8", "--shutdown-timeout", "5", *flags],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            # Without the shared server's key (serve reads TESSERA_API_KEY).
            env={**{k: v for k, v in os.environ.items() if k != "TESSERA_API_KEY"}, "RUST_LOG": "info", **(env or {})},
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"tessera serve exited: {self.log_path.read_text()}"
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(f"tessera serve never became healthy: {self.log_path.read_text()}")

    def post(self, path, payload, headers=None):
        """POSTs JSON; returns (status, parsed body or the raw text of a stream)."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(
            f"{self.url}{path}",
            data=json.dumps(payload).encode(),
            headers={"Content-Type": "application/json", **(headers or {})},
        )
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                text = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            text, status = e.read().decode(), e.code
        return status, (text if payload.get("stream") else json.loads(text))

    def metrics(self):
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self):
        """SIGTERM, then the exit status (the server flushes its spans on the way out)."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.log.close()
