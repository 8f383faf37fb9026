#!/bin/sh
# What `cmake --install` and `cpack -G DEB` give a user: the plugin and the tools in standard
# places, the plugin exporting NCCL's tables, the installed demo finding the installed plugin on
# its own, and a Debian package holding the same files.
# usage: install_test.sh BUILD_DIR
set -u
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
say_fail() { echo "FAIL: $*"; fail=1; }
cmake --install "$build" --prefix "$tmp/usr" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; say_fail "cmake --install"; }
lib=$(find "$tmp/usr" -name libnccl-net-zip.so | head -1)
[ -n "$lib" ] || say_fail "no libnccl-net-zip.so installed"
tuner=$(find "$tmp/usr" -name libnccl-tuner-zip.so | head -1)
[ -n "$tuner" ] || say_fail "no libnccl-tuner-zip.so installed"
[ -z "$tuner" ] || nm -D --defined-only "$tuner" | grep -q ncclTunerPlugin_v5 || say_fail "installed tuner lacks ncclTunerPlugin_v5"
for t in zipccl-inspect zipccl-demo zipccl-net-bench zipccl-doctor; do
  [ -x "$tmp/usr/bin/$t" ] || say_fail "no bin/$t"
done
if [ -n "$lib" ]; then
  nm -D --defined-only "$lib" | grep -q ncclNetPlugin_v11 || say_fail "installed plugin lacks ncclNetPlugin_v11"
  # The demo from the install must find the installed plugin on its own, not the build tree's.
  out=$(env -u ZIPCCL_PLUGIN "$tmp/usr/bin/zipccl-demo" --mib=1 --msg-kib=64 2>&1)
  rc=$?
  echo "$out" | grep -q "through $lib" || say_fail "installed zipccl-demo did not use $lib: $out"
  [ $rc -eq 0 ] || say_fail "installed zipccl-demo exited $rc: $out"
fi
# The Debian package.
if command -v dpkg-deb >/dev/null; then
  (cd "$build" && cpack -G DEB -B "$tmp/pkg" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; say_fail "cpack -G DEB"; }
  deb=$(ls "$tmp"/pkg/*.deb 2>/dev/null | head -1)
  if [ -z "$deb" ]; then
    say_fail "no .deb"
  else
    dpkg-deb -c "$deb" >"$tmp/deb.txt"
    for f in libnccl-net-zip.so libnccl-tuner-zip.so bin/zipccl-demo bin/zipccl-inspect bin/zipccl-net-bench bin/zipccl-doctor; do
      grep -q "$f" "$tmp/deb.txt" || say_fail "$deb lacks $f"
    done
  fi
else
  echo "dpkg-deb not found: the package is not checked"
fi
[ $fail -eq 0 ] && echo "PASS: installed layout, installed demo, Debian package"
exit $fail
