#!/bin/bash
# Device run 17 (2026-12-05): bench/kv-tail (one polling I/O thread, the default, against every thread polling), and
# bench/cpu-per-gb after its presets moved to bench/benchenv.py (2 ranks, 128 MB, 1 rep).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; } > $O/machine.txt 2>&1
B=$R/build-dev NT=$R/build-dev-nt
( cmake -S $R -B $B -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build $B -j8 --target nccl-net-gdr ) > $O/build.log 2>&1 &
[ -x $NT/all_reduce_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi > $O/nt-build.log 2>&1 &
wait
echo "build $(( $(date +%s) - t0 )) s"
for f in $B/lib/libnccl-net-gdr.so $NT/all_reduce_perf_mpi; do [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
export LD_LIBRARY_PATH=$W/lib
P=$B/lib/libnccl-net-gdr.so
python3 $R/bench/kv-tail --nccl-lib $W/lib --reps 2 --out $O/kv --variant one,$P --variant all,$P,GDRNET_TCP_SPIN_THREADS=64 > $O/kv.txt 2>&1
echo "kv rc=$?"; cat $O/kv.txt
python3 $R/bench/cpu-per-gb --nccl-lib $W/lib --no-mps --run-timeout 45 --np 2 --size 128M --iters 100 --reps 1 --out $O/c2 --variant one,$P $NT > $O/c2.txt 2>&1
echo "c2 rc=$?"; grep -v '^# .* rep' $O/c2.txt
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log c2 kv 2>/dev/null; rm -rf *.log c2 kv )
