#!/usr/bin/env bash
# The demo: builds libnccl-net-gdr and moves data through the plugin's own NCCL ABI between two
# processes on this machine, every byte checked: first over TCP, then over RDMA on the project's
# userspace verbs emulator (no RDMA NIC needed).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"

echo
echo "== TCP transport: build/bin/gdrnet-perf --local --transport tcp --check =="
build/bin/gdrnet-perf --local --transport tcp --check

if [ -e build/lib/verbs-emu/libibverbs.so.1 ]; then
  vemu_dir=$(mktemp -d /tmp/gdrnet-demo-vemu.XXXXXX)
  trap 'rm -rf "$vemu_dir"' EXIT
  echo
  echo "== RDMA transport on the verbs emulator: GDRNET_IBVERBS_LIB=build/lib/verbs-emu/libibverbs.so.1 \
build/bin/gdrnet-perf --local --transport rdma --check =="
  VEMU_DIR="$vemu_dir" GDRNET_IBVERBS_LIB="$PWD/build/lib/verbs-emu/libibverbs.so.1" \
    build/bin/gdrnet-perf --local --transport rdma --check
fi
