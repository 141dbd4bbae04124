#!/bin/bash
# Device run 4: issue 25 (GIN through the plugin over TCP and the emulator, NCCL IB's GIN proxy as the baseline, a
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
# issue 25, alternated: NCCL IB's GIN proxy on the emulator (baseline), the plugin's GIN over the emulator, over TCP
for rep in 1 2; do
  two $O/ib-gin-$rep.log 90 baseline-ib-emulator.env $GE -- $A2A
  two $O/gdr-gin-emu-$rep.log 90 emulator.env $GE -- $A2A
  two $O/gdr-gin-tcp-$rep.log 90 tcp.env $GE -- $A2A
done
grep -h "GIN/RMA table\|gin plugin" $O/gdr-gin-emu-1.log | sort | uniq -c | head -4
grep -h "WARN" $O/gdr-gin-*-1.log | sort | uniq -c | head -6
sed -n '/out-of-place/,/Avg bus/p' $O/ib-gin-1.log $O/gdr-gin-emu-1.log | grep -E "^ +[0-9]" | head -12
two $O/gdr-gin-fault.log 120 emulator.env $GE GDRNET_FALLBACK=1 GDRNET_GIN_PATH=messages "VEMU_FAULTS=wc:op=write_imm:nth=200:status=retry_exc;port_down:dev=vemu0:after_ms=6000:for_ms=2000" -- $A2A
grep -h "move to TCP\|recovered\|back on RDMA" $O/gdr-gin-fault.log | cut -c1-160 | sort | uniq -c | head -5
if [ -f /tmp/gin_putsignal ]; then
  two $O/putsig-tcp.log 60 tcp.env $GE -- /tmp/gin_putsignal; grep -h "PASS\|FAIL" $O/putsig-tcp.log | head -3
  two $O/putsig-emu.log 60 emulator.env $GE -- /tmp/gin_putsignal; grep -h "PASS\|FAIL" $O/putsig-emu.log | head -3
fi
echo "t=$(( $(date +%s) - t0 )) s"
# issue 23: final main over the emulator with CUDA memory
AR="/tmp/nt/all_reduce_perf_mpi -b 1M -e 64M -f 4 -n 10 -w 2 -c 1"
two $O/emu-clean.log 90 emulator.env -- $AR
two $O/emu-faults.log 150 emulator.env GDRNET_FALLBACK=1 "VEMU_FAULTS=wc:op=write_imm:nth=300:status=retry_exc;qp_fatal:nth=6;wc:op=write:nth=2000:status=rem_op" -- $AR
two $O/emu-lazy-devfatal.log 150 emulator.env GDRNET_FALLBACK=1 VEMU_GDR_LAZY=1 NCCL_NET_FORCE_FLUSH=1 "VEMU_FAULTS=device_fatal:dev=vemu0:after_ms=5000:for_ms=2000" -- /tmp/nt/sendrecv_perf_mpi -b 1M -e 64M -f 4 -n 20 -w 2 -c 1
grep -h "move to TCP\|is back\|DEVICE_FATAL" $O/emu-lazy-devfatal.log | cut -c1-160 | sort | uniq -c | head -4
# issue 24 item 12: NCCL_NET=GDR and a plugin whose init fails; the same without NCCL_NET
two $O/init-fail-net.log 40 tcp.env GDRNET_SOCKET_IFNAME=nosuchif -- /tmp/nt/all_reduce_perf_mpi -b 8 -e 8 -n 2 -w 1
grep -h "Failed to initialize any NET plugin\|NET/GDR.*WARN\|WARN.*GDR" $O/init-fail-net.log | cut -c1-220 | head -4
two $O/init-fail-nonet.log 40 ../.device/tcp-nonet.env GDRNET_SOCKET_IFNAME=nosuchif -- /tmp/nt/all_reduce_perf_mpi -b 8 -e 8 -n 2 -w 1
grep -h "Using network\|Failed to initialize NET plugin" $O/init-fail-nonet.log | cut -c1-200 | head -3
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log 2>/dev/null; rm -f *.log )
