#!/usr/bin/env python3
"""Prefill speed of servers running side by side: each round sends every server one fresh prompt
of common English words (no shared prefix, so no prefix cache helps) with max_tokens 1, in turn,
and times the whole request; rounds alternate the servers so a drift of a shared host touches
them alike. Prints each request and each server's median prompt tokens per second.

Usage: prefill_ttft.py [--words 820] [--rounds 6] [--seed 0] NAME=URL[,MODEL] ...
  URL is an OpenAI-compatible /v1/completions endpoint; MODEL the `model` field to send (vLLM
  wants its served name; Tessera takes none). The prompts follow from --seed: run again against
  the same servers with another seed, or their prefix caches answer.
Example (three servers started beforehand on ports 8712-8714):
  prefill_ttft.py vllm=http://127.0.0.1:8712/v1/completions,qwen \\
      tessera-bf16=http://127.0.0.1:8713/v1/completions tessera-q4=http://127.0.0.1:8714/v1/completions
"""
import argparse
import json
import random
import statistics
import time
import urllib.request

WORDS = (
    "the of and to in is was for on that with as by at from his her an which or be are this "
    "have not but had they were one all there been has their more when will would who so no out "
    "up into if do than only other its time new some could these two may then first any my now "
    "such like our over man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state "
    "good very make world still own see men work long get here between both life being under "
    "never day same another know while last might us great old year off come since against go "
    "came right used take three"
).split()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=820)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("servers", nargs="+", metavar="NAME=URL[,MODEL]")
    args = ap.parse_args()
    servers = []
    for spec in args.servers:
        name, _, rest = spec.partition("=")
        url, _, model = rest.partition(",")
        if not name or not url:
            ap.error(f"bad server {spec!r}: want NAME=URL[,MODEL]")
        servers.append((name, url, model or None))
    rates = {name: [] for name, _, _ in servers}
    for rnd in range(args.rounds):
        for i, (name, url, model) in enumerate(servers):
            rng = random.Random(1_000_000_007 * args.seed + 1_000_003 * rnd + i)
            body = {"prompt": " ".join(rng.choice(WORDS) for _ in range(args.words)),
                    "max_tokens": 1, "temperature": 0}
            if model:
                body["model"] = model
            req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            t = time.time()
            with urllib.request.urlopen(req, timeout=600) as r:
                n = json.load(r)["usage"]["prompt_tokens"]
            dt = time.time() - t
            rates[name].append(n / dt)
            print(f"round {rnd} {name}: {n} prompt tokens in {dt * 1000:.0f} ms ({n / dt:.0f} tok/s)",
                  flush=True)
    for name, r in rates.items():
        print(f"{name}: median {statistics.median(r):.0f} tok/s (all: "
              f"{', '.join(f'{x:.0f}' for x in sorted(r))})")


if __name__ == "__main__":
    main()
