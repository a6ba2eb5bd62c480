#!/usr/bin/env python3
"""Plots % of the copy bandwidth against context length at batch 1 and 16, from
`decode_bench --contexts` JSON (and, optionally, flashinfer_peer.py run on that file).

Usage: plot_contexts.py CONTEXTS.json OUT.png [PEER.json]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series(rows, batch):
    pts = sorted((r["context"], r["pct_copy"]) for r in rows if r["batch"] == batch)
    return [p[0] for p in pts], [p[1] for p in pts]


def main(src, dst, peer=""):
    with open(src) as f:
        data = json.load(f)
    sets = [("vxqa " + data["results"][0]["config"], data["results"], "-")]
    if peer:
        with open(peer) as f:
            p = json.load(f)
        sets.append((p["results"][0]["config"], p["results"], "--"))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    colors = {1: "#4c72b0", 16: "#dd8452"}
    for name, rows, style in sets:
        for batch in (1, 16):
            x, y = series(rows, batch)
            if x:
                ax.plot(x, y, style, marker="o", color=colors[batch], label=f"{name}, batch {batch}")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1024 * 2**i for i in range(8)], [f"{2**i}K" for i in range(8)])
    ax.axhline(100, color="#c44e52", linestyle=":", label="copy bandwidth")
    ax.set_ylim(0, 105)
    ax.set_xlabel("context length (tokens), E5M2, D 256, G6 Hkv1, page 800")
    ax.set_ylabel("% of the device-to-device copy bandwidth")
    ax.set_title(f"{data['device']}, copy {data['copy_gbs']:.0f} GB/s, {data['date']}, commit {data['commit'][:10]}",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:4])
