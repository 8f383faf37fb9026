#!/usr/bin/env bash
# The test command. Installs what is missing, then:
#   1. build/       default build (CUDA when nvcc exists) and every CTest test;
#   2. build-asan/  clang with AddressSanitizer + UndefinedBehaviorSanitizer and the libFuzzer
#                   targets, CPU only, and the same CTest tests;
#   3. each fuzzer for FUZZ_SECONDS from the seed corpus; any crash fails.
# Every step runs that can (a failed build skips its tests; ninja -k 0 lists all errors); a
# summary ends the output and the exit status is non-zero when anything failed.
#   4. build-tsan/: clang with ThreadSanitizer, CPU only, the same CTest tests but the codec's golden
#                   outputs, which run on one thread (TSAN=0 skips it).
# Environment: JOBS (default: nproc), FUZZ_SECONDS per fuzzer (default 30), TSAN=0,
#              ZIPCCL_SKIP_DEPS=1 to skip scripts/deps.sh.
set -uo pipefail  # no -e: a failing step is recorded, the rest still runs

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
JOBS=${JOBS:-$(nproc)}
FUZZ_SECONDS=${FUZZ_SECONDS:-30}
LOGS=$ROOT/build-asan/logs
mkdir -p "$LOGS"
rm -f "$LOGS"/*.log  # the summary must not quote an earlier run

summary=()
failed=0
# run NAME CMD...: runs a step, records PASS/FAIL and its duration.
run() {
  local name=$1 start=$SECONDS
  shift
  echo
  echo "==== $name: $*"
  if "$@"; then
    summary+=("$(printf '%-34s PASS  %4ds' "$name" $((SECONDS - start)))")
    return 0
  fi
  summary+=("$(printf '%-34s FAIL  %4ds' "$name" $((SECONDS - start)))")
  failed=1
  return 1
}
skip() { summary+=("$(printf '%-34s SKIP  (%s)' "$1" "$2")"); failed=1; }

finish() {
  echo
  echo "==================== zipccl test summary ===================="
  printf '%s\n' "${summary[@]}"
  local dir log
  for dir in build build-asan build-tsan; do
    log=$LOGS/ctest-$dir.log
    [[ -f $log ]] || continue
    # Skipped tests (e.g. real data absent) are listed by name above the summary, not passed.
    printf '%-12s: %s, %s skipped\n' "$dir/" "$(grep -E 'tests passed' "$log")" "$(grep -c '(Skipped)$' "$log")"
  done
  if [[ $failed -eq 0 ]]; then echo "RESULT: PASS"; else echo "RESULT: FAIL"; fi
  exit $failed
}

ctest_logged() {  # ctest_logged DIR LOG: all tests, output of failures shown, summary kept
  ctest --test-dir "$1" --output-on-failure -j "$JOBS" --timeout 600 2>&1 | tee "$2"
}

fuzz() {  # fuzz NAME: FUZZ_SECONDS of libFuzzer from the seeds; its corpus grows across runs
  local dir=build-asan/fuzz
  mkdir -p "$dir/corpus/$1" "$dir/artifacts"
  local rc=0
  "$dir/$1" -max_total_time="$FUZZ_SECONDS" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/$1-" "$dir/corpus/$1" "$dir/seeds/$1" >"$LOGS/$1.log" 2>&1 || rc=$?
  if [[ $rc -eq 0 ]]; then
    grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|Done )' "$LOGS/$1.log"
  else
    tail -n 60 "$LOGS/$1.log"
    echo "$1 failed (exit $rc); reproduce with: $dir/$1 $dir/artifacts/$1-*"
  fi
  return $rc
}

if [[ ${ZIPCCL_SKIP_DEPS:-0} != 1 ]]; then
  run "dependencies" bash scripts/deps.sh || finish
fi

# 1. Default build.
if run "build/ configure+build" bash -c \
  "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_TESTS=ON &&
   cmake --build build -j $JOBS -- -k 0"; then
  run "build/ ctest" ctest_logged build "$LOGS/ctest-build.log"
else
  skip "build/ ctest" "build failed"
fi

# 2. Sanitizer build with the fuzzers.
if run "build-asan/ configure+build" bash -c \
  "CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -DZIPCCL_TESTS=ON -DZIPCCL_SANITIZE=ON -DZIPCCL_FUZZ=ON -DZIPCCL_CUDA=OFF &&
   cmake --build build-asan -j $JOBS -- -k 0"; then
  export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run "build-asan/ ctest (ASan+UBSan)" ctest_logged build-asan "$LOGS/ctest-build-asan.log"

  # 3. Fuzzing.
  if run "fuzz seed corpus" build-asan/fuzz/fuzz_seeds build-asan/fuzz/seeds; then
    for f in decode_fuzzer roundtrip_fuzzer socket_link_fuzzer; do
      run "fuzz $f (${FUZZ_SECONDS}s)" fuzz "$f"
    done
  else
    skip "fuzzing" "no seed corpus"
  fi
else
  skip "build-asan/ ctest" "build failed"
  skip "fuzzing" "build failed"
fi

# 4. ThreadSanitizer build.
if [[ ${TSAN:-1} == 1 ]]; then
  if run "build-tsan/ configure+build" bash -c \
    "CC=clang CXX=clang++ cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DZIPCCL_TESTS=ON -DZIPCCL_SANITIZE=thread -DZIPCCL_CUDA=OFF &&
     cmake --build build-tsan -j $JOBS -- -k 0"; then
    # A report fails its test (exit code 66) after the test has run to its end; the suppressions
    # are the emulated HCA's stand-ins for DMA (tests/tsan.supp says why).
    TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp \
      run "build-tsan/ ctest (TSan)" ctest_logged build-tsan "$LOGS/ctest-build-tsan.log"
  else
    skip "build-tsan/ ctest" "build failed"
  fi
fi

finish
