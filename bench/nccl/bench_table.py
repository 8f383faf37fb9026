#!/usr/bin/env python3
"""The table of scripts/device-nccl-bench.sh's runs: per collective and size the median time of
each run label and its speedup over compression off at the same pacing, measured in the same call.

    bench_table.py DIR PACES LABEL...

DIR: the bench's $OUT, whose *.log files hold "BENCH label=<pacing>_<variant> coll=... bytes=...
median_ms=..." lines (one log per label and round); a label measured in several rounds counts the
median of its rounds' medians; a label run as an A/B of nets stands for its LABEL@<net> parts.
Before the table, each label's account from the plugin (its send comms' closing lines: messages,
how many compressed and coded on the GPU, ratios; the codec's job-seconds per second inside
collectives; the tuner's decisions; each rank's kernel starts, the median from demand to running
and its parts, awake / launch call / to running). LABEL...: the
table's columns in order. After it, where labels ran as an A/B of nets, their table: per collective
and size B's time over A's (> 1: A faster), the geometric mean over rounds of each round's median
pair ratio, and the rounds' lowest and highest.
"""
import glob
import os
import re
import statistics
import sys


def load(top):
    """{(label, collective, bytes): median ms over the rounds} from DIR/*.log."""
    runs = {}
    for f in glob.glob(os.path.join(top, "*.log")):
        for m in re.finditer(r"BENCH label=(\S+) coll=(\S+) bytes=(\d+) median_ms=([\d.]+)", open(f, errors="replace").read()):
            runs.setdefault((m[1], m[2], int(m[3])), []).append(float(m[4]))
    return {k: statistics.median(v) for k, v in runs.items()}


def base(label):
    """The run with compression off at the same pacing."""
    return label.split("_")[0] + "_off"


def human(b):
    if b >= 1 << 30:
        return f"{b >> 30} GiB"
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def codec_share(text):
    """The codec's job-seconds (every connection's encodes and decodes, all ranks) per second the
    ranks spent inside collectives (BUSY lines): jobs of several connections at once each count,
    so it can pass 1. None without BUSY lines."""
    busy = sum(float(x) for x in re.findall(r"BUSY label=\S+ rank=\d+ seconds=([\d.]+)", text))
    codec = sum(float(x) for x in re.findall(r"(?:send|recv) comm .* closed: .*?, codec ([\d.]+) s,", text))
    return codec / busy if busy > 0 else None


def starts(text):
    """Each rank's resident kernel starts: how many, the median from demand to running, and its
    parts where the log gives them (awake / launch call / to running, us)."""
    out = []
    for x in re.finditer(r"resident kernel started (\d+) times, (\d+) us median from demand to running \(p90 \d+, "
                         r"max \d+(?:; medians: awake (\d+), launch call (\d+), to running (\d+))?\)", text):
        parts = f" ({x[3]}/{x[4]}/{x[5]})" if x[3] else ""
        out.append(f"{x[1]}x {x[2]} us{parts}")
    return f", kernel starts {', '.join(out)}" if out else ""


def accounts(top):
    for f in sorted(glob.glob(os.path.join(top, "*.log"))):
        m = c = g = 0
        ratios = []
        text = open(f, errors="replace").read()
        for x in re.finditer(r"send comm .* closed: (\d+) messages \((\d+) compressed\).* ratio ([\d.]+).* (\d+) codec jobs on the GPU", text):
            m, c, g = m + int(x[1]), c + int(x[2]), g + int(x[4])
            ratios.append(x[3])
        if m:
            tuned = (f", tuner decisions: {text.count('/Simple compressed')} compressed, {text.count(chr(39).join(['NCCL', 's choice']))} NCCL's"
                     if "tuner: " in text else "")
            share = codec_share(text)
            busy = f", codec {share:.2f} job-s per collective-s" if share is not None else ""
            print(f"{os.path.basename(f)[:-4]}: {m} messages sent, {c} compressed, {g} coded on the GPU, ratios {' '.join(ratios)}{busy}{tuned}{starts(text)}")


def ab_table(top, order):
    """The A/B runs' table (collective_bench.py "AB" lines), one column per label of order."""
    runs, nets = {}, {}
    for f in glob.glob(os.path.join(top, "*.log")):
        for m in re.finditer(r"AB label=(\S+) coll=(\S+) bytes=(\d+) a=(\S+) b=(\S+) ratio=([\d.]+)",
                             open(f, errors="replace").read()):
            runs.setdefault((m[1], m[2], int(m[3])), []).append(float(m[6]))
            nets[m[1]] = (m[4], m[5])
    labels = [l for l in dict.fromkeys(order) if l in nets]
    if not labels:
        return
    a, b = nets[labels[0]]
    print(f"\n(A/B in one process: {b}'s time over {a}'s, geometric mean of the rounds' median pair ratios "
          "[lowest-highest round])")
    print("| collective | size | " + " | ".join(labels) + " |")
    print("|---|---|" + "---|" * len(labels))
    for c, size in sorted({(c, size) for (_, c, size) in runs}):
        cells = []
        for l in labels:
            r = runs.get((l, c, size))
            cells.append(f"{statistics.geometric_mean(r):.2f} [{min(r):.2f}-{max(r):.2f}]" if r else "-")
        print(f"| {c} | {human(size)} | " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    top, pace, order = sys.argv[1], sys.argv[2], sys.argv[3:]
    t = load(top)
    accounts(top)
    keys = sorted({(c, s) for (_, c, s) in t})
    # A label run as an A/B of nets (collective_bench.py --nets) stands for its LABEL@<net> parts.
    found = sorted({k[0] for k in t})
    labels = [l for o in dict.fromkeys(order) for l in found if l == o or l.startswith(o + "@")]
    print(f"\n(p<N>: each rank's sends capped at N Mb/s ({pace}); lo: unpaced, lo_socket NCCL's own Socket transport; "
          "x: speedup over compression off at the same pacing)")
    print("| collective | size | " + " | ".join(f"{l} ms" + ("" if l == base(l) else f" | {l} x") for l in labels) + " |")
    print("|---|---|" + "---|" * sum(1 if l == base(l) else 2 for l in labels))
    for c, s in keys:
        row = []
        for l in labels:
            v, o = t.get((l, c, s)), t.get((base(l), c, s))
            row.append(f"{v:.3g}" if v else "-")
            if l != base(l):
                row.append(f"{o / v:.2f}" if v and o else "-")
        print(f"| {c} | {human(s)} | " + " | ".join(row) + " |")
    ab_table(top, order)
    return 0


if __name__ == "__main__":
    sys.exit(main())
