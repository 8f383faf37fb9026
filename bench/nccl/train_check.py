#!/usr/bin/env python3
"""A small GPT trained on synthetic tokens through the NCCL backend, unchanged code: its loss curve
must be bit-identical with compression on and off, and its step time is the end-to-end number.

    python bench/nccl/train_check.py --mode ddp|fsdp [--steps 200] [--label NAME]

WORLD ranks as ranks.py starts them (the transport is whatever the environment selects:
scripts/device-train-check.sh runs it with NCCL_ZIP_ENABLE=0 and 2). bf16 weights and gradients,
a fixed seed, deterministic kernels (hand-written attention, torch.use_deterministic_algorithms),
the same batches on every run. Prints per rank 0:
  LOSS step=<i> <loss as float32 hex>
  CURVE label=<label> mode=<mode> steps=<n> hash=<sha256 of the losses' bits, 16 hex> final=<loss>
  STEP label=<label> mode=<mode> median_ms=<median step time after 10 warm-up steps> grad_mb=<MB
       of gradients reduced per step>
Two runs' CURVE hashes are equal exactly when every loss of every step is.
"""
import argparse
import hashlib
import math
import os
import statistics
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from ranks import WORLD, join, launch


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # Plain attention: the fused kernels' backward passes may not be deterministic.
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, ctx):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        return self.head(self.ln(self.blocks(x)))


def batches(rank, steps, batch, ctx, vocab):
    """Synthetic tokens with some structure to learn (a noisy walk), the same on every run."""
    g = torch.Generator().manual_seed(1234 + rank)
    for _ in range(steps):
        start = torch.randint(0, vocab, (batch, 1), generator=g)
        steps_ = torch.randint(-3, 4, (batch, ctx), generator=g)
        seq = (start + steps_.cumsum(1)) % vocab
        yield seq[:, :-1], seq[:, 1:]


def worker(rank, port, args):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    dev = join(rank, port)
    torch.manual_seed(0)  # the same initial weights on every rank and run
    model = GPT(args.vocab, args.dim, args.layers, args.heads, args.ctx).to(dev, torch.bfloat16)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if args.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model, device_ids=[dev.index], bucket_cap_mb=25)
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        model = FSDP(model, device_id=dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    losses, times = [], []
    for step, (x, y) in enumerate(batches(rank, args.steps, args.batch, args.ctx + 1, args.vocab)):
        x, y = x.to(dev), y.to(dev)
        torch.cuda.synchronize(dev)
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(x).float().view(-1, args.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize(dev)
        times.append(time.perf_counter() - t0)
        # Every rank's loss, so that the curve covers what all of them computed.
        all_losses = [torch.zeros(1, device=dev) for _ in range(WORLD)]
        dist.all_gather(all_losses, loss.detach().float().reshape(1))
        losses.append([v.item() for v in all_losses])
        if rank == 0:
            print(f"LOSS step={step} " + " ".join(struct.pack(">f", v).hex() for v in losses[-1]), flush=True)
    if rank == 0:
        h = hashlib.sha256(b"".join(struct.pack(">f", v) for row in losses for v in row)).hexdigest()[:16]
        print(f"CURVE label={args.label} mode={args.mode} steps={args.steps} hash={h} final={losses[-1][0]:.6f}",
              flush=True)
        med = statistics.median(times[10:]) if len(times) > 10 else statistics.median(times)
        print(f"STEP label={args.label} mode={args.mode} median_ms={med * 1e3:.2f} grad_mb={grad_bytes / 1e6:.1f}",
              flush=True)
    dist.destroy_process_group()  # closes NCCL's connections: the plugin logs its summaries


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["ddp", "fsdp"], default="ddp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--label", default="run")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    args = ap.parse_args()
    launch(worker, args, "no CUDA device")


if __name__ == "__main__":
    main()
