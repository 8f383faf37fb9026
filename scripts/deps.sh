#!/usr/bin/env bash
# Installs the build and test dependencies that are missing, with apt-get (Debian/Ubuntu).
# Does nothing (and needs no network) when everything is already there.
set -euo pipefail

# One entry per package: "package|check". The package is installed when its check (a shell
# command) fails. Areas that need more add a line here.
PACKAGES=(
  "cmake|command -v cmake"
  "ninja-build|command -v ninja"
  "g++|command -v g++"
  "clang|command -v clang++"
  "pkg-config|command -v pkg-config"
  "libgtest-dev|test -e /usr/include/gtest/gtest.h && compgen -G '/usr/lib/*/libgtest_main.*' >/dev/null"
  "libibverbs-dev|test -e /usr/include/infiniband/verbs.h"
)

apt_updated=0
install() {
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "deps.sh: need root or sudo to install: $*" >&2; return 1; }
    sudo=(sudo)
  fi
  if [[ $apt_updated -eq 0 ]]; then
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    apt_updated=1
  fi
  echo "deps.sh: installing $*"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

missing=()
for entry in "${PACKAGES[@]}"; do
  pkg=${entry%%|*}
  bash -c "${entry#*|}" >/dev/null 2>&1 || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  install "${missing[@]}"
fi

# libFuzzer and the sanitizer runtimes ship apart from clang (only a Recommends), in the
# package named after clang's major version.
fuzzer_lib=libclang_rt.fuzzer-$(uname -m).a
if [[ $(clang -print-file-name="$fuzzer_lib") != /* ]]; then
  ver=$(clang -dumpversion | cut -d. -f1)
  install "libclang-rt-$ver-dev" || install "libclang-common-$ver-dev"
  [[ $(clang -print-file-name="$fuzzer_lib") == /* ]] || { echo "deps.sh: no $fuzzer_lib for clang $ver" >&2; exit 1; }
fi

echo "deps.sh: all dependencies present"
