#!/bin/sh
# The plugin's decision lines are short enough for kubectl logs (at most 200 characters after "NET/GDR : "): the
# init line (transport and why, device names), the TCP sizing lines (on a rank with fewer than 8 cores, why the I/O
# thread count is what it is), the fallback WARNs ("moves to TCP", "now runs over TCP"); the detail (devices, the
# whole fallback reason with GIDs and the first fault) follows at INFO(NET).
# usage: log_lines.sh GDRNET_PERF PLUGIN EMULATOR_LIB
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
emu=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/log-lines.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "log_lines: FAIL: $*"
  exit 1
}
# msgs <file> <pattern>: the messages (after "NET/GDR : ") of the lines matching pattern
msgs() { grep -- "$2" "$1" | sed 's/.*NET\/GDR : //'; }
short() { # <file> <pattern> <what>
  [ -n "$(msgs "$1" "$2")" ] || fail "no line matching '$2' ($3)"
  long=$(msgs "$1" "$2" | awk 'length > 200')
  [ -z "$long" ] || fail "$3: over 200 characters: $long"
}
# TCP, 64 ranks on the host (fewer than 8 cores per rank whatever this machine has)
NCCL_DEBUG=INFO OMPI_COMM_WORLD_LOCAL_SIZE=64 "$perf" --local --transport tcp --sizes 8:1K --iters 4 \
  --plugin "$plugin" >"$tmp/tcp" 2>&1 || fail "the TCP run failed: $(cat "$tmp/tcp")"
short "$tmp/tcp" "NET/GDR : using the tcp transport (GDRNET_TRANSPORT=tcp); 1 device(s): " "the init line"
short "$tmp/tcp" "NET/GDR : TCP: " "the TCP sizing lines"
grep -q "NET/GDR : TCP: [0-9]* I/O thread(s) per process: auto: [0-9]* core(s) for this rank (per OMPI_COMM_WORLD_LOCAL_SIZE), fewer than 8: the most, as blocking threads" \
  "$tmp/tcp" || fail "no reason for the I/O thread count on a small rank: $(msgs "$tmp/tcp" 'I/O thread')"
grep -q "NET/GDR : devices: \[0\]" "$tmp/tcp" || fail "no devices detail line"
# RDMA over the emulator, recovery off: each connection moves to TCP at its 20th data write
VEMU_DIR=$tmp NCCL_DEBUG=INFO VEMU_TIME_SCALE=0.01 GDRNET_RECOVERY_ATTEMPTS=0 GDRNET_FAILBACK=0 \
  VEMU_FAULTS="wc:op=write_imm:nth=20:status=retry_exc" GDRNET_IBVERBS_LIB=$emu "$perf" --local --transport rdma \
  --check --sizes 8:64K --iters 20 --plugin "$plugin" >"$tmp/rdma" 2>&1 || fail "the RDMA run failed: $(cat "$tmp/rdma")"
short "$tmp/rdma" "WARN NET/GDR : .* moves to TCP: " "the fallback WARN"
short "$tmp/rdma" "WARN NET/GDR : .* now runs over TCP (fallback 1)" "the fallback done WARN"
grep -q "INFO NET/GDR : .* (local .*, remote .*) moves to TCP: .*QP 0x" "$tmp/rdma" ||
  fail "no INFO line with the whole fallback reason: $(msgs "$tmp/rdma" 'moves to TCP')"
echo "log_lines: PASS"
