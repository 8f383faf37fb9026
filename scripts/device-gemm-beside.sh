#!/usr/bin/env bash
# What the codec takes from the application's kernels, on the GPU machine in one call: builds the
# plugin, then runs bench/nccl/gemm_beside.py (a bf16 GEMM loop alone, then beside back-to-back
# all_gathers; 2 ranks on the one GPU, each its own NCCL_HOSTID, under MPS, sockets on lo paced
# to PACE Mb/s per rank) with compression off, auto and always, and prints each run's GEMM
# slowdown (beside / alone) and all_gather time.
#   OUT=... scripts/device-gemm-beside.sh     (PACE=32000 (0: unpaced) ARGS="--dim 8192 --gemms 100 --mib 64"
#                                              RUNS="NAME:K=V,K=V ...": the runs, by default
#                                              zip0:NCCL_ZIP_ENABLE=0 zip1:NCCL_ZIP_ENABLE=1
#                                              zip2:NCCL_ZIP_ENABLE=2)
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/device-gemm-beside}
mkdir -p "$OUT"
export NCCL_MIN_NCHANNELS=${CHANNELS:-8}  # the same channels with compression off and on
. scripts/device-nccl-job.sh
nccl_job_build nccl-net-zip
nccl_job_start
nccl_job_plugin "${PACE:-32000}"
rc=0
for run in ${RUNS:-zip0:NCCL_ZIP_ENABLE=0 zip1:NCCL_ZIP_ENABLE=1 zip2:NCCL_ZIP_ENABLE=2}; do
  label=${run%%:*}
  # shellcheck disable=SC2046,SC2086  # the run's K=V pairs split on commas; ARGS split on purpose
  env $(tr , ' ' <<<"${run#*:}") timeout -k 10 120 python3 "$ROOT/bench/nccl/gemm_beside.py" --label "$label" ${ARGS:-} \
    >"$OUT/$label.log" 2>&1
  r=$?
  [ $r -eq 0 ] || { rc=1; echo "$label: rc=$r"; tail -5 "$OUT/$label.log"; }
  grep -h "^GEMM" "$OUT/$label.log"
done
exit $rc
