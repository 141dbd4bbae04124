#!/bin/sh
# The unknown-knob hint names a configuration.md that exists, however the code was reached: gdrnet-doctor run by a
# relative path and found through PATH (glibc's dladdr names the main program by its argv[0]), and the plugin
# dlopened by a relative path (gdrnet-perf --plugin ./libnccl-net-gdr.so). In a build tree that is the repository's
# docs/configuration.md, in an installed tree the installed one: either way a file that is there.
# usage: knob_hint.sh <gdrnet-doctor> <gdrnet-perf> <libnccl-net-gdr.so>
set -u
doctor=$1
perf=$2
plugin=$3
fails=0
# check <what> <output>: the output names "the knobs: PATH" or "(knobs: PATH)" with PATH an existing file
check() {
  doc=$(printf '%s\n' "$2" | sed -n 's/.*knobs: \(\/[^ )]*configuration\.md\).*/\1/p' | head -n 1)
  if [ -z "$doc" ] || [ ! -f "$doc" ]; then
    echo "FAIL: $1: the hint names no existing configuration.md ('$doc'): $(printf '%s\n' "$2" | grep -i knobs | head -n 2)"
    fails=$((fails + 1))
  else
    echo "ok: $1: the knobs: $doc"
  fi
}
ddir=$(dirname "$doctor")
out=$(cd "$ddir" && GDRNET_NO_SUCH_KNOB=1 PATH="$ddir:/usr/bin:/bin" gdrnet-doctor --no-verbs --no-cuda 2>&1)
check "gdrnet-doctor through PATH" "$out"
out=$(cd "$ddir/.." && GDRNET_NO_SUCH_KNOB=1 "./$(basename "$ddir")/gdrnet-doctor" --no-verbs --no-cuda 2>&1)
check "gdrnet-doctor by a relative path" "$out"
pdir=$(dirname "$plugin")
out=$(cd "$pdir" && GDRNET_NO_SUCH_KNOB=1 NCCL_DEBUG=WARN GDRNET_TRANSPORT=tcp "$perf" --plugin "./$(basename "$plugin")" \
  --local --sizes 8:8 --iters 1 2>&1)
check "the plugin dlopened by a relative path" "$out"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "knob_hint: ok"
