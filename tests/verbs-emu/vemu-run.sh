#!/bin/sh
# Run a command (and everything it starts) on the verbs emulator.
#   vemu-run.sh [--lib DIR] [--dir DIR] [--keep] [--] command [args...]
# --lib DIR   directory holding the emulator's libibverbs.so.1 (default: ../../build/lib/verbs-emu next to this
#             script's repository, or $VEMU_LIB_DIR)
# --dir DIR   VEMU_DIR to use (default: a fresh temporary directory, removed afterwards unless --keep)
# Other VEMU_* variables (VEMU_DEVICES, VEMU_FAULTS, VEMU_TRACE, ...) pass through from the environment.
# With mpirun, forward the variables to the ranks: mpirun -x LD_LIBRARY_PATH -x VEMU_DIR -x VEMU_DEVICES ...
set -eu
here=$(cd "$(dirname "$0")" && pwd)
lib=${VEMU_LIB_DIR:-$here/../../build/lib/verbs-emu}
dir=
keep=0
while [ $# -gt 0 ]; do
	case $1 in
	--lib) lib=$2; shift 2 ;;
	--dir) dir=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	--) shift; break ;;
	-h|--help) sed -n '2,9p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--lib DIR] [--dir DIR] [--keep] [--] command [args...]" >&2; exit 2; }
[ -e "$lib/libibverbs.so.1" ] || { echo "vemu-run: no libibverbs.so.1 in $lib (build the 'vemu' target)" >&2; exit 2; }
lib=$(cd "$lib" && pwd)
if [ -z "$dir" ]; then
	dir=$(mktemp -d "${TMPDIR:-/tmp}/vemu.XXXXXX")
	[ $keep -eq 1 ] || trap 'rm -rf "$dir"' EXIT INT TERM
fi
export VEMU_DIR=$dir
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
"$@"
