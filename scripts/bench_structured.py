#!/usr/bin/env python3
"""Structured-output throughput: N concurrent JSON-schema requests against N unconstrained ones
on a running server, alternating A/B rounds. Prints output tok/s and inter-token latency p50/p99
per round, the constrained/unconstrained ratio, and the mask cost per token per sequence from
the server's /metrics (tessera_structured_mask_seconds_total / tessera_structured_masks_total).

    scripts/bench_structured.py --url http://127.0.0.1:8660 [--clients 16] [--tokens 128] [--rounds 2]
        [--llama-url http://127.0.0.1:8661]

With --llama-url, each round also runs the same two loads against llama-server (its
`json_schema` field instead of `response_format`; no mask metrics there), alternated with
Tessera's in the same round, and prints Tessera/llama-server output tok/s for the constrained
load, the load average before each round, and the means at the end. (--llama alone points
--url at a llama-server.) Both modes generate exactly --tokens tokens per request: the
unconstrained requests set ignore_eos, the schema asks for more array items than --tokens can
hold.
"""

import argparse
import json
import os
import statistics
import threading
import time
import urllib.request

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 40},
        "items": {
            "type": "array",
            "minItems": 200,
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 24}, "qty": {"type": "integer"}},
                "required": ["name", "qty"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["title", "items"],
    "additionalProperties": False,
}
PROMPT = "List a shop's inventory as JSON: a title, then many items with a name and a quantity."


def stream(url, body, out):
    req = urllib.request.Request(f"{url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    times, tokens = [], 0
    with urllib.request.urlopen(req, timeout=1800) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                if c.get("delta", {}).get("content"):
                    times.append(time.perf_counter())
    # A server that reports no usage in the stream: one content delta per token.
    out.append((times, tokens or len(times)))


def metrics(url):
    try:
        text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
    except OSError:
        return {}
    vals = {}
    for line in text.splitlines():
        if line.startswith("tessera_structured_"):
            k, v = line.split()
            vals[k] = float(v)
    return vals


def round_(args, constrained, url=None, llama=None):
    url = url or args.url
    llama = args.llama if llama is None else llama
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": args.tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if constrained and llama:
        body["json_schema"] = SCHEMA
    elif constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "inv", "schema": SCHEMA}}
    else:
        body["ignore_eos"] = True
    out, threads = [], []
    before = metrics(url)
    t0 = time.perf_counter()
    for i in range(args.clients):
        b = dict(body, seed=i)
        th = threading.Thread(target=stream, args=(url, b, out))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    after = metrics(url)
    itl = [b - a for times, _ in out for a, b in zip(times, times[1:])]
    tokens = sum(t for _, t in out)
    masks = after.get("tessera_structured_masks_total", 0) - before.get("tessera_structured_masks_total", 0)
    mask_s = after.get("tessera_structured_mask_seconds_total", 0) - before.get(
        "tessera_structured_mask_seconds_total", 0)
    return {
        "tok_s": tokens / wall,
        "tokens": tokens,
        "itl_p50_ms": statistics.median(itl) * 1e3,
        "itl_p99_ms": statistics.quantiles(itl, n=100)[98] * 1e3,
        "mask_us": (mask_s / masks * 1e6) if masks else None,
        "masks": masks,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--llama", action="store_true", help="--url is a llama-server")
    p.add_argument("--llama-url", help="a llama-server on the same model, run alternated with --url")
    args = p.parse_args()
    ratios, vs_llama = [], []
    for r in range(args.rounds):
        load = os.getloadavg()
        print(f"round {r}: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
        plain = round_(args, False)
        cons = round_(args, True)
        ratios.append(cons["tok_s"] / plain["tok_s"])
        print(f"round {r}: unconstrained {json.dumps(plain)}")
        print(f"round {r}: constrained   {json.dumps(cons)}")
        print(f"round {r}: ratio constrained/unconstrained tok/s = {ratios[-1]:.3f}")
        if args.llama_url:
            l_plain = round_(args, False, args.llama_url, True)
            l_cons = round_(args, True, args.llama_url, True)
            vs_llama.append(cons["tok_s"] / l_cons["tok_s"])
            print(f"round {r}: llama-server unconstrained {json.dumps(l_plain)}")
            print(f"round {r}: llama-server constrained   {json.dumps(l_cons)}")
            print(f"round {r}: llama-server ratio constrained/unconstrained = "
                  f"{l_cons['tok_s'] / l_plain['tok_s']:.3f}")
            print(f"round {r}: constrained tok/s Tessera / llama-server = {vs_llama[-1]:.3f}")
    print(f"mean ratio {statistics.mean(ratios):.3f}")
    if vs_llama:
        print(f"mean constrained Tessera / llama-server {statistics.mean(vs_llama):.3f}")


if __name__ == "__main__":
    main()
