#!/bin/bash
# Device run 11: 8-byte all_reduce at 8 ranks, Socket / pool / pool without the proxy's help / polling forced, 3 reps
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
B=$R/build-dev-full NT=$R/build-dev-nt
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j10 --target nccl-net-gdr ) > $O/build.log 2>&1 &
make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
P=$B/lib/libnccl-net-gdr.so
python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 60 --np 8 --size 8 --iters 10000 --warmup 200 --reps 3 --out $O/l8 \
  --variant pool,$P --variant pool-nohelp,$P,GDRNET_TCP_PROXY_IO=0 --variant pool-spin,$P,GDRNET_TCP_SPIN_US=200,GDRNET_TCP_SPIN_MAX_US=1000 $NT > $O/l8.txt 2>&1
echo "l8 rc=$?"; grep -v "^#" $O/l8.txt | tail -13; grep "^# medians" $O/l8.txt
( cd $O && tar czf logs.tgz l8 2>/dev/null; rm -rf l8 )
