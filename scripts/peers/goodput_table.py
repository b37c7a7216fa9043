#!/usr/bin/env python3
"""Markdown table of `tessera bench --find-capacity --json` reports, one row per server.

Usage: goodput_table.py --run REPORT.json WEIGHTS [--run REPORT.json WEIGHTS ...]

A row gives the server (the report's label), its weights as named by the caller, its capacity
(the highest passing request rate below every failing one), and the TTFT and TPOT p90 and the
fraction of good requests of the probe at that rate. A search whose lowest rate already failed
has no capacity: "< RATE (failed there)", with that failing probe's figures.
"""

import argparse
import json
import sys


def fmt(x, digits=0):
    return "n/a" if x is None else f"{x:.{digits}f}"


def row(path, weights):
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    if report.get("kind") != "capacity":
        raise ValueError(f"{path}: not a --find-capacity report (kind {report.get('kind')!r})")
    answer = report["answer"]
    probes = report["probes"]
    label = report.get("label") or report["url"]
    cap = answer["capacity_rps"]
    failing = answer["lowest_failing_rps"]
    if cap is None:
        # No rate passed: the figures of the lowest (failing) probe, to show how far off it was.
        p = min(probes, key=lambda q: q["rate"])
        capacity = f"< {p['rate']:.3g} (failed there)"
    else:
        at = [q for q in probes if q["rate"] == cap and q["passed"]]
        if not at:
            raise ValueError(f"{path}: no passing probe at the capacity {cap}")
        p = at[-1]
        capacity = f"{cap:.3f}"
    return [
        label,
        weights,
        capacity,
        fmt(p["ttft_ms"]["p90"]),  # n/a when no request succeeded
        fmt(p["tpot_ms"]["p90"], 1),
        f"{100 * p['fraction_good']:.0f}% ({p['good_requests']}/{p['requests_measured']})",
        fmt(failing, 3) if failing is not None else "none failed",
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", nargs=2, action="append", metavar=("REPORT", "WEIGHTS"),
                        required=True)
    args = parser.parse_args()
    header = ["Server", "Weights", "Capacity (req/s)", "TTFT p90 (ms)", "TPOT p90 (ms)",
              "Good there", "Lowest failing (req/s)"]
    rows = []
    for path, weights in args.run:
        try:
            rows.append(row(path, weights))
        except (OSError, KeyError, ValueError, json.JSONDecodeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 1
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
