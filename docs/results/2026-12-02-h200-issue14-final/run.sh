#!/bin/bash
# issue 14: the final TCP defaults (run 1 as is, run 2 with BENCH_ARGS="--reps 3") of main against NCCL Socket, all four collectives, 8 B, KV, DDP (2 reps)
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; uname -r; git -C $R log --oneline -1 2>/dev/null || cat $R/.device/COMMIT; } | tee $O/machine.txt
# (nccl-tests 2.19.6, built beforehand with MPI=1 NAME_SUFFIX=_mpi into /tmp/nt; the project never builds it)
( cmake -S $R -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/b -j4 --target nccl-net-gdr ) > $O/build.log 2>&1 &
wait
[ -f /tmp/b/lib/libnccl-net-gdr.so ] || { echo "plugin build failed"; tail -20 $O/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
left=$(( 575 - ($(date +%s) - t0) ))
timeout $left bash $R/nccl-tests-configs/bench-tcp-vs-socket.sh --plugin /tmp/b/lib/libnccl-net-gdr.so --nccl-lib $W/lib \
  --no-mps --reps 2 --budget $((left - 15)) --run-timeout 50 --ddp ${BENCH_ARGS:-} \
  /tmp/nt $O/bench > $O/bench.log 2>&1
echo "bench rc=$?"
cat $O/bench/summary.txt 2>/dev/null || tail -30 $O/bench.log
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz bench *.log 2>/dev/null; rm -rf bench *.log )
