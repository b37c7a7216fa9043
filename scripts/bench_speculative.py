#!/usr/bin/env python3
"""Single-stream speed with and without speculative decoding, side by side.

Sends the same greedy completions, one at a time, alternately to two servers (one started
with `--speculative ngram`, one without, same model) and reports each server's decode rate
(output tokens after the first / time after the first token) per workload, and their ratio.

Workloads:
- code-edit: a 300-800-token source file from this repository, then the start of the same
  file with one identifier renamed; the model continues the file (much of it is a copy).
- prose: an ordinary story prompt (little repeats).

Usage: scripts/bench_speculative.py --plain URL --spec URL [--rounds 3] [--max-tokens 256]
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
            if ev.get("usage"):
                tokens = ev["usage"]["completion_tokens"]
    end = time.perf_counter()
    first = first or end
    return tokens, end - first, first - t0, "".join(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--plain", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=256)
    a = ap.parse_args()
    workloads = {
        "code-edit": [code_prompt(*c) for c in CODE_FILES],
        "prose": PROSE,
    }
    for name, prompts in workloads.items():
        rates = {"plain": [], "spec": []}
        for _ in range(a.rounds):
            for p in prompts:
                outs = {}
                for which in ("plain", "spec"):
                    n, secs, _, text = stream(getattr(a, which), p, a.max_tokens)
                    rates[which].append((n - 1) / secs if secs > 0 else 0.0)
                    outs[which] = text
                if outs["plain"] != outs["spec"]:
                    print(f"  {name}: outputs differ!")
        plain = statistics.median(rates["plain"])
        spec = statistics.median(rates["spec"])
        print(
            f"{name}: decode tok/s median plain {plain:.1f}, speculative {spec:.1f}, "
            f"ratio {spec / plain:.2f} ({len(rates['plain'])} requests each)"
        )


if __name__ == "__main__":
    main()
