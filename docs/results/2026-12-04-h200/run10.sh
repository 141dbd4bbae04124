#!/bin/bash
# Device run 10 (2026-12-04): issue 25, a GIN peer moved to the message path when recovery in place fails; the
# plugin's GIN beside NCCL IB's GIN proxy on the emulator; issue 26, the 8-byte latency at 8 ranks after fdb743a.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; cat $R/.device/COMMIT 2>/dev/null; } > $O/machine.txt 2>&1
B=$R/build-dev-full BM=$R/build-dev-main NT=$R/build-dev-nt
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j10 --target nccl-net-gdr vemu ) > $O/build.log 2>&1 &
[ -f $BM/lib/libnccl-net-gdr.so ] || ( cmake -S $R/.device/main-src -B $BM -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $BM -j3 --target nccl-net-gdr ) > $O/build-main.log 2>&1 &
make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi $NT/alltoall_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $B/lib/libnccl-net-gdr.so $B/lib/verbs-emu/libibverbs.so.1 $BM/lib/libnccl-net-gdr.so $NT/alltoall_perf_mpi $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build*.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=$B LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $log), $(grep -m1 'Avg bus bandwidth' $log) $(grep -m1 -o 'Assigned GIN plugin [A-Z_]*' $log) (t=$(( $(date +%s) - t0 )) s)"; }
A2A="$NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 20 -w 2 -c 1 -R 2 -D 3"
GE="NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET GDRNET_STATS_FILE=/tmp/gst-%p.prom"
rm -f /tmp/gst-*.prom
two $O/gin-move.log 90 emulator.env $GE GDRNET_RECOVERY_ATTEMPTS=0 GDRNET_FALLBACK=1 "VEMU_FAULTS=wc:op=write_imm:nth=100:status=retry_exc" -- $A2A
grep -h "message path\|moved\|not recovered" $O/gin-move.log | cut -c1-220 | sort | uniq -c | head -6
grep -h "gdrnet_gin_.*_total" /tmp/gst-*.prom | grep -v " 0$" | head -14; mkdir -p $O/prom-move; cp /tmp/gst-*.prom $O/prom-move/ 2>/dev/null; rm -f /tmp/gst-*.prom
for rep in 1 2; do
  two $O/gin-emu-$rep.log 90 emulator.env $GE -- $A2A
  two $O/ib-gin-$rep.log 90 baseline-ib-emulator.env NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET -- $A2A
done
rm -f /tmp/gst-*.prom
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 60"
$CPG --np 8 --size 8 --iters 10000 --warmup 200 --reps 2 --out $O/l8 --variant main,$BM/lib/libnccl-net-gdr.so --variant pool,$B/lib/libnccl-net-gdr.so $NT > $O/l8.txt 2>&1; echo "l8 rc=$?"; tail -9 $O/l8.txt
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log prom-move l8 2>/dev/null; rm -rf *.log prom-move l8 )
