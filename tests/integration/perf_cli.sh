#!/bin/sh
# gdrnet-perf's command line, no plugin needed: --help and --version exit 0; every usage error exits 2 and names the
# option and what it accepts; a missing plugin exits 1.
# usage: perf_cli.sh <gdrnet-perf> <version>
set -u
perf=$1
version=$2
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
expect 2 "bad --port '70000' (expected 0..65535)" --local --port 70000
expect 2 "one of --local, --server or --client HOST is required" --sizes 8:8
expect 1 "dlopen(/nonexistent/libx.so)" --local --plugin /nonexistent/libx.so
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "perf_cli: ok"
