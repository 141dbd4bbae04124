#!/usr/bin/env bash
# twohost.sh CASE PERF PLUGIN VEMU_LIB_DIR: two "hosts" on one machine. Each end of gdrnet-perf (--server, --client,
# which load the plugin through its ABI as NCCL does) runs in a network namespace of its own; a veth pair joins them,
# and the addresses exist only inside those namespaces (nothing reaches the host's network). Cases:
#   tcp             TCP transport across, every byte checked
#   ifname          GDRNET_SOCKET_IFNAME picks the veth: with a second interface in the server's namespace whose
#                   address the client cannot reach, the run passes with =<veth> and fails (connect times out) with
#                   =<the other one>
#   rdma            RDMA transport on the verbs emulator across: the plugin's control channel on the veth, the
#                   emulated NIC through VEMU_DIR (shared; a path longer than a socket address on purpose)
#   linkdown-tcp    the veth goes down mid-stream (64 MiB into a run that never pauses): both ends fail within
#                   GDRNET_TCP_TIMEOUT_MS (2 s here) plus slack, with the plugin's error on both
#   linkdown-rdma   the emulated port goes down mid-stream (VEMU_FAULTS port_down in the server, at a fixed time
#                   after its start that the run outlasts; the RDMA data path does not use the veth): after
#                   GDRNET_RECOVERY_TIMEOUT_MS the connections move to TCP over the veth and the run completes, every
#                   byte checked (docs/recovery.md)
#   linkdown-all    as linkdown-rdma, and the veth goes down too (the host's whole network): both ends fail within
#                   GDRNET_RECOVERY_TIMEOUT_MS + GDRNET_CONNECT_TIMEOUT_MS plus slack
#   mixed           a host without a usable RDMA device (GDRNET_TRANSPORT=auto picks TCP: GDRNET_HCA selects no port)
#                   and one with RDMA on the emulator, both auto, either one the server: the connections run over TCP
#                   from the start across the veth (the RDMA host's TCP door on its control address), every byte
#                   checked, and each side logs its connections' mixed-pair INFO line naming both settings
#   ipv6            an IPv6-only network (no IPv4 on the veth; lo keeps 127.0.0.1, as on any host), then no IPv4
#                   at all; GDRNET_SOCKET_IFNAME unset: the plugin takes the veth's IPv6 address; TCP and RDMA across
#   ipv6-linklocal  only link-local IPv6 addresses on the veth (as ipv6): the connector must use its own interface's
#                   scope id, not the one in the listener's handle
# Exit 0 pass, 1 fail, 77 skipped (not root, or namespaces/veth cannot be made), with the reason.
set -u
case=${1:?case} perf=${2:?perf} plugin=${GDRNET_TEST_PLUGIN:-${3:?plugin}} vemu=${4:?vemu lib dir}
id=$$
nsA=gdrnetA$id nsB=gdrnetB$id vA=gna$id vB=gnb$id vC=gnc$id vD=gnd$id
work=$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-netns.XXXXXX") || exit 1
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  [ -n "${NETNS_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
log() { echo "[netns $case] $*"; }
skip() {
  echo "SKIP netns.$case: $*"
  exit 77
}
fail() {
  echo "FAIL netns.$case: $*"
  for f in "$work"/*.out "$work"/*.err; do [ -s "$f" ] && { echo "--- $f"; tail -n 30 "$f"; }; done
  exit 1
}
now_ms() { date +%s%3N; }

[ "$(id -u)" = 0 ] || skip "not root: network namespaces and veth pairs need CAP_NET_ADMIN and CAP_SYS_ADMIN (CI runs as root)"
command -v ip >/dev/null || skip "no ip(8) (iproute2)"
ip netns add "$nsA" 2>"$work/setup.err" || skip "cannot create a network namespace: $(cat "$work/setup.err")"
ip netns add "$nsB" 2>"$work/setup.err" || skip "cannot create a network namespace: $(cat "$work/setup.err")"
ip link add "$vA" type veth peer name "$vB" 2>"$work/setup.err" || skip "cannot create a veth pair: $(cat "$work/setup.err")"
ip link set "$vA" netns "$nsA" && ip link set "$vB" netns "$nsB" || fail "cannot move the veth ends into the namespaces"
A() { ip netns exec "$nsA" "$@"; }
B() { ip netns exec "$nsB" "$@"; }
A ip link set lo up && B ip link set lo up || fail "lo"
# no duplicate-address detection: addresses are usable at once (no sleeping for DAD)
A sysctl -qw "net.ipv6.conf.$vA.accept_dad=0" && B sysctl -qw "net.ipv6.conf.$vB.accept_dad=0" || fail "sysctl accept_dad"
addrA=10.231.0.1 addrB=10.231.0.2
case $case in
ipv6)
  A ip addr add fd77::1/64 dev "$vA" nodad && B ip addr add fd77::2/64 dev "$vB" nodad || fail "IPv6 addresses"
  addrA=fd77::1 ;;
ipv6-linklocal) ;;
*)
  A ip addr add "$addrA/24" dev "$vA" && B ip addr add "$addrB/24" dev "$vB" || fail "IPv4 addresses" ;;
esac
A ip link set "$vA" up && B ip link set "$vB" up || fail "link up"
if [ "$case" = ipv6-linklocal ]; then
  addrA="$(A ip -6 addr show dev "$vA" scope link | sed -n 's/.*inet6 \(fe80[^/]*\).*/\1/p')%$vB"
  [ "$addrA" != "%$vB" ] || fail "no link-local address on $vA"
fi
if [ "$case" = ifname ]; then
  # a second interface in the server's namespace, with an address the client's namespace has no route to
  A ip link add "$vC" type veth peer name "$vD" && A ip addr add 10.232.0.1/24 dev "$vC" && A ip link set "$vC" up &&
    A ip link set "$vD" up || fail "second interface"
fi
A ip addr > "$work/nsA.addr"
log "namespaces $nsA ($vA) and $nsB ($vB), server address $addrA"

# the knobs of every run: short timeouts, so that failures are fast and bounded
export GDRNET_CONNECT_TIMEOUT_MS=5000 GDRNET_TCP_TIMEOUT_MS=${NETNS_TCP_TIMEOUT_MS:-2000} GDRNET_IB_TIMEOUT=14 GDRNET_IB_RETRY_CNT=7
unset GDRNET_SOCKET_IFNAME NCCL_SOCKET_IFNAME
vemu_dir="$work/vemu-a-directory-path-longer-than-an-AF_UNIX-socket-address-can-hold-so-the-emulator-uses-another-way"
export VEMU_DIR=$vemu_dir VEMU_DEVICES=vemu0:roce
mkdir -p "$VEMU_DIR"

# start_server NAME ENV...: gdrnet-perf --server in namespace A; sets $port and $spid; its output in $work/NAME.out
start_server() {
  local name=$1
  shift
  mkfifo "$work/$name.fifo" || fail "mkfifo"
  A env "$@" "$perf" --server --port 0 --timeout "${server_timeout:-60}" --plugin "$plugin" -v >"$work/$name.fifo" \
    2>"$work/$name.err" &
  spid=$!
  pids+=("$spid")
  exec 3<"$work/$name.fifo"
  local line
  read -r line <&3 || fail "the server printed nothing"
  port=$(printf '%s\n' "$line" | sed -n 's/.*waiting for a client on port \([0-9][0-9]*\).*/\1/p')
  [ -n "$port" ] || fail "no port in the server's first line: $line"
  cat <&3 >"$work/$name.out" &
  pids+=($!)
  exec 3<&-
}

# wait_ends: waits for the client ($cpid) then the server ($spid); sets $crc $src and their end times $t1 $t2
wait_ends() {
  wait "$cpid"
  crc=$?
  t1=$(now_ms)
  wait "$spid"
  src=$?
  t2=$(now_ms)
}

# run_pair TRANSPORT [server env...] -- [client options...]: a server in A, its client in B; sets $crc $src
run_pair() {
  local tr=$1
  shift
  local senv=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do senv+=("$1"); shift; done
  shift
  start_server server "${senv[@]}" GDRNET_TRANSPORT="$tr"
  B env GDRNET_TRANSPORT="$tr" "${cenv[@]}" timeout 120 "$perf" --client "$addrA" --port "$port" --transport "$tr" \
    --plugin "$plugin" -v --timeout 30 "$@" >"$work/client.out" 2>"$work/client.err"
  crc=$?
  [ "$crc" = 0 ] || kill "$spid" 2>/dev/null # a failed client may have left the server waiting for it
  wait "$spid"
  src=$?
}

rdma_env=(GDRNET_IBVERBS_LIB="$vemu/libibverbs.so.1" LD_LIBRARY_PATH="$vemu")
cenv=()
checked=(--check --sizes 0:4M:16 --iters 20)
case $case in
tcp)
  cenv=(GDRNET_SOCKET_IFNAME="=$vB")
  run_pair tcp GDRNET_SOCKET_IFNAME="=$vA" -- "${checked[@]}"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "client exit $crc, server exit $src"
  grep -q "devices: \[0\]$vA " "$work/server.err" || fail "the server did not use $vA"
  grep -q "accepted $addrB:" "$work/server.err" || fail "the server did not accept from $addrB"
  ;;
ifname)
  cenv=(GDRNET_SOCKET_IFNAME="=$vB")
  run_pair tcp GDRNET_SOCKET_IFNAME="=$vA" -- "${checked[@]}"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "with =$vA: client exit $crc, server exit $src"
  grep -q "devices: \[0\]$vA .*$vA=$addrA" "$work/server.err" || fail "the server did not announce $vA's address"
  rm -f "$work/server.fifo"
  # (the client gives up after GDRNET_CONNECT_TIMEOUT_MS; the server, left waiting for it, is stopped)
  server_timeout=5 start_server server GDRNET_SOCKET_IFNAME="=$vC" GDRNET_TRANSPORT=tcp
  B env GDRNET_TRANSPORT=tcp "${cenv[@]}" GDRNET_CONNECT_TIMEOUT_MS=1500 timeout 120 "$perf" --client "$addrA" \
    --port "$port" --transport tcp --plugin "$plugin" -v --timeout 5 --check --sizes 1K:1K --iters 2 \
    >"$work/client.out" 2>"$work/client.err"
  crc=$?
  kill "$spid" 2>/dev/null
  wait "$spid"
  [ "$crc" != 0 ] || fail "with =$vC (unreachable from the client) the run passed: the knob did not choose the interface"
  grep -q "devices: \[0\]$vC " "$work/server.err" || fail "the server did not use $vC"
  grep -q "connect to 10.232.0.1:" "$work/client.err" || fail "the client did not try $vC's address"
  ;;
rdma)
  cenv=("${rdma_env[@]}" GDRNET_SOCKET_IFNAME="=$vB")
  run_pair rdma "${rdma_env[@]}" GDRNET_SOCKET_IFNAME="=$vA" -- "${checked[@]}"
  [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "client exit $crc, server exit $src"
  grep -q "using the rdma transport" "$work/server.err" || fail "the server did not use RDMA"
  grep -q "connection vemu0 .* <-> $addrB:" "$work/server.err" || fail "no RDMA connection from $addrB"
  ;;
linkdown-tcp)
  # One size, more iterations than the test lets it finish: from its start the run moves data through the plugin
  # without pause (a link going down between sizes would find the plugin idle and perf in its own bootstrap). The
  # veth goes down once 64 MiB more have left the client's end: mid-stream.
  start_server server GDRNET_SOCKET_IFNAME="=$vA" GDRNET_TRANSPORT=tcp
  txb() { B cat "/sys/class/net/$vB/statistics/tx_bytes"; }
  tx0=$(txb)
  B env GDRNET_TRANSPORT=tcp GDRNET_SOCKET_IFNAME="=$vB" timeout 120 "$perf" --client "$addrA" --port "$port" \
    --transport tcp --plugin "$plugin" -v --check --sizes 4M:4M --iters 100000 >"$work/client.out" \
    2>"$work/client.err" &
  cpid=$!
  pids+=("$cpid")
  while [ $(($(txb) - tx0)) -lt $((64 << 20)) ]; do
    kill -0 "$cpid" 2>/dev/null || fail "the client ended before 64 MiB went out"
    sleep 0.05 # polls the counter (a condition), not a synchronisation
  done
  t0=$(now_ms)
  B ip link set "$vB" down || fail "link down"
  log "$vB down after $((($(txb) - tx0) >> 20)) MiB"
  wait_ends
  bound=$((GDRNET_TCP_TIMEOUT_MS + 4000))
  log "client exit $crc after $((t1 - t0)) ms, server exit $src after $((t2 - t0)) ms (bound: GDRNET_TCP_TIMEOUT_MS $GDRNET_TCP_TIMEOUT_MS + 4000 ms)"
  [ "$crc" != 0 ] && [ "$src" != 0 ] || fail "the run did not fail (client $crc, server $src)"
  [ $((t1 - t0)) -le "$bound" ] && [ $((t2 - t0)) -le "$bound" ] || fail "no error within $bound ms"
  grep -q "NET/GDR.*TCP connection.*failed" "$work/client.err" || fail "no TCP connection error from the client's plugin"
  grep -q "NET/GDR.*TCP connection.*failed" "$work/server.err" || fail "no TCP connection error from the server's plugin"
  ;;
linkdown-rdma | linkdown-all)
  # The emulated NIC's port goes down (VEMU_FAULTS port_down, in the server) T ms after the server's agent started:
  # mid-stream, as the run lasts longer than T plus the bounds. The RDMA data path does not use the veth: with the
  # veth up the connections wait GDRNET_RECOVERY_TIMEOUT_MS for the port, then move to TCP and the run completes,
  # every byte checked. linkdown-all takes the veth down as well once the server has seen the port go down (the
  # host's whole network): both ends fail, within GDRNET_RECOVERY_TIMEOUT_MS + GDRNET_CONNECT_TIMEOUT_MS + slack.
  T=6000
  export GDRNET_RECOVERY_TIMEOUT_MS=2000
  start_server server "${rdma_env[@]}" GDRNET_SOCKET_IFNAME="=$vA" GDRNET_TRANSPORT=rdma \
    VEMU_FAULTS="port_down:dev=vemu0:after_ms=$T"
  B env GDRNET_TRANSPORT=rdma "${rdma_env[@]}" GDRNET_SOCKET_IFNAME="=$vB" timeout 120 "$perf" --client "$addrA" \
    --port "$port" --transport rdma --plugin "$plugin" -v --check --sizes 4K:4M:4 --duration 2 \
    >"$work/client.out" 2>"$work/client.err" &
  cpid=$!
  pids+=("$cpid")
  until grep -q "port error (link down)" "$work/server.err"; do
    kill -0 "$cpid" 2>/dev/null || fail "the client ended before the port went down"
    sleep 0.05 # polls the server's log (a condition), not a synchronisation
  done
  t0=$(now_ms)
  if [ "$case" = linkdown-all ]; then
    B ip link set "$vB" down || fail "link down"
    log "the port went down; $vB down too"
  else
    log "the port went down"
  fi
  wait_ends
  log "client exit $crc after $((t1 - t0)) ms, server exit $src after $((t2 - t0)) ms"
  grep -q "connection vemu0" "$work/client.err" || fail "the client never connected over RDMA"
  if [ "$case" = linkdown-rdma ]; then
    [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "the run did not complete over TCP (client $crc, server $src)"
    grep -q "now runs over TCP" "$work/client.err" && grep -q "now runs over TCP" "$work/server.err" ||
      fail "the connections did not move to TCP"
  else
    bound=$((GDRNET_RECOVERY_TIMEOUT_MS + GDRNET_CONNECT_TIMEOUT_MS + 4000))
    [ "$crc" != 0 ] && [ "$src" != 0 ] || fail "the run did not fail (client $crc, server $src)"
    [ $((t1 - t0)) -le "$bound" ] && [ $((t2 - t0)) -le "$bound" ] || fail "no error within $bound ms"
    grep -q "NET/GDR.*failed" "$work/client.err" || fail "no connection error from the client's plugin"
  fi
  ;;
mixed)
  # (--transport auto goes from the client to the server: both are auto; each host's RDMA is its own environment)
  tcp_only=("${rdma_env[@]}" GDRNET_HCA=nomatch0)
  for order in rdma-serves tcp-serves; do
    if [ "$order" = rdma-serves ]; then
      senv=("${rdma_env[@]}") cenv=("${tcp_only[@]}") rdma_log=server.err tcp_log=client.err
    else
      senv=("${tcp_only[@]}") cenv=("${rdma_env[@]}") rdma_log=client.err tcp_log=server.err
    fi
    rm -f "$work/server.fifo"
    run_pair auto "${senv[@]}" -- "${checked[@]}"
    [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "$order: client exit $crc, server exit $src"
    grep -q "using the rdma transport" "$work/$rdma_log" || fail "$order: the RDMA host did not use RDMA"
    grep -q "using the tcp transport (no usable RDMA device" "$work/$tcp_log" || fail "$order: the other host has RDMA"
    [ "$(grep -c "runs over TCP (mixed pair: this rank GDRNET_TRANSPORT=auto (RDMA, TCP), the peer GDRNET_TRANSPORT=auto (TCP only" "$work/$rdma_log")" -eq 2 ] ||
      fail "$order: the RDMA host's INFO lines (one per connection)"
    [ "$(grep -c "mixed pair: this rank GDRNET_TRANSPORT=auto (TCP only: no usable RDMA device), the peer GDRNET_TRANSPORT=auto (RDMA, TCP): TCP from the start" "$work/$tcp_log")" -eq 2 ] ||
      fail "$order: the TCP host's INFO lines (one per connection)"
    log "$order: ok"
  done
  ;;
ipv6 | ipv6-linklocal)
  # an IPv6-only network (lo keeps 127.0.0.1, as on any host), then no IPv4 at all
  for tr in tcp rdma tcp-noipv4 rdma-noipv4; do
    if [ "$tr" = tcp-noipv4 ]; then
      A ip addr del 127.0.0.1/8 dev lo && B ip addr del 127.0.0.1/8 dev lo || fail "removing IPv4 from lo"
    fi
    tr=${tr%-noipv4}
    cenv=()
    senv=()
    if [ "$tr" = rdma ]; then cenv=("${rdma_env[@]}"); senv=("${rdma_env[@]}"); fi
    rm -f "$work/server.fifo"
    run_pair "$tr" "${senv[@]}" -- --check --sizes 0:1M:16 --iters 10
    [ "$crc" = 0 ] && [ "$src" = 0 ] || fail "$tr: client exit $crc, server exit $src"
    # TCP names its device's address; RDMA its control channel's peer
    if [ "$case" = ipv6 ]; then
      grep -Eq "$vA=\[fd77::1\]|<-> \[fd77::2\]:" "$work/server.err" || fail "$tr: the server did not use IPv6"
    else
      grep -Eq "$vA=\[fe80::|<-> \[fe80::" "$work/server.err" || fail "$tr: the server did not use link-local IPv6"
    fi
    log "$tr across over IPv6: ok"
  done
  ;;
*)
  echo "twohost.sh: unknown case $case" >&2
  exit 2
  ;;
esac
log PASS
