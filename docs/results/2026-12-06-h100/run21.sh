#!/bin/bash
# Device run 21 (2026-12-06): the restructure and the per-connection bookkeeping against the code before them.
# .device/before/ holds `git archive` of main before them (b458230); the working tree is after. Both plugins and the
# emulator are built Release; then, alternated, --reps times: all_reduce 8 B and 128 MB over TCP (tcp.env) and over
# the verbs emulator (emulator.env), before and after, and bench/msgrate (plugin isend/test rate) before and after.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O; REPS=${REPS:-3}
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
B=$R/build-dev; NT=$B/nt
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; gcc --version | head -1; } > $O/machine.txt 2>&1; cat $O/machine.txt
if [ ! -x $NT/all_reduce_perf_mpi ]; then
  mkdir -p $B/nccl/lib; ln -sfn $W/include $B/nccl/include
  ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so.2
  ( make -C $R/.nccl-tests/src -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=$B/nccl \
      CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi ) > $O/nt-build.log 2>&1 &
fi
for v in before after; do src=$R; [ $v = before ] && src=$R/.device/before
  ( cmake -S $src -B $B/$v -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=ON && cmake --build $B/$v -j16 --target nccl-net-gdr vemu gdrnet-perf ) > $O/build-$v.log 2>&1
  [ -f $B/$v/lib/libnccl-net-gdr.so ] || { echo "build $v failed"; tail -20 $O/build-$v.log; exit 1; }
done
wait
echo "builds $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
run() { local log=$1 envf=$2 bdir=$3; shift 3
  ( set -a; export NET_GDR_BUILD_DIR=$bdir; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    export LD_LIBRARY_PATH=$W/lib:$LD_LIBRARY_PATH
    timeout 120 mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "$@" ) > $log 2>&1; echo $?; }
for rep in $(seq 1 $REPS); do
  for tp in tcp emulator; do for v in before after; do
    [ $(( $(date +%s) - t0 )) -gt ${BUDGET_S:-540} ] && break 3
    rc=$(run $O/$tp-$v-8-$rep.log $tp.env $B/$v $NT/all_reduce_perf_mpi -b 8 -e 8 -n 2000 -w 200 -c 1)
    t8=$(awk '$1==8 && NF>10 {print $6}' $O/$tp-$v-8-$rep.log | head -1)
    rc2=$(run $O/$tp-$v-128m-$rep.log $tp.env $B/$v $NT/all_reduce_perf_mpi -b 128M -e 128M -n 20 -w 5 -c 1)
    bw=$(awk '$1==134217728 && NF>10 {print $8}' $O/$tp-$v-128m-$rep.log | head -1)
    echo "rep $rep $tp $v: 8 B ${t8:-?} us (rc $rc), 128 MB busbw ${bw:-?} GB/s (rc $rc2), wrong lines $(cat $O/$tp-$v-*-$rep.log | grep -c "FAILED\|Out of bounds values : [1-9]")"
  done; done
done
for rep in $(seq 1 ${MREPS:-2}); do for v in before after; do
  [ $(( $(date +%s) - t0 )) -gt $(( ${BUDGET_S:-540} + 30 )) ] && break 2
  echo "msgrate $v rep $rep:"; timeout 45 python3 $R/bench/msgrate --build $B/$v --sizes 8:4096:8 --reps 1 --transports tcp,rdma 2>&1 | grep -v "^#" | tail -8
done; done
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log && rm -f *.log )
