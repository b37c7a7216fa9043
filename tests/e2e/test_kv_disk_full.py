"""The disk KV tier on a full file system: a real 256 KiB tmpfs (mounted here, which needs root:
without it the test fails saying so, never a silent skip; CI runs the e2e tests as root). Every
tile write fails with ENOSPC; requests still succeed with the tokens of a server without tiers,
the fault is counted in `tessera_kv_tier_errors{tier="disk"}`, and the log says it once."""

import os
import re
import subprocess

import pytest

from conftest import Server

PROMPTS = [
    "In a village of La Mancha, the name of which I have no desire to call to mind, " * (3 + i) + f"Chapter {i}:"
    for i in range(4)
]


@pytest.fixture
def full_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.fail("mounting a tmpfs needs root: run tests/e2e/run.sh as root (CI does)")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs here (the test needs one): {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _greedy(server, prompt):
    status, body = server.post(
        "/v1/completions", {"prompt": prompt, "max_tokens": 12, "temperature": 0, "logprobs": 1}
    )
    assert status == 200, body
    return body["choices"][0]["text"], body["choices"][0]["logprobs"]["token_logprobs"]


def _errors(server):
    m = re.search(r'^tessera_kv_tier_errors_total\{tier="disk"\} (\d+)', server.metrics(), re.M)
    assert m, "the disk tier's error counter is exported"
    return int(m.group(1))


def test_a_full_disk_tier_costs_nothing_but_its_writes(tmp_path, full_fs):
    plain = Server(tmp_path)
    try:
        want = [_greedy(plain, p) for p in PROMPTS]
    finally:
        plain.stop()
    # Write-through: every full tile is written at once, so the 256 KiB fill on the first prompt.
    tiered = Server(tmp_path, "--kv-disk", str(full_fs), "--kv-disk-size", "1GiB", "--kv-tier-write-through")
    try:
        for _ in range(2):
            got = [_greedy(tiered, p) for p in PROMPTS]
            assert got == want, "the same tokens and log-probabilities as without tiers"
        assert _errors(tiered) > 0, "the failed writes are counted"
    finally:
        tiered.stop()
    log = tiered.log_path.read_text()
    said = [line for line in log.splitlines() if "KV tier disk" in line]
    assert len(said) == 1, f"the fault is logged once: {said}"
    assert "No space left on device" in said[0] or "ENOSPC" in said[0] or "os error 28" in said[0], said[0]
    # Nothing but whole tiles stays on the file system: no temporary files left behind.
    leftovers = [p.name for p in full_fs.iterdir() if p.name.startswith(".tmp-")]
    assert leftovers == [], leftovers
