#!/usr/bin/env python3
"""Print the SASS lines with the most warp-stall samples from `ncu --page source --csv` output,
per profiled kernel. Used by scripts/device-gpu.sh profile."""
import csv
import sys

tables, header = [], None
with open(sys.argv[1], newline="") as f:
    for row in csv.reader(f):
        if "Source" in row and any(h.startswith("Warp Stall Sampling (All") for h in row):
            header = row
            tables.append((header, []))
        elif header and len(row) == len(header):
            tables[-1][1].append(row)
if not tables:
    print(open(sys.argv[1]).read()[:3000])
    sys.exit("no source table found")
for header, rows in tables:
    col = next(i for i, h in enumerate(header) if h.startswith("Warp Stall Sampling (All"))
    src = header.index("Source")
    val = lambda r: float(r[col] or 0)
    total = sum(val(r) for r in rows) or 1
    print(f"--- {len(rows)} SASS lines, top stall sites:")
    for r in sorted(rows, key=val, reverse=True)[:30]:
        print(f"{100 * val(r) / total:5.1f}%  {r[src][:110]}")
