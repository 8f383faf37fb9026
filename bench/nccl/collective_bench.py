#!/usr/bin/env python3
"""Collective timing through whatever NCCL transport the environment selects, ZIP_RANKS (default 2)
ranks on one host.

    python bench/nccl/collective_bench.py --label NAME [--sizes 64K,1M,64M,256M] [--repeats 10]
                                          [--collectives all_gather,reduce_scatter,all_reduce,
                                                         alltoallv,alltoallv_late] [--sync stream]

Ranks, NCCL_HOSTID and MPS as in ranks.py (scripts/device-nccl-bench.sh runs it).
Data: bf16 N(0, 0.02^2), different per rank; --data FILE: the values of a .safetensors file of bf16
tensors (../shared/data/grads_bf16.safetensors), tiled, from a different offset per rank. SIZE is the collective's total buffer: all_gather's
output, reduce_scatter's input, all_reduce's tensor, alltoallv's input per rank (an MoE dispatch
with one expert 8x hotter; alltoallv_late: the last rank enters 2 ms late); K, M and G suffixes are
KiB, MiB and GiB, a plain number MiB. Each timing is one collective between two barriers and device syncs
(torch.cuda.synchronize(), as a user's timing loop: it also waits for the plugin's codec kernel to
exit when idle); --sync stream: syncs of the current stream only, the collective's own time
(warm-up 3; --repeats timings, more below 4 MiB: see repeats()); prints "BENCH label=... coll=... bytes=... median_ms=... p90_ms=... algbw=..." per
collective and size from rank 0 (algbw: GB/s of SIZE over the time).
Each rank then prints its seconds inside collectives, warm-ups included ("BUSY label=... rank=...
seconds=..."). After the timings, one all_gather of the largest size is checked bit for bit
("CHECK ok=1|0").

--nets A,B (or ZIP_BENCH_NETS): an A/B in one process: each rank makes one communicator per NCCL
net (Zip, Socket: ncclConfig_t.netName; NCCL_NET is dropped, as it would override them) and times
each collective on both in turn, repeat by repeat, the first alternating (ABBA), between the same
barriers: runs differ by more than these nets do at small sizes (docs/benchmarks.md). Prints BENCH
lines labelled LABEL@<net> and per collective and size "AB ... ratio=..." from rank 0: the median
over repeats of B's time / A's (> 1: A faster) and the share of repeats A was faster in
(bench_table.py's A/B table).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from ranks import WORLD, gaussian, join, launch, real_bf16

LATE_S = 0.002


def parse_size(s):
    """Bytes of "64K", "16M", "1G" or "64" (MiB)."""
    s = s.strip().upper()
    if s.endswith("K"):
        return int(s[:-1]) << 10
    if s.endswith("G"):
        return int(s[:-1]) << 30
    return int(s.rstrip("M")) << 20


def repeats(asked, size):
    """Small collectives take well under a millisecond and jitter by as much on a shared GPU: up to
    100 repeats below 4 MiB, as many as would move asked x 4 MiB."""
    return max(asked, min(100, asked * (4 << 20) // size))


def run(coll, rank, dev, n, data=None):
    """Tensors for one collective of n bf16 elements in total, and the call on a group (None: the
    default). data: a .safetensors file of bf16 tensors to take the values from instead of
    N(0, 0.02^2)."""
    values = (lambda r, k, salt: real_bf16(data, r, k, salt)) if data else gaussian
    if coll == "all_gather":
        x = values(rank, n // WORLD, 1).to(dev)
        out = torch.empty(n, dtype=torch.bfloat16, device=dev)
        return lambda g=None: dist.all_gather_into_tensor(out, x, group=g)
    if coll == "reduce_scatter":
        x = values(rank, n, 2).to(dev)
        out = torch.empty(n // WORLD, dtype=torch.bfloat16, device=dev)
        return lambda g=None: dist.reduce_scatter_tensor(out, x, group=g)
    if coll in ("alltoallv", "alltoallv_late"):
        # An MoE dispatch: each rank's n elements split over the ranks, expert 0's (rank 0) share 8x
        # the others'; "late": the last rank enters LATE_S after the others (a straggler).
        w = [8 if j == 0 else 1 for j in range(WORLD)]
        unit = n // sum(w)
        send = [unit * wj for wj in w]
        recv = [unit * w[rank]] * WORLD
        x = values(rank, sum(send), 4).to(dev)
        out = torch.empty(sum(recv), dtype=torch.bfloat16, device=dev)
        late = coll == "alltoallv_late" and rank == WORLD - 1

        def alltoallv(g=None):
            if late:
                time.sleep(LATE_S)
            dist.all_to_all_single(out, x, recv, send, group=g)
        return alltoallv
    x = values(rank, n, 3).to(dev)
    y = torch.empty_like(x)

    def all_reduce(g=None):
        y.copy_(x)  # the same data every time (a sum would grow)
        dist.all_reduce(y, group=g)
    return all_reduce


def groups(nets):
    """One group of every rank per NCCL net name: [(name, group)], [(None, None)] (the default
    group) without names."""
    if not nets:
        return [(None, None)]
    out = []
    for name in nets:
        opts = dist.ProcessGroupNCCL.Options()
        opts.config.net_name = name
        out.append((name, dist.new_group(list(range(WORLD)), backend="nccl", pg_options=opts)))
    return out


def worker(rank, port, args):
    nets = [x for x in args.nets.split(",") if x]
    dev = join(rank, port, bind=not nets)
    comms = groups(nets)
    if args.sync == "device":
        sync = lambda: torch.cuda.synchronize(dev)  # noqa: E731
    else:
        sync = lambda: torch.cuda.current_stream(dev).synchronize()  # noqa: E731
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    busy = 0.0  # seconds inside collectives, warm-ups too: what the plugin's codec times add up against
    for coll in args.collectives.split(","):
        for size in sizes:
            n = size // 2  # bf16 elements
            op = run(coll, rank, dev, n, args.data)
            times = [[] for _ in comms]
            for i in range(repeats(args.repeats, size) + 3):
                for j in range(len(comms)):
                    k = j if i % 2 == 0 else len(comms) - 1 - j
                    sync()
                    dist.barrier()
                    sync()
                    t0 = time.perf_counter()
                    op(comms[k][1])
                    sync()
                    dt = time.perf_counter() - t0
                    busy += dt
                    if i >= 3:
                        times[k].append(dt)
            if rank == 0:
                for (name, _), t in zip(comms, times):
                    label = f"{args.label}@{name.lower()}" if name else args.label
                    t = sorted(t)
                    med = statistics.median(t)
                    print(f"BENCH label={label} coll={coll} bytes={size} median_ms={med * 1e3:.3f} "
                          f"p90_ms={t[int(0.9 * (len(t) - 1))] * 1e3:.3f} algbw={size / med / 1e9:.2f}", flush=True)
                if len(comms) == 2:
                    ratios = [b / a for a, b in zip(*times)]
                    print(f"AB label={args.label} coll={coll} bytes={size} a={comms[0][0]} b={comms[1][0]} "
                          f"ratio={statistics.median(ratios):.3f} a_faster={sum(r > 1 for r in ratios) / len(ratios):.2f} "
                          f"pairs={len(ratios)}", flush=True)
            del op
    print(f"BUSY label={args.label} rank={rank} seconds={busy:.4f}", flush=True)
    n = max(sizes) // 2
    x = gaussian(rank, n // WORLD, 5).to(dev)
    out = torch.empty(n, dtype=torch.bfloat16, device=dev)
    dist.all_gather_into_tensor(out, x)
    want = torch.cat([gaussian(r, n // WORLD, 5) for r in range(WORLD)])
    ok = torch.equal(out.cpu().view(torch.int16), want.view(torch.int16))
    print(f"CHECK label={args.label} rank={rank} all_gather {max(sizes)} bytes ok={int(ok)}", flush=True)
    dist.barrier()  # neither rank leaves (rank 0 holds the TCP store) while the other still uses it
    dist.destroy_process_group()
    if not ok:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="run")
    ap.add_argument("--sizes", default="64,128,256")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--collectives", default="all_gather,reduce_scatter")
    ap.add_argument("--data", default="", help="a .safetensors file of bf16 tensors: its values instead of Gaussian")
    ap.add_argument("--sync", choices=("device", "stream"), default="device",
                    help="around each timing: torch.cuda.synchronize(), or the current stream's")
    ap.add_argument("--nets", default=os.environ.get("ZIP_BENCH_NETS", ""),
                    help="A,B: each collective on a communicator of each NCCL net, in turn (an A/B)")
    args = ap.parse_args()
    if args.nets:
        os.environ.pop("NCCL_NET", None)  # it would override every communicator's net name
    launch(worker, args, f"BENCH label={args.label} no CUDA device, nothing measured")


if __name__ == "__main__":
    main()
