#!/usr/bin/env bash
# The demo: builds libnccl-net-gdr and moves data through the plugin's own NCCL ABI between two
# processes on this machine, every byte checked: first over TCP, then over RDMA on the project's
# userspace verbs emulator (no RDMA NIC needed).
set -euo pipefail
usage() {
  cat <<'EOF'
usage: scripts/demo.sh [--help]

Builds libnccl-net-gdr (RelWithDebInfo, in build/; missing build dependencies are installed with apt through
scripts/install-deps.sh), then moves data through the plugin between two processes on this machine, every byte
checked:
  build/bin/gdrnet-perf --local --transport tcp --check
  GDRNET_IBVERBS_LIB=build/lib/verbs-emu/libibverbs.so.1 build/bin/gdrnet-perf --local --transport rdma --check
(the second over the project's verbs emulator: no RDMA NIC needed). Takes no other argument.
The last line is the verdict: "TCP and RDMA (emulator): every byte verified, OK", or which run failed.
Exit status: 0 when both runs passed (or TCP passed and the emulator was not built); non-zero on a build or data
error.
EOF
}
case "${1-}" in
-h | --help) usage; exit 0 ;;
"") ;;
*) echo "demo.sh: unknown argument '$1' (it takes none; see --help)" >&2; usage >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
./scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"

# Each run's exit status is kept so that the demo ends on one verdict line naming the run that failed.
echo
echo "== TCP transport: build/bin/gdrnet-perf --local --transport tcp --check =="
tcp_rc=0
build/bin/gdrnet-perf --local --transport tcp --check || tcp_rc=$?

rdma_rc=skipped
if [ -e build/lib/verbs-emu/libibverbs.so.1 ]; then
  vemu_dir=$(mktemp -d /tmp/gdrnet-demo-vemu.XXXXXX)
  trap 'rm -rf "$vemu_dir"' EXIT
  echo
  echo "== RDMA transport on the verbs emulator: GDRNET_IBVERBS_LIB=build/lib/verbs-emu/libibverbs.so.1 \
build/bin/gdrnet-perf --local --transport rdma --check =="
  rdma_rc=0
  VEMU_DIR="$vemu_dir" GDRNET_IBVERBS_LIB="$PWD/build/lib/verbs-emu/libibverbs.so.1" \
    build/bin/gdrnet-perf --local --transport rdma --check || rdma_rc=$?
fi

echo
if [ "$tcp_rc" = 0 ] && [ "$rdma_rc" = 0 ]; then
  echo "TCP and RDMA (emulator): every byte verified, OK"
  exit 0
fi
if [ "$tcp_rc" = 0 ] && [ "$rdma_rc" = skipped ]; then
  echo "TCP: every byte verified, OK; RDMA (emulator) not run: build/lib/verbs-emu/libibverbs.so.1 was not built"
  exit 0
fi
verdict() { # <name> <status>
  case "$2" in
  0) echo "$1 OK" ;;
  skipped) echo "$1 not run" ;;
  *) echo "$1 FAILED (gdrnet-perf exit $2, see above)" ;;
  esac
}
echo "$(verdict TCP "$tcp_rc"); $(verdict "RDMA (emulator)" "$rdma_rc")"
exit 1
