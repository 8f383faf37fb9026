#!/bin/sh
# A plugin's dynamic symbol table holds NCCL's entry points and nothing else of ours:
#   check_exports.sh LIB         the net plugin: ncclNetPlugin_v8..v11 (and the tuner's tables)
#   check_exports.sh LIB tuner   the tuner alone: ncclTunerPlugin_v2..v5 and nothing else
set -eu
lib="$1"
kind="${2:-net}"
if [ "$kind" = tuner ]; then
  allowed='^ncclTunerPlugin_v(2|3|4|5)$'
  required="ncclTunerPlugin_v2 ncclTunerPlugin_v3 ncclTunerPlugin_v4 ncclTunerPlugin_v5"
else
  allowed='^(ncclNetPlugin_v(8|9|10|11)|ncclTunerPlugin_v[0-9]+)$'
  required="ncclNetPlugin_v8 ncclNetPlugin_v9 ncclNetPlugin_v10 ncclNetPlugin_v11"
fi
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
bad=$(echo "$syms" | grep -Ev "$allowed" || true)
if [ -n "$bad" ]; then
  echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
for s in $required; do
  echo "$syms" | grep -qx "$s" || { echo "missing $s"; exit 1; }
done
# The same through readelf: global symbols in .dynsym that are defined (not UND).
n=$(readelf --dyn-syms -W "$lib" | awk '$5=="GLOBAL" && $7!="UND" {print $8}' | grep -Evc "$allowed" || true)
[ "$n" -eq 0 ] || { echo "readelf: $n unexpected global symbols"; exit 1; }
echo "exports OK: $(echo $syms)"
