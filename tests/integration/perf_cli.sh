#!/bin/sh
# gdrnet-perf's command line, no plugin needed: --help and --version exit 0; every usage error exits 2 and names the
# option and what it accepts; a missing plugin exits 1. With the plugin (third argument): the client's errors, the
# --json/--csv paths, the counters files and lines.
# usage: perf_cli.sh <gdrnet-perf> <version> [<libnccl-net-gdr.so>]
set -u
perf=$1
version=$2
plugin=${3:-}
fails=0
# expect <status> <text the output must contain> <args...>
expect() {
  want=$1
  text=$2
  shift 2
  out=$("$perf" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "FAIL: gdrnet-perf $*: exit $rc, expected $want; output: $out"
    fails=$((fails + 1))
  elif ! printf '%s\n' "$out" | grep -qF -- "$text"; then
    echo "FAIL: gdrnet-perf $*: the output does not say \"$text\": $out"
    fails=$((fails + 1))
  else
    echo "ok: gdrnet-perf $* -> $rc: $(printf '%s\n' "$out" | head -n 1)"
  fi
}
expect 0 "--local" --help
expect 0 "gdrnet-perf $version" --version
expect 0 "--version" --help
expect 2 "unknown option '--bogus'" --bogus
expect 2 "unknown option '-x'" -x
expect 2 "option --transport needs a value: rdma, tcp or auto" --local --transport
expect 2 "option --client needs a value: the server's host name" --client
expect 2 "option --sizes needs a value: MIN:MAX[:FACTOR]" --local --sizes
expect 2 "bad --transport 'ib' (expected rdma, tcp or auto)" --local --transport ib
expect 2 "bad --sizes '8:zz': MAX is not a size (expected MIN:MAX[:FACTOR]: byte counts with optional K/M/G suffix" --local --sizes 8:zz
expect 2 "bad --sizes 'x': MIN is not a size" --local --sizes x
expect 2 "MAX < MIN" --local --sizes 1M:8
expect 2 "FACTOR must be an integer in 2..1024" --local --sizes 8:1M:1
expect 2 "at most 1G per message" --local --sizes 8:2G
expect 2 "bad --timeout 'x' (expected seconds, more than 0 and at most 86400" --local --timeout x
expect 2 "bad --timeout '0'" --local --timeout 0
expect 2 "bad --duration '5000' (expected seconds, more than 0 and at most 3600" --local --duration 5000
expect 2 "bad --inflight '99' (expected 1..32)" --local --inflight 99
expect 2 "bad --reps '0' (expected 1..1000)" --local --reps 0
expect 2 "bad --port '70000' (expected 0..65535)" --local --port 70000
expect 2 "one of --local, --server or --client HOST is required" --sizes 8:8
expect 1 "dlopen(/nonexistent/libx.so)" --local --plugin /nonexistent/libx.so
# --client: a name that does not resolve says so (not "No route to host"); a refused connection gives up after
# --timeout (not a fixed 30 s) and says to start the server
expect 1 "cannot resolve host 'no.such.host.invalid'" --client no.such.host.invalid --timeout 2
t0=$(date +%s)
expect 1 "127.0.0.1:1: connection refused: is the server running? (refused for 1 s, --timeout;" --client 127.0.0.1 --port 1 --timeout 1
t1=$(date +%s)
if [ $((t1 - t0)) -gt 10 ]; then
  echo "FAIL: --client 127.0.0.1 --port 1 --timeout 1 took $((t1 - t0)) s"
  fails=$((fails + 1))
fi
# --json/--csv FILE are checked before the run (the plugin is never loaded here), "-" is stdout
expect 2 "--json '/nonexistent/dir/x.json': the directory /nonexistent/dir does not exist" --local --plugin /nonexistent/libx.so --json /nonexistent/dir/x.json
expect 2 "--csv '/': is a directory" --local --plugin /nonexistent/libx.so --csv /
expect 2 "--json - and --csv - both name stdout" --local --json - --csv -

if [ -n "$plugin" ]; then
  tmp=$(mktemp -d) || exit 1
  trap 'rm -rf "$tmp"' EXIT
  run() { TMPDIR=$tmp/stats "$perf" --plugin "$plugin" --local --transport tcp --sizes 8:64 --iters 2 "$@"; }
  mkdir "$tmp/stats" || exit 1
  # --json -: stdout is the JSON document alone, the table is on stderr
  if run --json - >"$tmp/out.json" 2>"$tmp/err" && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rows"][-1]["bytes"] == 64' "$tmp/out.json" && grep -q "# counters (process A)" "$tmp/err"; then
    echo "ok: --json - writes the JSON alone to stdout"
  else
    echo "FAIL: --json -: stdout is not the JSON document: $(head -c 300 "$tmp/out.json"); stderr: $(head -c 300 "$tmp/err")"
    fails=$((fails + 1))
  fi
  [ ! -e ./- ] || { echo "FAIL: --json - wrote a file named '-'"; fails=$((fails + 1)); }
  # something that is not a gdrnet-perf server accepts and closes: the client says so and what to check, at once
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
print(s.getsockname()[1], flush=True)
s.settimeout(20)
for _ in range(2):
    c, _ = s.accept()
    c.close()' >"$tmp/port" &
  fake=$!
  i=0
  while [ ! -s "$tmp/port" ] && [ "$i" -lt 100 ]; do
    sleep 0.1
    i=$((i + 1))
  done
  fport=$(cat "$tmp/port")
  expect 1 "bootstrap: the server 127.0.0.1:$fport closed the connection during setup" --plugin "$plugin" \
    --transport tcp --client 127.0.0.1 --port "$fport" --timeout 5
  expect 1 "is a gdrnet-perf --server of this version listening on that port, not another program?" --plugin "$plugin" \
    --transport tcp --client 127.0.0.1 --port "$fport" --timeout 1
  kill "$fake" 2>/dev/null
  wait "$fake" 2>/dev/null
  # a setup error (after the plugin's init): the error alone, no zero "# counters" lines, no counters file behind
  run --dev 5 >"$tmp/out" 2>&1
  rc=$?
  left=$(ls "$tmp/stats")
  if [ "$rc" -ne 1 ] || ! grep -qF -- "--dev 5: the plugin has" "$tmp/out" || [ -n "$left" ] ||
    grep -q "# counters" "$tmp/out" || [ "$(wc -l <"$tmp/out")" -ne 1 ]; then
    echo "FAIL: --local --dev 5: exit $rc, left in TMPDIR: '$left'; output: $(cat "$tmp/out")"
    fails=$((fails + 1))
  else
    echo "ok: --local --dev 5 -> 1, the error alone, no counters file left"
  fi
  # the plugin's init fails: no "# counters" lines (there is nothing to count), no file left
  GDRNET_SOCKET_IFNAME=nosuchif run >"$tmp/out" 2>&1
  rc=$?
  left=$(ls "$tmp/stats")
  if [ "$rc" -ne 1 ] || grep -q "# counters" "$tmp/out" || ! grep -q "init() returned" "$tmp/out" || [ -n "$left" ]; then
    echo "FAIL: init failure: exit $rc, left in TMPDIR: '$left'; output: $(cat "$tmp/out")"
    fails=$((fails + 1))
  else
    echo "ok: init failure -> 1, no # counters lines, no file left"
  fi
  # NCCL_DEBUG=INFO: the variables gdrnet-perf set are said to be its own, and interval 0 means "at each close only"
  NCCL_DEBUG=INFO run >"$tmp/out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "GDRNET_STATS_FILE set by gdrnet-perf to $tmp/stats/gdrnet-perf-stats-%p.prom" "$tmp/out" ||
    grep -q "GDRNET_STATS_FILE set by environment" "$tmp/out" || ! grep -q "(Prometheus text format) at each close only" "$tmp/out" ||
    grep -q "every 0s" "$tmp/out"; then
    echo "FAIL: NCCL_DEBUG=INFO: exit $rc; output: $(grep -i stats "$tmp/out")"
    fails=$((fails + 1))
  else
    echo "ok: NCCL_DEBUG=INFO names gdrnet-perf as the setter of GDRNET_STATS_FILE, 'at each close only'"
  fi
  # a user's own GDRNET_STATS_FILE is "set by environment" and kept
  GDRNET_STATS_FILE=$tmp/mine-%p.prom NCCL_DEBUG=INFO run >"$tmp/out" 2>&1
  set -- "$tmp"/mine-*.prom
  if ! grep -q "GDRNET_STATS_FILE set by environment to $tmp/mine-%p.prom" "$tmp/out" || [ ! -e "$1" ]; then
    echo "FAIL: a user's GDRNET_STATS_FILE: $(grep -i stats "$tmp/out")"
    fails=$((fails + 1))
  else
    echo "ok: a user's GDRNET_STATS_FILE is the user's, and kept"
  fi
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "perf_cli: ok"
