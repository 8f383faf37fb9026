#!/usr/bin/env python3
"""bench/nccl/bench_table.py and plot_speedup.py's link-speed lines on made-up benchmark logs:
medians over rounds, speedups over compression off at the same pacing, sizes up to GiB, the
plugin's account of a run (the codec's share of the time inside collectives, the kernel's starts),
an A/B of nets in one process (its LABEL@<net> columns, the geometric mean of its rounds' ratios),
and one line per variant and size against the paced link's speed."""
import os
import subprocess
import sys
import tempfile

NCCL = sys.argv[1]  # bench/nccl
sys.path.insert(0, NCCL)
from bench_table import load  # noqa: E402
from plot_speedup import by_link  # noqa: E402

GIB, MIB = 1 << 30, 1 << 20
failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, wanted {want!r}")


def log(top, label, rnd, rows):
    with open(os.path.join(top, f"{label}.r{rnd}.log"), "w") as f:
        for coll, size, ms in rows:
            f.write(f"BENCH label={label} coll={coll} bytes={size} median_ms={ms} p90_ms={ms} algbw=1\n")


with tempfile.TemporaryDirectory() as top:
    for pace, off in (("p10000", 100.0), ("p40000", 40.0)):
        log(top, f"{pace}_off", 1, [("all_gather", GIB, off), ("all_gather", MIB, 1.0)])
        log(top, f"{pace}_auto", 1, [("all_gather", GIB, off / 1.4), ("all_gather", MIB, 1.0)])
        # Three rounds: the median of the rounds' medians counts.
        for rnd, ms in ((1, off / 1.2), (2, off / 1.25), (3, off / 3)):
            log(top, f"{pace}_always", rnd, [("all_gather", GIB, ms)])
    log(top, "lo_off", 1, [("all_gather", GIB, 10.0)])
    log(top, "lo_auto", 1, [("all_gather", GIB, 12.5)])
    # The plugin's closing lines and the ranks' seconds inside collectives: 3 codec job-seconds
    # (two sends, one receive) over 2 + 2 busy seconds.
    with open(os.path.join(top, "p10000_auto.r1.log"), "a") as f:
        for side, codec in (("send comm to", 1.0), ("send comm to", 0.5), ("recv comm from", 1.5)):
            f.write(f"vm:1:2 [0] NCCL INFO NET/Zip : {side} 127.0.0.1:1 closed: 10 messages (5 compressed), "
                    f"1.000 MB in, 0.700 MB on the wire, ratio 0.700, codec {codec:.3f} s, 5 codec jobs on the GPU\n")
        f.write("BUSY label=p10000_auto rank=0 seconds=2.0000\nBUSY label=p10000_auto rank=1 seconds=2.0000\n")
        # Each rank's kernel starts: a log with a start's parts, and one from before them.
        f.write("vm:1:2 [0] NCCL INFO NET/Zip : GPU codec on GPU 0: resident kernel started 61 times, 109 us median "
                "from demand to running (p90 171, max 6640; medians: awake 5, launch call 20, to running 80), the "
                "last launch's 10 CTAs on 6 SMs\n")
        f.write("vm:1:3 [0] NCCL INFO NET/Zip : GPU codec on GPU 0: resident kernel started 60 times, 98 us median "
                "from demand to running (p90 147, max 24343)\n")

    t = load(top)
    expect("rounds' median", round(t[("p10000_always", "all_gather", GIB)], 6), round(100 / 1.25, 6))
    lines = by_link(t, "all_gather")
    expect("link lines", sorted(lines), [("always", GIB), ("auto", GIB)])
    expect("auto against link speed", [(g, round(x, 3)) for g, x in lines[("auto", GIB)]], [(1.25, 1.4), (5.0, 1.4)])
    expect("no line for the unpaced run nor below 64 MiB", ("auto", MIB) in lines, False)

    out = subprocess.run([sys.executable, os.path.join(NCCL, "bench_table.py"), top, "10000,40000", "p10000_off",
                          "p10000_auto", "lo_off", "lo_auto"], capture_output=True, text=True).stdout
    acct = [l for l in out.splitlines() if l.startswith("p10000_auto.r1:")]
    expect("account", acct, ["p10000_auto.r1: 20 messages sent, 10 compressed, 10 coded on the GPU, ratios 0.700 0.700, "
                             "codec 0.75 job-s per collective-s, kernel starts 61x 109 us (5/20/80), 60x 98 us"])
    row = [l for l in out.splitlines() if l.startswith("| all_gather | 1 GiB |")]
    expect("1 GiB row", row, ["| all_gather | 1 GiB | 100 | 71.4 | 1.40 | 10 | 12.5 | 0.80 |"])

# Two rounds of an A/B of nets and one of a variant of it: the rounds' ratios 0.5 and 2 have the
# geometric mean 1.
with tempfile.TemporaryDirectory() as top:
    for rnd, ratio in ((1, 0.5), (2, 2.0)):
        with open(os.path.join(top, f"lo_ab.r{rnd}.log"), "w") as f:
            f.write(f"BENCH label=lo_ab@zip coll=alltoallv bytes=65536 median_ms=0.1 p90_ms=0.1 algbw=1\n"
                    f"BENCH label=lo_ab@socket coll=alltoallv bytes=65536 median_ms=0.2 p90_ms=0.2 algbw=1\n"
                    f"AB label=lo_ab coll=alltoallv bytes=65536 a=Zip b=Socket ratio={ratio} a_faster=0.5 pairs=200\n")
    with open(os.path.join(top, "lo_ab_inl.r1.log"), "w") as f:
        f.write("AB label=lo_ab_inl coll=alltoallv bytes=65536 a=Zip b=Socket ratio=0.970 a_faster=0.4 pairs=200\n")
    out = subprocess.run([sys.executable, os.path.join(NCCL, "bench_table.py"), top, "", "lo_ab", "lo_ab_inl"],
                         capture_output=True, text=True).stdout
    lines = out.splitlines()
    expect("A/B columns", [l for l in lines if l.startswith("| collective |")][0],
           "| collective | size | lo_ab@socket ms | lo_ab@socket x | lo_ab@zip ms | lo_ab@zip x |")
    expect("A/B row", [l for l in lines if l.startswith("| alltoallv | 64 KiB |")],
           ["| alltoallv | 64 KiB | 0.2 | - | 0.1 | - |", "| alltoallv | 64 KiB | 1.00 [0.50-2.00] | 0.97 [0.97-0.97] |"])

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("bench table and link-speed lines: as expected")
