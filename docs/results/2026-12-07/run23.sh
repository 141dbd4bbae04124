#!/bin/bash
# Device run 23 (2026-12-07): the TCP transport against NCCL Socket, bench/tcp-matrix with a time budget.
#   run23.sh build                        as run 20 (docs/results/2026-12-06-h100/run20.sh build)
#   run23.sh matrix NAME ROWS REPS VARIANT...   bench/tcp-matrix on ROWS (NAME or NAME,K=V,... variants of the
#                                         one plugin) into $OUT/tm-NAME.txt and $OUT/tm-NAME.tgz (its logs);
#                                         it starts no run group that would end after BUDGET_S (default 300)
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
[ "$1" = build ] && exec bash $R/docs/results/2026-12-06-h100/run20.sh build
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
B=$R/build-dev; NT=$B/nt; P=$B/be/lib/libnccl-net-gdr.so
name=$2 rows=$3 reps=$4; shift 4; V=()
for v in "$@"; do n=${v%%,*}; rest=${v#"$n"}; V+=(--variant "$n,$P$rest"); done
b=${BUDGET_S:-300}
timeout $((b + 120)) python3 $R/bench/tcp-matrix --nccl-lib $W/lib --reps $reps --timeout 90 --budget $b \
  --out $O/tm-$name "${V[@]}" --rows $rows $NT > $O/tm-$name.txt 2>&1
echo "tcp-matrix $name rc=$?"; grep -v "^# .* rep [0-9]*: ok" $O/tm-$name.txt
(cd $O && tar czf tm-$name.tgz tm-$name && rm -rf tm-$name)
