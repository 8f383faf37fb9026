#!/usr/bin/env python3
"""scripts/timeline.py on made-up NCCL_ZIP_TIMELINE files: a send comm whose second message waited
for its clear-to-send (a defer event, then its post) and a receive comm; the stages' medians and
counts, the wait counted once per deferred message, the warm-up skipped with --skip-ms; then
--collectives on two collectives of another process; then a third process's GPU-coded messages,
their job times on a clock 1 s ahead of the host's: the stages they split the coding into, and the
first job's times in its collective's fill."""
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]  # scripts/timeline.py
failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, wanted {want!r}")


def write(top, name, side, rows, pid=1):
    """rows: (t_us, event, seq, sub, bytes[, compressed])."""
    with open(os.path.join(top, name), "w") as f:
        f.write(f"# {side} comm, peer 127.0.0.1:1, pid {pid}\nt_ns,event,seq,sub,bytes,compressed,gpu\n")
        for t_us, event, seq, sub, size, *compressed in rows:
            f.write(f"{t_us * 1000},{event},{seq},{sub},{size},{int(bool(compressed and compressed[0]))},0\n")


def stage(out, comm, name):
    """The 'median / p90 / mean  (count)' of stage `name` in comm's block."""
    block = out.split(comm, 1)[1].split("\n\n", 1)[0]
    for line in block.splitlines():
        line = line.strip()
        if line.startswith(name + " "):
            return " ".join(line[len(name):].split())
    return None


with tempfile.TemporaryDirectory() as top:
    K = 4096
    # Message 0 goes at once; message 1's isend is deferred at 100 us and posted at 130 us (its
    # clear-to-send came at 128); message 2 is deferred twice in a row by NCCL's retries, which
    # the plugin logs once, and posted 10 us after the first.
    write(top, "zipccl-1-send-0.csv", "send", [
        (0, "cts", 0, 0, 1), (2, "post", 0, 0, K), (5, "wire", 0, 0, K), (9, "done", 0, 0, K),
        (100, "defer", 0, 0, K), (128, "cts", 1, 0, 1), (130, "post", 1, 0, K), (134, "wire", 1, 0, K),
        (140, "done", 1, 0, K),
        (200, "defer", 0, 0, K), (209, "cts", 2, 0, 1), (210, "post", 2, 0, K), (212, "wire", 2, 0, K),
        (220, "done", 2, 0, K),
    ])
    write(top, "zipccl-1-recv-1.csv", "recv", [
        (0, "post", 0, 0, K), (6, "wire", 0, 0, K), (8, "done", 0, 0, K),
        (10, "post", 1, 0, K), (135, "wire", 1, 0, K), (139, "done", 1, 0, K),
    ])
    out = subprocess.run([sys.executable, SCRIPT, top], capture_output=True, text=True, check=True).stdout
    send, recv = "zipccl-1-send-0.csv", "zipccl-1-recv-1.csv"
    expect("send messages", "3 messages" in out.split(send, 1)[1].splitlines()[0], True)
    expect("defer->post", stage(out, send, "defer->post"), "30 / 30 / 20 (2)")
    expect("cts->post", stage(out, send, "cts->post"), "2 / 2 / 2 (3)")
    expect("post->wire (raw)", stage(out, send, "post->wire (raw)"), "3 / 4 / 3 (3)")
    expect("send post->done", stage(out, send, "post->done"), "10 / 10 / 9 (3)")
    expect("recv post->wire", stage(out, recv, "post->wire"), "125 / 125 / 66 (2)")
    expect("recv wire->done", stage(out, recv, "wire->done (raw)"), "4 / 4 / 3 (2)")
    # Past the first 150 us: only message 2 and its wait.
    out = subprocess.run([sys.executable, SCRIPT, top, "--skip-ms", "0.15"], capture_output=True, text=True,
                         check=True).stdout
    expect("defer->post after the warm-up", stage(out, send, "defer->post"), "10 / 10 / 10 (1)")
    expect("recv comm without messages after the warm-up", recv in out, False)

with tempfile.TemporaryDirectory() as top:
    K = 65536
    # Collective 1 (0-1500 us): send 0 deferred at 10, taken at 20, coded to K/2 by 50, on the link
    # at 52; send 1 raw, taken at 30; receive 0 lands at 700 and is decoded at 900, after receive
    # 1 landed (800, the last): one receive still to decode then. Collective 2 (3000-4100 us):
    # one raw message each way. At 0.065536 GB/s, K bytes take 1000 us on the wire.
    write(top, "zipccl-2-send-0.csv", "send", [
        (10, "defer", 0, 0, K), (20, "post", 0, 0, K), (50, "coded", 0, 0, K // 2, 1),
        (52, "wire", 0, 0, K // 2, 1), (600, "done", 0, 0, K),
        (30, "post", 1, 0, K), (60, "wire", 1, 0, K), (1500, "done", 1, 0, K),
        (3010, "post", 2, 0, K), (3012, "wire", 2, 0, K), (4100, "done", 2, 0, K),
    ], pid=2)
    write(top, "zipccl-2-recv-1.csv", "recv", [
        (0, "post", 0, 0, K), (700, "wire", 0, 0, K // 2, 1), (900, "coded", 0, 0, K, 1), (905, "done", 0, 0, K),
        (5, "post", 1, 0, K), (800, "wire", 1, 0, K), (810, "done", 1, 0, K),
        (3000, "post", 2, 0, K), (3500, "wire", 2, 0, K), (3510, "done", 2, 0, K),
    ], pid=2)
    out = subprocess.run([sys.executable, SCRIPT, top, "--collectives", "0.065536"], capture_output=True,
                         text=True, check=True).stdout
    lines = {line.split(",", 2)[1].strip(): line for line in out.splitlines() if line.startswith("pid 2,")}
    expect("collective sizes", sorted(lines), ["128 KiB sent", "64 KiB sent"])
    expect("collective 1", lines.get("128 KiB sent", "").split(": ", 1)[-1],
           "span 1500, wire 1500, fill 52 (a send ready 10, taken 20, coded 50), tail 700, idle 0; "
           "ratio 0.750, 50% coded, 1 receives decoding at the last arrival")
    expect("collective 2", lines.get("64 KiB sent", "").split(": ", 1)[-1],
           "span 1100, wire 1000, fill 12 (a send ready 10, taken 10, coded nan), tail 600, idle 100; "
           "ratio 1.000, 0% coded, 0 receives decoding at the last arrival")

with tempfile.TemporaryDirectory() as top:
    K, G = 65536, 1000000  # G: the GPU clock's lead in us
    # After the shift by the least (taken - posted), 5 us (send 0 and receive 1): send 0 taken at
    # its post (20), first tile 30, result 45, coded 60; send 1 posted 30, taken 40, tile 50,
    # result 70, coded 81; receive 0 lands 700, taken 715; receive 1 lands 800, taken 805.
    write(top, "zipccl-3-send-0.csv", "send", [
        (20, "post", 0, 0, K), (G + 25, "gpu_taken", 0, 0, K // 2), (G + 35, "gpu_start", 0, 0, K // 2),
        (G + 50, "gpu_end", 0, 0, K // 2), (60, "coded", 0, 0, K // 2, 1), (62, "wire", 0, 0, K // 2, 1),
        (600, "done", 0, 0, K),
        (30, "post", 1, 0, K), (G + 45, "gpu_taken", 1, 0, K // 2), (G + 55, "gpu_start", 1, 0, K // 2),
        (G + 75, "gpu_end", 1, 0, K // 2), (81, "coded", 1, 0, K // 2, 1), (83, "wire", 1, 0, K // 2, 1),
        (1500, "done", 1, 0, K),
    ], pid=3)
    write(top, "zipccl-3-recv-1.csv", "recv", [
        (0, "post", 0, 0, K), (700, "wire", 0, 0, K // 2, 1), (G + 720, "gpu_taken", 0, 0, K),
        (G + 730, "gpu_start", 0, 0, K), (G + 760, "gpu_end", 0, 0, K), (770, "coded", 0, 0, K, 1),
        (775, "done", 0, 0, K),
        (5, "post", 1, 0, K), (800, "wire", 1, 0, K // 2, 1), (G + 810, "gpu_taken", 1, 0, K),
        (G + 815, "gpu_start", 1, 0, K), (G + 835, "gpu_end", 1, 0, K), (840, "coded", 1, 0, K, 1),
        (845, "done", 1, 0, K),
    ], pid=3)
    out = subprocess.run([sys.executable, SCRIPT, top], capture_output=True, text=True, check=True).stdout
    send, recv = "zipccl-3-send-0.csv", "zipccl-3-recv-1.csv"
    expect("send post->taken", stage(out, send, "post->taken"), "10 / 10 / 5 (2)")
    expect("send taken->start", stage(out, send, "taken->start"), "10 / 10 / 10 (2)")
    expect("send start->end", stage(out, send, "start->end"), "20 / 20 / 18 (2)")
    expect("send end->coded", stage(out, send, "end->coded"), "15 / 15 / 13 (2)")
    expect("recv wire->taken", stage(out, recv, "wire->taken"), "15 / 15 / 10 (2)")
    out = subprocess.run([sys.executable, SCRIPT, top, "--collectives", "0.065536"], capture_output=True,
                         text=True, check=True).stdout
    expect("GPU collective", [line.split(": ", 1)[-1] for line in out.splitlines() if line.startswith("pid 3,")],
           ["span 1500, wire 1000, fill 62 (a send ready 20, taken 20, GPU took it 20, first tile 30, "
            "result 45, coded 60), tail 700, idle 500; ratio 0.500, 100% coded, 1 receives decoding at the "
            "last arrival"])

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("timeline.py: stages, the deferred isends' waits, --skip-ms, --collectives and GPU job times as expected")
