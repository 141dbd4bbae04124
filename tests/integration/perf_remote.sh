#!/bin/sh
# perf_remote.sh PERF PLUGIN [client options...]: gdrnet-perf --server on a free port and gdrnet-perf
# --client against it on this host (their own TCP bootstrap carries the handle). Both must exit 0. The
# server's first line names its port; reading it through a FIFO is the synchronisation (no sleeps). The server then
# names the client and its transport and prints the client's table.
# Plugin: $GDRNET_TEST_PLUGIN when set, else PLUGIN.
set -u
perf=$1
plugin=${GDRNET_TEST_PLUGIN:-$2}
shift 2
dir=$(mktemp -d "${TMPDIR:-/tmp}/gdrnet-perf-remote.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/out" || exit 1
"$perf" --server --port 0 --timeout 60 --plugin "$plugin" >"$dir/out" 2>"$dir/server.err" &
spid=$!
exec 3<"$dir/out"
if ! read -r line <&3; then
  echo "perf_remote: the server printed nothing" >&2
  cat "$dir/server.err" >&2
  exit 1
fi
echo "server: $line"
port=$(printf '%s\n' "$line" | sed -n 's/.*waiting for a client on port \([0-9][0-9]*\).*/\1/p')
if [ -z "$port" ]; then
  echo "perf_remote: no port in the server's first line" >&2
  kill "$spid" 2>/dev/null
  exit 1
fi
cat <&3 >"$dir/server.out" &
cpid=$!
"$perf" --client 127.0.0.1 --port "$port" --plugin "$plugin" "$@" >"$dir/client.out"
crc=$?
cat "$dir/client.out"
# a client that failed may have left the server waiting for it
[ "$crc" -eq 0 ] || kill "$spid" 2>/dev/null
wait "$spid"
src=$?
wait "$cpid" # the rest of the server's output is in server.out once cat has seen EOF
echo "--- server output:"
cat "$dir/server.out" "$dir/server.err"
echo "client exit $crc, server exit $src"
[ "$crc" -eq 0 ] && [ "$src" -eq 0 ] && grep -q "run complete" "$dir/server.out" || exit 1
# as perftest does, the server prints the client, the transport it chose and the same result table as the client
rows() { grep '^  *[0-9]' "$1"; }
if ! grep -q '^# gdrnet-perf server: client 127\.0\.0\.1 port [0-9]* connected' "$dir/server.out" ||
  ! grep -q '^# transport \(tcp\|rdma\), chosen by the plugin: ' "$dir/server.out" ||
  [ -z "$(rows "$dir/client.out")" ] || [ "$(rows "$dir/client.out")" != "$(rows "$dir/server.out")" ]; then
  echo "perf_remote: the server did not print the client, its transport and the client's table" >&2
  exit 1
fi
