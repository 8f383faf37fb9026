#!/usr/bin/env bash
# Work requests per message on the verbs transport, counted by the emulated HCA
# (NCCL_ZIP_EMU_STATS, docs/verbs-emulation.md): two zip_peer processes exchange through the plugin
# over the emulated libibverbs, compression always on, messages of at most one 256 KiB RDMA write,
# one QP; both processes' counts are summed. Prints one row per grouping (receives of 1 and of 4
# messages).
# Usage: scripts/wr-count.sh [BUILD_DIR]   (default: build; needs nccl-net-zip, zip_peer and the
#        emulator built there)
set -euo pipefail
B=$(cd "${1:-build}" && pwd)
PEER=$B/tests/plugin/zip_peer
export NCCL_ZIP_TRANSPORT=ib NCCL_ZIP_IBVERBS_LIB=$B/verbs/emu/libzipccl-ibverbs-emu.so NCCL_SOCKET_IFNAME=lo
export NCCL_ZIP_ENABLE=2
printf '%-6s %9s %9s %6s %7s %11s %10s %13s\n' group receives messages SEND WRITE WRITE_IMM "WRs/msg" "control/msg"
for group in 1 4; do
  receives=$((240 / group))
  work=$(mktemp -d)
  export NCCL_ZIP_EMU_STATS=$work/stats
  args=(--plugin="$B/plugin/libnccl-net-zip.so" --version=11 --msgs=$receives --group=$group --max=262144
        --kind=mix --seed=4)
  "$PEER" recv "${args[@]}" >"$work/recv.out" &
  recv=$!
  for _ in $(seq 300); do grep -q '^HANDLE ' "$work/recv.out" && break; sleep 0.1; done
  handle=$(sed -n 's/^HANDLE //p' "$work/recv.out")
  "$PEER" send "${args[@]}" --handle="$handle" >"$work/send.out"
  wait $recv
  grep -q '^RESULT ok=1' "$work/recv.out" || { cat "$work/recv.out" "$work/send.out"; exit 1; }
  awk -v g=$group -v r=$receives '
    { for (i = 1; i <= NF; ++i) { split($i, kv, "="); c[kv[1]] += kv[2] } }
    END {
      m = r * g; total = c["sends"] + c["writes"] + c["writes_imm"] + c["reads"]
      # Each message here is at most one data write, its last (with the immediate): the SENDs and
      # plain writes are control messages.
      printf "%-6d %9d %9d %6d %7d %11d %10.3f %13.3f\n", g, r, m, c["sends"], c["writes"], c["writes_imm"],
             total / m, (c["sends"] + c["writes"]) / m
    }' "$work/stats"
  rm -rf "$work"
done
