#!/bin/bash
# Device run 13 (2026-12-05): issue 26, goal 1 — the polling's cost at 2 ranks: the cap on polling threads
# (GDRNET_TCP_SPIN_THREADS), polling windows, the pool's size, the proxy's help. Stage: sweep | kv
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O; ST=${1:-sweep}
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
B=$R/build-dev NT=$R/build-dev-nt
[ -f $B/lib/libnccl-net-gdr.so ] || ( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j8 --target nccl-net-gdr ) > $O/build.log 2>&1 &
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $B/lib/libnccl-net-gdr.so $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 45"
P=$B/lib/libnccl-net-gdr.so
NOSPIN="GDRNET_TCP_SPIN_US=0,GDRNET_TCP_SPIN_MAX_US=0"
if [ $ST = sweep ]; then
  $CPG --np 2 --size 128M --iters 100 --reps 2 --out $O/c2 --variant pool,$P --variant nospin,$P,$NOSPIN \
    --variant nospin-nohelp,$P,$NOSPIN,GDRNET_TCP_PROXY_IO=0 --variant cap1,$P,GDRNET_TCP_SPIN_THREADS=1 \
    --variant cap2,$P,GDRNET_TCP_SPIN_THREADS=2 --variant cap3,$P,GDRNET_TCP_SPIN_THREADS=3 \
    --variant cap2-help,$P,GDRNET_TCP_SPIN_THREADS=2,GDRNET_TCP_PROXY_IO=1 \
    --variant s50,$P,GDRNET_TCP_SPIN_US=50,GDRNET_TCP_SPIN_MAX_US=50 --variant io3,$P,GDRNET_TCP_IO_THREADS=3 \
    $NT > $O/c2.txt 2>&1; echo "c2 rc=$?"; grep -v '^# .* rep' $O/c2.txt | tail -30
  echo "at $(( $(date +%s) - t0 )) s"
  $CPG --np 2 --size 32M --iters 200 --reps 2 --out $O/c2m --variant pool,$P --variant nospin,$P,$NOSPIN \
    --variant cap1,$P,GDRNET_TCP_SPIN_THREADS=1 --variant cap2,$P,GDRNET_TCP_SPIN_THREADS=2 \
    $NT > $O/c2m.txt 2>&1; echo "c2m rc=$?"; grep -v '^# .* rep' $O/c2m.txt | tail -16
fi
grep -h "I/O thread" $O/c2*/cap1-rep1.log 2>/dev/null | grep -m1 INFO | cut -c1-500
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c2 c2m kv 2>/dev/null; rm -rf *.log c2 c2m kv )
