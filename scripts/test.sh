#!/usr/bin/env bash
# Runs every test of libnccl-net-gdr: installs the build dependencies (Debian/Ubuntu), builds the project
# twice (RelWithDebInfo, then ASan+UBSan), runs the whole CTest suite in each, then builds, installs, tests
# and removes the .deb package. Exit status 0 only when everything passed.
# With CI=true (.ci/run sets it) a missing test dependency fails the run; otherwise the tests left out, and why, are
# listed at the end (tests/deps.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)

# What was not tested, and why: printed last, whether the run passed or failed.
skipped_report() {
  local f any=0
  for f in build/skipped-tests.txt build-asan/skipped-tests.txt; do
    if [ -s "$f" ]; then
      [ "$any" -eq 1 ] || echo "== tests not built or not run (missing dependency, or off by configuration) =="
      any=1
      sed "s|^|  ${f%%/*}: |" "$f"
    fi
  done
  if [ "$any" -eq 0 ] && [ -f build/skipped-tests.txt ]; then
    echo "== every test dependency present: no test left out =="
  fi
}
trap skipped_report EXIT

./scripts/install-deps.sh

echo "== build (RelWithDebInfo) =="
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests (RelWithDebInfo) =="
ctest --test-dir build --output-on-failure -j"$jobs"

if [ "${GDRNET_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== build (ASan+UBSan) =="
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGDRNET_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs"
  echo "== tests (ASan+UBSan) =="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs" -LE nosanitize
fi

if [ -x packaging/test-packages.sh ] && [ "${GDRNET_SKIP_PACKAGES:-0}" != 1 ]; then
  echo "== packages =="
  packaging/test-packages.sh build-pkg
fi
