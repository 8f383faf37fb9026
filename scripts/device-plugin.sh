#!/usr/bin/env bash
# The net plugin on the GPU machine, in one call (no network needed; ~5 minutes):
#   1. build (Release, sm_90) into build-dev;
#   2. ctest of the transports, the engine and the plugin (device-buffer exchanges, GPUDirect RDMA
#      over the emulated libibverbs on cudaMalloc'd memory included: they run where a GPU is);
#   3. a real NCCL job (bench/nccl/allreduce_check.py, 2 processes, PyTorch's NCCL) through the
#      plugin, the ranks forced onto the network (on one GPU: each rank its own NCCL_HOSTID, under
#      MPS, which this script starts and stops), checked exactly: NCCL's own socket transport,
#      then the plugin (host buffers: NCCL stages through host memory) off (NCCL_ZIP_ENABLE=0),
#      auto and forced (1, 2) on the CPU codec (NCCL_ZIP_GPU=0, set: the GPU codec is the default
#      where a GPU is) and on the resident GPU codec (NCCL_ZIP_GPU=1; the job copies each result to
#      the host while collectives run, which hangs a plugin that blocks in CUDA);
#   4. all_reduce 64 MiB bf16 timing: Socket vs plugin off vs plugin auto (CPU, and GPU codec);
#   5. the same job over the verbs transport on the emulated HCA (tests/verbs/emu): host buffers
#      compressed (NCCL_ZIP_ENABLE=2), then device buffers by GPUDirect RDMA (NCCL_ZIP_GDR=1, the
#      emulation's DMA-BUF and peermem; --sync, since the emulation moves GPU bytes with CUDA
#      copies, which a thread blocked in a copy to the host would hold up), auto and forced (the
#      resident GPU codec codes the device buffers through device staging);
#   6. the log lines that show what NCCL used (net plugin, tuner and its decisions).
# Usage: scripts/device-plugin.sh        (logs under $OUT, default /tmp/device-plugin)
#        NCCL_JOB=0 scripts/device-plugin.sh   steps 1-2 only
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/device-plugin}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
FAIL=0

# Every step has a deadline, and all of them together DEADLINE seconds (under the device call's
# 10 minutes); timeout signals the whole process group (the spawned ranks too).
DEADLINE=${DEADLINE:-540}
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  if [ $left -lt 10 ]; then
    say "== $name: SKIPPED (out of time)"
    FAIL=1
    return 1
  fi
  [ $secs -le $left ] || secs=$left
  local t0=$SECONDS
  timeout -k 10 "$secs" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  say "== $name: rc=$rc ($((SECONDS - t0)) s)$([ $rc -eq 124 ] && echo ' TIMED OUT')"
  [ $rc -eq 0 ] || FAIL=1
  return $rc
}

# No NVLink SHARP / multicast anywhere (the machine's fabric state is not ours to touch).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

say "device-plugin.sh at $(date -u +%FT%TZ), commit $(git describe --always --dirty 2>/dev/null || echo '?') (-dirty: the tree differs from it)"
nvidia-smi -L 2>&1 | tee -a "$SUMMARY"

# 1. Build: only what the plugin tests and the NCCL job need.
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DZIPCCL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
. scripts/device-gtest.sh
gtest_setup || exit 1
step configure 60 cmake -S . -B build-dev "${cmake_args[@]}" || { say "configure failed: see $OUT/configure.log"; exit 1; }
step build 240 cmake --build build-dev -j "$(nproc)" --target nccl-net-zip plugin_tests zip_peer zipccl-demo \
  common_tests socket_tests engine_tests engine_gpu_tests verbs_link_tests verbs_emu_tests verbs_ib_gdr_tests \
  verbs_emu_gdr_device_tests zipccl-doctor zipccl-net-bench zipccl-inspect ||
  { tail -40 "$OUT/build.log"; exit 1; }
PLUGIN=$ROOT/build-dev/plugin/libnccl-net-zip.so
say "plugin: $PLUGIN; dynamic deps: $(readelf -d "$PLUGIN" | awk '/NEEDED/ {print $5}' | tr '\n' ' ')"

# 2. The plugin's tests, device buffers included.
step ctest 180 ctest --test-dir build-dev -L 'plugin|verbs|socket|engine|common' -j 8 --timeout 120 --output-on-failure
grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/ctest.log" | tail -25 | tee -a "$SUMMARY"
say "GPU cases run (not skipped): $(grep -cE "(DeviceExchange|IbGdrExchange|EmuGdrDevice|DeviceBuffers).*Passed" "$OUT/ctest.log")"
if [ "${NCCL_JOB:-1}" = 0 ]; then
  say "overall: $([ $FAIL -eq 0 ] && echo PASS || echo FAIL) (NCCL job not run; logs in $OUT)"
  exit $FAIL
fi

# 3 and 4. The NCCL job: two ranks forced onto the network transport over loopback. MPS lets two
# processes' kernels share the GPU without time slices (a user-space daemon: no device setting).
if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then
  nvidia-cuda-mps-control -d && say "MPS daemon started (ranks share the GPU)"
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
fi
export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
JOB=(python3 "$ROOT/bench/nccl/allreduce_check.py")
socket_env=(env NCCL_NET=Socket NCCL_NET_PLUGIN=none)
zip=(env NCCL_NET=Zip NCCL_NET_PLUGIN="$PLUGIN")

step nccl_socket 75 "${socket_env[@]}" "${JOB[@]}" --label socket --bench 10
step nccl_zip0 75 "${zip[@]}" NCCL_ZIP_ENABLE=0 "${JOB[@]}" --label zip0 --bench 10
step nccl_zip1 75 "${zip[@]}" NCCL_ZIP_GPU=0 NCCL_ZIP_ENABLE=1 "${JOB[@]}" --label zip1 --bench 10
step nccl_zip2 60 "${zip[@]}" NCCL_ZIP_GPU=0 NCCL_ZIP_ENABLE=2 "${JOB[@]}" --label zip2
step nccl_gpu2 75 "${zip[@]}" NCCL_ZIP_GPU=1 NCCL_ZIP_ENABLE=2 "${JOB[@]}" --label gpu2
step nccl_gpu1 75 "${zip[@]}" NCCL_ZIP_GPU=1 NCCL_ZIP_ENABLE=1 "${JOB[@]}" --label gpu1 --bench 10

# 5. The verbs transport over the emulated HCA.
emu=("${zip[@]}" NCCL_ZIP_TRANSPORT=ib NCCL_ZIP_IBVERBS_LIB="$ROOT/build-dev/verbs/emu/libzipccl-ibverbs-emu.so")
step nccl_ib_zip2 75 "${emu[@]}" NCCL_ZIP_ENABLE=2 "${JOB[@]}" --label ib_zip2
step nccl_ib_gdr 75 "${emu[@]}" NCCL_ZIP_GDR=1 NCCL_ZIP_EMU_GDR=dmabuf,peermem NCCL_NET_GDR_LEVEL=SYS "${JOB[@]}" \
  --label ib_gdr --sync
step nccl_ib_gdr2 75 "${emu[@]}" NCCL_ZIP_ENABLE=2 NCCL_ZIP_GDR=1 NCCL_ZIP_EMU_GDR=dmabuf,peermem NCCL_NET_GDR_LEVEL=SYS \
  "${JOB[@]}" --label ib_gdr2 --sync

# 6. What NCCL used, what the plugin did, and the results.
for f in nccl_socket nccl_zip0 nccl_zip1 nccl_zip2 nccl_gpu2 nccl_gpu1 nccl_ib_zip2 nccl_ib_gdr nccl_ib_gdr2; do
  log="$OUT/$f.log"
  say ""
  say "---- $f"
  grep -E "Loaded net plugin|TUNER/Plugin|tuner plugin|coll channels|NCCL_MIN_NCHANNELS|Using network|NET/Zip : (socket|ib transport|device buffers|host buffers|GPU codec)" "$log" | sort | uniq -c | head -10 | tee -a "$SUMMARY"
  grep -E "NET/Zip : tuner: " "$log" | sed 's/.*tuner: //' | sort | uniq -c | head -6 | tee -a "$SUMMARY"
  grep -oE "via NET/[A-Za-z]+/[0-9]+(/GDRDMA)?" "$log" | sort | uniq -c | tee -a "$SUMMARY"
  grep -E "NET/Zip : (communicator|(send|recv) comm .* closed)" "$log" | head -4 | tee -a "$SUMMARY"
  grep -E "WARN" "$log" | head -6 | tee -a "$SUMMARY"
  grep -E "^(RESULT|BENCH)|MISMATCH|Error|Traceback" "$log" | head -12 | tee -a "$SUMMARY"
done
say ""
say "timing, all_reduce 64 MiB bf16:"
grep -h "^BENCH" "$OUT"/nccl_*.log | tee -a "$SUMMARY"
say ""
say "overall: $([ $FAIL -eq 0 ] && echo PASS || echo FAIL) (logs in $OUT/logs.tar.gz)"
# A device call returns at most 8 files: the summary, and the logs in one archive.
(cd "$OUT" && find . -name '*.log' | sort | tar -czf logs.tar.gz --remove-files -T -)
exit $FAIL
