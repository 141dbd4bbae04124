#!/bin/bash
# Device run 6 (2026-12-04): the emulator's frame trailer (void frames) with CUDA memory: the plugin over the
# emulator clean and with a device lost on both ranks, stock NCCL IB over the emulator, the plugin's GIN alltoall.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; git -C $R log --oneline -1 2>/dev/null; } > $O/machine.txt 2>&1
( cmake -S $R -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/bn -j10 --target nccl-net-gdr vemu ) > $O/build-new.log 2>&1 &
( make -C $R/.nccl-tests/src -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=/tmp/nt NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" /tmp/nt/all_reduce_perf_mpi /tmp/nt/alltoall_perf_mpi ) > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in /tmp/bn/lib/libnccl-net-gdr.so /tmp/bn/lib/verbs-emu/libibverbs.so.1 /tmp/nt/all_reduce_perf_mpi /tmp/nt/alltoall_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build-new.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/bn LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $log), $(grep -m1 'Avg bus bandwidth' $log) $(grep -m1 -o 'Assigned GIN plugin [A-Z_]*' $log) (t=$(( $(date +%s) - t0 )) s)"; }
AR="/tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 10 -w 2 -c 1"
two $O/gdr-emu.log 60 emulator.env -- $AR
two $O/ib-emu.log 60 baseline-ib-emulator.env -- $AR
two $O/gdr-emu-devloss.log 70 emulator.env GDRNET_FALLBACK=1 GDRNET_FAILBACK=1 "VEMU_FAULTS=device_fatal:dev=vemu0:after_ms=2500:for_ms=1500" -- /tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 40 -w 2 -c 1
grep -h "moves to TCP\|back on RDMA\|now runs over TCP" $O/gdr-emu-devloss.log | cut -c1-170 | sort | uniq -c | head -4
two $O/gdr-gin-emu.log 60 emulator.env NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET -- /tmp/nt/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 10 -w 2 -c 1 -R 2 -D 3
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log 2>/dev/null; rm -f *.log )
