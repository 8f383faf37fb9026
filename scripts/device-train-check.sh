#!/usr/bin/env bash
# A small GPT trained through the plugin, on the GPU machine in one call: bench/nccl/train_check.py
# (DDP and FSDP, bf16, fixed seed) with compression off and on, unchanged training code, the ranks
# on the one GPU (each its own NCCL_HOSTID, under MPS) forced onto the network over loopback,
# paced to PACE Mb/s per rank (a NIC of that speed; 0: unpaced; the default 10 Gb/s makes the
# default model's step wait for its gradients: at 32 Gb/s it is compute-bound). Prints, per mode, each run's loss
# curve hash (equal: bit-identical training), median step time and the bytes the plugin saved;
# fails where a run printed no curve or a curve differs from its mode's raw run.
#   OUT=... scripts/device-train-check.sh    (MODES="ddp fsdp" RUNS="gpu0 gpu2 gpu1" STEPS=200
#                                            PACE=10000 ARGS="extra train_check.py arguments")
# Runs: gpuN = the plugin with the resident GPU codec (NCCL_ZIP_GPU=1, the default) and
# NCCL_ZIP_ENABLE=N, so every run has the channels the GPU codec asks for; zipN = the CPU codec.
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/device-train-check}
mkdir -p "$OUT"
. scripts/device-nccl-job.sh
nccl_job_build nccl-net-zip
nccl_job_start
nccl_job_plugin "${PACE:-10000}"
for mode in ${MODES:-ddp fsdp}; do
  for run in ${RUNS:-gpu0 gpu2 gpu1}; do
    label=${mode}_$run
    gpu=0
    case $run in gpu*) gpu=1 ;; esac
    # shellcheck disable=SC2086  # ARGS: extra arguments, split on purpose
    env NCCL_ZIP_ENABLE="${run#???}" NCCL_ZIP_GPU=$gpu timeout -k 10 120 python3 "$ROOT/bench/nccl/train_check.py" \
      --mode "$mode" --steps "${STEPS:-200}" --label "$label" ${ARGS:-} >"$OUT/$label.log" 2>&1
    echo "$label: rc=$? $(grep -h '^CURVE\|^STEP' "$OUT/$label.log" | tr '\n' ' ')"
    grep -hE "Traceback|Error|WARN" "$OUT/$label.log" | head -3
  done
done | tee "$OUT/runs.txt"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import glob, os, re, sys
out = sys.argv[1]
rows, ok = {}, True
for f in sorted(glob.glob(os.path.join(out, "*_*.log"))):
    label = os.path.basename(f)[:-4]
    text = open(f, errors="replace").read()
    c = re.search(r"CURVE .* hash=(\w+) final=(\S+)", text)
    s = re.search(r"STEP .* median_ms=([\d.]+) grad_mb=([\d.]+)", text)
    tin = sum(float(m[1]) for m in re.finditer(r"communicator \w+: .*?([\d.]+) MB in", text))
    twire = sum(float(m[1]) for m in re.finditer(r"communicator \w+: .*? ([\d.]+) MB on the wire", text))
    rows[label] = (c[1] if c else None, c[2] if c else "-", float(s[1]) if s else None, s[2] if s else "-", tin, twire)
print("| run | curve hash | final loss | step ms | speedup | grads MB | plugin MB in | on the wire |")
print("|---|---|---|---|---|---|---|---|")
for label, (h, final, ms, mb, tin, twire) in rows.items():
    mode = label.split("_")[0]
    base = rows.get(mode + "_gpu0") or rows.get(mode + "_zip0")
    speed = f"{base[2] / ms:.2f}" if base and base[2] and ms else "-"
    print(f"| {label} | {h} | {final} | {ms if ms else '-'} | {speed} | {mb} | {tin:.0f} | {twire:.0f} |")
    if h is None or (base and base[0] != h):
        ok = False
print("loss curves: " + ("bit-identical within each mode" if ok else "DIFFER or missing"))
sys.exit(0 if ok else 1)
PY
rc=${PIPESTATUS[0]}
echo "overall: $([ "$rc" = 0 ] && echo PASS || echo FAIL)"
exit "$rc"
