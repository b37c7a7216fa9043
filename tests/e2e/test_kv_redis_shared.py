"""Two `tessera serve` replicas sharing one real `redis-server` as their KV tier: a prompt
prefilled by A (its full tiles written through to Redis at once) is served from Redis by B,
which never computed it: B reports the tiles as cached and gives A's tokens and log-probabilities."""

import re
import shutil
import subprocess
import time

import pytest

from conftest import Server, free_port

PROMPT = (
    "The harbour master kept a ledger of every ship that entered the bay: its name, its flag, its cargo "
    "and the hour of its arrival. "
) * 6 + "The oldest entry in the ledger reads:"


@pytest.fixture
def redis_url(tmp_path):
    binary = shutil.which("redis-server")
    if not binary:
        pytest.fail("redis-server is missing (scripts/test.sh installs it)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True).stdout.strip() != "PONG":
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.1)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _counter(server, name):
    m = re.search(rf'^{name}_total{{tier="redis"}} (\d+)', server.metrics(), re.M)
    assert m, f"{name} is exported"
    return int(m.group(1))


def _complete(server):
    status, body = server.post(
        "/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "logprobs": 2}
    )
    assert status == 200, body
    c = body["choices"][0]
    cached = (body["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return c["text"], c["logprobs"]["token_logprobs"], cached, body["usage"]["prompt_tokens"]


def test_a_prompt_prefilled_by_one_replica_is_served_from_redis_by_another(tmp_path, redis_url):
    a = Server(tmp_path, "--kv-redis", redis_url, "--kv-tier-write-through")
    b = Server(tmp_path, "--kv-redis", redis_url)
    try:
        text_a, lp_a, cached_a, n = _complete(a)
        assert cached_a == 0, "A computed the prompt"
        # A's writes go out on its tier thread: wait until Redis holds them.
        deadline = time.monotonic() + 30
        while _counter(a, "tessera_kv_tier_written_bytes") == 0:
            assert time.monotonic() < deadline, "A wrote nothing to Redis"
            time.sleep(0.2)
        time.sleep(1)
        text_b, lp_b, cached_b, _ = _complete(b)
        assert cached_b >= n - 16, f"B found the prompt's full tiles in Redis ({cached_b} of {n})"
        assert text_b == text_a
        assert lp_b == lp_a, "the same log-probabilities, bit for bit"
        assert _counter(b, "tessera_kv_tier_hits") > 0
    finally:
        a.stop()
        b.stop()
