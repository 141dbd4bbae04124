#!/bin/bash
# Device run 31 (2026-12-08): build as run 27 did, probe the host's steal under one of the plugin's runs (sendrecv
# 8 MiB, 1 rep), then on a host that steals (1 % or more) the inline variant against the default, else the whole
# matrix. Inline: every NCCL step (at most 512 KiB with tcp.env) written and read on the control stream by NCCL's
# proxy thread, as NCCL Socket does at its defaults (no helper thread): no hand-over to an I/O thread at all.
#   [E_ROWS=...] [D_ROWS=...] run31.sh BUDGET_S    (the matrix's --budget; the build and the probe take about 60 s
#   more; E_ROWS: the rows on a host that steals, D_ROWS: else)
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
M=$R/docs/results/2026-12-07/run27.sh
bash $M build || exit 1
BUDGET_S=30 bash $M matrix probe sr8m 1 default > /dev/null 2>&1
rm -f $O/tm-probe.tgz # the device returns at most 8 files of $OUT
s=$(sed -n 's/^# sr8m default rep 1: ok, host steal \([0-9.]*\) %.*/\1/p' $O/tm-probe.txt)
echo "probe: the plugin's sendrecv 8 MiB run read ${s:-no} steal"; grep "^sr8m\|steal" $O/tm-probe.txt
if [ -n "$s" ] && awk -v s="$s" 'BEGIN { exit !(s >= 1.0) }'; then
  BUDGET_S=${1:-200} bash $M matrix e ${E_ROWS:-sr1m,a2a1m,ar512k,kv,ar128m} 2 default \
    inl,GDRNET_TCP_INLINE=512K,GDRNET_TCP_CTS_INLINE=524288
else
  BUDGET_S=${1:-200} bash $M matrix d ${D_ROWS:-all} 2 default
fi
