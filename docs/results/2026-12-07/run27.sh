#!/bin/bash
# Device runs 27-28 (2026-12-07): build and matrix as run 26 did (run26.sh runs this), and with THREADS=1 the CPU
# and run-queue wait of each thread of every row's processes, and the host's steal (threadcpu.py)
#   run27.sh build                 run23.sh build, and the plugin of an older main (git archive REV into
#                                  build-old-src/, carried) into build-old-src/b
#   run27.sh matrix NAME ROWS REPS VARIANT...   as run23.sh matrix; the variant "old" (alone, or old,K=V,...)
#                                  is build-old-src's build, the others this tree's
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
if [ "$1" = build ]; then
  ( cmake -S $R/build-old-src -B $R/build-old-src/b -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF &&
    cmake --build $R/build-old-src/b -j8 ) > $O/build-old.log 2>&1 &
  bash $R/docs/results/2026-12-07/run23.sh build; rc=$?; wait
  [ -f $R/build-old-src/b/lib/libnccl-net-gdr.so ] || { echo "old build failed"; tail -5 $O/build-old.log; exit 1; }
  # the device returns at most 8 files of $OUT (run 28 lost a matrix to that): the build logs only when it failed
  [ $rc = 0 ] && rm -f $O/build.log $O/build-old.log $O/nt-build.log
  exit $rc
fi
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
B=$R/build-dev; NT=$B/nt; P=$B/be/lib/libnccl-net-gdr.so; PO=$R/build-old-src/b/lib/libnccl-net-gdr.so
name=$2 rows=$3 reps=$4; shift 4; V=()
for v in "$@"; do
  n=${v%%,*}; rest=${v#"$n"}
  if [ "$n" = old ]; then V+=(--variant "$n,$PO$rest"); else V+=(--variant "$n,$P$rest"); fi
done
b=${BUDGET_S:-300}
M=(); TC="python3 $R/docs/results/2026-12-07/threadcpu.py $O/threads-$name.txt --"
[ "${THREADS:-0}" = 1 ] && M=(--mpirun "$TC mpirun --allow-run-as-root" --torchrun "$TC torchrun")
timeout $((b + 120)) python3 $R/bench/tcp-matrix --nccl-lib $W/lib --reps $reps --timeout 90 --budget $b \
  --out $O/tm-$name "${M[@]}" "${V[@]}" --rows $rows $NT > $O/tm-$name.txt 2>&1
echo "tcp-matrix $name rc=$?"; grep -v "^# .* rep [0-9]*: ok" $O/tm-$name.txt
[ -f $O/threads-$name.txt ] && cat $O/threads-$name.txt
(cd $O && tar czf tm-$name.tgz tm-$name && rm -rf tm-$name)
