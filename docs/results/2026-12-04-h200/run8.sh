#!/bin/bash
# Device run 8 (2026-12-04): issue 26, the I/O pool (branch pool2) against main's per-connection helpers and Socket.
# Stage: 8r (8 ranks), 2r (2 ranks + KV tail). Builds in /build-dev-* of the tree (ignored, kept while warm).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O; ST=${1:-8r}
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
BP=$R/build-dev-pool BM=$R/build-dev-main NT=$R/build-dev-nt
( cmake -S $R -B $BP -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $BP -j6 --target nccl-net-gdr ) > $O/build-pool.log 2>&1 &
[ -f $BM/lib/libnccl-net-gdr.so ] || ( cmake -S $R/.device/main-src -B $BM -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $BM -j4 --target nccl-net-gdr ) > $O/build-main.log 2>&1 &
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $BP/lib/libnccl-net-gdr.so $BM/lib/libnccl-net-gdr.so $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build-*.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 60"
P=$BP/lib/libnccl-net-gdr.so M=$BM/lib/libnccl-net-gdr.so
NOSPIN="GDRNET_TCP_SPIN_US=0,GDRNET_TCP_SPIN_MAX_US=0"
if [ $ST = 8r ]; then
  $CPG --np 8 --size 128M --iters 25 --reps 2 --out $O/c8 --variant main,$M --variant pool,$P \
    --variant pool-noproxy,$P,GDRNET_TCP_PROXY_IO=0 --variant pool4,$P,GDRNET_TCP_IO_THREADS=4 $NT > $O/c8.txt 2>&1; echo "c8 rc=$?"; tail -16 $O/c8.txt
fi
if [ $ST = 8r2 ] || [ $ST = all ]; then
  $CPG --np 8 --size 128M --iters 25 --reps 2 --out $O/c8 --variant main,$M --variant pool,$P \
    --variant pool4,$P,GDRNET_TCP_IO_THREADS=4 --variant pool8,$P,GDRNET_TCP_IO_THREADS=8 --variant pool16,$P,GDRNET_TCP_IO_THREADS=16 \
    $NT > $O/c8.txt 2>&1; echo "c8 rc=$?"; tail -18 $O/c8.txt
  $CPG --np 8 --size 8 --iters 3000 --warmup 200 --reps 2 --out $O/l8 --variant main,$M --variant pool,$P --variant pool8,$P,GDRNET_TCP_IO_THREADS=8 \
    $NT > $O/l8.txt 2>&1; echo "l8 rc=$?"; tail -12 $O/l8.txt
fi
if [ $ST = 2r ] || [ $ST = all ]; then
  $CPG --np 2 --size 128M --iters 100 --reps 2 --out $O/c2 --variant main,$M --variant pool,$P --variant pool-help,$P,GDRNET_TCP_PROXY_IO=1 \
    $NT > $O/c2.txt 2>&1; echo "c2 rc=$?"; tail -14 $O/c2.txt
fi
if [ $ST = kv ]; then
  kv() { local log=$1 envf=$2; shift 2; local port=$((29500 + RANDOM % 1000))
    ( set -a; . $R/nccl-tests-configs/$envf; set +a
      for n in 0 1; do h=A; [ $n = 1 ] && h=B
        timeout 90 env NCCL_HOSTID=host$h NCCL_NVLS_ENABLE=0 "$@" torchrun --nnodes=2 --node_rank=$n --nproc_per_node=1 \
          --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port $R/nccl-tests-configs/pytorch/kv_transfer.py --device 0 > $log.node$n 2>&1 &
      done; wait )
    echo "$(basename $log): $(grep -A3 'phase' $log.node0 | grep -v phase | tr -s ' ' | tr '\n' '|')"; }
  mkdir -p $O/kv
  for rep in 1 2; do
    kv $O/kv/socket-$rep baseline-socket.env
    kv $O/kv/pool-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$BP/lib:$W/lib
    kv $O/kv/main-$rep tcp.env NCCL_NET_PLUGIN=$M LD_LIBRARY_PATH=$BM/lib:$W/lib
  done
  $CPG --np 8 --size 8 --iters 10000 --warmup 200 --reps 2 --out $O/l8 --variant main,$M --variant pool,$P $NT > $O/l8.txt 2>&1; echo "l8 rc=$?"; tail -9 $O/l8.txt
  $CPG --np 2 --size 32M --iters 200 --reps 2 --out $O/c2 --variant main,$M --variant pool,$P $NT > $O/c2.txt 2>&1; echo "c2-32M rc=$?"; tail -9 $O/c2.txt
fi
if [ $ST = r9 ]; then
  $CPG --np 8 --size 8 --iters 10000 --warmup 200 --reps 2 --out $O/l8 --variant main,$M --variant pool,$P $NT > $O/l8.txt 2>&1; echo "l8 rc=$?"; tail -9 $O/l8.txt
  $CPG --np 2 --size 128M --iters 100 --reps 2 --out $O/c2 --variant pool,$P --variant pool-nospin,$P,$NOSPIN \
    --variant pool-nospin-io2,$P,$NOSPIN,GDRNET_TCP_IO_THREADS=2 $NT > $O/c2.txt 2>&1; echo "c2 rc=$?"; tail -10 $O/c2.txt
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
    kv $O/kv/pool-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$BP/lib:$W/lib
    kv $O/kv/pool-spin1000-$rep tcp.env NCCL_NET_PLUGIN=$P LD_LIBRARY_PATH=$BP/lib:$W/lib GDRNET_TCP_SPIN_US=1000
  done
fi
grep -h "I/O thread\|helper" $O/c*/pool-rep1.log 2>/dev/null | grep -m2 INFO | cut -c1-400
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c8 c2 l8 kv 2>/dev/null; rm -rf *.log c8 c2 l8 kv )
