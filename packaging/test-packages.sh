#!/usr/bin/env bash
# test-packages.sh: build the .deb (and .rpm) with CPack, inspect them, install the .deb with dpkg, run the
# integration tests and the tools against the INSTALLED files, remove the package and check nothing is left.
#
# Usage: packaging/test-packages.sh [options] [BUILD_DIR]
#   BUILD_DIR      a configured build of this project (default: build-pkg under the source tree). If it has no
#                  CMakeCache.txt it is configured here as the README builds the package: -DCMAKE_INSTALL_PREFIX=/usr
#                  (the distribution's library directory, multiarch on Debian) -DGDRNET_BUILD_TESTS=OFF (the
#                  package is the same, the build half the time). It is built (cmake --build) before packaging.
#   --tests-from DIR  run the integration tests of this build (configured with tests, e.g. build/ of the release
#                  stage) against the installed plugin (default: BUILD_DIR's own, if it has any)
#   --keep         leave the package installed at the end
#   --no-install   only build and inspect the packages (no root needed)
#   --require-integration  fail (instead of warn) when no registered integration test loads the plugin
#   -h, --help     this text
#
# Needs: cmake/cpack, dpkg-deb, readelf (binutils); dpkg -i/-r need root (or sudo); rpmbuild + rpm for the RPM part.
# Output: one "PASS:"/"FAIL:"/"SKIP:" line per check, a summary, exit 0 only if nothing failed.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/.." && pwd)"
PKG=libnccl-net-gdr

BUILD=""
KEEP=0
INSTALL=1
REQUIRE_IT=0
TESTS_FROM=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=1 ;;
    --tests-from) [ $# -ge 2 ] || { echo "test-packages.sh: --tests-from needs a build directory" >&2; exit 2; }
                  TESTS_FROM="$2"; shift ;;
    --no-install) INSTALL=0 ;;
    --require-integration) REQUIRE_IT=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "test-packages.sh: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$BUILD" ] || { echo "test-packages.sh: one BUILD_DIR only" >&2; exit 2; }; BUILD="$1" ;;
  esac
  shift
done
[ -n "$BUILD" ] || BUILD="$SRC/build-pkg"

NPASS=0; NFAIL=0; NSKIP=0
FAILS=()
pass() { echo "PASS: $*"; NPASS=$((NPASS + 1)); }
fail() { echo "FAIL: $*"; NFAIL=$((NFAIL + 1)); FAILS+=("$*"); }
skip() { echo "SKIP: $*"; NSKIP=$((NSKIP + 1)); }
check() {  # check "description" command...   (PASS when the command succeeds)
  local what="$1"; shift
  if "$@"; then pass "$what"; else fail "$what"; fi
}
finish() {
  echo
  echo "test-packages: $NPASS passed, $NFAIL failed, $NSKIP skipped"
  if [ "$NFAIL" -gt 0 ]; then
    printf '  failed: %s\n' "${FAILS[@]}"
    echo "RESULT: FAIL"
    exit 1
  fi
  echo "RESULT: PASS"
  exit 0
}
section() { echo; echo "== $*"; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-pkgtest.XXXXXX")"
cleanup() {
  rm -rf "$WORK"
  if [ "$INSTALL" -eq 1 ] && [ "$KEEP" -eq 0 ] && [ "${INSTALLED:-0}" -eq 1 ]; then
    $SUDO dpkg -P "$PKG" >/dev/null 2>&1 || true      # never leave a half-tested package behind
  fi
}
trap cleanup EXIT

# ---- build ---------------------------------------------------------------------------------------------------
section "build ($BUILD)"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
  echo "configuring $BUILD with -DCMAKE_INSTALL_PREFIX=/usr -DGDRNET_BUILD_TESTS=OFF"
  if ! cmake -S "$SRC" -B "$BUILD" -DCMAKE_INSTALL_PREFIX=/usr -DCMAKE_BUILD_TYPE=RelWithDebInfo \
       -DGDRNET_BUILD_TESTS=OFF >"$WORK/configure.log" 2>&1; then
    tail -n 30 "$WORK/configure.log"; fail "configure $BUILD"; finish
  fi
fi
BUILD="$(cd "$BUILD" && pwd)"
if ! cmake --build "$BUILD" -j"$(nproc 2>/dev/null || echo 2)" >"$WORK/build.log" 2>&1; then
  tail -n 40 "$WORK/build.log"; fail "build $BUILD"; finish
fi
pass "build $BUILD"
cache_get() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt" | head -n 1; }
VERSION="$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")"
RELEASE="$(sed -n 's/^set(CPACK_DEBIAN_PACKAGE_RELEASE "\(.*\)")$/\1/p' "$BUILD/CPackConfig.cmake")"
LIBDIR="$(cache_get CMAKE_INSTALL_LIBDIR)"
PREFIX="$(cache_get CMAKE_INSTALL_PREFIX)"
LINK_OPT="$(cache_get GDRNET_INSTALL_DEFAULT_PLUGIN_LINK)"
[ -n "$VERSION" ] || { fail "read CPACK_PACKAGE_VERSION from $BUILD/CPackConfig.cmake"; finish; }
echo "version $VERSION-$RELEASE, libdir $LIBDIR, default plugin link ${LINK_OPT:-OFF}"
if [ "$PREFIX" != "/usr" ]; then
  echo "note: $BUILD was configured with CMAKE_INSTALL_PREFIX=$PREFIX; the package installs /usr/$LIBDIR" \
       "(configure with -DCMAKE_INSTALL_PREFIX=/usr for the distribution's multiarch directory)"
fi
PLUGIN_REL="usr/$LIBDIR/libnccl-net-gdr.so"
link_on() { case "${LINK_OPT^^}" in ON|1|TRUE|YES) return 0 ;; *) return 1 ;; esac; }

# ---- .deb ----------------------------------------------------------------------------------------------------
section "Debian package"
rm -f "$BUILD"/packages/${PKG}_*.deb
if (cd "$BUILD" && cpack -G DEB --config "$BUILD/CPackConfig.cmake") >"$WORK/cpack-deb.log" 2>&1; then
  pass "cpack -G DEB"
else
  tail -n 30 "$WORK/cpack-deb.log"; fail "cpack -G DEB"; finish
fi
DEB="$(ls "$BUILD"/packages/${PKG}_*.deb 2>/dev/null | head -n 1)"
ARCH="$(dpkg --print-architecture)"
check "deb file name ${PKG}_${VERSION}-${RELEASE}_${ARCH}.deb" [ "$(basename "$DEB")" = "${PKG}_${VERSION}-${RELEASE}_${ARCH}.deb" ]

dpkg-deb -I "$DEB" >"$WORK/control.txt"
field() { dpkg-deb -f "$DEB" "$1"; }
echo "--- control"; sed -n '/^ Package:/,$p' "$WORK/control.txt" | sed 's/^/  /'
check "Package: $PKG" [ "$(field Package)" = "$PKG" ]
check "Version: $VERSION-$RELEASE" [ "$(field Version)" = "$VERSION-$RELEASE" ]
check "Architecture: $ARCH" [ "$(field Architecture)" = "$ARCH" ]
check "Recommends libibverbs1" grep -qw libibverbs1 <<<"$(field Recommends)"
DEPENDS="$(field Depends)"
check "Depends names libc6 (from dpkg-shlibdeps): '$DEPENDS'" grep -q 'libc6' <<<"$DEPENDS"
check "Depends has nothing on libibverbs/rdma/cuda/nccl" bash -c '! grep -qiE "ibverbs|rdma|cuda|nccl|nvidia" <<<"$1"' _ "$DEPENDS$(field Pre-Depends)"
check "no CUDA in any relation field" bash -c '! grep -qi cuda <<<"$1"' _ "$(field Recommends)$(field Suggests)$(field Depends)"
check "Maintainer set" [ -n "$(field Maintainer)" ]
check "ldconfig trigger in control.tar" bash -c 'dpkg-deb --ctrl-tarfile "$1" | tar -xO ./triggers 2>/dev/null | grep -q "activate-noawait ldconfig"' _ "$DEB"

dpkg-deb -c "$DEB" | awk '{print $6 ($7 ? " " $7 " " $8 : "")}' | sed 's|^\./||' >"$WORK/deb-files.txt"
echo "--- files"; sed 's/^/  /' "$WORK/deb-files.txt"
has() { grep -qxF "$1" "$WORK/deb-files.txt"; }
for f in "$PLUGIN_REL" usr/bin/gdrnet-perf usr/bin/gdrnet-doctor usr/bin/gdrnet-top \
         usr/share/doc/$PKG/changelog \
         usr/share/doc/$PKG/examples/k8s/pod.yaml usr/share/doc/$PKG/examples/k8s/ddp-job.yaml \
         usr/share/doc/$PKG/examples/k8s/doctor-daemonset.yaml usr/share/doc/$PKG/examples/k8s/collect-doctor.py \
         usr/share/doc/$PKG/examples/k8s/nccl-tests-mpijob.yaml \
         usr/share/doc/$PKG/examples/container/Dockerfile \
         usr/share/$PKG/nccl-tests-configs/run-matrix usr/share/$PKG/nccl-tests-configs/summarize \
         usr/share/$PKG/nccl-tests-configs/README.md usr/share/$PKG/nccl-tests-configs/rdma-gdr.env \
         usr/share/$PKG/nccl-tests-configs/tcp.env usr/share/$PKG/nccl-tests-configs/emulator.env \
         usr/share/$PKG/nccl-tests-configs/pytorch/ddp_step.py usr/share/$PKG/nccl-tests-configs/pytorch/allreduce_bench.py; do
  check "deb contains /$f" has "$f"
done
if [ -f "$SRC/README.md" ]; then check "deb contains README.md" has "usr/share/doc/$PKG/README.md"; fi
for d in "$SRC"/docs/*.md; do
  [ -e "$d" ] || continue
  check "deb contains docs/$(basename "$d")" has "usr/share/doc/$PKG/docs/$(basename "$d")"
done
for t in gdrnet-perf gdrnet-doctor gdrnet-top; do
  check "deb contains the man page /usr/share/man/man1/$t.1" has "usr/share/man/man1/$t.1"
done
for t in gdrnet-perf gdrnet-doctor gdrnet-top gdrnet-run-matrix gdrnet-summarize; do
  check "deb contains bash completion for $t" has "usr/share/bash-completion/completions/$t"
done
for s in run-matrix summarize; do
  check "deb links /usr/bin/gdrnet-$s to the installed $s" has "usr/bin/gdrnet-$s -> ../share/$PKG/nccl-tests-configs/$s"
done
check "deb has the current docs only, not the lab archive docs/results/" \
  bash -c '! grep -q "^usr/share/doc/$1/docs/results" "$2"' _ "$PKG" "$WORK/deb-files.txt"
if link_on; then
  check "deb has libnccl-net.so -> libnccl-net-gdr.so (option ON)" has "usr/$LIBDIR/libnccl-net.so -> libnccl-net-gdr.so"
else
  check "deb has no libnccl-net.so (option OFF)" bash -c '! grep -q "/libnccl-net\.so\b" "$1"' _ "$WORK/deb-files.txt"
fi
check "deb has no verbs emulator / libibverbs" bash -c '! grep -qE "ibverbs|verbs-emu" "$1"' _ "$WORK/deb-files.txt"
check "deb has no headers, static libs or test programs" \
  bash -c '! grep -qE "(^usr/include/|\.a$|/it_|/test_|vemu|gen-config-doc)" "$1"' _ "$WORK/deb-files.txt"
check "deb file modes: tools and scripts executable" bash -c '
  dpkg-deb -c "$1" | awk "{print \$1, \$6}" | grep -E " \./usr/(bin/gdrnet-|share/'"$PKG"'/nccl-tests-configs/(run-matrix|summarize)$)" |
  awk "{ if (substr(\$1,4,1) != \"x\") bad=1 } END { exit bad }"' _ "$DEB"

mkdir -p "$WORK/deb"
dpkg-deb -x "$DEB" "$WORK/deb"
SO="$WORK/deb/$PLUGIN_REL"
if [ -f "$SO" ]; then
  check "packaged plugin is an ELF shared object" bash -c 'file -L "$1" | grep -q "ELF.*shared object"' _ "$SO"
  NEEDED="$(readelf -d "$SO" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  check "packaged plugin NEEDED only libc-family libraries: $NEEDED" \
    bash -c '! grep -qiE "ibverbs|cuda|nccl|stdc\+\+" <<<"$1"' _ "$NEEDED"
  check "packaged plugin is stripped" bash -c '! readelf -S "$1" | grep -q "\.debug_info"' _ "$SO"
  EXPORTS="$(readelf --dyn-syms -W "$SO" | awk '$7 != "UND" && ($5 == "GLOBAL" || $5 == "WEAK") && $4 != "NOTYPE" {print $8}' | sed 's/@.*//' | sort -u | tr '\n' ' ')"
  # the plugin tables only (plugin/exports.map): ncclNet, and the GIN and RMA tables
  check "packaged plugin exports only the plugin tables (ncclNet/ncclGin/ncclRmaPlugin_v*): $EXPORTS" \
    bash -c 'for s in $1; do case "$s" in ncclNetPlugin_v[0-9]*|ncclGinPlugin_v[0-9]*|ncclRmaPlugin_v[0-9]*) ;; *) exit 1 ;; esac; done; case " $1 " in *" ncclNetPlugin_v"*) ;; *) exit 1 ;; esac' _ "$EXPORTS"
else
  fail "packaged plugin /$PLUGIN_REL missing"
fi

# ---- install, test the installed files, remove ---------------------------------------------------------------
section "install with dpkg"
INSTALLED=0
if [ "$INSTALL" -eq 0 ]; then
  skip "dpkg -i / integration / dpkg -r (--no-install)"
elif [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
  fail "dpkg -i needs root (or passwordless sudo); rerun as root or with --no-install"
else
  if dpkg-query -W -f='${Status}' "$PKG" 2>/dev/null | grep -q "install ok installed"; then
    echo "note: $PKG $(dpkg-query -W -f='${Version}' "$PKG") is already installed; purging it first"
    $SUDO dpkg -P "$PKG" >/dev/null
  fi
  if $SUDO dpkg -i "$DEB" >"$WORK/dpkg-i.log" 2>&1; then
    INSTALLED=1
    pass "dpkg -i $(basename "$DEB")"
  else
    cat "$WORK/dpkg-i.log"; fail "dpkg -i $(basename "$DEB")"
  fi
fi

if [ "$INSTALLED" -eq 1 ]; then
  dpkg -L "$PKG" | sort >"$WORK/installed.txt"
  check "dpkg status: install ok installed" bash -c 'dpkg-query -W -f="\${Status}" "$1" | grep -q "install ok installed"' _ "$PKG"
  IPLUGIN="/$PLUGIN_REL"
  check "installed plugin at $IPLUGIN" [ -f "$IPLUGIN" ]
  for f in /usr/bin/gdrnet-perf /usr/bin/gdrnet-doctor /usr/bin/gdrnet-top /usr/share/$PKG/nccl-tests-configs/run-matrix \
           /usr/share/$PKG/nccl-tests-configs/summarize; do
    check "installed and executable: $f" [ -x "$f" ]
  done
  check "every file dpkg lists exists" bash -c 'while read -r f; do [ -e "$f" ] || { echo "missing $f"; exit 1; }; done <"$1"' _ "$WORK/installed.txt"
  check "the loader finds libnccl-net-gdr.so by name (as NCCL dlopens it)" \
    bash -c 'ldconfig -p | grep -q "libnccl-net-gdr\.so " || [ -f /usr/lib/libnccl-net-gdr.so ] || [ -f "$1" ]' _ "$IPLUGIN"

  section "integration tests against the installed plugin"
  # The "selfcheck" tests load a deliberately broken wrapper plugin (they prove the checks can fail): not the
  # installed plugin's business, so they are left out here; so is the ABI matrix ("abimatrix": the suite again
  # through every other table of the same library, which the build's own pass runs), and so is the fault matrix
  # ("faultmatrix": recovery under injected faults, the same code whichever file it is loaded from).
  TBUILD="${TESTS_FROM:-$BUILD}"
  [ ! -d "$TBUILD" ] || TBUILD="$(cd "$TBUILD" && pwd)"
  NIT="$(cd "$TBUILD" && ctest -N -L integration -LE 'selfcheck|abimatrix|faultmatrix' 2>/dev/null | sed -n 's/^Total Tests: *//p')"
  if [ -n "$NIT" ] && [ "$NIT" -gt 0 ]; then
    echo "running $NIT integration test(s) with GDRNET_TEST_PLUGIN=$IPLUGIN"
    if (cd "$TBUILD" && GDRNET_TEST_PLUGIN="$IPLUGIN" ctest -L integration -LE 'selfcheck|abimatrix|faultmatrix' --output-on-failure -V -j"$(nproc 2>/dev/null || echo 2)") >"$WORK/it.log" 2>&1; then
      pass "ctest -L integration ($NIT tests) against $IPLUGIN"
    else
      grep -E "Test +#|FAIL|tests passed|tests failed" "$WORK/it.log" | tail -n 40
      fail "ctest -L integration against $IPLUGIN"
    fi
    # Prove the tests loaded the installed file, not the build tree's (each test logs "plugin <path>").
    NLOADED="$(grep -c "] plugin /" "$WORK/it.log" || true)"
    if [ "$NLOADED" -gt 0 ]; then
      check "integration tests loaded the installed plugin ($NLOADED processes)" grep -q "] plugin $IPLUGIN," "$WORK/it.log"
      check "integration tests never loaded another plugin" \
        bash -c '! grep "] plugin /" "$2" | grep -vq "] plugin $1,"' _ "$IPLUGIN" "$WORK/it.log"
    elif [ "$REQUIRE_IT" -eq 1 ]; then
      fail "none of the $NIT registered integration tests loads the plugin (see tests/integration/CMakeLists.txt)"
    else
      echo "WARNING: none of the $NIT registered integration test(s) loads the plugin yet (tests/integration registers"
      echo "         the two-process ABI tests once the plugin passes them); the installed plugin is exercised by"
      echo "         gdrnet-perf below. Use --require-integration to make this a failure."
      skip "integration tests against the installed plugin: none registered that load it"
    fi
  elif [ -x "$TBUILD/bin/gdrnet-it-tcp" ]; then
    check "gdrnet-it-tcp against $IPLUGIN" env GDRNET_TEST_PLUGIN="$IPLUGIN" "$TBUILD/bin/gdrnet-it-tcp"
  elif [ "$REQUIRE_IT" -eq 1 ] || [ -n "$TESTS_FROM" ]; then
    fail "no integration tests in $TBUILD (ctest -L integration is empty: build it with GDRNET_BUILD_TESTS=ON first)"
  else
    echo "WARNING: no integration tests in $TBUILD (ctest -L integration is empty: GDRNET_BUILD_TESTS=OFF?)"
    skip "integration tests against the installed plugin: none built"
  fi

  section "installed tools"
  # Run from a neutral directory with a clean library path: the installed tools must find the installed plugin.
  if (cd / && env -u LD_LIBRARY_PATH -u GDRNET_PLUGIN /usr/bin/gdrnet-perf --local --transport tcp --check \
        --sizes 1:1048576 --iters 20) >"$WORK/perf.log" 2>&1; then
    pass "gdrnet-perf --local --transport tcp --check --sizes 1:1048576 --iters 20"
    tail -n 5 "$WORK/perf.log" | sed 's/^/  /'
  else
    tail -n 30 "$WORK/perf.log"; fail "gdrnet-perf --local --transport tcp --check"
  fi
  rc=0; (cd / && /usr/bin/gdrnet-doctor) >"$WORK/doctor.log" 2>&1 || rc=$?
  case "$rc" in
    0) pass "gdrnet-doctor: exit 0 (ready)" ;;
    1) pass "gdrnet-doctor: exit 1 (not ready: expected on a host without RDMA)" ;;
    *) tail -n 30 "$WORK/doctor.log"; fail "gdrnet-doctor: exit $rc (0 or 1 expected)" ;;
  esac
  rc=0; (cd / && /usr/bin/gdrnet-doctor --json) >"$WORK/doctor.json" 2>"$WORK/doctor.err" || rc=$?
  if [ "$rc" -le 1 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$WORK/doctor.json" 2>/dev/null; then
    pass "gdrnet-doctor --json: valid JSON (exit $rc)"
  else
    fail "gdrnet-doctor --json: exit $rc or invalid JSON"
  fi
  check "gdrnet-top on PATH (--help), and --once says it found no stats file in an empty directory (exit 1)" \
    bash -c 'cd / && env PATH=/usr/bin:/bin gdrnet-top --help >/dev/null && { env PATH=/usr/bin:/bin gdrnet-top --once "$1/empty-top" 2>/dev/null; test $? = 1; }' _ "$WORK"
  check "installed summarize runs on its own (--help)" bash -c '"$1" --help >/dev/null' _ /usr/share/$PKG/nccl-tests-configs/summarize
  check "installed run-matrix runs on its own (--help)" bash -c '"$1" --help >/dev/null' _ /usr/share/$PKG/nccl-tests-configs/run-matrix
  check "gdrnet-run-matrix and gdrnet-summarize on PATH (--help)" \
    bash -c 'cd / && env PATH=/usr/bin:/bin gdrnet-run-matrix --help >/dev/null && env PATH=/usr/bin:/bin gdrnet-summarize --help >/dev/null'
  check "gdrnet-run-matrix run from the installed tree writes its results under \$HOME, not there" \
    bash -c 'cd "$1" && HOME="$2" gdrnet-run-matrix --dry-run --collectives all_reduce --protos LL /nonexistent tcp,single-host 2>/dev/null |
             tail -n 1 | grep -q "would go to $2/nccl-tests-results/"' _ /usr/share/$PKG/nccl-tests-configs "$WORK"
  check "installed run-matrix --dry-run with an installed preset" bash -c '"$1" --dry-run --collectives all_reduce --protos LL /nonexistent tcp | grep -q "NCCL_NET=GDR"' _ /usr/share/$PKG/nccl-tests-configs/run-matrix

  section "remove with dpkg"
  if [ "$KEEP" -eq 1 ]; then
    skip "dpkg -r (--keep: $PKG stays installed)"
  elif $SUDO dpkg -r "$PKG" >"$WORK/dpkg-r.log" 2>&1; then
    pass "dpkg -r $PKG"
    INSTALLED=0
    check "dpkg status after -r: not installed" \
      bash -c '! dpkg-query -W -f="\${Status}" "$1" 2>/dev/null | grep -q "install ok installed"' _ "$PKG"
    check "no installed file left behind" \
      bash -c 'left=0; while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then echo "left: $f"; left=1; fi; done <"$1"; exit $left' _ "$WORK/installed.txt"
    for d in /usr/share/$PKG /usr/share/doc/$PKG; do
      check "directory $d removed" [ ! -e "$d" ]
    done
    check "plugin no longer found by the loader" bash -c '! ldconfig -p | grep -q "libnccl-net-gdr\.so "'
    $SUDO dpkg -P "$PKG" >/dev/null 2>&1 || true
  else
    cat "$WORK/dpkg-r.log"; fail "dpkg -r $PKG"
  fi
fi

# ---- .rpm ----------------------------------------------------------------------------------------------------
section "RPM package"
if ! command -v rpmbuild >/dev/null 2>&1; then
  skip "rpmbuild not installed: no .rpm"
else
  rm -f "$BUILD"/packages/${PKG}-*.rpm
  if (cd "$BUILD" && cpack -G RPM --config "$BUILD/CPackConfig.cmake") >"$WORK/cpack-rpm.log" 2>&1; then
    pass "cpack -G RPM"
    RPM="$(ls "$BUILD"/packages/${PKG}-*.rpm 2>/dev/null | head -n 1)"
    RARCH="$(uname -m)"
    check "rpm file name ${PKG}-${VERSION}-${RELEASE}.${RARCH}.rpm" [ "$(basename "$RPM")" = "${PKG}-${VERSION}-${RELEASE}.${RARCH}.rpm" ]
    rpm -qlp "$RPM" 2>/dev/null | sort >"$WORK/rpm-files.txt"
    echo "--- files"; sed 's/^/  /' "$WORK/rpm-files.txt"
    rhas() { grep -qxF "$1" "$WORK/rpm-files.txt"; }
    for f in "/$PLUGIN_REL" /usr/bin/gdrnet-perf /usr/bin/gdrnet-doctor /usr/share/doc/$PKG/changelog \
             /usr/share/$PKG/nccl-tests-configs/run-matrix /usr/share/$PKG/nccl-tests-configs/summarize \
             /usr/share/$PKG/nccl-tests-configs/rdma-gdr.env /usr/share/$PKG/nccl-tests-configs/pytorch/ddp_step.py; do
      check "rpm contains $f" rhas "$f"
    done
    rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$RPM" 2>/dev/null | awk '$1 !~ /^d/ {print $2}' | sort >"$WORK/rpm-nondirs.txt"
    sed -n 's|^\([^ ]*[^/]\)\( -> .*\)\{0,1\}$|/\1|p' "$WORK/deb-files.txt" | sort >"$WORK/deb-nondirs.txt"
    if diff "$WORK/deb-nondirs.txt" "$WORK/rpm-nondirs.txt" >"$WORK/rpm-vs-deb.diff"; then
      pass "rpm and deb carry the same files"
    else
      sed 's/^/  /' "$WORK/rpm-vs-deb.diff"; fail "rpm and deb carry the same files"
    fi
    check "rpm does not own system directories" bash -c '! grep -qxE "/usr|/usr/bin|/usr/lib|/usr/lib64|/usr/$1|/usr/share|/usr/share/doc" "$2"' _ "$LIBDIR" "$WORK/rpm-files.txt"
    REQ="$(rpm -qp --requires "$RPM" 2>/dev/null | tr '\n' ' ')"
    check "rpm Requires nothing on libibverbs/cuda/nccl: $REQ" bash -c '! grep -qiE "ibverbs|cuda|nccl" <<<"$1"' _ "$REQ"
    check "rpm Suggests libibverbs" bash -c 'rpm -qp --suggests "$1" 2>/dev/null | grep -q libibverbs' _ "$RPM"
    check "rpm version $VERSION-$RELEASE" [ "$(rpm -qp --qf '%{VERSION}-%{RELEASE}' "$RPM" 2>/dev/null)" = "$VERSION-$RELEASE" ]
    check "rpm changelog has $VERSION" bash -c 'rpm -qp --changelog "$1" 2>/dev/null | grep -q -- "- $2-"' _ "$RPM" "$VERSION"
    if link_on; then
      check "rpm has libnccl-net.so (option ON)" rhas "/usr/$LIBDIR/libnccl-net.so"
    else
      check "rpm has no libnccl-net.so (option OFF)" bash -c '! grep -q "/libnccl-net\.so$" "$1"' _ "$WORK/rpm-files.txt"
    fi
  else
    tail -n 30 "$WORK/cpack-rpm.log"; fail "cpack -G RPM"
  fi
fi

finish
