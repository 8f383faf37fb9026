# Sourced by the device scripts: GoogleTest for a bare GPU machine. Where it is not installed, it
# is built from the source tree carried in .gtest (a copy of /usr/src/googletest) into /tmp/gtest,
# and cmake_args (the caller's array) gets its prefix. Build log: $OUT/gtest-build.log.
gtest_setup() {
  local g
  for g in /usr/lib/cmake/GTest /usr/lib/*/cmake/GTest /usr/local/lib/cmake/GTest /usr/local/lib/*/cmake/GTest; do
    [ -f "$g/GTestConfig.cmake" ] && return 0
  done
  [ -d .gtest ] || return 0
  echo "GoogleTest not installed: building it from .gtest"
  cmake -S .gtest -B /tmp/gtest-build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF \
    -DCMAKE_INSTALL_PREFIX=/tmp/gtest >"$OUT/gtest-build.log" 2>&1 &&
    cmake --build /tmp/gtest-build -j "$(nproc)" >>"$OUT/gtest-build.log" 2>&1 &&
    cmake --install /tmp/gtest-build >>"$OUT/gtest-build.log" 2>&1 || { echo "GoogleTest build failed"; return 1; }
  cmake_args+=(-DCMAKE_PREFIX_PATH=/tmp/gtest)
}
