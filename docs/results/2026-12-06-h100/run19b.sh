#!/bin/bash
# Device run 19b (2026-12-06, right after run 19 on the same warm machine, nccl-tests reused): run 19's mixed pair
# again with GDRNET_FALLBACK=1 (emulator.env sets 0, and an RDMA rank without its TCP transport cannot meet a
# TCP-only one: run 19's two ranks said so at once, on both sides).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
NT=$R/.nccl-tests/build-mpi
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1
B=$R/build-be  # run 19's /tmp/be does not outlive its command: built again the same way
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=ON && cmake --build $B -j16 --target nccl-net-gdr vemu ) > $O/build.log 2>&1
[ -f $B/lib/libnccl-net-gdr.so ] && [ -x $NT/all_reduce_perf_mpi ] || { echo "build failed"; tail -5 $O/build.log; exit 1; }
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=$B LD_LIBRARY_PATH=$W/lib
( set -a; . $R/nccl-tests-configs/emulator.env; set +a; rm -rf /tmp/vemu-run
  export VEMU_DIR=/tmp/vemu-run GDRNET_TRANSPORT=auto GDRNET_FALLBACK=1
  timeout 90 mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH \
    -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 $NT/all_reduce_perf_mpi -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 : \
    -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 GDRNET_IB_DISABLE=1 $NT/all_reduce_perf_mpi -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 ) > $O/mixed.log 2>&1
echo "mixed rc=$? OK x$(grep -c 'Out of bounds values : 0 OK' $O/mixed.log) wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $O/mixed.log)"
grep -v "NCCL INFO\|^#" $O/mixed.log | grep -E "^ +[0-9]" | head -10
grep -h "using the\|TCP door\|TCP from the start\|Using network\|WARN" $O/mixed.log | cut -c1-240 | sort | uniq -c | head -12
( cd $O && tar czf logs.tgz *.log 2>/dev/null; rm -f *.log )
