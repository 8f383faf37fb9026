#!/usr/bin/env bash
# Same-run comparison on the device machine: the working tree against a base tree (and optionally
# more variant trees), all built alike (Release, sm_90); the GPU tests on the working tree, then
# gpu_codec_bench and zipccl-demo (two ranks through the plugin, the resident GPU codec included) in turn on
# every tree, twice each (base, this, variants..., base, this, variants...), so that all sides see
# the same machine state.
#   git archive REV | (mkdir -p .ab-base && tar -x -C .ab-base)   # e.g. the previous main
#   scripts/device-gpu-ab.sh .ab-base [VARIANT_DIR...] [gpu_codec_bench args]   # logs in $OUT
# DEMO=0 leaves the demo out, CODEC=0 gpu_codec_bench; SERVICE_ARGS="10 16" (gpu_service_bench's
# arguments) runs the resident codec's benchmark on every tree in the same alternation, not only
# this tree's once; TESTS="gpu/gpu_service_tests ..." runs only those GPU tests.
# Leading arguments that are directories are trees (variants are named v1, v2, ... in order);
# the rest go to the benchmark. Trees outside git's view (.ab-base and the like are ignored)
# go into the device call's carry.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] && [ -d "$1" ] || { echo "usage: scripts/device-gpu-ab.sh BASE_DIR [VARIANT_DIR...] [bench args]"; exit 2; }
names=(this base) dirs=(. "$1")
shift
while [ $# -gt 0 ] && [ -d "$1" ]; do
  names+=("v$((${#names[@]} - 1))") dirs+=("$1")
  shift
done
OUT=${OUT:-/tmp/zipccl-gpu-ab}
mkdir -p "$OUT"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_FLAGS=-Xptxas=-v)
. scripts/device-gtest.sh
gtest_setup || exit 1
# Fresh build trees: git archive gives every file its commit's time, so a base older than the
# last build here would look up to date to ninja and keep the previous objects.
build() {  # source dir, build dir
  rm -rf "$2"
  local targets=(gpu_codec_tests gpu_codec_bench zipccl-demo)
  [ -f "$1/bench/gpu/service_bench.cc" ] && targets+=(gpu_service_tests gpu_service_bench)
  [ -f "$1/tests/engine/resident_cuda_test.cu" ] && targets+=(engine_gpu_tests)
  { cmake -S "$1" -B "$2" "${cmake_args[@]}" && cmake --build "$2" -j "$(nproc)" --target "${targets[@]}"; } \
    >"/tmp/$(basename "$2").log" 2>&1 || { tail -30 "/tmp/$(basename "$2").log"; echo "BUILD FAILED: $1"; return 1; }
}
pids=()
for i in "${!names[@]}"; do
  build "${dirs[$i]}" "build-ab-${names[$i]}" &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || exit 1; done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
for i in "${!names[@]}"; do
  echo "${names[$i]}: ${dirs[$i]}$([ "${dirs[$i]}" = . ] && echo ' (the working tree)')"
  # The resident kernel's spills first: a path added to it can cost the others (docs/gpu-codec.md).
  log=/tmp/build-ab-${names[$i]}.log
  grep -h -A1 "Function properties for .*resident_kernel" "$log" | awk '/Function properties/ {
    n = /ILb1E/ ? " (staging)" : /ILb0E/ ? " (one buffer)" : "" } /spill/ { sub(/^ */, ""); print "  resident_kernel" n ": " $0 }' | sort -u
  echo "  ptxas: $(grep -c -E ' [1-9][0-9]* bytes spill stores' "$log") functions spill"
done
export ZIPCCL_DATA_DIR=${ZIPCCL_DATA_DIR:-$([ -d .zdata ] && echo "$PWD/.zdata" || echo "$PWD/../shared/data")}
# GPU tests of this tree, all in one log; the engine's also with one hardware queue.
for t in ${TESTS:-gpu/gpu_codec_tests gpu/gpu_service_tests engine/engine_gpu_tests engine/engine_gpu_tests:1}; do
  bin=build-ab-this/tests/${t%:1}
  [ -x "$bin" ] || continue
  echo "== $t" >>"$OUT/tests.log"
  if [ "$t" != "${t%:1}" ]; then
    CUDA_DEVICE_MAX_CONNECTIONS=1 timeout 300 "$bin" --gtest_color=no >/tmp/t.log 2>&1
  else
    timeout 300 "$bin" --gtest_color=no >/tmp/t.log 2>&1
  fi
  r=$?
  cat /tmp/t.log >>"$OUT/tests.log"
  echo "$t (this): rc=$r"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]|no CUDA device|Failure|Which is|Expected" /tmp/t.log | head -20
done
if [ -z "${SERVICE_ARGS:-}" ] && [ -x build-ab-this/bench/gpu/gpu_service_bench ]; then
  echo "== resident codec (this)"
  timeout 120 build-ab-this/bench/gpu/gpu_service_bench >"$OUT/service-bench.log" 2>&1
  echo "rc=$?"
  cat "$OUT/service-bench.log"
fi
order=(base this)
for n in "${names[@]}"; do [ "$n" = this ] || [ "$n" = base ] || order+=("$n"); done
for run in 1 2; do
  [ -n "${SERVICE_ARGS:-}" ] || break
  for side in "${order[@]}"; do
    echo "== resident codec $side, run $run"
    # shellcheck disable=SC2086  # a list of CTA counts and flags
    timeout 150 "build-ab-$side/bench/gpu/gpu_service_bench" $SERVICE_ARGS >"$OUT/service-$side-$run.log" 2>&1
    echo "rc=$?"
    grep -E "^\| [0-9a-z]|CTAs|no CUDA device" "$OUT/service-$side-$run.log" | grep -v -- "---|"
  done
done
for run in 1 2; do
  [ "${CODEC:-1}" = 1 ] || break
  for side in "${order[@]}"; do
    echo "== $side, run $run"
    timeout 200 "build-ab-$side/bench/gpu/gpu_codec_bench" "$@" >"$OUT/bench-$side-$run.log" 2>&1
    grep -E "copy|^\| [0-9a-z]|floor|no CUDA device" "$OUT/bench-$side-$run.log" | grep -v -- "--- |"
  done
done
for run in 1 2; do
  [ "${DEMO:-1}" = 1 ] || break
  for side in "${order[@]}"; do
    echo "== demo $side, run $run"
    timeout 120 "build-ab-$side/bin/zipccl-demo" --mib=64 >/tmp/demo.log 2>&1
    { echo "== demo $side, run $run"; cat /tmp/demo.log; } >>"$OUT/demo.log"  # one file: the call returns 8
    grep -E "^  (off|auto|always)|FAILED" /tmp/demo.log
  done
done
