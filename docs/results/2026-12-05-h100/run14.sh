#!/bin/bash
# Device run 14 (2026-12-05): issue 26 — the new TCP defaults where a rank has >= 8 cores (one polling I/O thread,
# GDRNET_TCP_SPIN_THREADS=1; no proxy help) against the old ones (every I/O thread polls), polling off, and Socket:
# 2 ranks 128 MB and 32 MB (3 reps), the KV example's lone-block tail (2 reps), 8 ranks 128 MB (1 rep).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
B=$R/build-dev NT=$R/build-dev-nt
rm -rf $B
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j8 --target nccl-net-gdr ) > $O/build.log 2>&1 &
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $B/lib/libnccl-net-gdr.so $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 45"
P=$B/lib/libnccl-net-gdr.so
ALL=GDRNET_TCP_SPIN_THREADS=64 NOPOLL="GDRNET_TCP_SPIN_US=0,GDRNET_TCP_SPIN_MAX_US=0"
V="--variant new,$P --variant allpoll,$P,$ALL --variant nopoll,$P,$NOPOLL"
med() { grep '^# medians' $1 | sed 's/^# medians: //; s/, [0-9.]* us//g'; }
$CPG --np 2 --size 128M --iters 100 --reps 3 --out $O/c2 $V $NT > $O/c2.txt 2>&1; echo "c2 rc=$?"; med $O/c2.txt
$CPG --np 2 --size 32M --iters 200 --reps 3 --out $O/c2m $V $NT > $O/c2m.txt 2>&1; echo "c2m rc=$?"; med $O/c2m.txt
echo "at $(( $(date +%s) - t0 )) s"
kv() { local log=$1 envf=$2; shift 2; local port=$((29500 + RANDOM % 1000))
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    for n in 0 1; do h=A; [ $n = 1 ] && h=B
      timeout 90 env NCCL_HOSTID=host$h NCCL_NVLS_ENABLE=0 "$@" torchrun --nnodes=2 --node_rank=$n --nproc_per_node=1 \
        --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port $R/nccl-tests-configs/pytorch/kv_transfer.py --device 0 > $log.node$n 2>&1 &
    done; wait )
  echo "$(basename $log): $(cat $log.node0 $log.node1 | grep -A3 'phase' | grep -v phase | tr -s ' ' | tr '\n' '|')"; }
mkdir -p $O/kv
for rep in 1 2; do
  kv $O/kv/socket-$rep baseline-socket.env
  kv $O/kv/new-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$B/lib:$W/lib
  kv $O/kv/allpoll-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$B/lib:$W/lib $ALL
  kv $O/kv/nopoll-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$B/lib:$W/lib GDRNET_TCP_SPIN_US=0 GDRNET_TCP_SPIN_MAX_US=0
done
echo "at $(( $(date +%s) - t0 )) s"
$CPG --np 8 --size 128M --iters 25 --reps 1 --out $O/c8 --variant new,$P $NT > $O/c8.txt 2>&1; echo "c8 rc=$?"; med $O/c8.txt
grep -h "I/O thread" $O/c2/new-rep1.log $O/c8/new-rep1.log 2>/dev/null | grep INFO | sort -u | head -2 | cut -c1-700
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c2 c2m c8 kv 2>/dev/null; rm -rf *.log c2 c2m c8 kv )
