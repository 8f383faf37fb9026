#!/usr/bin/env python3
"""Speedup against size, and against link speed, one panel per collective, from
scripts/device-nccl-bench.sh's logs.

    plot_speedup.py DIR OUT.png [--title TEXT]

DIR: the bench's $OUT, whose *.log files hold "BENCH label=<pacing>_<variant> coll=... bytes=...
median_ms=..." lines. Each variant's speedup is the time of <pacing>_off (compression off at the
same pacing, same call; labels measured in several rounds: the median of the rounds' medians)
over its own. Top row: against size, one line per label. Bottom row (where the runs were paced at
two speeds or more): against the paced link's speed, one line per variant and size from 64 MiB.
1.0 marked. Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_table import base, load  # noqa: E402


def short(b):
    if b >= 1 << 30:
        return f"{b >> 30}G"
    return f"{b >> 20}M" if b >= 1 << 20 else f"{b >> 10}K"


LINK_PLOT_MIN_BYTES = 64 << 20  # below, collectives are latency-bound: speed lines say little


def by_link(t, coll):
    """{(variant, bytes): [(link GB/s, speedup)]} of the paced runs (labels p<Mb/s>_<variant>)."""
    lines = {}
    for (label, c, size), ms in t.items():
        pacing, _, variant = label.partition("_")
        if c != coll or variant == "off" or size < LINK_PLOT_MIN_BYTES or ms <= 0:
            continue
        if not (pacing.startswith("p") and pacing[1:].isdigit()):
            continue
        off = t.get((pacing + "_off", c, size))
        if off:
            lines.setdefault((variant, size), []).append((int(pacing[1:]) / 8000, off / ms))
    return {k: sorted(v) for k, v in lines.items() if len(v) > 1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    t = load(args.dir)
    if not t:
        print(f"no BENCH lines in {args.dir}/*.log", file=sys.stderr)
        return 1
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = sorted({c for (_, c, _) in t})
    labels = sorted({l for (l, _, _) in t if not l.endswith("_off")})
    links = {coll: by_link(t, coll) for coll in colls}
    rows = 2 if any(links.values()) else 1
    fig, axes = plt.subplots(rows, len(colls), figsize=(5.5 * len(colls), 4 * rows), squeeze=False)
    for ax, coll in zip(axes[0], colls):
        for label in labels:
            off = base(label)
            pts = sorted((s, t[(off, coll, s)] / v) for (l, c, s), v in t.items()
                         if l == label and c == coll and (off, coll, s) in t and v > 0)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xscale("log", base=2)
        sizes = sorted({s for (_, c, s) in t if c == coll})
        ax.set_xticks(sizes)
        ax.set_xticklabels([short(s) for s in sizes], rotation=45)
        ax.set_xlabel("size (total buffer)")
        ax.set_ylabel("speedup over compression off")
        ax.set_title(coll)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for ax, coll in zip(axes[1] if rows == 2 else [], colls):
        for (variant, size), pts in sorted(links[coll].items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{variant} {short(size)}")
        ax.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
        ax.set_xlabel("link speed, GB/s per rank (paced)")
        ax.set_ylabel("speedup over compression off")
        ax.set_title(coll)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
