#!/usr/bin/env bash
# Collective timings through real NCCL/PyTorch on the GPU machine, in one call (~5 minutes):
# builds the plugin (Release, sm_90) into build-dev, then runs bench/nccl/collective_bench.py
# (ZIP_RANKS ranks, default 2, on one GPU, each its own NCCL_HOSTID, under MPS, sockets on lo) for
# the plugin with compression off, auto and always, host buffers coded by the resident GPU codec
# (NCCL_ZIP_GPU=1; GPU=0: the CPU codec), with each rank's sends paced to each of PACES Mb/s
# (NCCL_ZIP_SOCKET_PACE_MBPS; default 32000, a 4 GB/s NIC; PACES= none) and unpaced (always unpaced: the
# stand's ceiling for compressed traffic), and NCCL's own Socket transport unpaced (SOCKET=0:
# not); prints per collective and size the median time and the speedup over compression off at
# the same pacing, measured in the same call
# (bench/nccl/bench_table.py; bench/nccl/plot_speedup.py $OUT draws it). Every run has
# NCCL_MIN_NCHANNELS=CHANNELS (default 8, what the GPU codec sets): the same channels with
# compression off and on. A short warm-up job runs first, uncounted; ROUNDS=N runs the whole
# sequence N times, even rounds in reverse order (each label's time: the median of its rounds'),
# since on this stand one run of a configuration can differ from the next by 15% and more
# (docs/benchmarks.md).
#   OUT=... scripts/device-nccl-bench.sh      (SIZES=64,128,256 (MiB, or 64K, 1M...) REPEATS=10
#                                              PACES=10000,20000,40000 GPU=1 CHANNELS=8
#                                              COLLECTIVES=all_gather,reduce_scatter,all_reduce,
#                                              alltoallv,alltoallv_late; VARIANTS="NAME:K=V,K=V
#                                              ..." adds, per pacing and unpaced, auto labels
#                                              <p>_auto_NAME with those settings (e.g.
#                                              notuner:NCCL_ZIP_TUNER=0 cpu:NCCL_ZIP_GPU=0
#                                              5ctas:NCCL_ZIP_GPU_CTAS=5); TIMELINE=1 writes each run's
#                                              per-stage times, scripts/timeline.py, to
#                                              $OUT/timeline.txt (paced runs: also each
#                                              collective's span, fill and tail against
#                                              its wire time, --collectives; TIMELINE=keep:
#                                              and the CSV files in timeline.tar.gz); ROUNDS=1;
#                                              DATA=a .safetensors file of bf16 tensors,
#                                              e.g. ../shared/data/
#                                              grads_bf16.safetensors: its values, not Gaussian;
#                                              SYNC=stream: stream syncs around each timing, not
#                                              torch.cuda.synchronize(), which also waits for the
#                                              codec kernel's idle exit; BASE=DIR: another
#                                              tree, e.g. `git archive REV | (mkdir -p .ab-base
#                                              && tar -x -C .ab-base)` carried into the call,
#                                              built alike, its plugin run as the variant
#                                              <p>_auto_base: an A/B of code in one call;
#                                              ALWAYS=0: no forced-compression runs;
#                                              UNPACED=0: no unpaced plugin runs; AB=Socket:
#                                              runs lo_ab (and lo_ab_NAME per VARIANTS entry),
#                                              the plugin (auto) and that NCCL net timed in turn
#                                              in one process (collective_bench.py --nets), their
#                                              own table after the main one; the logs
#                                              end up in $OUT/logs.tar.gz, PACK=0: not)
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/device-nccl-bench}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PACES=${PACES-${PACE:-32000}}  # set and empty: unpaced runs only
export NCCL_MIN_NCHANNELS=${CHANNELS:-8}
GPU=${GPU:-1}
. scripts/device-nccl-job.sh
nccl_job_build nccl-net-zip
if [ -n "${BASE:-}" ]; then
  # Fresh: git archive gives every file its commit's time, which ninja would take as up to date.
  rm -rf "$BASE/build-dev"
  (cd "$BASE" && OUT=$OUT/base && mkdir -p "$OUT" && nccl_job_build nccl-net-zip) ||
    { echo "BASE=$BASE did not build"; exit 1; }
  VARIANTS="${VARIANTS:-} base:NCCL_NET_PLUGIN=$(cd "$BASE" && pwd)/build-dev/plugin/libnccl-net-zip.so"
fi
nccl_job_start
nccl_job_plugin 0  # unpaced here: each run sets its own pace
BENCH=(python3 "$ROOT/bench/nccl/collective_bench.py" --sizes "${SIZES:-64,128,256}" --repeats "${REPEATS:-10}"
  --collectives "${COLLECTIVES:-all_gather,reduce_scatter}" ${DATA:+--data "$DATA"} --sync "${SYNC:-device}")
LABELS=()
ROUND=1
run() {  # label (p<Mb/s>_* or lo_*), env assignments...
  local label=$1
  shift
  LABELS+=("$label")
  local tl=() log="$OUT/$label.r$ROUND.log"
  if [ -n "${TIMELINE:-}" ]; then
    rm -rf "$OUT/timeline/$label" && mkdir -p "$OUT/timeline/$label"
    tl=(NCCL_ZIP_TIMELINE="$OUT/timeline/$label")
  fi
  env "$@" "${tl[@]}" timeout -k 10 150 "${BENCH[@]}" --label "$label" >"$log" 2>&1
  echo "$label (round $ROUND): rc=$? $(grep -o 'BENCH label=[^ ]* coll=' "$log" | wc -l) timings, $(grep -o 'CHECK[^C]*ok=1' "$log" | wc -l)/2 checks ok"
  grep -hE "WARN|Traceback|Error" "$log" | head -3
}
add() { QUEUE+=("$*"); }  # label, env assignments (no spaces in either): a run of this round
variants() {  # label prefix, env assignments...: one auto run PREFIX_NAME per VARIANTS entry
  local prefix=$1 v
  shift
  for v in ${VARIANTS:-}; do
    # shellcheck disable=SC2046  # the entry's K=V pairs, split on commas
    add "${prefix}_${v%%:*}" "$@" NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU" $(tr , ' ' <<<"${v#*:}")
  done
}
# The first NCCL job after MPS starts runs slow (up to 1.3x): a short one first, not counted.
# (argparse: the last --sizes, --repeats, --collectives stand)
env NCCL_ZIP_ENABLE=0 timeout -k 10 150 "${BENCH[@]}" --label warmup --sizes 16M --repeats 3 --collectives all_gather \
  >"$OUT/warmup.txt" 2>&1 || echo "warm-up run failed (rc=$?)"
for ((ROUND = 1; ROUND <= ${ROUNDS:-1}; ROUND++)); do
  QUEUE=()
  for pace in ${PACES//,/ }; do  # labels p<Mb/s>_*: that pacing
    p=p$pace
    add ${p}_off NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=0
    add ${p}_auto NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU"
    [ "${ALWAYS:-1}" = 0 ] || add ${p}_always NCCL_ZIP_SOCKET_PACE_MBPS="$pace" NCCL_ZIP_ENABLE=2 NCCL_ZIP_GPU="$GPU"
    variants "${p}_auto" NCCL_ZIP_SOCKET_PACE_MBPS="$pace"
  done
  if [ "${UNPACED:-1}" = 1 ]; then
    add lo_off NCCL_ZIP_ENABLE=0
    add lo_auto NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU"
    # Forced and unpaced, with the most CTAs the link sizing gives (lo reports no speed, so the
    # sizing would take 10 Gb/s and 4 CTAs): the fastest compressed traffic moves here (codec and
    # PCIe bound), so no pacing can give more than p<N>_off / lo_always: the stand's ceiling.
    [ "${ALWAYS:-1}" = 0 ] || add lo_always NCCL_ZIP_ENABLE=2 NCCL_ZIP_GPU="$GPU" NCCL_ZIP_GPU_CTAS=16
    variants lo_auto
  fi
  if [ -n "${AB:-}" ]; then
    add lo_ab ZIP_BENCH_NETS="Zip,$AB" NCCL_ZIP_ENABLE=1 NCCL_ZIP_GPU="$GPU"
    variants lo_ab ZIP_BENCH_NETS="Zip,$AB"
  fi
  [ "${SOCKET:-1}" = 0 ] || add lo_socket NCCL_NET=Socket NCCL_NET_PLUGIN=none
  # Even rounds run the labels in reverse: a run's place in the sequence (right after another
  # configuration's teardown, say) must not favor one label over the next.
  for ((i = 0; i < ${#QUEUE[@]}; i++)); do
    j=$((ROUND % 2 ? i : ${#QUEUE[@]} - 1 - i))
    # shellcheck disable=SC2086  # a label and its K=V pairs
    run ${QUEUE[j]}
  done
done
if [ -n "${TIMELINE:-}" ]; then
  for l in $(printf '%s\n' "${LABELS[@]}" | sort -u); do
    echo "== $l"
    python3 scripts/timeline.py "$OUT/timeline/$l"
    # Paced labels: each collective's span against its wire time at the pace.
    [[ $l =~ ^p([0-9]+)_ ]] && python3 scripts/timeline.py "$OUT/timeline/$l" --collectives \
      "$(awk -v m="${BASH_REMATCH[1]}" 'BEGIN { print m / 8000 }')"
  done >"$OUT/timeline.txt" 2>&1
  # TIMELINE=keep: the CSV files too, for another look (a device call returns 8 files at most).
  [ "$TIMELINE" = keep ] && tar czf "$OUT/timeline.tar.gz" -C "$OUT" timeline
  rm -rf "$OUT/timeline"
fi
python3 bench/nccl/bench_table.py "$OUT" "$PACES" "${LABELS[@]}"
rc=$?
# A device call returns at most 8 files: every run's log in one archive (PACK=0: left as they are,
# for a caller that reads them, as scripts/device-e2e.sh does).
if [ "${PACK:-1}" = 1 ]; then
  (cd "$OUT" && find . -name '*.log' -o -name warmup.txt | sort | tar -czf logs.tar.gz --remove-files -T -)
fi
exit $rc
