#!/usr/bin/env python3
"""Plots decode_bench JSON files (and optionally a flashinfer_peer.py one from the same run):
per shape, the achieved bandwidth of every Config as % of the copy bandwidth measured in
the same run (left), and achieved GB/s against the bytes a step must move, a roofline-style
view with the copy bandwidth as the roof (right).

Usage: plot.py RESULT.json OUT.png [PEER.json]"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def best_us(r):
    return min(r["eager_us"], r["graph_us"])


def main(src: str, dst: str, peer: str = "") -> None:
    with open(src) as f:
        data = json.load(f)
    rows = [dict(r, config=r.get("config", r.get("convert", ""))) for r in data["results"]]
    if peer:
        with open(peer) as f:
            rows += json.load(f)["results"]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    configs = list(dict.fromkeys(r["config"] for r in rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, (ax, roof) = plt.subplots(1, 2, figsize=(15, 0.55 * len(shapes) * max(1, len(configs) / 2) + 2.5),
                                   gridspec_kw={"width_ratios": [3, 2]})
    height = 0.8 / len(configs)
    for ci, config in enumerate(configs):
        for si, shape in enumerate(shapes):
            r = next((r for r in rows if r["shape"] == shape and r["config"] == config), None)
            if r is None:
                continue
            y = si + ci * height
            ax.barh(y, r["pct_copy"], height, color=colors[ci % len(colors)], label=config if si == 0 else None)
            ax.text(r["pct_copy"], y, f" {r['pct_copy']:.0f}% ({best_us(r):.1f} us)", va="center", fontsize=7)
            roof.scatter(r["mbytes"], r["gbs"], color=colors[ci % len(colors)], s=18)
    ax.set_yticks([si + 0.4 - height / 2 for si in range(len(shapes))], shapes, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(100, color="#c44e52", linestyle="--")
    ax.set_xlabel("% of the device-to-device copy bandwidth (KV + q + out bytes / best of eager and graph time)")
    ax.legend(loc="lower right", fontsize=7)
    ax.set_title(f"vxqa decode, {data['device']}, copy {data['copy_gbs']:.0f} GB/s\n{data['date']}, commit "
                 f"{data['commit'][:10]}", fontsize=9)
    roof.axhline(data["copy_gbs"], color="#c44e52", linestyle="--", label="copy bandwidth (the roof)")
    roof.set_xscale("log")
    roof.set_xlabel("MB a step must move")
    roof.set_ylabel("achieved GB/s")
    roof.legend(fontsize=7)
    roof.set_title("bandwidth against size", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:4])
