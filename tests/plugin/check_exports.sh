#!/bin/sh
# The plugin's dynamic symbol table holds the NCCL entry points and nothing else of ours.
set -eu
lib="$1"
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
bad=$(echo "$syms" | grep -Ev '^(ncclNetPlugin_v(8|9|10|11)|ncclTunerPlugin_v[0-9]+)$' || true)
if [ -n "$bad" ]; then
  echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
for v in 8 9 10 11; do
  echo "$syms" | grep -qx "ncclNetPlugin_v$v" || { echo "missing ncclNetPlugin_v$v"; exit 1; }
done
# The same through readelf: global symbols in .dynsym that are defined (not UND).
n=$(readelf --dyn-syms -W "$lib" | awk '$5=="GLOBAL" && $7!="UND" {print $8}' | grep -Evc '^(ncclNetPlugin_v(8|9|10|11)|ncclTunerPlugin_v[0-9]+)$' || true)
[ "$n" -eq 0 ] || { echo "readelf: $n unexpected global symbols"; exit 1; }
echo "exports OK: $(echo $syms)"
