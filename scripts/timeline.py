#!/usr/bin/env python3
"""Where messages wait: reads the CSV files NCCL_ZIP_TIMELINE=<dir> leaves (one per comm) and
prints, per comm, the time each stage of a message takes (median, p90, mean in us), the messages
in flight on average (Little's law) and the throughput over the traffic's span.

  scripts/timeline.py DIR [--skip-ms N]   (N: ignore the first N ms of each comm, warm-up)
  scripts/timeline.py DIR --collectives GBPS   (per process: its collectives' spans against the
                                                wire time of their bytes at GBPS GB/s)

Send stages: defer->post (an isend that first returned no request, until the one that took the
message: a wait for the receiver's clear-to-send or a cold kernel), cts->post (NCCL's data comes
after the receiver's clear-to-send), post->coded (the encode), coded->wire (waiting for earlier
messages' turn), wire->done (the transfer), post->done.
Receive stages: post->wire (the sender and the transfer), wire->coded (the decode), coded->done
(NCCL's next test), post->done.
Messages the resident GPU codec coded also split their coding at their job's times on the GPU
(each file logs them on the GPU's clock; a process's are shifted so that its quickest job is
taken the moment it was posted, so the ->taken stage reads as the time above that quickest):
post->taken (receive: wire->taken: the doorbell, until a look of the kernel took the job),
taken->start (the tiles of the jobs before it), start->end (its own tiles), end->coded (until
NCCL's progress thread saw the result).

--collectives: a process's messages of 64 KiB and more whose [post, done] overlap form one
collective (a timing loop's barriers and syncs part them). Per size sent, medians over its
collectives, in us: span (first post to last done), wire (its sent wire bytes at GBPS), fill (first
post to the first send handed to the link; before it, from the first post, the first isend NCCL
tried, the first it took, where the GPU codes: the first job the kernel took, the first tile started
and the first result written, and the first encode's end), tail (the last receive's arrival to the
last done: the decodes still to run then, counted, and NCCL's next test), idle (span - wire: what
the link did not carry)."""
import csv, glob, math, os, statistics, sys


def load(path):
    with open(path) as f:
        head = f.readline().strip("# \n")
        rows = list(csv.DictReader(f))
    return head, rows


def stats(xs):
    if not xs:
        return "-"
    xs = sorted(xs)
    return f"{xs[len(xs) // 2]:.0f} / {xs[int(len(xs) * 0.9)]:.0f} / {statistics.fmean(xs):.0f}"


def messages(path):
    """The file's header line, its first event's t_ns, {(seq, sub): {event: t_ns, 'bytes',
    'wire_bytes', 'compressed', 'defer': the first isend NCCL tried where it was deferred}},
    clear-to-send times {seq: t_ns}."""
    head, rows = load(path)
    if not rows:
        return head, None, {}, {}
    msgs, cts, deferred = {}, {}, None
    for r in rows:
        t = int(r["t_ns"])
        if r["event"] == "cts":
            cts[int(r["seq"])] = t
            continue
        if r["event"] == "defer":
            deferred = t
            continue
        m = msgs.setdefault((int(r["seq"]), int(r["sub"])), {})
        if r["event"] == "post" and deferred is not None:
            m["defer"] = deferred
            deferred = None
        m[r["event"]] = t
        if r["event"] == "post":
            m["bytes"] = int(r["bytes"])
        if r["event"] in ("wire", "coded"):
            m["compressed"] = r["compressed"] == "1"
            if r["event"] == "wire":
                m["wire_bytes"] = int(r["bytes"])
    return head, int(rows[0]["t_ns"]), msgs, cts


GPU = ("gpu_taken", "gpu_start", "gpu_end")


def pid_of(head):
    return head.rsplit("pid ", 1)[-1]


def load_all(files):
    """messages() of every file, each process's GPU times moved onto its clock: by the least
    (taken - posted) over its jobs, an encode posted at its isend, a decode at its arrival."""
    loaded = [(path, *messages(path)) for path in files]
    offset = {}
    for _, head, _, msgs, _ in loaded:
        send = head.startswith("send")
        for m in msgs.values():
            at = m.get("post" if send else "wire")
            if "gpu_taken" in m and at is not None:
                pid = pid_of(head)
                offset[pid] = min(offset.get(pid, m["gpu_taken"] - at), m["gpu_taken"] - at)
    for _, head, _, msgs, _ in loaded:
        for m in msgs.values():
            for e in GPU:
                if e in m:
                    m[e] -= offset.get(pid_of(head), 0)
    return loaded


def collectives(loaded, gbps):
    procs = {}
    for path, head, _, msgs, _ in loaded:
        pid = pid_of(head)
        send = head.startswith("send")
        procs.setdefault(pid, []).extend(
            dict(m, send=send) for m in msgs.values()
            if m.get("bytes", 0) >= 65536 and "post" in m and "done" in m)
    print(f"per process and size sent, medians over its collectives (us); wire at {gbps} GB/s")
    for pid, ms in sorted(procs.items()):
        ms.sort(key=lambda m: m["post"])
        groups, end = [], None
        for m in ms:
            if end is None or m["post"] > end:
                groups.append([])
                end = m["done"]
            groups[-1].append(m)
            end = max(end, m["done"])
        by_size = {}
        for g in groups:
            sends = [m for m in g if m["send"]]
            recvs = [m for m in g if not m["send"] and "wire" in m]
            if not sends or not recvs:
                continue
            t0, t1 = min(m["post"] for m in g), max(m["done"] for m in g)
            last = max(m["wire"] for m in recvs)  # the last receive's arrival
            wire_bytes = sum(m.get("wire_bytes", m["bytes"]) for m in sends)
            first = lambda e: (min((m[e] for m in sends if e in m), default=math.nan) - t0) / 1e3
            row = {"span": (t1 - t0) / 1e3, "wire": wire_bytes / gbps / 1e3, "fill": first("wire"),
                   "ready": (min(m.get("defer", m["post"]) for m in sends) - t0) / 1e3,
                   "taken": first("post"), "first_coded": first("coded"),
                   **{e: first(e) for e in GPU},
                   "tail": (t1 - last) / 1e3,
                   "ratio": wire_bytes / sum(m["bytes"] for m in sends),
                   "coded": sum(1 for m in sends if m.get("compressed")) / len(sends)}
            # Receives still to decode when the last one lands: the tail's work.
            row["behind"] = sum(1 for m in recvs if m.get("coded", 0) > last)
            row["idle"] = row["span"] - row["wire"]
            kib = round(sum(m["bytes"] for m in sends) / 1024)
            by_size.setdefault(kib, []).append(row)
        for kib, rows in sorted(by_size.items()):
            med = {k: statistics.median([r[k] for r in rows if not math.isnan(r[k])] or [math.nan])
                   for k in rows[0]}
            size = f"{kib / 1024:g} MiB" if kib >= 1024 else f"{kib} KiB"
            gpu = "" if math.isnan(med["gpu_taken"]) else (
                f"GPU took it {med['gpu_taken']:.0f}, first tile {med['gpu_start']:.0f}, "
                f"result {med['gpu_end']:.0f}, ")
            print(f"pid {pid}, {size} sent, {len(rows)} collectives: span {med['span']:.0f}, "
                  f"wire {med['wire']:.0f}, fill {med['fill']:.0f} (a send ready {med['ready']:.0f}, "
                  f"taken {med['taken']:.0f}, {gpu}coded {med['first_coded']:.0f}), tail {med['tail']:.0f}, "
                  f"idle {med['idle']:.0f}; ratio {med['ratio']:.3f}, {med['coded']:.0%} coded, "
                  f"{med['behind']:g} receives decoding at the last arrival")


def option(args, name):
    """The value after `name` in args (both taken out), or None."""
    if name not in args:
        return None
    i = args.index(name)
    value = float(args[i + 1])
    del args[i:i + 2]
    return value


def main():
    args = sys.argv[1:]
    gbps = option(args, "--collectives")
    skip_ms = option(args, "--skip-ms") or 0.0
    if len(args) != 1:
        sys.exit(__doc__)
    files = sorted(glob.glob(os.path.join(args[0], "zipccl-*.csv")))
    if not files:
        sys.exit(f"no zipccl-*.csv in {args[0]}")
    loaded = load_all(files)
    if gbps is not None:
        return collectives(loaded, gbps)
    print("stage: median / p90 / mean us")
    for path, head, first, msgs, cts in loaded:
        if not msgs:
            continue
        send = head.startswith("send")
        t0 = first + skip_ms * 1e6
        waits = [(m["post"] - m["defer"]) / 1e3 for m in msgs.values() if "defer" in m and m["post"] >= t0]
        done = [(k, m) for k, m in msgs.items() if "post" in m and "done" in m and m["post"] >= t0]
        if not done:
            continue
        span = (max(m["done"] for _, m in done) - min(m["post"] for _, m in done)) / 1e9
        nbytes = sum(m.get("bytes", 0) for _, m in done)
        comp = sum(1 for _, m in done if m.get("compressed"))
        wire = sum(m.get("wire_bytes", 0) for _, m in done)
        us = lambda a, b: [(m[b] - m[a]) / 1e3 for _, m in done if a in m and b in m]
        total = us("post", "done")
        print(f"\n{os.path.basename(path)} ({head}): {len(done)} messages, {comp} compressed, "
              f"{nbytes / 1e6:.1f} MB posted, {wire / 1e6:.1f} MB on the wire, "
              f"{nbytes / span / 1e9 if span > 0 else 0:.2f} GB/s over {span * 1e3:.1f} ms, "
              f"{sum(total) / 1e6 / span if span > 0 else 0:.1f} in flight")
        if send:
            c = [(m["post"] - cts[k[0]]) / 1e3 for k, m in done if k[0] in cts]
            stages = [("defer->post", waits), ("cts->post", c), ("post->coded", us("post", "coded")),
                      ("coded->wire", us("coded", "wire")),
                      ("post->wire (raw)", [(m["wire"] - m["post"]) / 1e3 for _, m in done
                                            if "wire" in m and "coded" not in m]),
                      ("wire->done", us("wire", "done"))]
        else:
            stages = [("post->wire", us("post", "wire")), ("wire->coded", us("wire", "coded")),
                      ("coded->done", us("coded", "done")),
                      ("wire->done (raw)", [(m["done"] - m["wire"]) / 1e3 for _, m in done
                                            if "wire" in m and "coded" not in m])]
        gpu = [("post->taken" if send else "wire->taken", us("post" if send else "wire", "gpu_taken")),
               ("taken->start", us("gpu_taken", "gpu_start")), ("start->end", us("gpu_start", "gpu_end")),
               ("end->coded", us("gpu_end", "coded"))]
        for name, xs in stages + [("post->done", total)] + (gpu if gpu[0][1] else []):
            print(f"  {name:18s} {stats(xs):>24s}  ({len(xs)})")


if __name__ == "__main__":
    main()
