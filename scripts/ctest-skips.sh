#!/bin/sh
# Prints "<test>: <reason>" for every test that a CTest run skipped (exit 77 with SKIP_RETURN_CODE, "(Skipped)" in
# CTest's summary), the reason being the last line the test printed (e.g. "no libcuda.so.1: skipped"). The
# "skipped.<dep>" tests of tests/deps.cmake are left out: <build>/skipped-tests.txt lists them already.
# usage: ctest-skips.sh <build dir> <file with the console output of that ctest run>
# scripts/test.sh calls it after each CTest run and prints the result in its final summary.
set -eu
dir=$1
console=$2
log=$dir/Testing/Temporary/LastTest.log
[ -f "$console" ] || exit 0
sed -n 's/^[[:space:]]*[0-9][0-9]* - \(.*\) (Skipped)$/\1/p' "$console" | while IFS= read -r name; do
  case $name in skipped.*) continue ;; esac
  reason=
  if [ -f "$log" ]; then
    reason=$(awk -v t="$name" '
      $2 == "Test:" && $3 == t { on = 1; out = 0; next }
      on && /^Output:$/ { out = 1; next }
      on && /^<end of output>$/ { exit }
      on && out && NF && $0 !~ /^-+$/ { last = $0 }
      END { print last }' "$log")
  fi
  echo "$name: ${reason:-(it printed no reason)}"
done
