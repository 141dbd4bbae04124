#!/bin/bash
# Device run 1 (issue 25 data): NCCL IB on the emulator: plain alltoall (segfault?) and GIN alltoall -R 2 -D 3
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null || echo /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl)
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; echo W=$W; which gdb; ls $W/lib; } > $O/machine.txt 2>&1
( cmake -S $R -B /tmp/be -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=ON -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/be -j8 --target nccl-net-gdr vemu ) > $O/build.log 2>&1 &
( make -C $R/.nccl-tests -j16 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=/tmp/nt NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ) > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"; ls /tmp/nt | head -30
[ -f /tmp/be/lib/verbs-emu/libibverbs.so.1 ] || { tail -30 $O/build.log; exit 1; }
[ -f /tmp/nt/alltoall_perf_mpi ] || { tail -30 $O/nt-build.log; exit 1; }
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/be LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), $(grep -m1 'Avg bus bandwidth' $log)"; }
NT=/tmp/nt
two $O/ib-a2a.log 90 baseline-ib-emulator.env NCCL_DEBUG_SUBSYS=INIT,NET,P2P,COLL -- $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
grep -n -i "segv\|signal\|backtrace\|WARN\|error" $O/ib-a2a.log | head -20
# same with gdb on both ranks, if there is one
if command -v gdb >/dev/null; then
  two $O/ib-a2a-gdb.log 120 baseline-ib-emulator.env -- gdb -q -batch -ex run -ex bt -ex "info registers rip" --args $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
  grep -A25 "SIGSEGV" $O/ib-a2a-gdb.log | head -60
fi
two $O/ib-a2a-nogin.log 90 baseline-ib-emulator.env NCCL_GIN_ENABLE=0 -- $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
two $O/ib-gin.log 90 baseline-ib-emulator.env VEMU_TRACE=/tmp/vtrace NCCL_DEBUG_SUBSYS=INIT,NET,P2P -- $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1 -R 2 -D 3
grep -n -i "WARN\|error\|not supported" $O/ib-gin.log | head -20
ls -la /tmp/vtrace* 2>/dev/null; for f in /tmp/vtrace*; do awk '{print $3,$4,$5}' $f | sort | uniq -c | sort -rn | head -15; tail -5 $f; done 2>/dev/null | head -60
cp /tmp/vtrace* $O/ 2>/dev/null
two $O/gdr-tcp-a2a.log 90 tcp.env -- $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
two $O/gdr-emu-a2a.log 90 emulator.env -- $NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && gzip -f *.log vtrace* 2>/dev/null )
