#!/usr/bin/env python3
"""Compares zipccl-nccl-check runs across transports, byte for byte.

  compare_checks.py DIR

DIR holds one folder per run, named <nranks>r_<proto>_<algo>_<transport>, each with rank<R>.txt
(the checker's stdout). A run passes when every rank printed RESULT ok=1 (every output equal to
its expectation) and its digests equal the reference's, case by case and rank by rank: NCCL's
Socket transport ("socket") of the same ranks, protocol and algorithm. A floating-point sum of
non-integer data ("order") has no exact expectation over more than two ranks: its value depends
on NCCL's reduction order, which the transport's speed and channels may change; there it is
compared with the same plugin configuration with compression off (zip2 -> zip0, gpu2 and gpu1
-> gpu0) and the raw runs themselves are its reference. Exit status 1 on any failure.
"""
import os
import re
import sys

RAW_OF = {"zip2": "zip0", "zip1": "zip0", "gpu2": "gpu0", "gpu1": "gpu0"}


def load(run_dir):
    """{rank: {case: (digest, ok, order)}}, {rank: RESULT line or None}"""
    cases, results = {}, {}
    for f in sorted(os.listdir(run_dir)):
        m = re.fullmatch(r"rank(\d+)\.txt", f)
        if not m:
            continue
        rank = int(m[1])
        cases[rank], results[rank] = {}, None
        for line in open(os.path.join(run_dir, f), errors="replace"):
            c = re.match(r"CASE (\S+) ([0-9a-f]{16}) ok=([01])( order)?", line)
            if c:
                cases[rank][c[1]] = (c[2], c[3] == "1", bool(c[4]))
            elif line.startswith("RESULT"):
                results[rank] = line.strip()
    return cases, results


def main():
    top = sys.argv[1]
    runs = {}
    for d in sorted(os.listdir(top)):
        m = re.fullmatch(r"(\d+)r_([^_]+)_([^_]+)_(\w+)", d)
        if m and os.path.isdir(os.path.join(top, d)):
            runs[(int(m[1]), m[2], m[3], m[4])] = load(os.path.join(top, d))
    failed = 0
    print("| ranks | proto | algo | transport | cases | self-check failures | digests differing | order sums compared |")
    print("|---|---|---|---|---|---|---|---|")
    for key in sorted(runs):
        nranks, proto, algo, transport = key
        cases, results = runs[key]
        problems = []
        if len(results) != nranks or any(r is None or "ok=1" not in r for r in results.values()):
            problems.append("not every rank passed: " + "; ".join(str(results.get(r)) for r in range(nranks)))
        self_fail = sum(1 for rc in cases.values() for d, ok, o in rc.values() if not ok)
        ref = runs.get((nranks, proto, algo, "socket"))
        raw = runs.get((nranks, proto, algo, RAW_OF.get(transport, "")))
        differ = compared_order = 0
        for rank, rc in cases.items():
            for name, (d, ok, order) in rc.items():
                base = ref if (not order or nranks == 2) else raw
                if base is None or base is runs[key]:
                    continue
                other = base[0].get(rank, {}).get(name)
                if other is None:
                    problems.append(f"rank {rank} {name}: missing from the reference")
                    continue
                compared_order += order
                if other[0] != d:
                    differ += 1
                    if differ <= 5:
                        problems.append(f"rank {rank} {name}: digest {d}, reference {other[0]}")
        if ref is None and transport != "socket":
            problems.append("no socket run to compare with")
        ncases = sum(len(rc) for rc in cases.values())
        print(f"| {nranks} | {proto} | {algo} | {transport} | {ncases} | {self_fail} | {differ} | {compared_order} |")
        if problems or self_fail or differ:
            failed += 1
            for p in problems[:8]:
                print(f"    {transport} {nranks}r {proto}/{algo}: {p}")
    print(f"\n{len(runs)} runs, {failed} failed")
    return 1 if failed or not runs else 0


if __name__ == "__main__":
    sys.exit(main())
