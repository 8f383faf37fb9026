#!/usr/bin/env bash
# Build the GPU codec, its tests and its benchmark on a GPU machine and run them in one go:
#   scripts/device-gpu.sh [steps...]   steps: test bench memcheck memcheck-bulk racecheck (the
#                                      default), service (the resident codec's benchmark, CTAs
#                                      packed and spread; SERVICE_CTAS="8 16" its CTA counts),
#                                      staging (that benchmark with each CTA staging its next
#                                      tile and with one tile buffer, --one-buffer, in
#                                      turn twice: an A/B in one build; SERVICE_CTAS, default 16),
#                                      beside (cuBLAS GEMMs beside its paced stream, packed and
#                                      spread; BESIDE_CTAS="10 16", BESIDE_DIMS="8192 4096"),
#                                      profile, trace (phase clocks: a second build with
#                                      -DZIPCCL_GPU_TRACE=ON, gpu_codec_bench --trace),
#                                      service-trace (that build's gpu_service_bench, one sustained
#                                      row at a time: where a tile's cycles go, device memory
#                                      against pinned host; SERVICE_CTAS, default 16)
# Logs go to $OUT (default /tmp/zipccl-gpu). GoogleTest comes from the system or, where it is
# not installed, from a source tree in .gtest (copy of /usr/src/googletest). Training tensors
# for the ratio test are read from $ZIPCCL_DATA_DIR, else .zdata, else ../shared/data.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/zipccl-gpu}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(test bench memcheck memcheck-bulk racecheck)
BUILD=${BUILD:-build-gpu}
JOBS=$(nproc)

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
nvcc --version | tail -2 | tee -a "$OUT/gpu.txt"

cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} "-DCMAKE_CUDA_FLAGS=-Xptxas=-v -lineinfo")
. scripts/device-gtest.sh
gtest_setup || exit 1
if ! { cmake -S . -B "$BUILD" "${cmake_args[@]}" && cmake --build "$BUILD" -j "$JOBS" --target gpu_codec_tests gpu_service_tests engine_gpu_tests gpu_codec_bench gpu_service_bench \
  gpu_beside_bench; } \
  >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "BUILD FAILED"
  exit 1
fi
grep -E "registers|spill" "$OUT/build.log" | sort | uniq -c | head -8

# The instrumented build (-DZIPCCL_GPU_TRACE=ON: phase clocks) of one target, its log in $2.
trace_build() {
  { cmake -S . -B "$BUILD-trace" "${cmake_args[@]}" -DZIPCCL_GPU_TRACE=ON -DZIPCCL_TESTS=OFF &&
      cmake --build "$BUILD-trace" -j "$JOBS" --target "$1"; } >"$2" 2>&1
}

export ZIPCCL_DATA_DIR=${ZIPCCL_DATA_DIR:-$([ -d .zdata ] && echo "$PWD/.zdata" || echo "$PWD/../shared/data")}
T="$BUILD/tests/gpu/gpu_codec_tests" S="$BUILD/tests/gpu/gpu_service_tests" E="$BUILD/tests/engine/engine_gpu_tests"
rc=0
summary=()
for s in "${steps[@]}"; do
  case $s in
    test)
      timeout 300 "$T" --gtest_color=no >"$OUT/test.log" 2>&1
      r=$?
      timeout 120 "$S" --gtest_color=no >>"$OUT/test.log" 2>&1 || r=1
      timeout 120 "$E" --gtest_color=no >>"$OUT/test.log" 2>&1 || r=1
      CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 120 "$E" --gtest_color=no >>"$OUT/test.log" 2>&1 || r=1
      NCCL_ZIP_GPU_CTAS_PER_SM=1 timeout 120 "$E" --gtest_color=no >>"$OUT/test.log" 2>&1 || r=1;;
    bench)
      timeout 300 "$BUILD/bench/gpu/gpu_codec_bench" >"$OUT/bench.log" 2>&1
      r=$?
      cat "$OUT/bench.log";;
    service)  # CTAs packed two to an SM (the plugin's default), then spread one to an SM
      timeout 120 "$BUILD/bench/gpu/gpu_service_bench" ${SERVICE_CTAS:-} >"$OUT/service.log" 2>&1
      r=$?
      timeout 120 "$BUILD/bench/gpu/gpu_service_bench" --per-sm=1 ${SERVICE_CTAS:-} >>"$OUT/service.log" 2>&1 || r=1
      cat "$OUT/service.log";;
    staging)
      : >"$OUT/staging.log"
      r=0
      for _ in 1 2; do
        for flag in --one-buffer ""; do
          # shellcheck disable=SC2086  # CTA counts
          timeout 120 "$BUILD/bench/gpu/gpu_service_bench" $flag ${SERVICE_CTAS:-16} >>"$OUT/staging.log" 2>&1 || r=1
        done
      done
      grep -E "stages|^\| [0-9a-z]" "$OUT/staging.log" | grep -v -e "---|" -e "^| bytes" -e "^| buffers";;
    beside)  # cuBLAS GEMMs beside the resident codec's paced stream: packed, then spread
      : >"$OUT/beside.log"
      r=0
      for dim in ${BESIDE_DIMS:-8192 4096}; do
        for ctas in ${BESIDE_CTAS:-10 16}; do
          for per_sm in 2 1; do
            NCCL_ZIP_GPU_CTAS_PER_SM=$per_sm timeout 120 "$BUILD/bench/gpu/gpu_beside_bench" --ctas="$ctas" \
              --dim="$dim" >>"$OUT/beside.log" 2>&1 || r=1
          done
        done
      done
      grep -h "^BESIDE" "$OUT/beside.log";;
    memcheck)
      ZIPCCL_GPU_TEST_QUICK=1 timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$T" --gtest_color=no --gtest_filter=-*TrainingTensors* >"$OUT/memcheck.log" 2>&1
      r=$?
      timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$S" --gtest_color=no \
        --gtest_filter=-*StopsWhenAsked* >>"$OUT/memcheck.log" 2>&1 || r=1;;
    memcheck-bulk)  # the bulk tile path (batches >= 16 MiB), which the quick cases do not reach
      timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$T" --gtest_color=no --gtest_filter=*LargeBatchAndBulk* >"$OUT/memcheck-bulk.log" 2>&1
      r=$?;;
    racecheck)
      ZIPCCL_GPU_TEST_QUICK=1 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$T" --gtest_color=no --gtest_filter=*Sizes*:*Corrupted*:*AllBf16*:*Options*:*SingleCodec* >"$OUT/racecheck.log" 2>&1
      r=$?
      # The resident form: one CTA's shared memory serves tile after tile of different jobs.
      ZIPCCL_GPU_TEST_WAIT_S=120 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 "$S" --gtest_color=no \
        --gtest_filter=-*StopsWhenAsked* >>"$OUT/racecheck.log" 2>&1 || r=1;;
    profile)  # Nsight Compute on a bulk and a 512 KiB encode and decode
      timeout 300 ncu --clock-control none --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
        --section SourceCounters --print-details all -k regex:'(en|de)code_kernel' --launch-skip 8 --launch-count 2 \
        -o /tmp/prof -f "$BUILD/bench/gpu/gpu_codec_bench" --profile >"$OUT/profile.log" 2>&1
      r=$?
      ncu -i /tmp/prof.ncu-rep --print-details all >>"$OUT/profile.log" 2>&1
      ncu -i /tmp/prof.ncu-rep --page source --print-source sass --csv >"$OUT/source.csv" 2>&1
      grep -E "_kernel|Duration|Compute \(SM\)|DRAM Through|Stall|stall|Issued Warp|Eligible Warps" "$OUT/profile.log" | head -80
      python3 scripts/top-stalls.py "$OUT/source.csv";;
    service-trace)
      trace_build gpu_service_bench "$OUT/service-trace-build.log"
      r=$?
      : >"$OUT/service-trace.log"
      for row in encode:device encode:host decode:device decode:host; do
        [ $r = 0 ] || break
        timeout 120 "$BUILD-trace/bench/gpu/gpu_service_bench" --only=$row ${SERVICE_CTAS:-16} \
          >>"$OUT/service-trace.log" 2>&1 || r=1
      done
      grep -E "^\| (device|pinned)|^trace:" "$OUT/service-trace.log";;
    trace)
      trace_build gpu_codec_bench "$OUT/trace-build.log" &&
        timeout 300 "$BUILD-trace/bench/gpu/gpu_codec_bench" --trace >"$OUT/trace.log" 2>&1
      r=$?
      cat "$OUT/trace.log";;
    *) echo "unknown step $s"; r=2;;
  esac
  [ -f "$OUT/$s.log" ] && [ "$s" != profile ] && grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|ERROR SUMMARY|RACECHECK SUMMARY|Failure|error:" "$OUT/$s.log" | head -30
  summary+=("$s: rc=$r")
  [ $r -ne 0 ] && rc=1
done
printf '%s\n' "${summary[@]}"
exit $rc
