#!/bin/bash
# Device run 12: 8-byte all_reduce at 8 ranks, NCCL's algorithm/protocol choice (TUNING) for Socket and the plugin,
# and the plugin with NCCL's GIN off (NCCL_GIN_ENABLE=0: "Assigned GIN plugin GDR" is the one init difference).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])")
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
B=$R/build-dev-full NT=$R/build-dev-nt
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j10 --target nccl-net-gdr ) > $O/build.log 2>&1 &
make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
P=$B/lib/libnccl-net-gdr.so
ls -la $P $NT/all_reduce_perf_mpi || { tail -20 $O/build.log $O/nt-build.log; exit 1; }
python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 40 --np 8 --size 8 --iters 5000 --warmup 200 --reps 1 --out $O/l8 \
  --variant pool,$P --variant pool-nogin,$P,NCCL_GIN_ENABLE=0 $NT > $O/l8.txt 2>&1
echo "l8 rc=$?"; grep -v "^#" $O/l8.txt | tail -6
# the choice NCCL makes for 8 bytes (TUNING prints one line per collective: a short run of its own)
python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 40 --np 8 --size 8 --iters 5 --warmup 1 --reps 1 --out $O/t8 \
  --env NCCL_DEBUG_SUBSYS=INIT,NET,TUNING --variant pool,$P $NT > $O/t8.txt 2>&1
echo "t8 rc=$?"
for f in $O/t8/*.log; do echo "== $f"; grep -E "Bytes -> Algo|latency|Latency" $f | sed -E 's/^vm:[0-9]+:[0-9]+ \[[0-9]\] //; s/opCount [0-9a-f]+//' | sort | uniq -c | sort -rn | head -6; done
( cd $O && tar czf logs.tgz l8 t8 2>/dev/null; rm -rf l8 t8 )
