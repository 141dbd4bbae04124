#!/bin/sh
# mixed_pair.sh PERF PLUGIN VEMU_LIB [auto|mismatch]: a process without a usable RDMA device and one with RDMA (the verbs emulator,
# VEMU_LIB) over loopback, as gdrnet-perf --server and --client, each on its own environment.
#   auto/auto, either one listening: both exit 0 with every byte checked (--check), the connections run over TCP from
#     the start, and each side logs the one INFO line of its connections naming both sides' capabilities;
#   an explicit mismatch (GDRNET_TRANSPORT=rdma against a TCP-only process, tcp against rdma), either way: both
#     processes fail within 2 s of the client's plugin init (not after the 30 s connect timeout), and each one's WARN names
#     both settings in words and the knob to change.
# The TCP-only process is made as on a real host: the RDMA library loads but no port is usable (GDRNET_HCA selects
# none), or the RDMA transport is off (GDRNET_IB_DISABLE=1). The server's first line names its port; reading it
# through a FIFO is the synchronisation (no sleeps). Plugin: $GDRNET_TEST_PLUGIN when set, else PLUGIN.
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
vemu=$3
cases=${4:-auto mismatch}
unset GDRNET_IBVERBS_LIB GDRNET_TRANSPORT GDRNET_IB_DISABLE GDRNET_HCA # each process gets its own below
dir=$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-mixed.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export VEMU_DIR="$dir/vemu"
fail=0
emu="GDRNET_IBVERBS_LIB=$vemu"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# run NAME "SERVER ENV" "CLIENT ENV" [client options]: sets $src, $crc and $ms: from the client's plugin init (its
# "NCCL called" line; gdrnet-perf then waits for the server's, and both connect) to both processes' exits, so that
# neither process start nor plugin init (slow under sanitizers) counts
run() {
  name=$1 senv=$2 cenv=$3
  shift 3
  rm -f "$dir/out"
  mkfifo "$dir/out" || exit 1
  # shellcheck disable=SC2086 # $senv: VAR=value words, split on purpose
  env $senv "$perf" --server --port 0 --timeout 60 -v --plugin "$plugin" >"$dir/out" 2>"$dir/$name.server.err" &
  spid=$!
  exec 3<"$dir/out"
  if ! read -r line <&3; then
    echo "mixed_pair: $name: the server printed nothing" >&2
    cat "$dir/$name.server.err" >&2
    exit 1
  fi
  port=$(printf '%s\n' "$line" | sed -n 's/.*waiting for a client on port \([0-9][0-9]*\).*/\1/p')
  [ -n "$port" ] || { echo "mixed_pair: $name: no port in '$line'" >&2; kill "$spid"; exit 1; }
  cat <&3 >"$dir/$name.server.out" &
  cpid=$!
  rm -f "$dir/cout" "$dir/t-init"
  mkfifo "$dir/cout" || exit 1
  # shellcheck disable=SC2086 # $cenv: likewise
  env $cenv "$perf" --client 127.0.0.1 --port "$port" --timeout 60 -v --plugin "$plugin" "$@" >"$dir/cout" 2>&1 &
  ccpid=$!
  while IFS= read -r l; do
    case $l in *"NCCL called ncclNetPlugin"*) [ -s "$dir/t-init" ] || now_ms >"$dir/t-init" ;; esac
    printf '%s\n' "$l"
  done <"$dir/cout" >"$dir/$name.client.out"
  wait "$ccpid"
  crc=$?
  wait "$spid"
  src=$?
  [ -s "$dir/t-init" ] || { echo "mixed_pair: $name: no init line from the client" >&2; cat "$dir/$name.client.out"; exit 1; }
  ms=$(($(now_ms) - $(cat "$dir/t-init")))
  wait "$cpid"
  exec 3<&-
  cat "$dir/$name.server.out" "$dir/$name.server.err" >"$dir/$name.server"
  echo "== $name: client exit $crc, server exit $src, ${ms} ms"
}

show() {
  echo "--- $1 server:"
  grep -E 'WARN|mixed pair|run complete|error' "$dir/$1.server" | cut -c1-400
  echo "--- $1 client:"
  grep -E 'WARN|mixed pair|error' "$dir/$1.client.out" | cut -c1-400
}

bad() {
  echo "mixed_pair: FAIL: $*" >&2
  fail=1
}

# has FILE TEXT [COUNT]: TEXT (fixed string) on at least COUNT (default 1) lines of FILE
has() {
  n=$(grep -cF -- "$2" "$1")
  [ "$n" -ge "${3:-1}" ]
}

rdma_auto="GDRNET_TRANSPORT=auto (RDMA, TCP)"
tcp_auto="GDRNET_TRANSPORT=auto (TCP only: no usable RDMA device)"

# ---- auto against auto, both orders: every byte checked, the INFO line on each side for both its connections
# (gdrnet-perf connects both ways: each process has a send and a receive connection to the other)
check_auto() { # NAME FILE-OF-RDMA-SIDE FILE-OF-TCP-SIDE
  if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then bad "$1: auto/auto exits $crc/$src"; fi
  grep -q "run complete" "$dir/$1.server" || bad "$1: the server did not complete"
  has "$2" "runs over TCP (mixed pair: this rank $rdma_auto, the peer $tcp_auto)" 2 ||
    bad "$1: the RDMA side's INFO lines"
  has "$3" "mixed pair: this rank $tcp_auto, the peer $rdma_auto: TCP from the start" 2 ||
    bad "$1: the TCP side's INFO lines"
  show "$1"
}
case " $cases " in *" auto "*)
  run auto-rdma-listens "$emu" "$emu GDRNET_HCA=nomatch0" --transport auto --check --sizes 0:4M:16 --iters 20
  check_auto auto-rdma-listens "$dir/auto-rdma-listens.server" "$dir/auto-rdma-listens.client.out"
  run auto-tcp-listens "GDRNET_IB_DISABLE=1" "$emu" --transport auto --check --sizes 0:4M:16 --iters 20
  check_auto auto-tcp-listens "$dir/auto-tcp-listens.client.out" "$dir/auto-tcp-listens.server"
  ;;
esac

# ---- explicit mismatch, both directions: both fail at once, naming both settings and the knob
# (GDRNET_TRANSPORT comes from each process's environment: no --transport, which the client passes to the server)
check_mismatch() { # NAME SETTING-OF-SERVER SETTING-OF-CLIENT
  if [ "$crc" -eq 0 ] || [ "$src" -eq 0 ]; then bad "$1: a mismatch must fail both (exits $crc/$src)"; fi
  [ "$ms" -le 2000 ] || bad "$1: the pair took $ms ms to fail (bound 2000)"
  has "$dir/$1.server" "here $2, there $3; set GDRNET_TRANSPORT=auto where it is forced" ||
    bad "$1: the server's WARN does not name both settings and the knob"
  has "$dir/$1.client.out" "here $3, there $2; set GDRNET_TRANSPORT=auto where it is forced" ||
    bad "$1: the client's WARN does not name both settings and the knob"
  show "$1"
}
case " $cases " in *" mismatch "*)
  run rdma-vs-tcponly "GDRNET_IB_DISABLE=1" "$emu GDRNET_TRANSPORT=rdma" --check --sizes 8:1K --iters 4
  check_mismatch rdma-vs-tcponly "$tcp_auto" "GDRNET_TRANSPORT=rdma (RDMA only)"
  run tcp-vs-rdma "$emu GDRNET_TRANSPORT=rdma" "$emu GDRNET_TRANSPORT=tcp" --check --sizes 8:1K --iters 4
  check_mismatch tcp-vs-rdma "GDRNET_TRANSPORT=rdma (RDMA only)" "GDRNET_TRANSPORT=tcp (TCP only)"
  ;;
esac

[ "$fail" -eq 0 ] && echo "mixed_pair: all cases passed"
exit "$fail"
