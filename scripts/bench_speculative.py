#!/usr/bin/env python3
"""Single-stream speed with and without speculative decoding, side by side.

Sends the same greedy completions, one at a time, alternately to two or more servers (e.g. one
started with `--speculative ngram` or `--draft-model`, one without, same model; or llama-server
with and without `-md`) and reports each server's decode rate (output tokens after the first /
time after the first token) per workload, and its ratio to the first server's.

Workloads:
- code-edit: a 300-800-token source file from this repository, then the start of the same
  file with one identifier renamed; the model continues the file (much of it is a copy).
- prose: an ordinary story prompt (little repeats).

Usage: scripts/bench_speculative.py --plain URL --spec URL [--rounds 3] [--max-tokens 256]
       scripts/bench_speculative.py --server NAME=URL --server NAME=URL ... [--workloads code-edit]
(the first server is the baseline; the token count is the response's usage, else llama-server's
`timings.predicted_n`, else the number of text chunks).
Only the standard library is used.
"""

import argparse
import json
import os
import statistics
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CODE_FILES = [
    ("crates/engine/src/forks.rs", "waiting", "num_waiting"),
    ("crates/engine/src/admission.rs", "reserve", "try_reserve"),
    ("crates/engine/src/ngram.rs", "lookup", "find_match"),
]

PROSE = [
    "The lighthouse keeper climbed the spiral stairs every evening. One stormy night",
    "In the spring of that year the village council decided to rebuild the old mill, and",
    "She opened the letter slowly, already guessing what it would say. The words",
]


def code_prompt(path, old, new):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        code = f.read()
    head = code[: len(code) // 8].replace(old, new)
    return (
        f"Below is a Rust source file, then the same file with `{old}` renamed to `{new}` "
        f"everywhere.\n\n### Original\n```rust\n{code}```\n\n"
        f"### With `{old}` renamed to `{new}`\n```rust\n{head}"
    )


def stream(url, prompt, max_tokens):
    """(tokens, seconds from first token to the end, ttft seconds)."""
    body = json.dumps(
        {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    req = urllib.request.Request(
        url + "/v1/completions", body, {"Content-Type": "application/json"}
    )
    t0 = time.perf_counter()
    first = None
    tokens = 0
    chunks = 0
    text = []
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ev = json.loads(line[5:])
            if ev.get("choices") and ev["choices"][0].get("text"):
                if first is None:
                    first = time.perf_counter()
                text.append(ev["choices"][0]["text"])
                chunks += 1
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
            elif ev.get("timings", {}).get("predicted_n"):
                tokens = ev["timings"]["predicted_n"]
    tokens = tokens or chunks
    end = time.perf_counter()
    first = first or end
    return tokens, end - first, first - t0, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plain", help="baseline server (same as --server plain=URL)")
    ap.add_argument("--spec", help="speculative server (same as --server spec=URL)")
    ap.add_argument("--server", action="append", default=[], help="NAME=URL, repeatable")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--workloads", default="code-edit,prose")
    a = ap.parse_args()
    servers = []
    if a.plain:
        servers.append(("plain", a.plain))
    if a.spec:
        servers.append(("spec", a.spec))
    servers += [tuple(s.split("=", 1)) for s in a.server]
    if len(servers) < 2:
        ap.error("give at least two servers")
    workloads = {
        "code-edit": [code_prompt(*c) for c in CODE_FILES],
        "prose": PROSE,
    }
    base = servers[0][0]
    for name in a.workloads.split(","):
        prompts = workloads[name]
        rates = {s: [] for s, _ in servers}
        same = {s: 0 for s, _ in servers}
        for _ in range(a.rounds):
            for p in prompts:
                outs = {}
                for which, url in servers:
                    n, secs, _, text = stream(url, p, a.max_tokens)
                    rates[which].append((n - 1) / secs if secs > 0 else 0.0)
                    outs[which] = text
                for which, _ in servers:
                    same[which] += outs[which] == outs[base]
        med = {s: statistics.median(r) for s, r in rates.items()}
        total = len(rates[base])
        print(f"{name} ({total} requests each; decode tok/s median, ratio to {base}, "
              f"replies identical to {base}'s):")
        for which, _ in servers:
            print(f"  {which}: {med[which]:.1f} tok/s, {med[which] / med[base]:.2f}x, "
                  f"{same[which]}/{total} identical")


if __name__ == "__main__":
    main()
