#!/bin/sh
# stall_recovery.sh PERF PLUGIN: a stall that is a recovery in progress is reported as one. gdrnet-perf --local over
# the emulator; both processes' port goes DOWN for 3 s mid-run (GDRNET_FALLBACK=0: the connections recover on the
# same device once it is back). GDRNET_STALL_WARN_MS=1000: the stall WARN names the state "recovering" (not a silent
# peer), a "resumed" line follows, and the run completes with every byte checked.
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
out=$(GDRNET_STALL_WARN_MS=1000 GDRNET_FALLBACK=0 VEMU_TIME_SCALE=0.001 \
  VEMU_FAULTS='port_down:dev=vemu0:after_ms=1000:for_ms=3000' \
  "$perf" --local --transport rdma --check --sizes 8K:8K --iters 20000 --timeout 120 --plugin "$plugin" 2>&1)
rc=$?
fail() {
  echo "$out" | tail -n 40
  echo "stall_recovery: FAIL: $*"
  exit 1
}
[ "$rc" -eq 0 ] || fail "gdrnet-perf exited $rc"
echo "$out" | grep 'stall: ' | head -n 4
warn=$(echo "$out" | grep -m1 'stall: .* connection of this process')
[ -n "$warn" ] || fail "no stall WARN while the port was down"
echo "$warn" | grep -q 'over rdma, recovering (' || fail "the WARN does not name the state recovering"
echo "$warn" | grep -q 'the connection is recovering' || fail "the WARN does not say the connection is recovering"
echo "$warn" | grep -q 'open but silent' && fail "a recovering connection reported as a silent peer"
echo "$out" | grep -q 'stall: .* resumed after [0-9.]* s' || fail "no \"resumed\" line after the recovery"
echo "$out" | grep -q 'recovery(ies)' || fail "no counters line"
echo "$out" | grep -q '# counters (process A): [0-9]* fault(s), [1-9][0-9]* recovery(ies)' ||
  fail "process A counted no recovery"
echo "stall_recovery: PASS"
