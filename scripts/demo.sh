#!/usr/bin/env bash
# The main job: installs what is missing, builds the plugin and the tools, then
#   1. zipccl-inspect: what the codec saves on the training tensors in ../shared/data, round trip
#      checked byte for byte (skipped with a note when the data is absent);
#   2. zipccl-demo: a two-rank exchange through the real libnccl-net-zip.so over loopback, with
#      compression off, auto and always: throughput, bytes on the wire, ratio, bit-exactness.
# Extra arguments go to zipccl-demo (e.g. --kind=fp32 --mib=256).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
[[ ${ZIPCCL_SKIP_DEPS:-0} == 1 ]] || bash scripts/deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target zipccl-inspect zipccl-demo

DATA=${ZIPCCL_DATA_DIR:-$ROOT/../shared/data}
echo
if compgen -G "$DATA/*.safetensors" >/dev/null; then
  echo "== zipccl-inspect: the codec on real training tensors ($DATA)"
  build/bin/zipccl-inspect --quiet "$DATA"/*.safetensors
else
  echo "== zipccl-inspect: no tensors in $DATA, skipped (set ZIPCCL_DATA_DIR)"
fi
echo
echo "== zipccl-demo: two ranks through the plugin"
build/bin/zipccl-demo "$@"
