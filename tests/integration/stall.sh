#!/bin/sh
# stall.sh PERF PLUGIN TOP TRANSPORT: the stall detector and the per-connection stats against a stopped peer.
# gdrnet-perf --server and --client on this host (GDRNET_STALL_WARN_MS=300, GDRNET_STATS_DIR, a file every second);
# once the client's stats file shows traffic, the server gets SIGSTOP:
#   - the client WARNs a stall naming the peer it connected to (its own INFO line says which), within
#     GDRNET_STALL_WARN_MS + 1 s of no progress by the detector's own account;
#   - the oldest request's age in the client's stats file grows from one write to the next;
#   - gdrnet-top --once lists the client's stalled connections first, the WARN's among them;
# then SIGCONT: both processes complete with every byte checked (--check), and the client says "resumed".
# Every wait is for a line or a file, bounded; none orders anything by sleeping.
# The run is short (5,000 round trips, then as many messages streamed): what is left after SIGCONT must end well
# within each phase's --timeout on a slow host (under TSan on a loaded 2-core machine a round trip takes 1-3 ms). On
# a fast host the client may be done before the stop lands (its row printed, no stall seen): both must then have
# ended cleanly, and the run goes again with four times the iterations, at most four runs.
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
top=$3
transport=$4
dir=$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-stall.XXXXXX") || exit 1
spid=
cpid=
cleanup() {
  [ -n "$spid" ] && kill -CONT "$spid" 2>/dev/null && kill "$spid" 2>/dev/null
  [ -n "$cpid" ] && kill "$cpid" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "stall: FAIL: $*"
  for f in "$dir"/client.out "$dir"/client.err "$dir"/server.err; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done
  exit 1
}
# until CMD succeeds, at most S seconds (a bound on the wait, not the synchronisation)
wait_for() {
  s=$1
  shift
  i=0
  while ! "$@"; do
    i=$((i + 1))
    [ "$i" -gt $((s * 20)) ] && return 1
    sleep 0.05
  done
  return 0
}
mkdir "$dir/stats" || exit 1
export GDRNET_STALL_WARN_MS=300 GDRNET_STATS_DIR="$dir/stats" GDRNET_STATS_INTERVAL_S=1
# the server, then the client with ITERS round trips and as many messages streamed; the launcher's ranks (RANK):
# each side learns the other's from the handle or the HELLO and the WARN names it
start() {
  rm -f "$dir/out"
  mkfifo "$dir/out" || exit 1
  RANK=3 "$perf" --server --port 0 --timeout 120 --plugin "$plugin" >"$dir/out" 2>"$dir/server.err" &
  spid=$!
  exec 3<"$dir/out"
  read -r line <&3 || fail "the server printed nothing"
  port=$(printf '%s\n' "$line" | sed -n 's/.*waiting for a client on port \([0-9][0-9]*\).*/\1/p')
  [ -n "$port" ] || fail "no port in the server's first line: $line"
  cat <&3 >"$dir/server.out" &
  exec 3<&-
  RANK=1 "$perf" --client 127.0.0.1 --port "$port" --transport "$transport" --check --sizes 8K:8K --iters "$1" -v \
    --timeout 120 --plugin "$plugin" >"$dir/client.out" 2>"$dir/client.err" &
  cpid=$!
}
# both processes ended, each with 0
finish() {
  wait "$cpid"
  crc=$?
  cpid=
  wait "$spid"
  src=$?
  spid=
  [ "$crc" -eq 0 ] || fail "the client exited $crc"
  [ "$src" -eq 0 ] || fail "the server exited $src"
}

# the client's file, once its connections moved data
cfile() { ls "$dir/stats"/gdrnet-*-"$cpid".prom 2>/dev/null; }
moving() {
  f=$(cfile) && [ -n "$f" ] &&
    awk '/^gdrnet_conn_requests_total\{/ && $NF + 0 > 10 { ok = 1 } END { exit !ok }' "$f"
}
# the client's row: its messages are all done
finished() { grep -qE '^ +8192 +[0-9]+ ' "$dir/client.out"; }
stalled() { grep -q 'stall: .* connection of this process' "$dir/client.err"; }
moving_or_finished() { moving || finished; }
stalled_or_finished() { stalled || finished; }

iters=5000
run=1
while :; do
  start "$iters"
  wait_for 60 moving_or_finished || fail "the client's stats file never showed traffic"
  if ! finished; then
    kill -STOP "$spid" || fail "cannot stop the server"
    echo "server $spid stopped ($iters iterations)"
    wait_for 30 stalled_or_finished || fail "no stall WARN from the client"
    stalled && ! finished && break
    kill -CONT "$spid" || fail "cannot continue the server"
  fi
  finish
  [ "$run" -lt 4 ] || fail "the client was done before the stop landed in $run runs (the last of $iters iterations)"
  echo "the client was done before the stop landed: again with $((iters * 4)) iterations"
  iters=$((iters * 4))
  run=$((run + 1))
done
warn=$(grep -m1 'stall: .* connection of this process' "$dir/client.err")
echo "WARN: $warn"
peer=$(printf '%s\n' "$warn" | sed -n 's/.* connection of this process ([^)]*) [a-z]* peer rank 3 at \([^ ]*\) over .*/\1/p')
[ -n "$peer" ] || fail "the WARN names no peer, or not as \"peer rank 3 at ADDRESS\" (the server's RANK)"
printf '%s\n' "$warn" | grep -q '(host [^,]*, pid [0-9]*, rank 1)' || fail "the WARN does not name this side's rank 1"
# the peer is the address the client connected to or accepted (its INFO lines, -v)
grep -F "$peer" "$dir/client.err" | grep -v 'stall' | grep -qE 'connected to|accepted|connection (to|from)|<->' ||
  fail "the WARN's peer $peer is not an address the client connected to"
noprog=$(printf '%s\n' "$warn" | sed -n 's/.*no progress for \([0-9.]*\) s.*/\1/p')
awk -v x="$noprog" 'BEGIN { exit !(x != "" && x >= 0.3 && x <= 1.3) }' ||
  fail "the WARN came after $noprog s of no progress, not within GDRNET_STALL_WARN_MS + 1 s"
printf '%s\n' "$warn" | grep -q "over $transport" || fail "the WARN does not name the transport $transport"
printf '%s\n' "$warn" | grep -q 'oldest waiting: .* of [0-9]* bytes, tag [0-9-]*, for' ||
  fail "the WARN does not name the stuck request"

# the oldest request's age grows in the stats file, from one write to the next
age() { awk '/^gdrnet_conn_oldest_request_seconds\{/ && $NF + 0 > m { m = $NF + 0 } END { print m + 0 }' "$(cfile)"; }
stalled_file() { grep -q '^gdrnet_conn_stalled{.*} 1$' "$(cfile)"; }
wait_for 20 stalled_file || fail "the stats file never showed the connection stalled"
a1=$(age)
grown() { awk -v a="$a1" -v b="$(age)" 'BEGIN { exit !(b > a) }'; }
wait_for 20 grown || fail "the oldest request's age did not grow in the stats file ($a1)"
echo "oldest request: $a1 s, then $(age) s"

# gdrnet-top: the client's stalled connections first, the one of the WARN among them
"$top" --once "$dir/stats" >"$dir/top.out" 2>&1 || fail "gdrnet-top --once failed: $(cat "$dir/top.out")"
cat "$dir/top.out"
first=$(grep -m1 -E '^[! ] +[0-9]+ ' "$dir/top.out")
case "$first" in
"! $cpid "*STALLED) ;;
*) fail "gdrnet-top's first connection is not a stalled one of the client: $first" ;;
esac
grep -E '^! +[0-9]+ ' "$dir/top.out" | grep -F " $peer " | grep -q 'STALLED$' ||
  fail "gdrnet-top does not list the connection to $peer as stalled"
# which side waits for which: the client (rank 1) for the server (rank 3), from both files
grep -q "^waits: rank 1 (pid $cpid) waits for rank 3: " "$dir/top.out" ||
  fail "gdrnet-top does not say that rank 1 waits for rank 3"
"$top" --json "$dir/stats" >"$dir/top.json" || fail "gdrnet-top --json failed"
grep -q '"stalled": [1-9]' "$dir/top.json" || fail "gdrnet-top --json counts no stalled connection"

kill -CONT "$spid" || fail "cannot continue the server"
echo "server $spid continued"
finish
grep -q 'mismatch' "$dir/client.out" "$dir/client.err" && fail "data mismatch"
grep -q 'stall: .* resumed after [0-9.]* s' "$dir/client.err" || fail "no \"resumed\" line after SIGCONT"
grep -m1 'resumed after' "$dir/client.err"
n=$(grep -c 'stall: .* connection of this process' "$dir/client.err")
[ "$n" -le 2 ] || fail "$n stall WARNs: one per connection expected"
left=$(ls "$dir/stats")
[ -z "$left" ] || fail "stats files left after a clean exit: $left"
echo "stall: PASS"
