#!/bin/sh
# demo.sh ends on one verdict line naming the run that failed: run in a copy of the tree's layout where
# install-deps.sh, cmake and build/bin/gdrnet-perf are stubs (no build, no traffic), the stub perf failing for the
# transport named in FAIL_TRANSPORT.
# usage: check_demo_verdict.sh <scripts/demo.sh>
set -u
demo=$1
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/scripts" "$tmp/build/bin" "$tmp/build/lib/verbs-emu" "$tmp/stubbin" || exit 1
cp "$demo" "$tmp/scripts/demo.sh" || exit 1
printf '#!/bin/sh\nexit 0\n' >"$tmp/scripts/install-deps.sh"
printf '#!/bin/sh\nexit 0\n' >"$tmp/stubbin/cmake"
cat >"$tmp/build/bin/gdrnet-perf" <<'STUB'
#!/bin/sh
# --local --transport T --check
[ "$3" = "${FAIL_TRANSPORT-}" ] && { echo "stub perf: $3 mismatch"; exit 3; }
echo "stub perf: $3 ok"
STUB
chmod +x "$tmp/scripts/install-deps.sh" "$tmp/stubbin/cmake" "$tmp/build/bin/gdrnet-perf"
: >"$tmp/build/lib/verbs-emu/libibverbs.so.1"
fails=0
check() { # <FAIL_TRANSPORT> <expected rc> <expected last line>
  out=$(FAIL_TRANSPORT=$1 PATH="$tmp/stubbin:$PATH" timeout 20 bash "$tmp/scripts/demo.sh" 2>&1)
  rc=$?
  last=$(printf '%s\n' "$out" | tail -n 1)
  if [ "$rc" -ne "$2" ] || [ "$last" != "$3" ]; then
    echo "FAIL: FAIL_TRANSPORT=$1: exit $rc (want $2), last line '$last' (want '$3'); output:"
    printf '%s\n' "$out"
    fails=$((fails + 1))
  fi
}
check none 0 "TCP and RDMA (emulator): every byte verified, OK"
check tcp 1 "TCP FAILED (gdrnet-perf exit 3, see above); RDMA (emulator) OK"
check rdma 1 "TCP OK; RDMA (emulator) FAILED (gdrnet-perf exit 3, see above)"
rm -f "$tmp/build/lib/verbs-emu/libibverbs.so.1"
check none 0 "TCP: every byte verified, OK; RDMA (emulator) not run: build/lib/verbs-emu/libibverbs.so.1 was not built"
[ "$fails" -eq 0 ] || exit 1
echo "demo-verdict: ok"
