#!/bin/sh
# gdrnet-perf --local on the verbs emulator without VEMU_DIR: the run gets a private rendezvous under TMPDIR (named
# with -v) and removes it at the end, leaving nothing behind (not in /tmp/vemu-<uid>, the emulator's default); a
# user's VEMU_DIR is used and kept.
# usage: perf_vemu_dir.sh GDRNET_PERF PLUGIN EMULATOR_LIB
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
emu=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-vemu-dir.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "perf_vemu_dir: FAIL: $*"
  exit 1
}
mkdir "$tmp/t" "$tmp/mine" || exit 1
out=$(env -u VEMU_DIR TMPDIR="$tmp/t" GDRNET_IBVERBS_LIB="$emu" "$perf" --local --transport rdma --check --sizes 8:1K \
  --iters 4 -v --plugin "$plugin" 2>&1) || fail "the run failed: $out"
dir=$(printf '%s\n' "$out" | sed -n 's/^# VEMU_DIR=\([^ ]*\) .*/\1/p')
case "$dir" in
"$tmp"/t/gdrnet-perf-vemu.*) ;;
*) fail "no private VEMU_DIR under TMPDIR named: $(printf '%s\n' "$out" | grep -i vemu)" ;;
esac
printf '%s\n' "$out" | grep -q '^# transport rdma, chosen by the plugin' || fail "not over the emulator: $out"
[ ! -e "$dir" ] || fail "$dir left behind: $(ls -R "$dir")"
left=$(ls -A "$tmp/t")
[ -z "$left" ] || fail "left in TMPDIR: $left"
# the user's own VEMU_DIR: used (the emulator's files appear there) and kept
VEMU_DIR="$tmp/mine" GDRNET_IBVERBS_LIB="$emu" "$perf" --local --transport rdma --sizes 8:1K --iters 4 -v \
  --plugin "$plugin" >"$tmp/out2" 2>&1 || fail "the run with VEMU_DIR failed: $(cat "$tmp/out2")"
if grep -q '^# VEMU_DIR=' "$tmp/out2"; then fail "a private VEMU_DIR although the user set one"; fi
[ -n "$(ls -A "$tmp/mine")" ] || fail "the user's VEMU_DIR was not used"
echo "perf_vemu_dir: PASS ($dir used and removed)"
