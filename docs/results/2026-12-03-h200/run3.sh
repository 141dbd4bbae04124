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
echo "t=$(( $(date +%s) - t0 )) s"
BT="bash $R/nccl-tests-configs/bench-tcp-vs-socket.sh --nccl-lib $W/lib --no-mps --reps 1 --collectives all_reduce --run-timeout 60 --budget 170"
$BT --plugin /tmp/bn/lib/libnccl-net-gdr.so /tmp/nt $O/bt-new > $O/bt-new.log 2>&1; echo "bt-new rc=$?"; cat $O/bt-new/summary.txt 2>/dev/null | head -40
$BT --plugin /tmp/bo/lib/libnccl-net-gdr.so /tmp/nt $O/bt-old > $O/bt-old.log 2>&1; echo "bt-old rc=$?"; cat $O/bt-old/summary.txt 2>/dev/null | head -40
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log bt-* c2-* c8-* 2>/dev/null; rm -rf *.log bt-new bt-old c2-new c2-old c2-new-32 c8-new c8-old )
