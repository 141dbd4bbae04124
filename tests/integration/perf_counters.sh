#!/bin/sh
# gdrnet-perf's "# counters" lines (the plugin's GDRNET_STATS_FILE, read after each process unloaded the plugin):
# a clean run over the emulator shows no fault in either process; a retry-exceeded on the 20th data write shows a
# fault and its recovery in both; the files gdrnet-perf made are removed.
# usage: perf_counters.sh GDRNET_PERF PLUGIN
set -u
perf=$1
plug=$2
# a TMPDIR of its own: other tests' gdrnet-perf runs (CTest -j) keep their files there while they run
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-counters.XXXXXX") || exit 1
export TMPDIR="$tmp"
fail() { echo "perf_counters: FAIL: $*"; exit 1; }
out=$("$perf" --local --check --sizes 8:1M:4 --iters 20 --plugin "$plug") || fail "the clean run failed"
echo "$out" | grep '^# counters'
n=$(echo "$out" | grep -c '^# counters (process [AB]): 0 fault(s), 0 recovery(ies)')
[ "$n" = 2 ] || fail "the clean run: $n of 2 counters lines say 0 faults, 0 recoveries"
out=$(VEMU_TIME_SCALE=0.01 VEMU_FAULTS=wc:op=write_imm:nth=20:status=retry_exc \
  "$perf" --local --check --sizes 8:1M:4 --iters 50 --plugin "$plug" 2>/dev/null) || fail "the run with a fault failed"
echo "$out" | grep '^# counters'
n=$(echo "$out" | grep -c '^# counters (process [AB]): [1-9][0-9]* fault(s), [1-9][0-9]* recovery(ies)')
[ "$n" = 2 ] || fail "the run with a fault: $n of 2 counters lines show a fault and a recovery"
left=$(ls "$tmp"/gdrnet-perf-stats-* 2>/dev/null)
[ -z "$left" ] || fail "stats files left behind: $left"
rmdir "$tmp" || fail "$tmp: not empty"
echo "perf_counters: PASS"
