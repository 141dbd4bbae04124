#!/bin/sh
# A CTest project with a test that passes, two that skip (exit 77) after saying why, one that skips silently and a
# "skipped.<dep>" one (listed by tests/deps.cmake already): ctest-skips.sh must name the three, each with its reason,
# and nothing else.
# usage: check_ctest_skips.sh <scripts/ctest-skips.sh> <cmake> <ctest>
set -u
skips=$1
cmake=$2
ctest=$3
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/build"
cat >"$tmp/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(skips NONE)
enable_testing()
add_test(NAME ok COMMAND sh -c "echo fine")
add_test(NAME needs.cuda COMMAND sh -c "echo probing; echo 'no libcuda.so.1: skipped'; exit 77")
add_test(NAME needs.torch COMMAND sh -c "echo 'cpu: skipped (torch is not importable)'; exit 77")
add_test(NAME quiet COMMAND sh -c "exit 77")
add_test(NAME skipped.cmocka COMMAND sh -c "echo 'missing cmocka'; exit 77")
set_tests_properties(needs.cuda needs.torch quiet skipped.cmocka PROPERTIES SKIP_RETURN_CODE 77)
CM
"$cmake" -S "$tmp/src" -B "$tmp/build" >/dev/null || exit 1
"$ctest" --test-dir "$tmp/build" >"$tmp/console.log" 2>&1
got=$(sh "$skips" "$tmp/build" "$tmp/console.log" | sort)
want=$(printf '%s\n' "needs.cuda: no libcuda.so.1: skipped" "needs.torch: cpu: skipped (torch is not importable)" \
  "quiet: (it printed no reason)" | sort)
if [ "$got" != "$want" ]; then
  echo "FAIL: ctest-skips.sh printed:"
  echo "$got"
  echo "expected:"
  echo "$want"
  echo "ctest's console:"
  cat "$tmp/console.log"
  exit 1
fi
echo "ctest-skips: ok"
echo "$got"
