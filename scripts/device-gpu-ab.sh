#!/usr/bin/env bash
# Same-run A/B of the GPU codec on the device machine: the working tree against a base tree,
# both built alike (Release, sm_90); the GPU tests on the working tree, then gpu_codec_bench
# alternately (base, this, base, this), so that both sides see the same machine state.
#   git archive REV | (mkdir -p .ab-base && tar -x -C .ab-base)   # e.g. the previous main
#   scripts/device-gpu-ab.sh .ab-base [gpu_codec_bench args]       # logs in $OUT
# (.ab-base is ignored by git: pass it to the device call's carry.)
set -uo pipefail
cd "$(dirname "$0")/.."
BASE=${1:?usage: scripts/device-gpu-ab.sh BASE_DIR [bench args]}
shift
OUT=${OUT:-/tmp/zipccl-gpu-ab}
mkdir -p "$OUT"
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90)
. scripts/device-gtest.sh
gtest_setup || exit 1
# Fresh build trees: git archive gives every file its commit's time, so a base older than the
# last build here would look up to date to ninja and keep the previous objects.
build() {  # source dir, build dir
  rm -rf "$2"
  { cmake -S "$1" -B "$2" "${cmake_args[@]}" && cmake --build "$2" -j "$(nproc)" --target gpu_codec_tests gpu_codec_bench; } \
    >"/tmp/$(basename "$2").log" 2>&1 || { tail -30 "/tmp/$(basename "$2").log"; echo "BUILD FAILED: $1"; return 1; }
}
build . build-ab-this & this=$!
build "$BASE" build-ab-base & base=$!
wait $this || exit 1
wait $base || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
echo "this: the working tree; base: $BASE"
export ZIPCCL_DATA_DIR=${ZIPCCL_DATA_DIR:-$([ -d .zdata ] && echo "$PWD/.zdata" || echo "$PWD/../shared/data")}
timeout 300 build-ab-this/tests/gpu/gpu_codec_tests --gtest_color=no >"$OUT/test.log" 2>&1
echo "GPU tests (this): rc=$?"
grep -E "^\[  (PASSED|FAILED) |FAILED  \]" "$OUT/test.log" | head -20
for run in 1 2; do
  for side in base this; do
    echo "== $side, run $run"
    timeout 200 "build-ab-$side/bench/gpu/gpu_codec_bench" "$@" >"$OUT/bench-$side-$run.log" 2>&1
    grep -E "copy|^\| [0-9a-z]|floor" "$OUT/bench-$side-$run.log" | grep -v -- "--- |"
  done
done
