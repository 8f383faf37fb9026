#!/usr/bin/env python3
"""What the plugin's codec takes from the application's kernels: a bf16 GEMM loop timed alone and
then beside a stream of all_gathers, ZIP_RANKS (default 2) ranks on this host as ranks.py starts
them; run it once per setting (NCCL_ZIP_ENABLE=0, 1, 2) and compare.

    python bench/nccl/gemm_beside.py --label NAME [--dim 8192] [--gemms 100] [--mib 64]

Each rank multiplies two dim x dim bf16 matrices --gemms times on its own stream, timed with CUDA
events: first alone (after a warm-up), then while --mib MiB all_gathers run back to back on NCCL's
stream, as many as cover the GEMM loop (counted from the alone timings, the same on every rank).
Rank 0 prints "GEMM label=... alone_ms=... beside_ms=... slowdown=... collectives=N coll_ms=..."
(slowdown: beside / alone; coll_ms: one all_gather's mean time while beside the GEMMs).
"""
import argparse
import math
import time

import torch
import torch.distributed as dist

from ranks import WORLD, gaussian, join, launch


def gemm_loop(a, b, c, n, stream):
    """n GEMMs on stream, timed by events there (ms)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        for _ in range(n):
            torch.matmul(a, b, out=c)
        end.record()
    return start, end


def worker(rank, port, args):
    dev = join(rank, port)
    g = torch.Generator(device=dev).manual_seed(rank)
    a = torch.randn(args.dim, args.dim, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(args.dim, args.dim, device=dev, dtype=torch.bfloat16, generator=g)
    c = torch.empty_like(a)
    side = torch.cuda.Stream(dev)
    n = (args.mib << 20) // 2
    x = gaussian(rank, n // WORLD, 7).to(dev)
    out = torch.empty(n, dtype=torch.bfloat16, device=dev)

    gemm_loop(a, b, c, 5, side)  # warm-up: cuBLAS picks its kernel
    dist.all_gather_into_tensor(out, x)
    torch.cuda.synchronize(dev)
    dist.barrier()
    s, e = gemm_loop(a, b, c, args.gemms, side)
    torch.cuda.synchronize(dev)
    alone = s.elapsed_time(e)

    dist.barrier()
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    for _ in range(3):
        dist.all_gather_into_tensor(out, x)
    torch.cuda.synchronize(dev)
    coll_alone = (time.perf_counter() - t0) / 3 * 1e3
    # As many all_gathers as cover the GEMM loop, the same count on every rank.
    count = torch.tensor([math.ceil(alone / coll_alone) + 2], device=dev)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    count = int(count.item())

    dist.barrier()
    torch.cuda.synchronize(dev)
    t0 = time.perf_counter()
    works = [dist.all_gather_into_tensor(out, x, async_op=True) for _ in range(count)]
    s, e = gemm_loop(a, b, c, args.gemms, side)
    for w in works:
        w.wait()
    torch.cuda.synchronize(dev)
    coll_beside = (time.perf_counter() - t0) / count * 1e3
    beside = s.elapsed_time(e)
    if rank == 0:
        print(f"GEMM label={args.label} dim={args.dim} gemms={args.gemms} alone_ms={alone:.2f} beside_ms={beside:.2f} "
              f"slowdown={beside / alone:.3f} collectives={count} coll_ms={coll_beside:.2f} coll_alone_ms={coll_alone:.2f}",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="run")
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--gemms", type=int, default=100)
    ap.add_argument("--mib", type=int, default=64)
    args = ap.parse_args()
    launch(worker, args, f"GEMM label={args.label} no CUDA device, nothing measured")


if __name__ == "__main__":
    main()
