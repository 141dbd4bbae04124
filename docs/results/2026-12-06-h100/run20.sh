#!/bin/bash
# Device run 20 (2026-12-06): the TCP transport against NCCL Socket, bench/tcp-matrix.
#   run20.sh build            plugin (Release) into build-dev/be, nccl-tests into build-dev/nt (kept on a warm machine)
#   run20.sh diag             all_reduce 8 B: Socket, default and variants alternated, 4 reps; syscalls per op (strace)
#   run20.sh matrix ROWS REPS VARIANT...   bench/tcp-matrix on ROWS (NAME or NAME,K=V,... variants of the one plugin)
# Output under $OUT (default /tmp/out); BUDGET_S: seconds this call may use (stops starting runs after it).
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=$(python3 -c "import nvidia.nccl as n; print(list(n.__path__)[0])" 2>/dev/null)
[ -d "$W" ] || W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
[ -d /opt/torch/.venv/bin ] && export PATH=/opt/torch/.venv/bin:$PATH
B=$R/build-dev; NT=$B/nt; P=$B/be/lib/libnccl-net-gdr.so
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; nvidia-smi -L; gcc --version | head -1; uptime; } > $O/machine-$1.txt 2>&1
cat $O/machine-$1.txt
case "$1" in
build)
  mkdir -p $B/nccl/lib; ln -sfn $W/include $B/nccl/include
  ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 $B/nccl/lib/libnccl.so.2
  ( make -C $R/.nccl-tests/src -j12 MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi NAME_SUFFIX=_mpi NCCL_HOME=$B/nccl \
      CUDA_HOME=/usr/local/cuda BUILDDIR=$NT NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
      $NT/all_reduce_perf_mpi $NT/alltoall_perf_mpi $NT/sendrecv_perf_mpi ) > $O/nt-build.log 2>&1 &
  ( cmake -S $R -B $B/be -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF && cmake --build $B/be -j16 ) > $O/build.log 2>&1
  wait
  for f in $P $NT/alltoall_perf_mpi $NT/all_reduce_perf_mpi $NT/sendrecv_perf_mpi; do
    [ -f $f ] || { echo "missing $f"; tail -8 $O/build.log $O/nt-build.log; exit 1; }; done
  echo "builds $(( $(date +%s) - t0 )) s";;
diag)
  shift
  V=(--variant default,$P --variant adaptive,$P,GDRNET_TCP_PROGRESS=adaptive --variant credits1k,$P,GDRNET_TCP_EAGER_CREDITS=1024 --variant nogin,$P,NCCL_GIN_ENABLE=0)
  timeout 200 python3 $R/bench/tcp-matrix --nccl-lib $W/lib --reps 4 --timeout 60 --out $O/diag "${V[@]}" --rows ar8 $NT > $O/diag.txt 2>&1
  echo "diag rc=$?"; grep -v "^# .* rep" $O/diag.txt | grep -v "goal [234]"
  if command -v strace >/dev/null; then
    for v in Socket GDR; do
      ( set -a; if [ $v = Socket ]; then . $R/nccl-tests-configs/baseline-socket.env; else . $R/nccl-tests-configs/tcp.env; export NCCL_NET_PLUGIN=$P; fi; set +a
        export LD_LIBRARY_PATH=$W/lib:$B/be/lib
        timeout 90 mpirun --allow-run-as-root --bind-to none -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 strace -f -c -o $O/strace-$v.txt $NT/all_reduce_perf_mpi -b 8 -e 8 -n 20000 -w 100 -c 0 : \
          -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 $NT/all_reduce_perf_mpi -b 8 -e 8 -n 20000 -w 100 -c 0 ) > $O/strace-run-$v.log 2>&1
      echo "strace $v rc=$? $(grep -m1 '^ *8 ' $O/strace-run-$v.log)"; head -12 $O/strace-$v.txt
    done
  else echo "no strace"; fi;;
matrix)
  rows=$2; reps=$3; shift 3; V=()
  for v in "$@"; do n=${v%%,*}; rest=${v#"$n"}; V+=(--variant "$n,$P$rest"); done
  left=$(( ${BUDGET_S:-560} - ($(date +%s) - t0) ))
  timeout $((left - 5)) python3 $R/bench/tcp-matrix --nccl-lib $W/lib --reps $reps --timeout 90 --out $O/tm "${V[@]}" --rows $rows $NT > $O/tm.txt 2>&1
  echo "tcp-matrix rc=$?"; grep -v "^# .* rep" $O/tm.txt;;
esac
echo "total $(( $(date +%s) - t0 )) s"
