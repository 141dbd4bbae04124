#!/bin/bash
# Device run 22 (2026-12-06): GIN all-to-all through the plugin after the gin/ restructure (ops table, shared.c,
# records by table, QPs through rdma/'s QP API): over the verbs emulator and over TCP, #wrong must be 0.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
B=$R/build-dev; NT=$B/nt; t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; } > $O/machine.txt 2>&1; cat $O/machine.txt
mkdir -p $B/nccl/lib; ln -sfn $W/include $B/nccl/include
ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so.2
( make -C $R/.nccl-tests/src -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=$B/nccl \
    CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/alltoall_perf_mpi ) > $O/nt-build.log 2>&1 &
( cmake -S $R -B $B/be -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=ON && cmake --build $B/be -j16 --target nccl-net-gdr vemu ) > $O/build.log 2>&1
wait
[ -x $NT/alltoall_perf_mpi ] && [ -f $B/be/lib/libnccl-net-gdr.so ] || { echo "build failed"; tail -5 $O/*.log; exit 1; }
nvidia-cuda-mps-control -d 2>/dev/null || true
A2A="$NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 20 -w 2 -c 1 -R 2 -D 3"
for rep in 1 2; do for envf in emulator.env tcp.env; do
  log=$O/gin-${envf%.env}-$rep.log
  ( set -a; export NET_GDR_BUILD_DIR=$B/be; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    export LD_LIBRARY_PATH=$W/lib:$LD_LIBRARY_PATH NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET
    timeout 90 mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 $A2A : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 $A2A ) > $log 2>&1
  echo "$(basename $log): rc=$?, OK x$(grep -c 'Out of bounds values : 0 OK' $log), wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $log), $(grep -m1 'Avg bus bandwidth' $log), $(grep -m1 -o 'Assigned GIN plugin [A-Za-z_]*' $log)"
  awk '$1 ~ /^[0-9]+$/ && NF > 10 {print "   ", $1, $6, $8}' $log | head -4
done; done
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log && rm -f *.log )
