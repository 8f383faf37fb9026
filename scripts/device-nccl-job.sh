# shellcheck shell=bash
# Sourced by the device scripts that run NCCL jobs (device-nccl-bench.sh, device-nccl-check.sh,
# device-train-check.sh), from the repository root, with OUT set.
#   nccl_job_build TARGET...  a Release sm_90 build of the targets into build-dev (log
#                             $OUT/build.log; its tail and exit 1 on failure)
#   nccl_job_start            the ranks share the one GPU under MPS (quit at exit) and are forced
#                             onto the network over lo (with ZIP_GPUS_PER_NODE > 1 only between
#                             nodes: NVLink inside them); NCCL logs INIT and NET
#   nccl_job_plugin [PACE]    NCCL takes the built plugin; PACE (Mb/s, 0 or none: unpaced) caps
#                             each rank's sends
# No NVLink SHARP / multicast anywhere (the machine's fabric state is not ours to touch).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

nccl_job_build() {
  { cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DZIPCCL_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DZIPCCL_TESTS=OFF && cmake --build build-dev -j "$(nproc)" --target "$@"; } >"$OUT/build.log" 2>&1 ||
    { tail -30 "$OUT/build.log"; exit 1; }
}

nccl_job_start() {
  if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then
    nvidia-cuda-mps-control -d && echo "MPS daemon started (ranks share the GPU)"
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
  fi
  [ "${ZIP_GPUS_PER_NODE:-1}" -gt 1 ] || export NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1
  export NCCL_IB_DISABLE=1 NCCL_SOCKET_IFNAME=lo
  export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
}

nccl_job_plugin() {
  export NCCL_NET=Zip NCCL_NET_PLUGIN="$PWD/build-dev/plugin/libnccl-net-zip.so"
  [ "${1:-0}" = 0 ] || export NCCL_ZIP_SOCKET_PACE_MBPS="$1"
}
