#!/bin/bash
# Device run 16 (2026-12-05): issue 26 — fewer hand-offs per message where few I/O threads poll: GDRNET_TCP_MIN_CHUNK
# 256K/512K (a 512 KiB step on 2 or 1 streams instead of 4) with 1 or 2 polling threads; KV example and 2 ranks 128 MB.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
B=$R/build-dev NT=$R/build-dev-nt
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j8 --target nccl-net-gdr ) > $O/build.log 2>&1 &
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $B/lib/libnccl-net-gdr.so $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 45"
P=$B/lib/libnccl-net-gdr.so
ALL=GDRNET_TCP_SPIN_THREADS=64
V="--variant cap1,$P --variant cap1-mc256,$P,GDRNET_TCP_MIN_CHUNK=256K --variant cap1-mc512,$P,GDRNET_TCP_MIN_CHUNK=512K --variant cap2,$P,GDRNET_TCP_SPIN_THREADS=2 --variant cap2-mc256,$P,GDRNET_TCP_SPIN_THREADS=2,GDRNET_TCP_MIN_CHUNK=256K --variant allpoll,$P,$ALL"
med() { grep '^# medians' $1 | sed 's/^# medians: //; s/, [0-9.]* us//g'; }
kv() { local log=$1 envf=$2; shift 2; local port=$((29500 + RANDOM % 1000))
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    for n in 0 1; do h=A; [ $n = 1 ] && h=B
      timeout 90 env NCCL_HOSTID=host$h NCCL_NVLS_ENABLE=0 "$@" torchrun --nnodes=2 --node_rank=$n --nproc_per_node=1 \
        --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port $R/nccl-tests-configs/pytorch/kv_transfer.py --device 0 > $log.node$n 2>&1 &
    done; wait )
  echo "$(basename $log): $(cat $log.node0 $log.node1 | grep -A3 'phase' | grep -v phase | grep -v checked | tr -s ' ' | tr '\n' '|')"; }
mkdir -p $O/kv
for rep in 1 2; do
  kv $O/kv/socket-$rep baseline-socket.env
  for c in 1:64K 1:256K 1:512K 2:64K 2:256K 64:64K; do
    kv $O/kv/cap${c%%:*}-mc${c#*:}-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$B/lib:$W/lib GDRNET_TCP_SPIN_THREADS=${c%%:*} GDRNET_TCP_MIN_CHUNK=${c#*:}
  done
done
echo "at $(( $(date +%s) - t0 )) s"
$CPG --np 2 --size 128M --iters 100 --reps 2 --out $O/c2 $V $NT > $O/c2.txt 2>&1; echo "c2 rc=$?"; med $O/c2.txt
grep -h "I/O thread" $O/c2/cap1-rep1.log 2>/dev/null | grep INFO | sort -u | head -2 | cut -c1-700
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c2 c2m c8 kv 2>/dev/null; rm -rf *.log c2 c2m c8 kv )
