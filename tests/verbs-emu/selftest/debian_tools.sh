#!/bin/sh
# Programs linked against the real rdma-core libibverbs (Debian's ibverbs-utils) run on the emulator
# through LD_LIBRARY_PATH. usage: debian_tools.sh <emulator lib dir>
set -eu
dir=$1
export LD_LIBRARY_PATH="$dir"
export VEMU_DEVICES=vemu0:roce,vemu1:ib
# ibv_rc_pingpong's QPs have timeout 14 and retry_cnt 7: a silent peer fails them after 8 x 67 ms = 0.5 s, which a
# loaded 2-core machine (the full CTest run in parallel) can exceed -- seen once as "transport retry counter
# exceeded" in the client. The emulator's timers are stretched here; nothing in this test measures them.
export VEMU_TIME_SCALE="${VEMU_TIME_SCALE:-20}"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(ibv_devices) || fail "ibv_devices exited $?"
echo "$out"
echo "$out" | grep -q vemu0 || fail "ibv_devices does not list vemu0"
echo "$out" | grep -q vemu1 || fail "ibv_devices does not list vemu1"

out=$(ibv_devinfo -v) || fail "ibv_devinfo exited $?"
echo "$out" | grep -q "hca_id:.*vemu0" || fail "ibv_devinfo: no vemu0"
[ "$(echo "$out" | grep -c 'PORT_ACTIVE (4)')" -eq 2 ] || fail "ibv_devinfo: ports not ACTIVE"
echo "$out" | grep -q "link_layer:.*Ethernet" || fail "ibv_devinfo: no Ethernet port"
echo "$out" | grep -q "link_layer:.*InfiniBand" || fail "ibv_devinfo: no InfiniBand port"
echo "$out" | grep -q "RoCE v2" || fail "ibv_devinfo: no RoCE v2 GID"
echo "$out" | grep -q "::ffff:127.0.1.1" || fail "ibv_devinfo: no IPv4-mapped GID"
echo "$out" | grep -q "fe80:" || fail "ibv_devinfo: no link-local GID"
echo "ibv_devinfo: OK"

# ibv_rc_pingpong server and client (RoCE with GID index 3, then IB): SEND/RECV between two processes
command -v ibv_rc_pingpong >/dev/null || { echo "no ibv_rc_pingpong: skipped"; exit 0; }
port_ready() { # is a socket in LISTEN state (st 0A) bound to local TCP port $1? (a port merely seen in
	# /proc/net/tcp -- as the remote port of another test's connection, or in TIME_WAIT -- is not enough: the
	# client would connect before the server listens and fail, as it once did in a full parallel CI run)
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" 'substr($2, length($2) - 4) == p && $4 == "0A" { found = 1 } END { exit !found }' \
		/proc/net/tcp /proc/net/tcp6 2>/dev/null
}
run_pp() {
	port=$1; shift
	ibv_rc_pingpong -p "$port" -n 200 -s 4096 "$@" >pp-server.log 2>&1 &
	spid=$!
	i=0
	until port_ready "$port"; do # wait for the server's listening socket (a condition, not a delay)
		i=$((i + 1)); [ $i -lt 500 ] || fail "ibv_rc_pingpong server never listened"
		kill -0 $spid 2>/dev/null || { cat pp-server.log; fail "ibv_rc_pingpong server died"; }
		sleep 0.01
	done
	ibv_rc_pingpong -p "$port" -n 200 -s 4096 "$@" localhost >pp-client.log 2>&1 || { cat pp-client.log; fail "client"; }
	wait $spid || { cat pp-server.log; fail "server"; }
	grep -q "200 iters" pp-client.log || fail "client did not finish"
	grep -q "200 iters" pp-server.log || fail "server did not finish"
	tail -1 pp-client.log
}
base=$(( 20000 + $$ % 12000 )) # below the ephemeral range (32768-60999) that other tests' connections use
run_pp $base -d vemu0 -g 3
run_pp $((base + 1)) -d vemu1
run_pp $((base + 2)) -d vemu0 -g 3 -e   # completion events
echo "ibv_rc_pingpong: OK"
