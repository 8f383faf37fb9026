#!/usr/bin/env python3
"""bench/nccl/compare_checks.py on made-up runs: equal digests pass; a differing exact case, a
failed self-check or a missing rank fail; order-dependent sums over 4 ranks are held to the raw
plugin run, not to NCCL's Socket."""
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]


def write(top, name, nranks, cases, ok=True):
    d = os.path.join(top, name)
    os.makedirs(d, exist_ok=True)
    for r in range(nranks):
        with open(os.path.join(d, f"rank{r}.txt"), "w") as f:
            for case, digest, order in cases:
                f.write(f"CASE {case} {digest:016x} ok={1 if ok else 0}{' order' if order else ''}\n")
            f.write(f"RESULT rank={r} ok={1 if ok else 0} cases={len(cases)} failed=0 nccl=22809\n")


def run(setup):
    with tempfile.TemporaryDirectory() as top:
        setup(top)
        p = subprocess.run([sys.executable, SCRIPT, top], capture_output=True, text=True)
        return p.returncode, p.stdout


EXACT = [("all_gather/bf16/gauss/1", 1, False), ("all_reduce_sum/bf16/gauss/1", 2, True)]
failures = []


def expect(what, rc, want, out):
    if rc != want:
        failures.append(f"{what}: exit {rc}, wanted {want}\n{out}")


# All the same: pass.
rc, out = run(lambda t: [write(t, f"2r_free_free_{x}", 2, EXACT) for x in ("socket", "zip0", "zip2")])
expect("equal runs", rc, 0, out)

# An exact case differs: fail, and the case is named.
def differ(t):
    write(t, "2r_free_free_socket", 2, EXACT)
    write(t, "2r_free_free_zip2", 2, [("all_gather/bf16/gauss/1", 9, False), EXACT[1]])
rc, out = run(differ)
expect("a differing exact case", rc, 1, out)
if "all_gather/bf16/gauss/1" not in out:
    failures.append("the differing case is not named:\n" + out)

# A self-check failed: fail.
def selfcheck(t):
    write(t, "2r_free_free_socket", 2, EXACT)
    write(t, "2r_free_free_zip2", 2, EXACT, ok=False)
rc, out = run(selfcheck)
expect("a failed self-check", rc, 1, out)

# 4 ranks: the order-dependent sum differs from Socket but equals the raw plugin's: pass; differs
# from the raw plugin's: fail.
def order(zip2_digest):
    def setup(t):
        write(t, "4r_free_free_socket", 4, [EXACT[0], ("all_reduce_sum/bf16/gauss/1", 5, True)])
        write(t, "4r_free_free_zip0", 4, [EXACT[0], ("all_reduce_sum/bf16/gauss/1", 6, True)])
        write(t, "4r_free_free_zip2", 4, [EXACT[0], ("all_reduce_sum/bf16/gauss/1", zip2_digest, True)])
    return setup
rc, out = run(order(6))
expect("order sums held to the raw run", rc, 0, out)
rc, out = run(order(7))
expect("an order sum differing from the raw run", rc, 1, out)

# A rank missing: fail.
def missing(t):
    write(t, "2r_free_free_socket", 2, EXACT)
    write(t, "2r_free_free_zip2", 1, EXACT)
rc, out = run(missing)
expect("a missing rank", rc, 1, out)

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("compare_checks: 6 scenarios as expected")
