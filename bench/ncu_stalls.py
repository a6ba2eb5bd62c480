#!/usr/bin/env python3
"""ncu_stalls.py — where a decode kernel's warps wait, main loop against epilogue.

    ncu_stalls.py SOURCE.csv [--top N]

SOURCE.csv is `ncu -i REPORT --page source --csv --print-source sass` of one kernel
(collected with at least `--section SourceCounters`). Every column whose name holds
"Sampling" or "stall" is a count of warp samples; the script sums each over the
instructions before the kernel's first PREEXIT (griddepcontrol.launch_dependents, which the
decode kernel issues right after its main loop) and from it on (the CTA's tail: cp.async
drain, barriers, the warps' merge and the stores), prints both, and lists the tail's N
instructions with the most samples. Python 3 standard library only.
"""

import argparse
import csv
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if "Source" in line and ("Address" in line or "#" in line)), None)
    if start is None:
        sys.exit("ncu_stalls: no header row with a Source column")
    rows = list(csv.reader(lines[start:]))
    header, body = rows[0], rows[1:]
    source = header.index("Source")
    counts = [i for i, name in enumerate(header) if "Sampling" in name or "stall" in name.lower()]
    if not counts:
        sys.exit("ncu_stalls: no sampling columns in " + ", ".join(header))

    def number(text):
        try:
            return float(text.replace(",", ""))
        except ValueError:
            return 0.0

    tail_from = next((i for i, r in enumerate(body) if len(r) > source and "PREEXIT" in r[source]), len(body))
    print(f"{len(body)} instructions, the tail from #{tail_from} ({len(body) - tail_from} instructions)")
    print(f"{'column':60s} {'loop and before':>16s} {'tail':>10s}")
    for c in counts:
        before = sum(number(r[c]) for r in body[:tail_from] if len(r) > c)
        tail = sum(number(r[c]) for r in body[tail_from:] if len(r) > c)
        if before or tail:
            print(f"{header[c][:60]:60s} {before:16.0f} {tail:10.0f}")
    total = counts[0]
    ranked = sorted(body[tail_from:], key=lambda r: -number(r[total]) if len(r) > total else 0)
    print(f"\nthe tail's {args.top} instructions with the most '{header[total]}':")
    for r in ranked[: args.top]:
        nonzero = [f"{header[c][:28]}={number(r[c]):.0f}" for c in counts[1:] if len(r) > c and number(r[c]) > 0]
        print(f"{number(r[total]):8.0f}  {r[source][:60]:60s} {' '.join(nonzero[:4])}")


if __name__ == "__main__":
    main()
