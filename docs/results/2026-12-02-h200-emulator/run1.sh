#!/bin/bash
# over the verbs emulator with CUDA memory: stock NCCL IB after the emulator's async-event change; the plugin on a
# fused device (2 emulated NICs merged by NCCL) with faults; a device lost and back under PyTorch
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; cat $R/.device/COMMIT; } | tee $O/machine.txt
# (nccl-tests 2.19.6, built beforehand with MPI=1 NAME_SUFFIX=_mpi into /tmp/nt; the project never builds it)
( cmake -S $R -B /tmp/be -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/be -j8 --target nccl-net-gdr vemu ) > $O/build.log 2>&1 &
wait
[ -f /tmp/be/lib/libnccl-net-gdr.so ] && [ -f /tmp/be/lib/verbs-emu/libibverbs.so.1 ] || { echo "build failed"; tail -20 $O/build.log; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/be LD_LIBRARY_PATH=$W/lib
two() { # two LOG TIMEOUT ENVFILE [VAR=V ...] -- prog args
  local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; local ok=$(grep -c "Out of bounds values : 0 OK" $log)
  echo "$(basename $log): rc=$rc, 'Out of bounds values : 0 OK' x$ok, $(grep -m1 'Avg bus bandwidth' $log)"
}
NT=/tmp/nt/all_reduce_perf_mpi
# 1. stock NCCL IB on the emulator
two $O/ib-base.log 120 baseline-ib-emulator.env -- $NT -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
grep -m2 "NET/IB\b.*Using\|NET/IB : Using" $O/ib-base.log
# 2. the plugin on two emulated NICs fused by NCCL (merge level SYS), clean and with faults on rank A
F="VEMU_DEVICES=vemu0:roce,vemu1:roce NCCL_NET_MERGE_LEVEL=SYS"
two $O/fused.log 120 emulator.env $F -- $NT -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
grep -m3 -i "fused\|merg\|vdevice\|makeVDevice" $O/fused.log
two $O/fused-faults.log 150 emulator.env $F GDRNET_FALLBACK=1 \
  "VEMU_FAULTS=wc:op=write_imm:nth=300:status=retry_exc;qp_fatal:nth=6;wc:op=write:nth=2000:status=rem_op" -- $NT -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
grep -c "recovered" $O/fused-faults.log | sed 's/^/fused-faults: lines with "recovered": /'
# 3. a device lost and back under PyTorch: phase 2's new communicator on RDMA again
( set -a; . $R/nccl-tests-configs/emulator.env; set +a
  rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run GDRNET_FALLBACK=1 VEMU_CUDA_PRIVATE_CTX=1 GDRNET_STATS_FILE=$O/stats-%h-%p.prom GDRNET_STATS_INTERVAL_S=0
  export VEMU_FAULTS="device_fatal:dev=vemu0:after_ms=4000:for_ms=2000"
  for n in 0 1; do
    NCCL_HOSTID=host$n timeout 200 torchrun --nnodes=2 --node_rank=$n --nproc_per_node=1 --master_addr=127.0.0.1 --master_port=29533 \
      $R/docs/results/2026-12-02-h200-emulator/device_back.py --phase1-s 10 > $O/back-$n.log 2>&1 &
  done; wait )
grep -h "^rank\|is back after\|move to TCP" $O/back-*.log | cut -c1-300 | head -12
grep -h "revivals_total\|connections_on_tcp\|device_lost" $O/stats-*.prom 2>/dev/null | head -12
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz *.log *.prom 2>/dev/null; rm -f *.log *.prom )
