#!/bin/bash
# Device run 7 (2026-12-04): issue 25, the one-sided RDMA path recovering in place under the GIN all-to-all
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
( cmake -S $R -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/bn -j10 --target nccl-net-gdr vemu ) > $O/build-new.log 2>&1 &
( make -C $R/.nccl-tests/src -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=/tmp/nt NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" /tmp/nt/alltoall_perf_mpi ) > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in /tmp/bn/lib/libnccl-net-gdr.so /tmp/bn/lib/verbs-emu/libibverbs.so.1 /tmp/nt/alltoall_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build-new.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/bn LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $log), $(grep -m1 'Avg bus bandwidth' $log) $(grep -m1 -o 'Assigned GIN plugin [A-Z_]*' $log) (t=$(( $(date +%s) - t0 )) s)"; }
A2A="/tmp/nt/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 20 -w 2 -c 1 -R 2 -D 3"
GE="NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET GDRNET_STATS_FILE=/tmp/gst-%p.prom"
two $O/gin-clean.log 60 emulator.env $GE -- $A2A
two $O/gin-rec-imm.log 60 emulator.env $GE "VEMU_FAULTS=wc:op=write_imm:nth=100:status=retry_exc" -- $A2A
grep -h "recovers in place\|recovered in place\|not recovered" $O/gin-rec-imm.log | cut -c1-200 | sort | uniq -c | head -6
two $O/gin-rec-write.log 60 emulator.env $GE "VEMU_FAULTS=wc:op=write:nth=200:status=rem_op;wc:op=write_imm:nth=400:status=retry_exc" -- $A2A
grep -h "recovers in place\|recovered in place\|not recovered" $O/gin-rec-write.log | cut -c1-200 | sort | uniq -c | head -6
grep -h "gdrnet_gin_recoveries_total\|gdrnet_gin_replayed_total\|gdrnet_gin_errors_total" /tmp/gst-*.prom | grep -v " 0$" | head -12
cp /tmp/gst-*.prom $O/ 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log *.prom 2>/dev/null; rm -f *.log *.prom )
