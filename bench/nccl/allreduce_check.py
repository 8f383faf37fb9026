#!/usr/bin/env python3
"""A real NCCL job of ZIP_RANKS (default 2) ranks on one host, checked exactly; run through the
net plugin by env.

    python bench/nccl/allreduce_check.py --label NAME [--bench REPEATS]

The ranks as ranks.py starts them (one GPU each, or sharing one under MPS with an NCCL_HOSTID
each). The transport is whatever the environment selects (scripts/device-plugin.sh sets
NCCL_NET_PLUGIN / NCCL_NET / NCCL_P2P_DISABLE / NCCL_SHM_DISABLE so that the ranks talk over the
network). Checks, for bf16 and fp32 and sizes from
1 element to 16 Mi elements (odd ones included):
  - all_reduce and reduce_scatter of integer-valued data (sums exact in both dtypes) against the
    sum computed on the CPU;
  - all_gather and send/recv of Gaussian data (what compresses) bit for bit against the data each
    rank generated;
  - an all_reduce captured in a CUDA graph (torch.cuda.graph, as a captured training step) and
    replayed with new data each time, exact.
--bench: median time of all_reduce of 64 MiB of bf16 Gaussian data over REPEATS runs.
--sync: wait for each collective with a stream synchronize before copying its result to the host,
so that no thread blocks inside a copy while NCCL's kernel runs (a transport that needs CUDA
calls to move data, like the emulated HCA's GPUDirect path, would otherwise wait behind it).
Prints one "CHECK ..." line per case, "RESULT ok=1|0 ..." and "BENCH ..." lines; exit 1 on any
mismatch.
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

from ranks import WORLD, gaussian, join, launch
SIZES = [1, 7, 1023, 4099, 65536, 131071, (1 << 20) + 5, 4 << 20, (16 << 20) + 3]
DTYPES = [torch.bfloat16, torch.float32]


def small_ints(rank, n, dtype):
    # Integers in [-64, 64]: every partial sum of up to 4 ranks is exact in bf16 and fp32.
    idx = torch.arange(n, dtype=torch.int64)
    return (((idx * 7 + rank * 13) % 129) - 64).to(dtype)


def same_bits(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == torch.bfloat16:
        return torch.equal(a.view(torch.int16), b.view(torch.int16))
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def checks(rank, dev, sync):
    def host(t):
        if sync:
            torch.cuda.current_stream(dev).synchronize()
        return t.cpu()

    bad = 0
    total = 0
    for dtype in DTYPES:
        for n in SIZES:
            tname = str(dtype).replace("torch.", "")
            salt = n % 9973
            cases = []
            # all_reduce
            x = small_ints(rank, n, dtype).to(dev)
            dist.all_reduce(x)
            want = sum(small_ints(r, n, torch.float32) for r in range(WORLD)).to(dtype)
            cases.append(("all_reduce", same_bits(host(x), want)))
            # all_gather
            mine = gaussian(rank, n, salt, dtype).to(dev)
            outs = [torch.empty(n, dtype=dtype, device=dev) for _ in range(WORLD)]
            dist.all_gather(outs, mine)
            cases.append(("all_gather", all(same_bits(host(outs[r]), gaussian(r, n, salt, dtype)) for r in range(WORLD))))
            # reduce_scatter: rank r keeps block r of the sum
            inp = small_ints(rank, n * WORLD, dtype).to(dev)
            out = torch.empty(n, dtype=dtype, device=dev)
            dist.reduce_scatter_tensor(out, inp)
            full = sum(small_ints(r, n * WORLD, torch.float32) for r in range(WORLD)).to(dtype)
            cases.append(("reduce_scatter", same_bits(host(out), full[rank * n:(rank + 1) * n])))
            # send/recv around the ring at once (both ways with 2 ranks)
            to, frm = (rank + 1) % WORLD, (rank - 1) % WORLD
            s = gaussian(rank, n, salt + 1, dtype).to(dev)
            r = torch.empty(n, dtype=dtype, device=dev)
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, s, to), dist.P2POp(dist.irecv, r, frm)])
            for q in reqs:
                q.wait()
            cases.append(("send_recv", same_bits(host(r), gaussian(frm, n, salt + 1, dtype))))
            torch.cuda.synchronize(dev)
            for name, ok in cases:
                total += 1
                bad += 0 if ok else 1
                if rank == 0 or not ok:
                    print(f"CHECK rank={rank} {name} {tname} n={n}: {'ok' if ok else 'MISMATCH'}", flush=True)
    ok = graph_check(rank, dev)
    total += 1
    bad += 0 if ok else 1
    if rank == 0 or not ok:
        print(f"CHECK rank={rank} all_reduce in a CUDA graph bfloat16: {'ok' if ok else 'MISMATCH'}", flush=True)
    return bad, total


def graph_check(rank, dev, replays=5):
    """all_reduce captured once in a CUDA graph, replayed on new integer data: every result exact."""
    n = (1 << 20) + 5
    x = small_ints(rank, n, torch.bfloat16).to(dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # warm-up outside the capture: connections, buffers
        for _ in range(3):
            dist.all_reduce(x)
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
    ok = True
    for k in range(replays):
        x.copy_(small_ints(rank + k, n, torch.bfloat16).to(dev))
        graph.replay()
        torch.cuda.synchronize(dev)
        want = sum(small_ints(r + k, n, torch.float32) for r in range(WORLD)).to(torch.bfloat16)
        ok = ok and same_bits(x.cpu(), want)
    return ok


def bench(rank, dev, repeats):
    n = 32 << 20  # 64 MiB of bf16
    x = gaussian(rank, n, 77, torch.bfloat16).to(dev)
    times = []
    for i in range(repeats + 3):
        y = x.clone()
        torch.cuda.synchronize(dev)
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(y)
        torch.cuda.synchronize(dev)
        if i >= 3:  # warm-up: connections, staging, the codec's first measurement
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return med, min(times)


def worker(rank, port, args):
    dev = join(rank, port)
    bad, total = checks(rank, dev, args.sync)
    print(f"RESULT label={args.label} rank={rank} ok={int(bad == 0)} cases={total} mismatches={bad}", flush=True)
    if args.bench:
        med, best = bench(rank, dev, args.bench)
        if rank == 0:
            print(f"BENCH label={args.label} all_reduce 64MiB bf16: median {med * 1e3:.2f} ms "
                  f"(best {best * 1e3:.2f} ms, {args.bench} runs), algbw {64 * 1.048576e-3 / med:.2f} GB/s",
                  flush=True)
    dist.destroy_process_group()  # closes NCCL's connections: the plugin logs its summaries
    if bad:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="run")
    ap.add_argument("--bench", type=int, default=0, help="repeats of the 64 MiB all_reduce timing (0: none)")
    ap.add_argument("--sync", action="store_true", help="stream-synchronize before each copy to the host")
    args = ap.parse_args()
    v = torch.cuda.nccl.version()
    print(f"torch {torch.__version__}, NCCL {'.'.join(map(str, v)) if isinstance(v, tuple) else v}, "
          f"NCCL_NET={os.environ.get('NCCL_NET', '')} NCCL_NET_PLUGIN={os.environ.get('NCCL_NET_PLUGIN', '')} "
          f"NCCL_ZIP_ENABLE={os.environ.get('NCCL_ZIP_ENABLE', '')}", flush=True)
    launch(worker, args, f"RESULT label={args.label} ok=0 no CUDA device")


if __name__ == "__main__":
    main()
