#!/usr/bin/env python3
"""Time to first token of a long prompt: cold, from the memory pool, and from a KV tier.

For each prompt length it starts `tessera serve` with the tier (`--kv-disk DIR` on a fresh
directory, or `--kv-redis URL` with `--redis URL`), sends the prompt once (cold: every token
computed) and again (a hit in the memory pool), stops the server with SIGTERM (full tiles are
written to the tier), starts a new server on the same tier and sends the prompt a third time
(a hit in the tier). Each request asks for one token; TTFT is measured by the client, and
`cached_tokens` is read from the usage. With Redis, each round uses a prompt of its own.

With `--multi-prefix` it measures instead a load of many long prefixes, more than the pool
holds (default: 64 distinct 1,500-token prefixes, 4 requests each with a short suffix of its
own, shuffled with a fixed seed; `--kv-memory 216MiB` holds about 8 of them): two servers run
side by side, one with the pool only and one with a disk tier, and each request goes to one then
the other, so both see the same machine load. It prints TTFT p50 / p90 and the mean
`cached_tokens` of each.

Usage: scripts/bench_kv_tiers.py --bin target/release/tessera [--model PATH]
       [--tokens 2000 8000] [--rounds 3] [--redis redis://127.0.0.1:6379/0]
       scripts/bench_kv_tiers.py --bin target/release/tessera --multi-prefix
       [--prefixes 64] [--per-prefix 4] [--prefix-tokens 1500] [--kv-memory 216MiB]
Only the standard library is used.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

TEXT = (
    "The harbour master kept a ledger of every ship that entered the bay: its name, its flag, "
    "its cargo and the hour of its arrival. Over the years the ledger grew into a history of "
    "the town itself, of its good seasons and its storms, of the families who built boats and "
    "the ones who left on them. "
)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def start(bin_, model, port, tier, log, kv_memory="1GiB"):
    args = [bin_, "serve", "--port", str(port), "--kv-memory", kv_memory] + tier
    if model:
        args += ["--model", model]
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return p
        except Exception:
            if p.poll() is not None:
                raise SystemExit("tessera serve exited; see its log")
            time.sleep(0.2)
    raise SystemExit("tessera serve did not become healthy")


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def ttft(port, prompt):
    body = {
        "prompt": prompt,
        "max_tokens": 1,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    t0 = time.perf_counter()
    first = None
    cached = None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ev = json.loads(line[5:])
            if first is None and ev.get("choices"):
                first = time.perf_counter()
            if ev.get("usage"):
                d = ev["usage"].get("prompt_tokens_details") or {}
                cached = d.get("cached_tokens")
    return (first or time.perf_counter()) - t0, cached


def prompt_of(port, n, tag):
    text = f"Ledger {tag}. " + TEXT * (n // 40 + 2)
    ids = post(f"http://127.0.0.1:{port}/tokenize", {"prompt": text})["tokens"]
    return ids[:n]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def multi_prefix(a, log):
    import random

    kv_dir = tempfile.mkdtemp(prefix="tessera-kv-multi-")
    servers = {}
    for name, tier in (("pool only", []), ("disk tier", ["--kv-disk", kv_dir])):
        port = free_port()
        servers[name] = (port, start(a.bin, a.model, port, tier, log, a.kv_memory))
    try:
        port0 = servers["pool only"][0]
        prefixes = [prompt_of(port0, a.prefix_tokens, f"user {i:03d}") for i in range(a.prefixes)]
        reqs = []
        for i, pre in enumerate(prefixes):
            for j in range(a.per_prefix):
                tail = post(f"http://127.0.0.1:{port0}/tokenize", {"prompt": f" Question {j} of user {i}:"})["tokens"]
                reqs.append(pre + tail[1:])
        random.Random(7).shuffle(reqs)
        rows = {name: [] for name in servers}
        cached = {name: [] for name in servers}
        t0 = time.time()
        for k, prompt in enumerate(reqs):
            order = list(servers) if k % 2 == 0 else list(reversed(servers))
            for name in order:
                t, c = ttft(servers[name][0], prompt)
                rows[name].append(t)
                cached[name].append(c or 0)
        print(
            f"{a.prefixes} prefixes x {a.per_prefix} requests, {a.prefix_tokens} tokens each, "
            f"--kv-memory {a.kv_memory}, {time.time() - t0:.0f} s"
        )
        for name in servers:
            ts = rows[name]
            print(
                f"{name}: TTFT p50 {pct(ts, 0.5) * 1000:.0f} ms, p90 {pct(ts, 0.9) * 1000:.0f} ms, "
                f"mean {statistics.mean(ts) * 1000:.0f} ms, mean cached_tokens "
                f"{statistics.mean(cached[name]):.0f}"
            )
        base = pct(rows["pool only"], 0.5)
        print(f"disk tier / pool only, TTFT p50: {pct(rows['disk tier'], 0.5) / base:.3f}")
    finally:
        for _, p in servers.values():
            stop(p)
        shutil.rmtree(kv_dir, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model")
    ap.add_argument("--tokens", type=int, nargs="+", default=[2000, 8000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--redis", help="use this Redis as the tier instead of a disk directory")
    ap.add_argument("--multi-prefix", action="store_true")
    ap.add_argument("--prefixes", type=int, default=64)
    ap.add_argument("--per-prefix", type=int, default=4)
    ap.add_argument("--prefix-tokens", type=int, default=1500)
    ap.add_argument("--kv-memory", default="216MiB")
    a = ap.parse_args()
    log = open(os.path.join(tempfile.gettempdir(), "tessera-bench-kv-tiers.log"), "ab")
    if a.multi_prefix:
        multi_prefix(a, log)
        return
    for n in a.tokens:
        hit = "redis hit" if a.redis else "disk hit"
        rows = {"cold": [], "pool hit": [], hit: []}
        cached = {}
        for r in range(a.rounds):
            kv_dir = tempfile.mkdtemp(prefix="tessera-kv-tier-")
            tier = ["--kv-redis", a.redis] if a.redis else ["--kv-disk", kv_dir]
            port = free_port()
            p = start(a.bin, a.model, port, tier, log)
            prompt = prompt_of(port, n, f"{n}-{r}-{time.time()}")
            for name in ("cold", "pool hit"):
                t, c = ttft(port, prompt)
                rows[name].append(t)
                cached[name] = c
            stop(p)
            port = free_port()
            p = start(a.bin, a.model, port, tier, log)
            t, c = ttft(port, prompt)
            rows[hit].append(t)
            cached[hit] = c
            stop(p)
            shutil.rmtree(kv_dir, ignore_errors=True)
        cold = statistics.median(rows["cold"])
        for name, ts in rows.items():
            m = statistics.median(ts)
            print(
                f"{n} tokens, {name}: TTFT median {m * 1000:.1f} ms ({m / cold:.3f}x cold), "
                f"cached_tokens {cached[name]}, {len(ts)} runs"
            )


if __name__ == "__main__":
    main()
