#!/usr/bin/env bash
# Collective timings through real NCCL/PyTorch on the GPU machine, in one call (~5 minutes):
# builds the plugin (Release, sm_90) into build-dev, then runs bench/nccl/collective_bench.py
# (ZIP_RANKS ranks, default 2, on one GPU, each its own NCCL_HOSTID, under MPS, sockets on lo) for
# the plugin with compression off, auto and always, host buffers coded by the resident GPU codec
# (NCCL_ZIP_GPU=1; GPU=0: the CPU codec), with each rank's sends paced to each of PACES Mb/s
# (NCCL_ZIP_SOCKET_PACE_MBPS; default 32000, a 4 GB/s NIC) and unpaced, and NCCL's own Socket
# transport unpaced (SOCKET=0: not); prints per collective and size the median time and the
# speedup over compression off at the same pacing, measured in the same call
# (bench/nccl/plot_speedup.py $OUT draws it). Every run has NCCL_MIN_NCHANNELS=CHANNELS (default
# 8, what NCCL_ZIP_GPU=1 sets): the same channels with compression off and on.
#   OUT=... scripts/device-nccl-bench.sh      (SIZES=64,128,256 (MiB, or 64K, 1M...) REPEATS=10
#                                              PACES=10000,20000,40000 GPU=1 CHANNELS=8
#                                              COLLECTIVES=all_gather,reduce_scatter,all_reduce,
#                                              alltoallv,alltoallv_late; EXTRA_CTAS=N adds paced
#                                              auto with NCCL_ZIP_GPU_CTAS=N; TUNER_AB=1 adds paced
#                                              auto without the tuner; TIMELINE=1 writes each run's
#                                              per-stage times, scripts/timeline.py, to
#                                              $OUT/timeline.txt)
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/device-nccl-bench}
mkdir -p "$OUT"
PACES=${PACES:-${PACE:-32000}}
export NCCL_MIN_NCHANNELS=${CHANNELS:-8}
GPU=${GPU:-1}
. scripts/device-nccl-job.sh
nccl_job_build nccl-net-zip
nccl_job_start
export NCCL_NET=Zip NCCL_NET_PLUGIN="$ROOT/build-dev/plugin/libnccl-net-zip.so"
BENCH=(python3 "$ROOT/bench/nccl/collective_bench.py" --sizes "${SIZES:-64,128,256}" --repeats "${REPEATS:-10}"
  --collectives "${COLLECTIVES:-all_gather,reduce_scatter}")
LABELS=()
run() {  # label (p<Mb/s>_* or lo_*), env assignments...
  local label=$1
  shift
  LABELS+=("$label")
  local tl=()
  if [ -n "${TIMELINE:-}" ]; then
    rm -rf "$OUT/timeline/$label" && mkdir -p "$OUT/timeline/$label"
    tl=(NCCL_ZIP_TIMELINE="$OUT/timeline/$label")
  fi
  env "$@" "${tl[@]}" timeout -k 10 150 "${BENCH[@]}" --label "$label" >"$OUT/$label.log" 2>&1
  echo "$label: rc=$? $(grep -c '^BENCH' "$OUT/$label.log") timings, $(grep -h 'CHECK' "$OUT/$label.log" | grep -c 'ok=1')/2 checks ok"
  grep -hE "WARN|Traceback|Error" "$OUT/$label.log" | head -3
}
for pace in ${PACES//,/ }; do  # labels p<Mb/s>_*: that pacing
  p=p$pace
  run ${p}_off NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=0
  run ${p}_auto NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU"
  run ${p}_always NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=2 NCCL_ZIP_GPU="$GPU"
  [ -n "${EXTRA_CTAS:-}" ] && run ${p}_auto${EXTRA_CTAS}ctas NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=1 \
    NCCL_ZIP_GPU="$GPU" NCCL_ZIP_GPU_CTAS="$EXTRA_CTAS"
  [ -n "${TUNER_AB:-}" ] && run ${p}_autonotuner NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU" \
    NCCL_ZIP_TUNER=0
done
run lo_off NCCL_ZIP_ENABLE=0
run lo_auto NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU"
[ "${SOCKET:-1}" = 0 ] || run lo_socket NCCL_NET=Socket NCCL_NET_PLUGIN=none
if [ -n "${TIMELINE:-}" ]; then
  for l in "${LABELS[@]}"; do
    echo "== $l"
    python3 scripts/timeline.py "$OUT/timeline/$l"
  done >"$OUT/timeline.txt" 2>&1
  rm -rf "$OUT/timeline"
fi
python3 - "$OUT" "$PACES" "${LABELS[@]}" <<'PY'
import re, sys, glob, os
out, pace, LABELS = sys.argv[1], sys.argv[2], sys.argv[3:]
t = {}
for f in glob.glob(os.path.join(out, "*.log")):
    for m in re.finditer(r"BENCH label=(\S+) coll=(\S+) bytes=(\d+) median_ms=([\d.]+)", open(f).read()):
        t[(m[1], m[2], int(m[3]))] = float(m[4])
# The plugin's own account of each run (its send comms' closing lines).
for f in sorted(glob.glob(os.path.join(out, "*.log"))):
    m = c = g = 0
    ratios = []
    for line in open(f):
        x = re.search(r"send comm .* closed: (\d+) messages \((\d+) compressed\).* ratio ([\d.]+).* (\d+) codec jobs on the GPU", line)
        if x:
            m, c, g = m + int(x[1]), c + int(x[2]), g + int(x[4])
            ratios.append(x[3])
    if m:
        text = open(f).read()
        tuned = f", tuner decisions: {text.count('/Simple compressed')} compressed, {text.count(chr(39).join(['NCCL', 's choice']))} NCCL's"
        print(f"{os.path.basename(f)[:-4]}: {m} messages sent, {c} compressed, {g} coded on the GPU, ratios {' '.join(ratios)}"
              f"{tuned if 'tuner: ' in text else ''}")
keys = sorted({(c, s) for (_, c, s) in t})
labels = [l for l in LABELS if any(k[0] == l for k in t)]
base = lambda l: l.split("_")[0] + "_off"  # the same pacing, compression off
print(f"\n(p<N>: each rank's sends capped at N Mb/s ({pace}); lo: unpaced, lo_socket NCCL's own Socket transport; "
      "x: speedup over compression off at the same pacing)")
human = lambda b: f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
print("| collective | size | " + " | ".join(f"{l} ms" + ("" if l == base(l) else f" | {l} x") for l in labels) + " |")
print("|---|---|" + "---|" * sum(1 if l == base(l) else 2 for l in labels))
for c, s in keys:
    row = []
    for l in labels:
        v, o = t.get((l, c, s)), t.get((base(l), c, s))
        row.append(f"{v:.3g}" if v else "-")
        if l != base(l):
            row.append(f"{o / v:.2f}" if v and o else "-")
    print(f"| {c} | {human(s)} | " + " | ".join(row) + " |")
PY
