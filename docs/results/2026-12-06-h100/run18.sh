#!/bin/bash
# Device run 18 (2026-12-06): (a) the README's build command as a user types it, on the GPU machine's compiler (gcc 13,
# Ubuntu 24.04), then the same with make -k to list every warning it turns into an error; (b) the LL128 wrong-data
# record of 2026-11-30: all_reduce and sendrecv with NCCL_PROTO=LL128 over the verbs emulator with CUDA buffers, two
# ranks on one GPU as two hosts (MPS), alternated, as many runs as fit in the command's time.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; gcc --version | head -1; cmake --version | head -1; } > $O/machine.txt 2>&1
cat $O/machine.txt
NT=$R/.nccl-tests/build-mpi
[ -x $NT/sendrecv_perf_mpi ] || make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi $NT/sendrecv_perf_mpi > $O/nt-build.log 2>&1 &
# (a) the README's command, exactly; then keep going over every file to list all the errors
( cd $R && cmake -S . -B build && cmake --build build -j ) > $O/readme-build.log 2>&1
echo "readme build rc=$?"
( cd $R && cmake --build build -j16 -- -k ) > $O/readme-build-k.log 2>&1
grep -E "error:|warning:" $O/readme-build-k.log | sort -u > $O/gcc13-warnings.txt
echo "gcc13 distinct warnings/errors: $(wc -l < $O/gcc13-warnings.txt)"; cut -c1-240 $O/gcc13-warnings.txt | head -40
# (b) a build that does not stop on warnings, for the runs
( cmake -S $R -B /tmp/be -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-w && cmake --build /tmp/be -j16 --target nccl-net-gdr vemu ) > $O/build.log 2>&1
wait
for f in /tmp/be/lib/libnccl-net-gdr.so /tmp/be/lib/verbs-emu/libibverbs.so.1 $NT/all_reduce_perf_mpi $NT/sendrecv_perf_mpi; do
  [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
echo "builds $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/be LD_LIBRARY_PATH=$W/lib
two() { # two LOG TIMEOUT ENVFILE [VAR=V ...] -- prog args
  local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?
  local wrong=$(grep -E '^ +[0-9]+ +[0-9]+ ' $log | awk '{w+=$(NF-4)+$NF} END{print w+0}')
  local rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' $log)
  echo "$(basename $log) rc=$rc rows=$rows wrong=$wrong $(grep -m1 -o 'Out of bounds values : .*' $log)"
  [ "$rc" = 0 ] && [ "$wrong" = 0 ] && rm -f $log
}
A="NCCL_PROTO=LL128 NCCL_ALGO=RING NCCL_DEBUG=WARN"
i=0
while [ $(( $(date +%s) - t0 )) -lt ${BUDGET_S:-540} ]; do
  i=$((i+1))
  two $O/ar-ll128-$i.log 60 emulator.env $A -- $NT/all_reduce_perf_mpi -b 1M -e 32M -f 2 -n 20 -w 5 -c 1
  two $O/sr-ll128-$i.log 60 emulator.env $A -- $NT/sendrecv_perf_mpi -b 1M -e 32M -f 2 -n 20 -w 5 -c 1
done
echo "pairs run: $i; total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log 2>/dev/null; rm -f *.log )
