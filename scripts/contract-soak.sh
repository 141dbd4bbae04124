#!/usr/bin/env bash
# The matching contract's long run: scripts/contract-soak.sh [MINUTES] (default 30). Builds the release tree (build/),
# then runs contract_run (tests/contract/contract.c, docs/design.md 4.1) for MINUTES on RDMA over the verbs emulator
# with one of the emulator's fault rules per seed (CONTRACT_FAULTS=1: every fault kind, on either side, fallback and
# failback on), and, at the same time, the same length over TCP (no faults). New seeds each run unless
# CONTRACT_SEED is set. Logs: build/contract-soak/<run>.log (every seed's schedule and fault, then a summary: seeds,
# faults per kind, wrong); a failing seed's own log stays beside it. Exit 0 when both runs have 0 wrong.
#   CONTRACT_SOAK_RUNS   default "rdma-faults tcp" (also: rdma)
set -euo pipefail
cd "$(dirname "$0")/.."
min=${1:-30}
secs=$(awk -v m="$min" 'BEGIN { s = m * 60; if (s < 10) s = 10; print s }')
bdir=${SOAK_BUILD_DIR:-build}
jobs=$(nproc 2>/dev/null || echo 2)
[ -f "$bdir/CMakeCache.txt" ] || cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$bdir" -j"$jobs" --target contract_run nccl-net-gdr vemu >/dev/null
out="$bdir/contract-soak"
mkdir -p "$out"
vemu_lib="$PWD/$bdir/lib/verbs-emu"
seed=${CONTRACT_SEED:-$(( $(date +%s) % 1000000 * 1000 + 1 ))}
echo "== contract soak: ${min} min ($secs s) per run, first seed $seed, logs in $out/ =="
pids=()
names=()
for run in ${CONTRACT_SOAK_RUNS:-rdma-faults tcp}; do
  d="$out/$run"
  rm -rf "$d"
  mkdir -p "$d"
  envs=(CONTRACT_SECONDS="$secs" CONTRACT_SEED="$seed" CONTRACT_DIR="$d")
  case $run in
  tcp) envs+=(GDRNET_TRANSPORT=tcp) ;;
  rdma | rdma-faults)
    faults=1
    [ "$run" = rdma ] && faults=0
    envs+=(GDRNET_TRANSPORT=rdma GDRNET_IBVERBS_LIB="$vemu_lib/libibverbs.so.1" LD_LIBRARY_PATH="$vemu_lib"
           VEMU_DIR="$d" VEMU_DEVICES="vemu0:roce,vemu1:ib" CONTRACT_FAULTS="$faults") ;;
  *) echo "contract-soak.sh: unknown run '$run' (rdma-faults, rdma, tcp)" >&2; exit 2 ;;
  esac
  env "${envs[@]}" "$bdir/tests/contract/contract_run" >"$out/$run.log" 2>&1 &
  pids+=($!)
  names+=("$run")
done
fail=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then r=PASS; else r=FAIL; fail=1; fi
  run=${names[$i]}
  echo "-- $run: $r"
  grep -E '^contract: ' "$out/$run.log" || true
  [ "$r" = FAIL ] && { grep -E '^FAIL seed|^  (schedule|fault|reproduce):' "$out/$run.log" | head -40 || true; }
done
exit "$fail"
