#!/usr/bin/env python3
"""Plots a decode_bench JSON file: achieved bandwidth per shape against the copy bandwidth
measured in the same run. Usage: plot.py RESULT.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src: str, dst: str) -> None:
    with open(src) as f:
        data = json.load(f)
    rows = data["results"]
    names = [f'{r["shape"]}\n({r.get("config", r.get("convert", ""))})' for r in rows]
    gbs = [r["gbs"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(rows) + 1.8))
    bars = ax.barh(names, gbs, color="#4c72b0")
    ax.axvline(data["copy_gbs"], color="#c44e52", linestyle="--", label=f"copy bandwidth {data['copy_gbs']:.0f} GB/s")
    for bar, r in zip(bars, rows):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {r['pct_copy']:.0f}% ({min(r['eager_us'], r['graph_us']):.0f} us)", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("GB/s (KV + q + out bytes / time)")
    ax.set_title(f"vxqa decode, {data['device']}, {data['label']}\n{data['date']}, commit {data['commit'][:10]}",
                 fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
