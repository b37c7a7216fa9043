#!/usr/bin/env python3
"""Tessera against llama-bench on every model: decode (tg128) and prefill (pp512), one run.

For each round and each model, Tessera's `throughput` example and `llama-bench` run one after
the other (Tessera first in odd rounds, llama.cpp first in even ones, so a drift in the machine's
load touches both alike), with the same thread count. Each run's peak resident memory comes from
`/usr/bin/time -f %M`. Prints the load average before and after, each run's figures, and a
Markdown table of the medians with the ratios the project's goals are stated in (decode >= 1.2x
llama-bench tg, prefill >= 1.5x llama-bench pp).

Each run is tagged with the machine's state, from the core-to-core round trip measured just
before and just after it (`throughput --probe`): a virtual machine's two CPUs on one core complex
(~45 ns) share one memory link, on two (~400 ns) each has its own, and single-sequence decode,
bound by memory, runs up to ~1.3x faster on two. The state moves between runs, so besides the
medians over all runs the script gives each state's decode and prefill ratios over the runs made
wholly in it.

    scripts/bench_models.py --throughput target/release/examples/throughput \\
        --llama-bench "$LLAMA_CPP_DIR"/build/bin/llama-bench --models-dir models --rounds 2

llama.cpp is built outside the repository (`$LLAMA_CPP_DIR` is its checkout); nothing here builds
or fetches it.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = [
    "gemma-3-270m-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
    "smollm2-135m-instruct-q4_1",
]


def timed(cmd):
    """Runs `cmd` under /usr/bin/time; returns (stdout, peak RSS in MiB)."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        out = subprocess.run(
            ["/usr/bin/time", "-f", "%M", "-o", rss.name, *cmd],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout, int(rss.read().strip().splitlines()[-1]) / 1024


def run_tessera(args, model):
    with tempfile.NamedTemporaryFile("r", suffix=".json") as js:
        cmd = [
            args.throughput,
            model,
            "--threads",
            str(args.threads),
            "--batches",
            "1",
            "--prompt",
            "512",
            "--decode",
            "128",
            "--json",
            js.name,
        ]
        _, rss = timed(cmd)
        res = json.load(js)
    return res["pp512"], res["tg128_b1"], rss


def run_llama(args, model):
    cmd = [
        args.llama_bench,
        "-m",
        model,
        "-t",
        str(args.threads),
        "-p",
        "512",
        "-n",
        "128",
        "-r",
        str(args.llama_reps),
        "-o",
        "json",
    ]
    out, rss = timed(cmd)
    pp = tg = None
    for test in json.loads(out):
        if test["n_prompt"] == 512 and test["n_gen"] == 0:
            pp = test["avg_ts"]
        if test["n_prompt"] == 0 and test["n_gen"] == 128:
            tg = test["avg_ts"]
    return pp, tg, rss


TWO_COMPLEXES_NS = 150.0


def probe(args):
    """The core-to-core round trip in ns (`throughput --probe`)."""
    out = subprocess.run(
        [args.throughput, "--probe"], check=True, capture_output=True, text=True
    ).stdout
    return float(out.split()[1])


def state(before, after):
    """'one' or 'two' core complexes if both probes agree, else 'mixed'."""
    a, b = before >= TWO_COMPLEXES_NS, after >= TWO_COMPLEXES_NS
    return "mixed" if a != b else ("two" if a else "one")


def med(rs, k):
    """The median of field `k` of runs `rs`."""
    return statistics.median(r[k] for r in rs)


def loadavg():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--throughput", required=True, help="Tessera's throughput example binary")
    p.add_argument("--llama-bench", required=True)
    p.add_argument("--models-dir", default="models")
    p.add_argument("--models", default=",".join(MODELS), help="file names without .gguf")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--llama-reps", type=int, default=2, help="llama-bench -r")
    args = p.parse_args()

    started = datetime.datetime.now().astimezone()
    print(f"# {started:%Y-%m-%d %H:%M %Z}; load average before: {loadavg()}")
    print("# command: " + " ".join(sys.argv))
    names = args.models.split(",")
    runs = {n: {"tessera": [], "llama": []} for n in names}
    for rnd in range(args.rounds):
        for name in names:
            model = os.path.join(args.models_dir, name + ".gguf")
            order = ["tessera", "llama"] if rnd % 2 == 0 else ["llama", "tessera"]
            for who in order:
                fn = run_tessera if who == "tessera" else run_llama
                before = probe(args)
                pp, tg, rss = fn(args, model)
                after = probe(args)
                st = state(before, after)
                runs[name][who].append((pp, tg, rss, st))
                print(
                    f"round {rnd + 1} {name:<36} {who:<8} pp512 {pp:8.1f}  tg128 {tg:7.1f}"
                    f"  peak RSS {rss:7.1f} MiB  (load {loadavg()}; core-to-core"
                    f" {before:.0f} / {after:.0f} ns: {st})",
                    flush=True,
                )
    print(f"# load average after: {loadavg()}")
    print()
    print(
        "| model | decode tg128, Tessera | llama-bench | ratio | prefill pp512, Tessera "
        "| llama-bench | ratio | peak RSS, Tessera | llama-bench |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        t, l = runs[name]["tessera"], runs[name]["llama"]
        tg_t, tg_l, pp_t, pp_l = med(t, 1), med(l, 1), med(t, 0), med(l, 0)
        print(
            f"| {name} | {tg_t:.1f} | {tg_l:.1f} | {tg_t / tg_l:.2f}× | {pp_t:.1f} | {pp_l:.1f} "
            f"| {pp_t / pp_l:.2f}× | {med(t, 2):.0f} MiB | {med(l, 2):.0f} MiB |"
        )
    print()
    for name in names:
        for st, what in (("one", "one core complex"), ("two", "two core complexes")):
            t = [r for r in runs[name]["tessera"] if r[3] == st]
            l = [r for r in runs[name]["llama"] if r[3] == st]
            if not t or not l:
                continue
            print(
                f"{name}, runs on {what} ({len(t)} Tessera, {len(l)} llama-bench): decode "
                f"{med(t, 1):.1f} / {med(l, 1):.1f} ({med(t, 1) / med(l, 1):.2f}×), prefill "
                f"{med(t, 0):.1f} / {med(l, 0):.1f} ({med(t, 0) / med(l, 0):.2f}×)"
            )


if __name__ == "__main__":
    main()
