#!/usr/bin/env python3
"""Chaos soak client for `tessera serve` (Python standard library only; run by scripts/soak.sh).

Sends --requests mixed requests from --concurrency threads: completions and chat, streamed and
whole, n from 1 to 3, log-probs, stop strings, short and long prompts; about 10% malformed,
10% from clients that disconnect at a random moment, 5% streams read very slowly. Each request
opens its own connection. Before the soak every greedy request shape is run alone, one at a
time, for its reference text.

Checks (exit status 1 when one fails): no 5xx (nor any other non-2xx) on a valid request; no
2xx on a malformed one; every completed greedy choice's text equals its reference; once idle,
`tessera_kv_tiles_used` is 0 and the server holds as many file descriptors as before the
soak. Reports the resident memory after warm-up (the first 20% of requests) and at the end,
and the drift between them. Prints one JSON summary line last.
"""

import argparse
import http.client
import json
import os
import random
import socket
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

WORDS = (
    "the quick brown fox jumps over a lazy dog while seven tired robots argue about the weather "
    "in a small village near the sea where lighthouses blink and sailors sing old songs"
).split()

SHORT_PROMPTS = ["Once upon a time", "The capital of France is", "1, 2, 3, 4,", "Hello! My name is"]


def long_prompt(seed, words):
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(words))


LONG_PROMPTS = [long_prompt(s, w) for s, w in [(1, 150), (2, 250), (3, 350)]]


def greedy_shapes():
    """The greedy request shapes: (route, body without stream/n). Their outputs are compared."""
    shapes = []
    for i, p in enumerate(SHORT_PROMPTS + LONG_PROMPTS):
        shapes.append(("/v1/completions", {"prompt": p, "max_tokens": 8 + 8 * (i % 4), "temperature": 0}))
        shapes.append(
            (
                "/v1/chat/completions",
                {"messages": [{"role": "user", "content": p}], "max_tokens": 12 + 6 * (i % 3), "temperature": 0},
            )
        )
    shapes.append(("/v1/completions", {"prompt": SHORT_PROMPTS[2], "max_tokens": 32, "temperature": 0, "stop": [" 7", "\n"]}))
    shapes.append(("/v1/completions", {"prompt": SHORT_PROMPTS[0], "max_tokens": 24, "temperature": 0, "logprobs": 2}))
    shapes.append(
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": SHORT_PROMPTS[1]}], "max_tokens": 16, "temperature": 0,
             "logprobs": True, "top_logprobs": 2, "stop": ["."]},
        )
    )
    return shapes


MALFORMED = [
    ("/v1/completions", b"{not json"),
    ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": -1}).encode()),
    ("/v1/completions", json.dumps({"prompt": "x", "top_p": 0}).encode()),
    ("/v1/completions", json.dumps({"max_tokens": 4}).encode()),
    ("/v1/chat/completions", json.dumps({"messages": "hi"}).encode()),
    ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 10_000}).encode()),
    ("/v1/completions", json.dumps({"prompt": "x", "model": "no-such-model"}).encode()),
    ("/v1/completions", json.dumps({"prompt": [[1, 2], "mixed", 3]}).encode()),
    ("/v1/completions", b"x" * (5 << 20)),
    ("/v1/nowhere", b"{}"),
]


class Soak:
    def __init__(self, args):
        self.host, self.port = args.host, args.port
        self.args = args
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.outcomes = Counter()
        self.failures = []
        self.rss = []
        # (requests done, KiB malloc has in use, KiB it holds), from /metrics.
        self.heap = []
        self.refs = {}
        self.done = 0

    # --- HTTP -----------------------------------------------------------------------------
    def conn(self, timeout=600):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def post(self, path, body, timeout=600):
        c = self.conn(timeout)
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json", "Connection": "close"})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def get(self, path):
        c = self.conn(30)
        try:
            c.request("GET", path, headers={"Connection": "close"})
            r = c.getresponse()
            return r.status, r.read().decode()
        finally:
            c.close()

    def metric(self, name):
        _, text = self.get("/metrics")
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    # --- request bodies -----------------------------------------------------------------------
    @staticmethod
    def text_of(path, body, stream, raw):
        """Choice index -> text, from a whole JSON response or the raw SSE text."""
        chat = path.endswith("chat/completions")
        texts = {}
        if not stream:
            for ch in json.loads(raw)["choices"]:
                texts[ch["index"]] = ch["message"]["content"] if chat else ch["text"]
            return texts, None
        error = None
        for line in raw.decode().splitlines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                error = ev["error"]
                continue
            for ch in ev.get("choices", []):
                piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                texts[ch["index"]] = texts.get(ch["index"], "") + (piece or "")
        return texts, error

    def reference(self, shapes):
        for i, (path, body) in enumerate(shapes):
            status, raw = self.post(path, json.dumps(body).encode())
            if status != 200:
                sys.exit(f"reference request {i} failed: {status} {raw[:300]!r}")
            self.refs[i] = self.text_of(path, body, False, raw)[0][0]

    def pick(self, i):
        """The i-th request: (kind, path, body bytes, stream, greedy shape index or None)."""
        r = random.Random(self.args.seed * 1_000_003 + i)
        roll = r.random()
        if roll < 0.10:
            path, body = MALFORMED[r.randrange(len(MALFORMED))]
            return "malformed", path, body, False, None
        stream = r.random() < 0.5
        n = r.choice([1, 1, 2, 3])
        if r.random() < 0.5:
            shape = r.randrange(len(self.shapes))
            path, body = self.shapes[shape]
            body = dict(body, n=n, stream=stream)
        else:
            shape = None
            prompt = r.choice(SHORT_PROMPTS + LONG_PROMPTS)
            common = {"max_tokens": r.randint(1, 48), "temperature": 0.8, "seed": r.randrange(1 << 30), "n": n,
                      "stream": stream}
            if r.random() < 0.3:
                common["stop"] = [r.choice(WORDS), "\n"]
            if r.random() < 0.5:
                path, body = "/v1/completions", dict(common, prompt=prompt)
                if r.random() < 0.3:
                    body["logprobs"] = r.randint(0, 3)
            else:
                path, body = "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": prompt}])
                if r.random() < 0.3:
                    body.update(logprobs=True, top_logprobs=r.randint(0, 3))
        if 0.10 <= roll < 0.20:
            kind = "disconnect"
        elif 0.20 <= roll < 0.25 and stream:
            kind = "slow"
        else:
            kind = "valid"
        return kind, path, json.dumps(body).encode(), stream, shape

    # --- one request ----------------------------------------------------------------------------
    def run_one(self, i):
        kind, path, body, stream, shape = self.pick(i)
        try:
            outcome = getattr(self, "do_" + kind)(i, path, body, stream, shape)
        except Exception as e:  # noqa: BLE001 - any client-side exception is a finding
            outcome = f"{kind}: exception {type(e).__name__}"
            self.fail(i, f"{kind} request raised {e!r}")
        with self.lock:
            self.outcomes[outcome] += 1
            self.done += 1

    def fail(self, i, what):
        with self.lock:
            self.failures.append(f"request {i}: {what}")

    def do_malformed(self, i, path, body, stream, shape):
        status, raw = self.post(path, body)
        if status < 400 or status >= 500:
            self.fail(i, f"malformed request got {status}: {raw[:200]!r}")
        return f"malformed: {status}"

    def do_valid(self, i, path, body, stream, shape, slow=False):
        c = self.conn()
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json", "Connection": "close"})
            r = c.getresponse()
            if slow:
                chunks = []
                while True:
                    piece = r.read(64)
                    if not piece:
                        break
                    chunks.append(piece)
                    time.sleep(0.02)
                raw = b"".join(chunks)
            else:
                raw = r.read()
            status = r.status
        finally:
            c.close()
        if status != 200:
            self.fail(i, f"valid request got {status}: {raw[:300]!r}")
            return f"valid: {status}"
        texts, error = self.text_of(path, body, stream, raw)
        if error:
            self.fail(i, f"stream ended with an error: {error}")
            return "valid: stream error"
        if shape is not None:
            want = self.refs[shape]
            for idx, got in texts.items():
                if got != want:
                    self.fail(i, f"greedy shape {shape} choice {idx}: {got!r} != alone {want!r}")
                    return "valid: greedy mismatch"
            return "valid: greedy ok"
        return "valid: 200"

    def do_slow(self, i, path, body, stream, shape):
        return self.do_valid(i, path, body, stream, shape, slow=True).replace("valid", "slow", 1)

    def do_disconnect(self, i, path, body, stream, shape):
        r = random.Random(i)
        s = socket.create_connection((self.host, self.port), timeout=600)
        try:
            head = (f"POST {path} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
                    f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
            moment = r.random()
            if moment < 0.2:
                s.sendall(head + body[: r.randrange(len(body) + 1)])  # before the body is complete
            else:
                s.sendall(head + body)
                time.sleep(r.random() * (0.05 if moment < 0.5 else 1.5))
                if moment > 0.5:
                    s.recv(r.randint(1, 4096))  # after some of the response
        finally:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            s.close()
        return "disconnect"

    # --- server process -------------------------------------------------------------------------
    def heap_by_tenth(self, field):
        if not self.heap:
            return None
        return self.by_tenth(self.heap, field, self.heap[-1][field])

    def mem_kib(self):
        """(VmRSS, RssAnon, RssFile) of the server in KiB. RssFile is the model file's pages
        the server has touched (the mmap: embedding rows are read there as tokens are first
        seen), clean and reclaimable; RssAnon is its own memory."""
        fields = {}
        with open(f"/proc/{self.args.pid}/status") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "RssAnon", "RssFile"):
                    fields[key] = int(rest.split()[0])
        return fields.get("VmRSS", 0), fields.get("RssAnon", 0), fields.get("RssFile", 0)

    def by_tenth(self, samples, field, end):
        """The value of `field` of the first sample taken once each further tenth was done."""
        return [
            round(next((x[field] for x in samples if x[0] >= self.args.requests * t // 10), end) / 1024, 1)
            for t in range(1, 11)
        ]

    def fds(self):
        return len(os.listdir(f"/proc/{self.args.pid}/fd"))

    def wait_idle(self, fds_before=None, timeout=60):
        """Waits until no request runs or waits, no tile is in use (and the fd count is back)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            busy = (self.metric("tessera_num_requests_running") or 0) + (self.metric("tessera_num_requests_waiting") or 0)
            tiles = self.metric("tessera_kv_tiles_used")
            if busy == 0 and tiles == 0 and (fds_before is None or self.fds() <= fds_before):
                return tiles
            time.sleep(0.5)
        return self.metric("tessera_kv_tiles_used")

    def run(self):
        self.shapes = greedy_shapes()
        t0 = time.time()
        self.reference(self.shapes)
        self.wait_idle()
        time.sleep(1)
        fds_before = self.fds()
        preempt_before = self.metric("tessera_num_preemptions_total") or 0
        warm = max(1, self.args.requests // 5)
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                with self.lock:
                    done = self.done
                self.rss.append((done, *self.mem_kib()))
                in_use = self.metric("tessera_heap_in_use_bytes")
                held = self.metric("tessera_heap_held_bytes")
                if in_use is not None and held is not None:
                    self.heap.append((done, in_use / 1024, held / 1024))
                stop.wait(1.0)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        soak_t0 = time.time()
        with ThreadPoolExecutor(self.args.concurrency) as pool:
            for _ in pool.map(self.run_one, range(self.args.requests)):
                pass
        soak_secs = time.time() - soak_t0
        stop.set()
        sampler.join()
        tiles = self.wait_idle(fds_before)
        time.sleep(1)
        fds_after = self.fds()
        rss_end, anon_end, file_end = self.mem_kib()
        after_warm = [m for m in self.rss if m[0] >= warm]
        rss_warm, anon_warm, _ = after_warm[0][1:] if after_warm else (rss_end, anon_end, file_end)
        anon_drift_mib = (anon_end - anon_warm) / 1024
        limit = self.args.max_anon_drift_mib
        if limit is not None and anon_drift_mib > limit:
            self.failures.append(f"RssAnon grew {anon_drift_mib:.1f} MiB after warm-up (limit {limit})")
        preemptions = (self.metric("tessera_num_preemptions_total") or 0) - preempt_before
        if tiles != 0:
            self.failures.append(f"tessera_kv_tiles_used is {tiles} once idle")
        if fds_after > fds_before:
            self.failures.append(f"file descriptors: {fds_before} before, {fds_after} after")
        summary = {
            "requests": self.args.requests,
            "concurrency": self.args.concurrency,
            "seconds": round(soak_secs, 1),
            "outcomes": dict(sorted(self.outcomes.items())),
            "failures": len(self.failures),
            "preemptions": preemptions,
            "kv_tiles_used_at_end": tiles,
            "fds_before": fds_before,
            "fds_after": fds_after,
            "rss_mib_after_warmup": round(rss_warm / 1024, 1),
            "rss_mib_end": round(rss_end / 1024, 1),
            "rss_mib_max": round(max(m[1] for m in self.rss) / 1024, 1) if self.rss else None,
            "rss_drift_mib": round((rss_end - rss_warm) / 1024, 1),
            "rss_anon_drift_mib": round(anon_drift_mib, 1),
            # The resident memory as each further tenth of the requests completed, and its
            # two parts: the server's own (anonymous) and the model file's pages.
            "rss_mib_by_tenth": self.by_tenth(self.rss, 1, rss_end),
            "rss_anon_mib_by_tenth": self.by_tenth(self.rss, 2, anon_end),
            "rss_file_mib_by_tenth": self.by_tenth(self.rss, 3, file_end),
            # malloc's own count at the same tenths: bytes in use (flat while the resident
            # memory grows means fragmentation, not a leak) and bytes it holds.
            "heap_in_use_mib_by_tenth": self.heap_by_tenth(1),
            "heap_held_mib_by_tenth": self.heap_by_tenth(2),
            "total_seconds": round(time.time() - t0, 1),
        }
        for f in self.failures[:30]:
            print("FAIL", f)
        if len(self.failures) > 30:
            print(f"... and {len(self.failures) - 30} more failures")
        print(json.dumps(summary))
        if self.args.min_preemptions and preemptions < self.args.min_preemptions:
            print(f"FAIL only {preemptions} preemptions (the pool is not small enough)")
            return 1
        return 1 if self.failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True, help="the server's process id (memory, fds)")
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--min-preemptions", type=int, default=1)
    ap.add_argument("--max-anon-drift-mib", type=float, default=None,
                    help="fail if the server's anonymous resident memory grows more than this after warm-up")
    args = ap.parse_args()
    sys.exit(Soak(args).run())


if __name__ == "__main__":
    main()
