#!/usr/bin/env bash
# Fuzzes every parser of bytes a peer sends (tests/fuzz/README.md) with libFuzzer, each target for a bounded time.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     default: 25 s per target, every target
#
# Builds build-fuzz (clang, -DGDRNET_FUZZ=ON: AddressSanitizer + UBSan + libFuzzer), then runs the targets
# FUZZ_JOBS at a time (default: the number of cores), each from its seeds and regression inputs in
# tests/fuzz/corpus/<target>/ (read only) plus a working corpus in build-fuzz/fuzz-corpus/<target>/ (kept between
# runs: a longer run continues where the last one stopped; FUZZ_FRESH=1 starts from the seeds again). Prints per
# target the executions, coverage (cov: edges, ft: features) and corpus size, and writes the same table to
# build-fuzz/fuzz-summary.md. Exit status 1 if any target crashed, leaked, timed out or broke an invariant: its
# input is in build-fuzz/fuzz-artifacts/<target>/; keep it as a regression input with
#   cp build-fuzz/fuzz-artifacts/<target>/crash-... tests/fuzz/corpus/<target>/regress-<what-it-found>
# after fixing the bug (ctest runs every file there: fuzz_replay.<target>, in every build).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-25}
shift || true
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
bdir=${FUZZ_BUILD_DIR:-build-fuzz}

./scripts/install-deps.sh
echo "== build ($bdir: clang, libFuzzer, ASan+UBSan) =="
# warnings are errors here (GDRNET_TEST_WERROR=OFF keeps them warnings)
CC=${FUZZ_CC:-clang} cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDRNET_FUZZ=ON \
  -DGDRNET_WERROR="${GDRNET_TEST_WERROR:-ON}" >/dev/null
cmake --build "$bdir" -j"$jobs" --target gdrnet_fuzz

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(cd "$bdir/tests/fuzz" && ls fuzz_* | sed 's/^fuzz_//' | sort)
fi
out="$bdir/fuzz-logs"
mkdir -p "$out"
[ "${FUZZ_FRESH:-0}" = 1 ] && rm -rf "$bdir/fuzz-corpus"

run_one() {
  local t=$1 work="$bdir/fuzz-corpus/$1" art="$bdir/fuzz-artifacts/$1/" dict=()
  mkdir -p "$work" "$art"
  [ -f tests/fuzz/gdrnet.dict ] && dict=(-dict=tests/fuzz/gdrnet.dict)
  # -timeout: one input may take 30 s (the targets bound their own waits well below); leaks are checked per input
  "$bdir/tests/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -use_value_profile=1 \
    -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" "$work" "tests/fuzz/corpus/$t" >"$out/$t.log" 2>&1
}

echo "== fuzzing ${#targets[@]} target(s), ${secs} s each, $jobs at a time =="
pids=()
names=()
fail=0
for t in "${targets[@]}"; do
  if [ ! -x "$bdir/tests/fuzz/fuzz_$t" ]; then
    echo "fuzz: no target $t" >&2
    exit 2
  fi
  run_one "$t" &
  pids+=($!)
  names+=("$t")
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
done
status=()
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then status[$i]=ok; else status[$i]=FAILED; fail=1; fi
done

sum="$bdir/fuzz-summary.md"
{
  echo "| target | seconds | executions | exec/s | cov (edges) | ft (features) | corpus | result |"
  echo "|---|---|---|---|---|---|---|---|"
  for i in "${!names[@]}"; do
    t=${names[$i]}
    log="$out/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(printf '%s\n' "$last" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(printf '%s\n' "$last" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(printf '%s\n' "$last" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
    echo "| $t | $secs | ${execs:-?} | ${rate:-?} | ${cov:-?} | ${ft:-?} | ${corp:-?} | ${status[$i]} |"
  done
} >"$sum"
cat "$sum"
if [ "$fail" != 0 ]; then
  for i in "${!names[@]}"; do
    [ "${status[$i]}" = ok ] && continue
    t=${names[$i]}
    echo "== $t FAILED: last lines of $out/$t.log =="
    grep -E 'ERROR|invariant broken|SUMMARY|Test unit written|leak' "$out/$t.log" | head -20 || true
    tail -30 "$out/$t.log"
  done
  exit 1
fi
