#!/usr/bin/env bash
# Every collective exact through NCCL's C API, on the GPU machine in one call: builds the plugin
# and zipccl-nccl-check (bench/nccl/nccl_check.cc, Release, sm_90), then for each rank count,
# protocol/algorithm combination and transport runs one checker process per rank, each its own
# NCCL_HOSTID on a GPU of its own where there are enough (ZIP_GPUS_PER_NODE to a node), else on
# the one GPU under MPS, forced onto the network over loopback, and compares the
# runs with bench/nccl/compare_checks.py: every output equal to its expectation, every digest
# equal to NCCL's Socket transport's (order-dependent float sums over >2 ranks: to the plugin's
# own run with compression off).
#   OUT=... scripts/device-nccl-check.sh
#     RANKS="2 4"  COMBOS="free/free LL/free LL128/free Simple/free free/tree Simple/ring"
#     TRANSPORTS="socket zip0 zip2 gpu0 gpu2 gpu1"  MAX_ELEMS=65536  DEADLINE=540 (seconds)
# PROTO/ALGO "free": NCCL chooses; "tree": allreduce on the tree, the rest on the ring.
# Transports: socket = NCCL_NET=Socket; zipN = the plugin with NCCL_ZIP_ENABLE=N on the CPU
# codec; gpuN = the same with the resident GPU codec (NCCL_ZIP_GPU=1).
# Results: $OUT/summary.txt (the table), $OUT/checks.tar.gz (every rank's output and log).
set -u
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=${OUT:-/tmp/device-nccl-check}
mkdir -p "$OUT"
RUNS=$OUT/runs
rm -rf "$RUNS" && mkdir -p "$RUNS"
DEADLINE=${DEADLINE:-540}
. scripts/device-nccl-job.sh

# NCCL's headers and library: the CUDA toolkit's, else PyTorch's wheel's.
if [ ! -f /usr/local/cuda/include/nccl.h ]; then
  NCCL_HOME=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null) &&
    export NCCL_HOME LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
fi
nccl_job_build nccl-net-zip zipccl-nccl-check
CHECK=$ROOT/build-dev/bin/zipccl-nccl-check
PLUGIN=$ROOT/build-dev/plugin/libnccl-net-zip.so
# The real tensors: $ZIPCCL_DATA_DIR, else .zdata (what a device call carries), else ../shared/data.
DATA=${ZIPCCL_DATA_DIR:-}
for d in "$ROOT/.zdata" "$ROOT/../shared/data"; do
  [ -z "$DATA" ] && [ -d "$d" ] && DATA=$(cd "$d" && pwd)
done
if [ -n "$DATA" ]; then DATA_ARG=(--data="$DATA"); else DATA_ARG=(); echo "no real tensors found: Gaussian and random bytes only"; fi

nccl_job_start

transport_env() {  # transport -> environment assignments
  case $1 in
    socket) echo "NCCL_NET=Socket NCCL_NET_PLUGIN=none" ;;
    zip[0-2]) echo "NCCL_NET=Zip NCCL_NET_PLUGIN=$PLUGIN NCCL_ZIP_ENABLE=${1#zip} NCCL_ZIP_GPU=0" ;;
    gpu[0-2]) echo "NCCL_NET=Zip NCCL_NET_PLUGIN=$PLUGIN NCCL_ZIP_ENABLE=${1#gpu} NCCL_ZIP_GPU=1" ;;
  esac
}

# Each rank its own "node" (NCCL_HOSTID) on a GPU of its own where there are enough
# (ZIP_GPUS_PER_NODE to a node), else sharing them.
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$GPUS" -ge 1 ] || GPUS=1
node_of() {  # rank nranks
  if [ "$GPUS" -ge "$2" ]; then echo $(($1 / ${ZIP_GPUS_PER_NODE:-1})); else echo "$1"; fi
}

# One run: nranks processes; at most 120 s.
run() {  # nranks proto algo transport
  local n=$1 proto=$2 algo=$3 t=$4
  local dir=$RUNS/${n}r_${proto}_${algo}_$t
  mkdir -p "$dir"
  local env
  read -r -a env <<<"$(transport_env "$t")"
  [ "$proto" = free ] || env+=(NCCL_PROTO="$proto")
  case $algo in
    free) ;;
    tree) env+=("NCCL_ALGO=ring;allreduce:tree") ;;
    *) env+=(NCCL_ALGO="$algo") ;;
  esac
  local pids=() r
  for ((r = 0; r < n; r++)); do
    env "${env[@]}" NCCL_HOSTID="zipcheck-$(node_of "$r" "$n")" timeout -k 5 60 "$CHECK" --rank=$r --nranks="$n" \
      --device=$((r % GPUS)) --id="$dir/id" \
      --max-elems="${MAX_ELEMS:-65536}" "${DATA_ARG[@]}" >"$dir/rank$r.txt" 2>"$dir/rank$r.log" &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  echo "$(basename "$dir"): rc=$rc $(grep -h RESULT "$dir"/rank*.txt | tr '\n' ' ')"
}

for n in ${RANKS:-2 4}; do
  for combo in ${COMBOS:-free/free LL/free LL128/free Simple/free free/tree Simple/ring}; do
    for t in ${TRANSPORTS:-socket zip0 zip2 gpu0 gpu2 gpu1}; do
      if [ $SECONDS -gt $((DEADLINE - 70)) ]; then  # a run takes 2-3 s, 60 at most
        echo "out of time: ${n}r ${combo} $t and later runs not done"
        break 3
      fi
      run "$n" "${combo%/*}" "${combo#*/}" "$t"
    done
  done
done | tee "$OUT/runs.txt"
python3 bench/nccl/compare_checks.py "$RUNS" | tee "$OUT/summary.txt"
rc=${PIPESTATUS[0]}
tar -czf "$OUT/checks.tar.gz" -C "$OUT" runs && rm -rf "$RUNS"
grep -q "^out of time" "$OUT/runs.txt" && rc=1
echo "overall: $([ "$rc" = 0 ] && echo PASS || echo FAIL)"
exit "$rc"
