#!/bin/sh
# The HCA filter is checked against the ports the plugin itself would open, through the same verbs library
# (GDRNET_IBVERBS_LIB, here the verbs emulator, which sysfs knows nothing of): NCCL_IB_HCA=mlx5_9 is a FAIL naming the
# ports there are, =vemu0 selects vemu0:1, and the outcome line follows (RDMA on vemu0:1, or TCP and why).
# usage: hca_verbs.sh <gdrnet-doctor> <verbs emulator libibverbs.so.1>   (exit 77 when the emulator was not built)
set -u
doctor=$1
emu=$2
[ -e "$emu" ] || {
  echo "no verbs emulator at $emu: skipped"
  exit 77
}
command -v python3 >/dev/null || {
  echo "python3 not found: skipped"
  exit 77
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hca-verbs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fails=0
# check <NCCL_IB_HCA> <hca status> <text of the hca finding> <text of the outcome>
check() {
  VEMU_DIR=$tmp VEMU_DEVICES=vemu0:roce GDRNET_IBVERBS_LIB=$emu NCCL_IB_HCA=$1 "$doctor" --json --no-cuda >"$tmp/out.json"
  if python3 - "$tmp/out.json" "$2" "$3" "$4" <<'PY'; then echo "ok: NCCL_IB_HCA=$1"; else fails=$((fails + 1)); fi
import json, sys
d = json.load(open(sys.argv[1]))
want_status, want_text, want_outcome = sys.argv[2:5]
h = [f for f in d["findings"] if f["id"] == "hca"]
text = json.dumps(h)
ok = len(h) == 1 and h[0]["status"] == want_status and want_text in text and want_outcome in d["outcome"]
if not ok:
    print("FAIL: hca findings %s; outcome %r; wanted %s with %r and outcome with %r" % (text, d["outcome"], want_status, want_text, want_outcome))
sys.exit(0 if ok else 1)
PY
}
check mlx5_9 FAIL "selects none of the ACTIVE ports the plugin opens" "run over TCP"
check mlx5_9 FAIL "lists: vemu0:1 (ACTIVE)" "GDR off: NCCL_IB_HCA=mlx5_9 selects no ACTIVE RDMA port"
check vemu0 OK "NCCL_IB_HCA=vemu0 selects vemu0:1" "run over RDMA on vemu0:1"
[ "$fails" -eq 0 ] || exit 1
echo "hca_verbs: ok"
