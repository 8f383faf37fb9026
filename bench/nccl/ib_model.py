#!/usr/bin/env python3
"""A model, not a measurement: the speedup compression would give NCCL's ring collectives on an
InfiniBand cluster (one GPU per node on one NIC, device buffers coded by the resident GPU codec),
from the codec numbers measured on an H100 (docs/benchmarks.md, "Resident codec").

    ib_model.py [--nodes 8] [--size-mib 256] [--ratio 0.7145]

Per rank, a ring collective sends B bytes (all_gather, reduce_scatter: (n-1)/n of the buffer;
all_reduce: twice that) in 2(n-1) or (n-1) steps of chunks. Raw, the NIC moves B at its line rate
L. Compressed, every chunk is encoded before it is sent and decoded after it lands, on the same
GPU kernel, so the kernel's rate for the two together is C = 1 / (1/E + 1/D); the wire carries
ratio x B. The pipeline runs at the slowest of the wire (L / ratio in uncompressed bytes) and the
codec (C), and every step on the ring's critical path waits for one chunk's encode and decode
latency in addition (a step's chunk is reduced or forwarded only once decoded):

    T_raw  = B / L + steps x a
    T_comp = B / min(L / ratio, C) + steps x (a + lat_enc(chunk) + lat_dec(chunk))

with a = 5 us per step for the network either way. Assumes the chunk pipeline is deep enough that
only the per-step latency is exposed, NCCL's own overheads equal in both, and the codec alone on
the GPU's share it is given (training kernels running beside it slow it down). Prints a markdown
table of T_raw / T_comp per collective, NIC speed and chunk size.
"""
import argparse

# Measured, nvidia-h100-x1, d631429, `SERVICE_ARGS=16 DEMO=0 CODEC=0 scripts/device-gpu-ab.sh`
# (gpu_service_bench, 16 CTAs packed on 8 SMs, the plugin's default; medians over 4 runs):
# sustained GB/s of 512 KiB jobs from and to device memory, (encode, decode).
SUSTAINED = (44.4, 57.9)
# One job on an idle kernel, doorbell to result, the same runs, median us: chunk bytes -> (encode, decode).
LATENCY = {128 << 10: (13.8, 14.8), 512 << 10: (20.5, 18.5)}
CTAS = 16
STEP_US = 5.0


def speedup(coll, nodes, size, link_gbps, chunk, ratio):
    n = nodes
    steps = 2 * (n - 1) if coll == "all_reduce" else n - 1
    sent = size * (n - 1) / n * (2 if coll == "all_reduce" else 1)
    link = link_gbps / 8 * 1e9  # bytes/s
    enc, dec = (x * 1e9 for x in SUSTAINED)
    codec = 1 / (1 / enc + 1 / dec)
    lat_enc, lat_dec = (x * 1e-6 for x in LATENCY[chunk])
    t_raw = sent / link + steps * STEP_US * 1e-6
    t_comp = sent / min(link / ratio, codec) + steps * (STEP_US * 1e-6 + lat_enc + lat_dec)
    return t_raw / t_comp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--ratio", type=float, default=0.7145, help="wire/input bytes (bf16 gradients: 0.7145)")
    a = ap.parse_args()
    size = a.size_mib << 20
    enc, dec = SUSTAINED
    print(f"Model: {a.nodes} nodes, {a.size_mib} MiB buffer, ratio {a.ratio}, resident codec with {CTAS} CTAs "
          f"(encode {enc} GB/s, decode {dec} GB/s, together {1 / (1 / enc + 1 / dec):.1f} GB/s)\n")
    print("| collective | chunk | 100 Gb/s | 200 Gb/s | 400 Gb/s |")
    print("|---|---|---|---|---|")
    for coll in ("all_gather", "reduce_scatter", "all_reduce"):
        for chunk in sorted(LATENCY):
            cells = [f"{speedup(coll, a.nodes, size, g, chunk, a.ratio):.2f}x" for g in (100, 200, 400)]
            print(f"| {coll} | {chunk >> 10} KiB | " + " | ".join(cells) + " |")
    print("\nBelow 1.00x the tuner keeps NCCL's raw choice. The codec rate (encode and decode together) at which")
    print("compression starts to pay is the line rate; the whole ratio is won from line rate / ratio:")
    for g in (100, 200, 400):
        print(f"- {g} Gb/s: pays above {g / 8:.1f} GB/s, full gain from {g / 8 / a.ratio:.1f} GB/s "
              f"(encode and decode each {2 * g / 8 / a.ratio:.0f} GB/s)")


if __name__ == "__main__":
    main()
