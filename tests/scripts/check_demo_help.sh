#!/bin/sh
# demo.sh --help and -h: the usage, exit 0, and nothing built or installed (the demo runs install-deps.sh, then the
# build, which print "install-deps"/"== " and CMake lines); an unknown argument: exit 2 naming it.
# usage: check_demo_help.sh <scripts/demo.sh>
set -u
demo=$1
fails=0
for h in --help -h; do
  out=$(timeout 20 bash "$demo" "$h" 2>&1)
  rc=$?
  if [ "$rc" -ne 0 ] || ! printf '%s\n' "$out" | grep -q "^usage: scripts/demo.sh" ||
    printf '%s\n' "$out" | grep -q "^== \|install-deps\.sh:\|Scanning dependencies\|Built target"; then
    echo "FAIL: demo.sh $h: exit $rc: $out"
    fails=$((fails + 1))
  fi
done
out=$(timeout 20 bash "$demo" --bogus 2>&1)
rc=$?
if [ "$rc" -ne 2 ] || ! printf '%s\n' "$out" | grep -q "unknown argument '--bogus'"; then
  echo "FAIL: demo.sh --bogus: exit $rc: $out"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] || exit 1
echo "demo-help: ok"
