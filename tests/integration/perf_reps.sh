#!/bin/sh
# gdrnet-perf --reps N: each row is the median of N measurements with the spread of GB/s and p50 in two more columns
# (and reps, gbps_min/max, p50_us_min/max in the JSON); no progress line when stdout is not a terminal. On a terminal
# (a pty made by script(1), where present) a long size (64M, --duration) shows the progress line with its repetition.
# usage: perf_reps.sh GDRNET_PERF PLUGIN
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-reps.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "perf_reps: FAIL: $*"
  exit 1
}
"$perf" --local --transport tcp --plugin "$plugin" --sizes 8:4K:8 --iters 20 --reps 3 --json "$tmp/r.json" \
  >"$tmp/out" 2>&1 || fail "--reps 3: exit $?: $(cat "$tmp/out")"
cat "$tmp/out"
grep -q '^# each row: the median of 3 measurements' "$tmp/out" || fail "no 'median of 3' line"
grep -q 'GB/s_spread%  p50_spread%$' "$tmp/out" || fail "no spread columns in the header"
n=$(grep -c '^  *[0-9]' "$tmp/out")
[ "$n" -eq 4 ] || fail "$n rows, expected 4 (8, 64, 512, 4K)"
bad=$(grep '^  *[0-9]' "$tmp/out" | awk 'NF != 9')
[ -z "$bad" ] || fail "rows without the two spread columns: $bad"
if grep -q "$(printf '\r')" "$tmp/out"; then fail "a progress line on a pipe"; fi
if command -v python3 >/dev/null; then
  python3 -c 'import json,sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    assert r["reps"] == 3, r
    assert r["gbps_min"] <= r["gbps"] <= r["gbps_max"], r
    assert r["p50_us_min"] <= r["p50_us"] <= r["p50_us_max"], r' "$tmp/r.json" || fail "JSON rows: $(cat "$tmp/r.json")"
fi
if command -v script >/dev/null; then
  # a command that lasts over a second (--duration 1.5 per size and repetition) shows the progress line on a terminal
  script -qec "'$perf' --local --transport tcp --plugin '$plugin' --sizes 64M:64M --inflight 2 --duration 1.5 --reps 2" \
    /dev/null >"$tmp/tty" 2>&1 </dev/null || fail "on a pty: exit $?: $(cat "$tmp/tty")"
  grep -q '\.\.\. 64M B: \(latency\|bandwidth\) [0-9]*/[0-9]* (rep [12]/2)' "$tmp/tty" ||
    fail "no progress line naming the repetition on a terminal: $(tr '\r' '\n' <"$tmp/tty")"
  echo "ok: the progress line on a terminal: $(tr '\r' '\n' <"$tmp/tty" | grep -m1 '(rep [12]/2)')"
else
  echo "script(1) not found: the terminal case is not checked"
fi
echo "perf_reps: PASS"
