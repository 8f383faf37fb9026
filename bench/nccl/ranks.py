"""What the NCCL jobs here share: WORLD ranks (ZIP_RANKS, default 2) on this host, one process each (torch.multiprocessing,
spawned), each its own "node" (NCCL_HOSTID) so that NCCL takes the network between them: one GPU
each where there are enough (ZIP_GPUS_PER_NODE of them to a node, default 1: NVLink inside a node,
the network between nodes); on a machine with fewer GPUs they share them, each rank its own node
(run under MPS: otherwise every round trip waits for a time slice)."""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = int(os.environ.get("ZIP_RANKS", "2"))
PER_NODE = int(os.environ.get("ZIP_GPUS_PER_NODE", "1"))


def gaussian(rank, n, salt, dtype=torch.bfloat16):
    """n values of N(0, 0.02^2), what gradients look like, the same for the same rank and salt."""
    g = torch.Generator().manual_seed(1000 * rank + salt)
    return (torch.randn(n, generator=g) * 0.02).to(dtype)


def tensor_bytes(path):
    """The data section of a .safetensors file (8-byte header length, JSON header, data)."""
    with open(path, "rb") as f:
        raw = f.read()
    return raw[8 + int.from_bytes(raw[:8], "little"):]


def real_bf16(path, rank, n, salt):
    """n bf16 values from a .safetensors file of bf16 tensors, tiled, each rank and salt from its
    own offset (a prime number of values apart), so ranks send different bytes of the same kind."""
    data = torch.frombuffer(bytearray(tensor_bytes(path)), dtype=torch.bfloat16)
    start = (rank * 7919 + salt * 104729) % data.numel()
    reps = (start + n + data.numel() - 1) // data.numel()
    return data.repeat(reps)[start:start + n].clone()


def join(rank, port, bind=True):
    """Joins this rank's process group (NCCL backend) on its device, which it returns. bind=False:
    the group is not bound to the device, so groups made later get communicators of their own
    (with their own config) instead of splits of its communicator."""
    own_gpus = torch.cuda.device_count() >= WORLD
    os.environ["NCCL_HOSTID"] = f"zip-host-{rank // PER_NODE if own_gpus else rank}"
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            device_id=dev if bind else None)
    return dev


def launch(worker, args, no_device):
    """Runs worker(rank, port, args) in WORLD processes, port a free one for their rendezvous;
    without a CUDA device prints no_device and exits 1."""
    if torch.cuda.device_count() == 0:
        print(no_device, flush=True)
        sys.exit(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(port, args), nprocs=WORLD, start_method="spawn")
