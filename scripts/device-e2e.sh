#!/usr/bin/env bash
# End to end on the GPU machine in one device call: the collectives exact through NCCL's C API
# (scripts/device-nccl-check.sh), a training run's loss curve bit-identical with compression on
# and off and its step time (scripts/device-train-check.sh), a GEMM's slowdown beside compressed
# collectives (scripts/device-gemm-beside.sh), and the collectives' speed over NCCL's
# Socket, the plugin raw, auto and always on links paced to 10/20/40 Gb/s and unpaced
# (scripts/device-nccl-bench.sh), drawn as speedup against size (bench/nccl/plot_speedup.py).
# Each part has a time budget so that the call ends within the device's 10 minutes; what ran out
# of time says so. Under $OUT: summary.md (the tables), speedup.png, logs.tar.gz (every part's logs).
#   OUT=... scripts/device-e2e.sh    (CHECK_S=200 TRAIN_S=100 GEMM_S=70 BENCH_S=200; the parts' own knobs,
#                                    e.g. RANKS, COMBOS, TRANSPORTS, STEPS, SIZES, REPEATS, PACES,
#                                    pass through; on a machine of several GPUs ZIP_RANKS=N RANKS=N
#                                    puts each rank on its own GPU, ZIP_GPUS_PER_NODE=K groups them)
set -u
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/device-e2e}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.md
: >"$SUMMARY"
rc=0
part() {  # part NAME SECONDS SCRIPT (environment assignments before it apply)
  local name=$1 secs=$2
  shift 2
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" >"$OUT/$name.txt" 2>&1
  local r=$?
  { echo "## $name (rc=$r, $((SECONDS - t0)) s$([ $r -eq 124 ] && echo ', OUT OF TIME'))"
    echo
    grep -E '^\||^overall|^loss curves|^[0-9]+ runs|^GEMM|out of time' "$OUT/$name.txt"
    echo; } >>"$SUMMARY"
  [ $r -eq 0 ] || rc=1
}
part check "${CHECK_S:-200}" env OUT="$OUT/check" DEADLINE=$((${CHECK_S:-200} - 20)) RANKS="${RANKS:-2 4}" \
  COMBOS="${COMBOS:-free/free Simple/free LL/free free/tree}" TRANSPORTS="${TRANSPORTS:-socket zip0 zip2 gpu0 gpu2}" \
  MAX_ELEMS="${MAX_ELEMS:-16384}" scripts/device-nccl-check.sh
part train "${TRAIN_S:-100}" env OUT="$OUT/train" MODES="${MODES:-ddp}" RUNS="${RUNS:-gpu0 gpu2}" \
  STEPS="${STEPS:-100}" scripts/device-train-check.sh
part gemm "${GEMM_S:-70}" env OUT="$OUT/gemm" scripts/device-gemm-beside.sh
part bench "${BENCH_S:-200}" env OUT="$OUT/bench" PACES="${PACES:-10000,20000,40000}" SIZES="${SIZES:-1M,16M,64M}" \
  REPEATS="${REPEATS:-3}" COLLECTIVES="${COLLECTIVES:-all_gather,reduce_scatter,all_reduce,alltoallv}" PACK=0 \
  scripts/device-nccl-bench.sh
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 bench/nccl/plot_speedup.py "$OUT/bench" "$OUT/speedup.png" --title "zipccl on one H200, 2 ranks" >>"$SUMMARY" 2>&1
else
  echo "no matplotlib here: draw it with bench/nccl/plot_speedup.py on the logs in $OUT/bench" >>"$SUMMARY"
fi
# Few files come back from a device call: the summary, the plot and one archive of the logs.
tar -czf "$OUT/logs.tar.gz" -C "$OUT" check train gemm bench check.txt train.txt gemm.txt bench.txt 2>/dev/null &&
  rm -rf "$OUT/check" "$OUT/train" "$OUT/gemm" "$OUT/bench" "$OUT"/{check,train,gemm,bench}.txt
cat "$SUMMARY"
echo "overall: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
