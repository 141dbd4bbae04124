#!/usr/bin/env bash
# Soak test: scripts/soak.sh [MINUTES] (default 30). Builds the release tree (build/), then runs gdrnet-soak
# (tests/soak/soak.c: many connections, random sizes, every byte checked, connection churn, RSS and fds sampled)
# over TCP and over RDMA on the verbs emulator at the same time, each for MINUTES. Their samples and summaries go to
# build/soak/<transport>.log; exit 0 when both pass.
#   SOAK_COMMS=N        connection pairs per run (default 6)
#   SOAK_TRANSPORTS     default "tcp rdma"
#   SOAK_FAULTS=1       fault mode: random VEMU_FAULTS rules on the RDMA run, which then expects the plugin to
#                       recover (no error, every byte); off by default
#   SOAK_ARGS           more gdrnet-soak options (--rss-growth-mb M, --fd-growth F, --stall S, --sample S, --seed X)
#   CONTRACT_MINUTES=M  then the matching contract's tester for M minutes (scripts/contract-soak.sh: RDMA with a
#                       fault rule per seed, and TCP); 0 (the default) leaves it out
set -euo pipefail
cd "$(dirname "$0")/.."
min=${1:-30}
secs=$(awk -v m="$min" 'BEGIN { s = m * 60; if (s < 10) s = 10; print s }')
bdir=${SOAK_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)

./scripts/install-deps.sh
[ -f "$bdir/CMakeCache.txt" ] || cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j"$jobs" --target gdrnet-soak nccl-net-gdr vemu >/dev/null
out="$bdir/soak"
mkdir -p "$out"
extra=()
[ "${SOAK_FAULTS:-0}" = 1 ] && extra+=(--faults)
# shellcheck disable=SC2206 # SOAK_ARGS is a list of options
extra+=(${SOAK_ARGS:-})
vemu_lib="$PWD/$bdir/lib/verbs-emu"
vemu_dir=$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-soak-vemu.XXXXXX")
trap 'rm -rf "$vemu_dir"' EXIT

echo "== soak: ${min} min ($secs s) per transport, ${SOAK_COMMS:-6} connection pairs, logs in $out/ =="
pids=()
names=()
for tr in ${SOAK_TRANSPORTS:-tcp rdma}; do
  envs=(GDRNET_TRANSPORT="$tr")
  if [ "$tr" = rdma ]; then
    envs+=(GDRNET_IBVERBS_LIB="$vemu_lib/libibverbs.so.1" LD_LIBRARY_PATH="$vemu_lib" VEMU_DIR="$vemu_dir"
           VEMU_DEVICES="vemu0:roce,vemu1:ib")
  fi
  env "${envs[@]}" "$bdir/tests/soak/gdrnet-soak" --seconds "$secs" --comms "${SOAK_COMMS:-6}" "${extra[@]}" \
    >"$out/$tr.log" 2>&1 &
  pids+=($!)
  names+=("$tr")
done
fail=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then r=PASS; else r=FAIL; fail=1; fi
  tr=${names[$i]}
  echo "-- $tr: $r"
  grep -E '\(baseline\)|PASS:' "$out/$tr.log" || true
  if [ "$r" = FAIL ]; then
    grep -E '^FAIL|WARN' "$out/$tr.log" | head -20 || true
    tail -5 "$out/$tr.log"
  fi
done
if [ "${CONTRACT_MINUTES:-0}" != 0 ]; then
  ./scripts/contract-soak.sh "$CONTRACT_MINUTES" || fail=1
fi
exit "$fail"
