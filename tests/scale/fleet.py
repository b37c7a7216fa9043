"""A fleet on loopback: `tessera serve` replicas and the real Shepherd Model Gateway (`smg`).

Replicas run the default model with one matmul thread and a small KV pool each, so three fit
on a small machine; a replica keeps its port across restarts (the gateway knows workers by
URL). The gateway is `smg launch` from PyPI, with health checks and load polls every second
so faults show within a test's time.
"""

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

# KV pool per replica: about 1,400 tokens of Gemma 3 270M at f16 (18 KiB a token), enough
# for five of the tests' long prefixes at once, not for all eight.
KV_MEMORY = os.environ.get("SCALE_KV_MEMORY", "24MiB")


_HANDED_OUT = set()


def free_port():
    """A loopback port free now and not handed out before in this process: the kernel may give
    the same ephemeral port to two binds in a row once the first socket is closed (two listeners
    of one smg got the same port that way)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def http(method, url, payload=None, timeout=60, headers=None):
    """One request; returns (status, body text). Connection errors raise OSError."""
    data = json.dumps(payload).encode() if payload is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def wait_until(cond, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def metric(text, name):
    """The sum of a Prometheus family's samples named exactly `name` (any labels)."""
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{[^}}]*\}})? (\S+)$", text, re.M):
        total += float(m.group(1))
    return total


class Replica:
    """One `tessera serve` on a fixed loopback port, its output in `log_dir`."""

    def __init__(self, binary, log_dir: Path, index, port=None):
        self.binary = binary
        self.log_dir = log_dir
        self.index = index
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        self.log_path = self.log_dir / f"replica{self.index}-{self.starts}.log"
        model = ["--model", os.environ["TESSERA_MODEL"]] if os.environ.get("TESSERA_MODEL") else []
        env = {k: v for k, v in os.environ.items() if k != "TESSERA_API_KEY"}
        env["RUST_LOG"] = "info"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [self.binary, "serve", *model, "--host", "127.0.0.1", "--port", str(self.port),
                 "--threads", "1", "--kv-memory", KV_MEMORY, "--max-seqs", "16", "--shutdown-timeout", "60"],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        return self

    def healthy(self):
        try:
            return http("GET", f"{self.url}/health", timeout=2)[0] == 200
        except OSError:
            return False

    def wait_healthy(self, timeout=300):
        def up():
            assert self.proc.poll() is None, f"replica {self.index} exited: {self.log_path.read_text()}"
            return self.healthy()

        wait_until(up, timeout, f"replica {self.index} to become healthy")

    def metrics(self):
        return http("GET", f"{self.url}/metrics", timeout=30)[1]

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self):
        self.proc.send_signal(signal.SIGTERM)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Gateway:
    """`smg launch` over the replicas with one routing policy."""

    def __init__(self, smg, log_dir: Path, replicas, policy, *extra):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"smg-{policy}-{self.port}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [smg, "launch", "--host", "127.0.0.1", "--port", str(self.port),
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
             "--worker-urls", *[r.url for r in replicas], "--policy", policy,
             "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
             "--health-success-threshold", "1", "--load-monitor-interval", "1",
             "--worker-startup-check-interval", "1", "--disable-tokenizer-autoload", "--log-level", "info",
             *extra],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        self.replicas = replicas
        wait_until(lambda: self.healthy_workers() == {r.url for r in replicas}, 120,
                   f"smg ({policy}) to register every replica: {self.log_path}")

    def workers(self):
        """The gateway's view: worker URL -> its entry in `GET /workers`."""
        assert self.proc.poll() is None, f"smg exited: {self.log_path.read_text()}"
        try:
            status, body = http("GET", f"{self.url}/workers", timeout=5)
        except OSError:
            return {}
        if status != 200:
            return {}
        data = json.loads(body)
        entries = data.get("workers", data) if isinstance(data, dict) else data
        return {w["url"]: w for w in entries}

    def healthy_workers(self):
        return {url for url, w in self.workers().items() if w.get("is_healthy")}

    def warnings(self):
        """The gateway's WARN and ERROR lines, but for its note that it runs without auth."""
        text = re.sub(r"\x1b\[[0-9;]*m", "", self.log_path.read_text())
        return [l for l in text.splitlines() if re.search(r"\b(WARN|ERROR)\b", l) and "SECURITY POSTURE" not in l]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
