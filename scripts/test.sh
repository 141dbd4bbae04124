#!/usr/bin/env bash
# Runs every test of libnccl-net-gdr: installs the build dependencies (Debian/Ubuntu), then the stages below in this
# order. Exit status 0 only when everything passed.
#   release   build (RelWithDebInfo), the whole CTest suite: unit, integration over TCP and over the verbs emulator,
#             the emulator's self-tests, every fuzz corpus replayed, the two-host tests in network namespaces
#   compilers the plugin, the tools and the tests built with a newer compiler than Debian 12's gcc 12 (clang-19 from
#             Debian 12's archive; COMPILERS_CC), warnings as errors, nothing run (build-clang)
#   asan      the same in an ASan+UBSan build (build-asan), without the tests labelled nosanitize (the ABI matrix's
#             v7/v9/v10 and the RDMA 2 GiB message: the release pass) or configs (the scripts' own tests: no
#             sanitized code in them), nor the two perf-demo runs (a benchmark's worth of traffic the other
#             integration tests already move under ASan)
#   tsan      a ThreadSanitizer build (build-tsan): the integration suite over TCP and the emulator (without the
#             fault matrix and the ABI matrix: tsan-faults, and the other passes; nor the longest runs under TSan,
#             closetail, large (both transports), perf-demo, the 4-QP variants and the stall scenarios: the other
#             passes) and the multi-threaded unit tests (label threads), in one CTest run;
#             any report fails
#   tsan-faults  (by name only, not in the default run) the fault matrix under ThreadSanitizer
#   fuzz      every fuzz target with libFuzzer for FUZZ_SECONDS each (default 20; scripts/fuzz.sh, build-fuzz)
#   soak      one minute of scripts/soak.sh over both transports (SOAK_MINUTES)
#   packages  build, install, test and remove the .deb
#   ./scripts/test.sh tsan fuzz   (or GDRNET_TEST_STAGES="tsan fuzz") runs only the stages named.
# GDRNET_SKIP_SANITIZE=1 skips asan and tsan, GDRNET_SKIP_PACKAGES=1 the packages.
# Every stage that builds configures with -DGDRNET_WERROR=ON (a warning fails the run); GDRNET_TEST_WERROR=OFF keeps
# warnings as warnings (a compiler newer than the ones above).
# With CI=true (.ci/run sets it) a missing test dependency fails the run; otherwise the tests left out, and why, are
# listed at the end (tests/deps.cmake).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
all="release compilers asan tsan fuzz soak packages"
extra="tsan-faults" # accepted by name, not run by default
read -r -a stages <<<"${*:-${GDRNET_TEST_STAGES:-$all}}"
for s in "${stages[@]}"; do
  case " $all $extra " in *" $s "*) ;; *) echo "test.sh: unknown stage '$s' (stages: $all; also: $extra)" >&2; exit 2 ;; esac
done

# What was not tested, and why: printed last, whether the run passed or failed. Two kinds: tests not built (a missing
# dependency or the configuration: <build>/skipped-tests.txt, tests/deps.cmake) and tests CTest ran that skipped
# themselves (exit 77: no libcuda, no torch, ...; <build>/skipped-at-run.txt, written by run_ctest).
skipped_report() {
  local f any=0 runs=0
  for f in build/skipped-tests.txt build-asan/skipped-tests.txt build-tsan/skipped-tests.txt; do
    if [ -s "$f" ]; then
      [ "$any" -eq 1 ] || echo "== tests not built or not run (missing dependency, or off by configuration) =="
      any=1
      sed "s|^|  ${f%%/*}: |" "$f"
    fi
  done
  for f in build/skipped-at-run.txt build-asan/skipped-at-run.txt build-tsan/skipped-at-run.txt; do
    if [ -s "$f" ]; then
      [ "$runs" -eq 1 ] || echo "== tests that skipped themselves when run (what they need is not on this host) =="
      runs=1
      sed "s|^|  ${f%%/*}: |" "$f"
    fi
  done
  if [ "$any" -eq 0 ] && [ -f build/skipped-tests.txt ]; then
    if [ "$runs" -eq 0 ]; then
      echo "== every test dependency present: no test left out =="
    else
      echo "== every test dependency present: every test built; the skips above are for what this host lacks =="
    fi
  fi
}
# ctest, its console kept so that the tests it skipped are named, each with its reason, in the final summary
run_ctest() {
  local dir=$1 rc=0
  shift
  ctest --test-dir "$dir" "$@" 2>&1 | tee "$dir/ctest-console.log" || rc=$?
  sh scripts/ctest-skips.sh "$dir" "$dir/ctest-console.log" >>"$dir/skipped-at-run.txt" || true
  return "$rc"
}
rm -f build/skipped-at-run.txt build-asan/skipped-at-run.txt build-tsan/skipped-at-run.txt
trap skipped_report EXIT

./scripts/install-deps.sh

werror=${GDRNET_TEST_WERROR:-ON}
times=()
# CPU seconds (user + system) of the stages' finished processes: on a shared machine the wall time says little about
# what two dedicated cores would take (about CPU / 2 for the parallel stages)
cpu_s() { awk '{ printf "%d", ($16 + $17) / 100 }' "/proc/$$/stat"; }
stage_release() {
  echo "== build (RelWithDebInfo) =="
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDRNET_WERROR="$werror" >/dev/null
  cmake --build build -j"$jobs"
  echo "== tests (RelWithDebInfo) =="
  run_ctest build --output-on-failure -j"$jobs"
}
# a newer compiler's warnings: every target, unoptimized (its warnings are the front end's; -DNDEBUG as users build)
stage_compilers() {
  local cc=${COMPILERS_CC:-clang-19}
  echo "== build ($cc, warnings as errors: build-clang) =="
  CC=$cc cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O0 -DNDEBUG" \
    -DGDRNET_WERROR="$werror" >/dev/null
  cmake --build build-clang -j"$jobs"
}
stage_asan() {
  echo "== build (ASan+UBSan) =="
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DGDRNET_SANITIZE=ON -DGDRNET_WERROR="$werror" >/dev/null
  cmake --build build-asan -j"$jobs"
  echo "== tests (ASan+UBSan) =="
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest build-asan --output-on-failure -j"$jobs" -LE "nosanitize|configs" \
    -E '^integration\.(tcp|rdma)\.perf-demo$'
}
# the longest runs under TSan (6 of its 11 minutes, and the RDMA 2 GiB message, whose every placed word TSan
# watches), and the stall scenarios (a peer stopped and continued with timed windows; unit_connstat runs their
# bookkeeping under TSan here): the tsan stage leaves them to tsan-faults
tsan_long='^integration\.(tcp\.closetail|(tcp|rdma)\.large|(tcp|rdma)\.perf-demo|rdma\..*-qps4-split[01]|(tcp|rdma)\.stall(-recovery)?)$'
stage_tsan_build() {
  echo "== build (ThreadSanitizer) =="
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDRNET_SANITIZE=thread -DGDRNET_WERROR="$werror" \
    >/dev/null
  cmake --build build-tsan -j"$jobs"
}
stage_tsan() {
  stage_tsan_build
  echo "== tests (ThreadSanitizer: integration, threaded unit tests) =="
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_ctest build-tsan --output-on-failure -j"$jobs" -L "integration|threads" -LE "faultmatrix|abimatrix" \
    -E "$tsan_long"
}
# what the tsan stage leaves out, under ThreadSanitizer (not in the default run: ~15 min more on two cores, and TSan's
# slowdown turns the emulator's scaled timers into extra faults; docs/HARDENING.md says what it finds today)
stage_tsan_faults() {
  [ -d build-tsan ] || stage_tsan_build
  echo "== tests (ThreadSanitizer: the fault matrix and the long runs) =="
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_ctest build-tsan --output-on-failure -j"$jobs" -L faultmatrix
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    run_ctest build-tsan --output-on-failure -j"$jobs" -L integration -LE "faultmatrix|abimatrix" \
    -R "$tsan_long"
}
stage_fuzz() { GDRNET_TEST_WERROR=$werror ./scripts/fuzz.sh "${FUZZ_SECONDS:-20}"; }
stage_soak() {
  cmake -S . -B "${SOAK_BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDRNET_WERROR="$werror" >/dev/null
  ./scripts/soak.sh "${SOAK_MINUTES:-1}"
}
stage_packages() {
  [ -x packaging/test-packages.sh ] || return 0
  echo "== packages =="
  # the package's build as the README's Install section configures it (no tests), warnings as errors; the
  # integration tests test-packages.sh runs against the installed plugin come from the release stage's build
  cmake -S . -B build-pkg -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGDRNET_BUILD_TESTS=OFF \
    -DGDRNET_WERROR="$werror" >/dev/null
  packaging/test-packages.sh --tests-from build build-pkg
}

for s in "${stages[@]}"; do
  case $s in
  asan | tsan | tsan-faults) [ "${GDRNET_SKIP_SANITIZE:-0}" != 1 ] || continue ;;
  packages) [ "${GDRNET_SKIP_PACKAGES:-0}" != 1 ] || continue ;;
  esac
  t0=$(date +%s)
  c0=$(cpu_s)
  "stage_${s//-/_}"
  times+=("$s $(($(date +%s) - t0))s (cpu $(($(cpu_s) - c0))s)")
done
echo "== all stages passed: ${times[*]} =="
