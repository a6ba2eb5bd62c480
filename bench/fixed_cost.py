#!/usr/bin/env python3
"""fixed_cost.py — a step's fixed cost and streaming rate, from a decode_bench JSON.

    python3 bench/fixed_cost.py RESULT.json [--config NAME] [--min-mb MB]

Fits graph µs = fixed + MB / rate by least squares over the rows of one Config (default
"default atom", rows of at least --min-mb MB: 10) and prints the fit, the rate as % of the
copy bandwidth the run measured, and each row against the line. For a `--ramp` run it also
fits the "one chunk a sequence" rows, and sets each "two chunks a sequence" row beside the
one-chunk row of the same CTAs (half its context, twice its batch): the difference is what
the split and its combine add.
"""
import argparse
import json
import sys


def fit(points):
    """Least-squares fixed + slope * x over (x, y) points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        sys.exit("fixed_cost.py: the rows have one size only; nothing to fit")
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - slope * mx, slope


def report(rows, copy_gbs, title):
    fixed, slope = fit([(r["mbytes"], r["graph_us"]) for r in rows])
    rate = 1e3 / slope  # MB per µs -> GB/s
    print(f"{title}: {len(rows)} rows, graph us = {fixed:.2f} + MB / {rate:.0f} GB/s "
          f"({100 * rate / copy_gbs:.1f} % of the run's {copy_gbs:.0f} GB/s copy)")
    for r in rows:
        line = fixed + slope * r["mbytes"]
        print(f"  {r['shape']}: {r['mbytes']:.1f} MB, {r['graph_us']:.2f} us, line {line:.2f} "
              f"({r['graph_us'] - line:+.2f})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result")
    ap.add_argument("--config", default="default atom")
    ap.add_argument("--min-mb", type=float, default=10.0)
    args = ap.parse_args()
    with open(args.result) as f:
        run = json.load(f)
    rows = run["results"]
    print(f"{run['device']}, commit {run['commit']}, {run['date']}")

    chosen = [r for r in rows if r["config"] == args.config and r["mbytes"] >= args.min_mb]
    if len(chosen) >= 2:
        report(chosen, run["copy_gbs"], f'"{args.config}", at least {args.min_mb:g} MB')

    one = [r for r in rows if r["config"] == "one chunk a sequence"]
    if len(one) >= 2:
        report(one, run["copy_gbs"], "ramp, one chunk a sequence")
    for two in (r for r in rows if r["config"] == "two chunks a sequence"):
        same = [r for r in one if r["batch"] == 2 * two["batch"] and 2 * r["context"] == two["context"]]
        for r in same:
            print(f"  split: {two['shape']} {two['graph_us']:.2f} us against the same CTAs in one chunk "
                  f"({r['shape']}) {r['graph_us']:.2f} us: {two['graph_us'] - r['graph_us']:+.2f} us")


if __name__ == "__main__":
    main()
