#!/bin/bash
# Device run 2: issue 26 (I/O pool vs main 55c0917 vs Socket, 2 and 8 ranks), issue 23 (emulator + CUDA, faults),
# issue 25 (NCCL IB's GIN proxy on the emulator with atomics)
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; git -C $R log --oneline -1 2>/dev/null; cat $R/.device/COMMIT 2>/dev/null; } > $O/machine.txt 2>&1
( cmake -S $R -B /tmp/bn -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/bn -j6 --target nccl-net-gdr vemu ) > $O/build-new.log 2>&1 &
( cmake -S $R/.device/old-src -B /tmp/bo -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/bo -j4 --target nccl-net-gdr ) > $O/build-old.log 2>&1 &
( make -C $R/.nccl-tests -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=/tmp/nt NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" ) > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in /tmp/bn/lib/libnccl-net-gdr.so /tmp/bn/lib/verbs-emu/libibverbs.so.1 /tmp/bo/lib/libnccl-net-gdr.so /tmp/nt/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -5 $O/build-*.log $O/nt-build.log; exit 1; }; done
nvidia-cuda-mps-control -d 2>/dev/null || true
export LD_LIBRARY_PATH=$W/lib
CPG="python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 60"
# issue 26: 2 ranks, 128 MB: the pool (new) and main 55c0917 (old), each against Socket
$CPG --plugin /tmp/bn/lib/libnccl-net-gdr.so --np 2 --size 128M --iters 100 --reps 2 --out $O/c2-new /tmp/nt > $O/c2-new.txt 2>&1; echo "c2-new rc=$?"; tail -12 $O/c2-new.txt
$CPG --plugin /tmp/bo/lib/libnccl-net-gdr.so --np 2 --size 128M --iters 100 --reps 1 --out $O/c2-old /tmp/nt > $O/c2-old.txt 2>&1; echo "c2-old rc=$?"; tail -8 $O/c2-old.txt
$CPG --plugin /tmp/bn/lib/libnccl-net-gdr.so --np 2 --size 32M --iters 200 --reps 1 --out $O/c2-new-32 /tmp/nt > $O/c2-new-32.txt 2>&1; echo "c2-new-32 rc=$?"; tail -8 $O/c2-new-32.txt
echo "t=$(( $(date +%s) - t0 )) s"
# 8 ranks as 8 hosts
$CPG --plugin /tmp/bn/lib/libnccl-net-gdr.so --np 8 --size 128M --iters 30 --reps 1 --out $O/c8-new /tmp/nt > $O/c8-new.txt 2>&1; echo "c8-new rc=$?"; tail -8 $O/c8-new.txt
$CPG --plugin /tmp/bo/lib/libnccl-net-gdr.so --np 8 --size 128M --iters 30 --reps 1 --out $O/c8-old /tmp/nt > $O/c8-old.txt 2>&1; echo "c8-old rc=$?"; tail -8 $O/c8-old.txt
echo "t=$(( $(date +%s) - t0 )) s"
lat8() { local log=$1 envf=$2 plug=$3; ( set -a; . $R/nccl-tests-configs/$envf; set +a; [ -n "$plug" ] && export NCCL_NET_PLUGIN=$plug
  timeout 60 mpirun --allow-run-as-root -np 8 -x LD_LIBRARY_PATH sh -c 'NCCL_HOSTID=h$OMPI_COMM_WORLD_RANK NCCL_TESTS_DEVICE=0 NCCL_DEBUG=WARN exec /tmp/nt/all_reduce_perf_mpi -b 8 -e 8 -n 200 -w 20 -c 1' ) > $log 2>&1
  echo "$(basename $log): rc=$? $(grep -E '^ +8 ' $log | head -1)"; }
lat8 $O/l8-sock.log baseline-socket.env ""; lat8 $O/l8-new.log tcp.env /tmp/bn/lib/libnccl-net-gdr.so; lat8 $O/l8-old.log tcp.env /tmp/bo/lib/libnccl-net-gdr.so; lat8 $O/l8-sock2.log baseline-socket.env ""; lat8 $O/l8-new2.log tcp.env /tmp/bn/lib/libnccl-net-gdr.so
echo "t=$(( $(date +%s) - t0 )) s"
# issue 23: the plugin over the emulator with CUDA memory, clean and with faults
export NET_GDR_BUILD_DIR=/tmp/bn
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, 'Out of bounds values : 0 OK' x$(grep -c 'Out of bounds values : 0 OK' $log), $(grep -m1 'Avg bus bandwidth' $log)"; }
two $O/emu-clean.log 90 emulator.env -- /tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
two $O/emu-faults.log 150 emulator.env GDRNET_FALLBACK=1 "VEMU_FAULTS=wc:op=write_imm:nth=300:status=retry_exc;qp_fatal:nth=6;wc:op=write:nth=2000:status=rem_op" -- /tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
grep -c "recovered" $O/emu-faults.log | sed 's/^/emu-faults lines with "recovered": /'
two $O/emu-port.log 150 emulator.env GDRNET_FALLBACK=1 "VEMU_FAULTS=port_down:dev=vemu0:after_ms=3000:for_ms=3000" -- /tmp/nt/sendrecv_perf_mpi -b 1M -e 64M -f 4 -n 20 -w 2 -c 1
grep -h "move to TCP\|back on RDMA\|returns to RDMA" $O/emu-port.log | cut -c1-200 | head -4
# issue 25: NCCL IB's own GIN proxy on the emulator (the baseline), and a plain alltoall
two $O/ib-gin.log 120 baseline-ib-emulator.env -- /tmp/nt/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 10 -w 2 -c 1 -R 2 -D 3
grep -m3 "Assigned GIN\|WARN" $O/ib-gin.log
two $O/ib-a2a.log 90 baseline-ib-emulator.env -- /tmp/nt/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 10 -w 2 -c 1
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c2-* c8-* 2>/dev/null; rm -rf *.log c2-new c2-old c2-new-32 c8-new c8-old )
