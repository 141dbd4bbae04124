#!/bin/bash
# Device run 5 (after run 4): issue 25 (GIN through the plugin over TCP and the emulator, NCCL IB's GIN proxy as the baseline, a
# mid-run fault, tests/gpu/gin_putsignal), issue 23 (final main over the emulator with CUDA memory: clean, faults,
# device loss with lazy GDR memory), issue 24 (what NCCL does when the plugin's init fails)
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; cat $R/.device/COMMIT 2>/dev/null; } > $O/machine.txt 2>&1
( cmake -S $R -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/bn -j8 --target nccl-net-gdr vemu ) > $O/build-new.log 2>&1 &
( make -C $R/.nccl-tests -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=/tmp/nt NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ) > $O/nt-build.log 2>&1 &
( nvcc -O2 -std=c++17 -arch=sm_90 -ccbin mpicxx -o /tmp/gin_putsignal $R/tests/gpu/gin_putsignal.cu -I$W/include -L$W/lib -l:libnccl.so.2 -Xlinker -rpath=$W/lib ) > $O/gin-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in /tmp/bn/lib/libnccl-net-gdr.so /tmp/bn/lib/verbs-emu/libibverbs.so.1 /tmp/nt/alltoall_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -5 $O/build-new.log $O/nt-build.log; exit 1; }; done
[ -f /tmp/gin_putsignal ] || { echo "gin_putsignal did not build"; tail -15 $O/gin-build.log; }
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/bn LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), $(grep -m1 'Avg bus bandwidth' $log) $(grep -m1 -o 'Loaded gin plugin[^,]*\|Assigned GIN plugin [A-Z_]*' $log)"; }
A2A="/tmp/nt/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 10 -w 2 -c 1 -R 2 -D 3"
GE="NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET"
# issue 25: the plugin's GIN over TCP after the staging fix, and one more alternated pair on the emulator
for rep in 1 2; do
  two $O/gdr-gin-tcp-$rep.log 90 tcp.env $GE -- $A2A
  two $O/ib-gin-$rep.log 90 baseline-ib-emulator.env $GE -- $A2A
  two $O/gdr-gin-emu-$rep.log 90 emulator.env $GE -- $A2A
done
grep -h "WARN" $O/gdr-gin-tcp-1.log | sort | uniq -c | head -4
if [ -f /tmp/gin_putsignal ]; then
  two $O/putsig-tcp.log 60 tcp.env $GE -- /tmp/gin_putsignal; grep -h "PASS\|FAIL" $O/putsig-tcp.log | head -3
fi
# issue 23: the final main over the emulator with CUDA memory: faults, and a port down and back (the way back)
AR="/tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 10 -w 2 -c 1"
two $O/emu-faults.log 150 emulator.env GDRNET_FALLBACK=1 "VEMU_FAULTS=wc:op=write_imm:nth=300:status=retry_exc;qp_fatal:nth=6;wc:op=write:nth=2000:status=rem_op" -- $AR
two $O/emu-port-back.log 150 emulator.env GDRNET_FALLBACK=1 GDRNET_FAILBACK=1 "VEMU_FAULTS=port_down:dev=vemu0:after_ms=4000:for_ms=3000" -- /tmp/nt/sendrecv_perf_mpi -b 1M -e 64M -f 4 -n 30 -w 2 -c 1
grep -h "move to TCP\|back on RDMA\|returns to RDMA\|moved back" $O/emu-port-back.log | cut -c1-160 | sort | uniq -c | head -4
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log 2>/dev/null; rm -f *.log )
