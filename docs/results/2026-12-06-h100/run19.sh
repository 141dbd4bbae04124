#!/bin/bash
# Device run 19 (2026-12-06): (a) the README's build command on gcc 13 after GDRNET_WERROR (default OFF) and the
# gn_log.c fix; (b) GIN all-to-all (alltoall_perf -R 2 -D 3) through the plugin over the emulator and over TCP,
# alternated with NCCL IB's GIN proxy on the same emulator, after the GIN hardening; (c) a mixed pair through NCCL:
# hostA with an (emulated) RDMA device, hostB without one, both GDRNET_TRANSPORT=auto; (d) bench/tcp-matrix's first
# rows, the default against GDRNET_TCP_PROGRESS=adaptive, as long as time is left.
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; gcc --version | head -1; cat $R/.device/COMMIT 2>/dev/null; } > $O/machine.txt 2>&1
cat $O/machine.txt
NT=$R/.nccl-tests/build-mpi
( make -C $R/.nccl-tests/src -j8 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=/tmp/nccl CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" $NT/all_reduce_perf_mpi $NT/alltoall_perf_mpi $NT/sendrecv_perf_mpi ) > $O/nt-build.log 2>&1 &
# (a) the README's command exactly, then the same tree with GDRNET_WERROR=ON (every warning gcc 13 finds is an error)
( cd $R && cmake -S . -B build && cmake --build build -j ) > $O/readme-build.log 2>&1
echo "readme build rc=$? warnings=$(grep -c 'warning:' $O/readme-build.log)"
( cd $R && cmake -S . -B build-werror -DGDRNET_WERROR=ON && cmake --build build-werror -j16 ) > $O/werror-build.log 2>&1
echo "GDRNET_WERROR=ON build rc=$? warnings=$(grep -c 'warning:' $O/werror-build.log)"
( cmake -S $R -B /tmp/be -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=ON && cmake --build /tmp/be -j16 --target nccl-net-gdr vemu ) > $O/build.log 2>&1
wait
for f in /tmp/be/lib/libnccl-net-gdr.so /tmp/be/lib/verbs-emu/libibverbs.so.1 $NT/alltoall_perf_mpi $NT/all_reduce_perf_mpi; do
  [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
echo "builds $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/be LD_LIBRARY_PATH=$W/lib
summ() { local log=$1 rc=$2; echo "$(basename $log): rc=$rc, OK x$(grep -c 'Out of bounds values : 0 OK' $log), wrong lines $(grep -c 'FAILED\|Out of bounds values : [1-9]' $log), $(grep -m1 'Avg bus bandwidth' $log) $(grep -m1 -o 'Assigned GIN plugin [A-Za-z_]*' $log) (t=$(( $(date +%s) - t0 )) s)"; }
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  summ $log $?; }
A2A="$NT/alltoall_perf_mpi -b 1M -e 16M -f 4 -n 20 -w 2 -c 1 -R 2 -D 3"
GE="NCCL_GIN_ENABLE=1 NCCL_DEBUG_SUBSYS=INIT,NET"
for rep in 1 2; do
  two $O/gin-emu-$rep.log 90 emulator.env $GE -- $A2A
  two $O/gin-tcp-$rep.log 90 tcp.env $GE -- $A2A
  two $O/ib-gin-$rep.log 90 baseline-ib-emulator.env $GE -- $A2A
done
# (c) mixed: hostA auto with the emulated device, hostB auto without RDMA (GDRNET_IB_DISABLE=1)
( set -a; . $R/nccl-tests-configs/emulator.env; set +a; rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run GDRNET_TRANSPORT=auto
  timeout 90 mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH \
    -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 $NT/all_reduce_perf_mpi -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 : \
    -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 GDRNET_IB_DISABLE=1 $NT/all_reduce_perf_mpi -b 8 -e 64M -f 4 -n 10 -w 2 -c 1 ) > $O/mixed.log 2>&1
summ $O/mixed.log $?
grep -h "using the\|TCP door\|TCP from the start\|Using network" $O/mixed.log | cut -c1-260 | sort | uniq -c | head -10
# (d) while time is left: bench/tcp-matrix on three rows, NCCL Socket against the default (fixed progress) and
# GDRNET_TCP_PROGRESS=adaptive, alternated, 2 reps
left=$(( ${BUDGET_S:-420} - ($(date +%s) - t0) ))
if [ $left -gt 150 ]; then
  P=/tmp/be/lib/libnccl-net-gdr.so
  timeout $((left - 10)) python3 $R/bench/tcp-matrix --nccl-lib $W/lib --reps 2 --timeout 60 --out $O/tm \
    --variant default,$P --variant adaptive,$P,GDRNET_TCP_PROGRESS=adaptive --rows ar8,sr1m,a2a1m $NT > $O/tm.txt 2>&1
  echo "tcp-matrix rc=$?"; grep -v "^# .* rep" $O/tm.txt | tail -30
fi
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log tm 2>/dev/null; rm -rf *.log tm )
