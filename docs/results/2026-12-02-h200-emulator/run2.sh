#!/bin/bash
# fused devices through NCCL: stock IB vs the plugin, with the topology dumped
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
# (nccl-tests 2.19.6, built beforehand with MPI=1 NAME_SUFFIX=_mpi into /tmp/nt; the project never builds it)
( cmake -S $R -B /tmp/be -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/be -j8 --target nccl-net-gdr vemu ) > $O/build.log 2>&1 &
wait
nvidia-cuda-mps-control -d 2>/dev/null || true
export NET_GDR_BUILD_DIR=/tmp/be LD_LIBRARY_PATH=$W/lib
two() { local log=$1 to=$2 envf=$3; shift 3; local ev=(); while [ "$1" != "--" ]; do ev+=("$1"); shift; done; shift
  ( set -a; . $R/nccl-tests-configs/$envf; set +a
    rm -rf /tmp/vemu-run; export VEMU_DIR=/tmp/vemu-run
    timeout $to mpirun --allow-run-as-root -x LD_LIBRARY_PATH -np 1 env NCCL_HOSTID=hostA NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" : \
      -np 1 env NCCL_HOSTID=hostB NCCL_TESTS_DEVICE=0 "${ev[@]}" "$@" ) > $log 2>&1
  local rc=$?; echo "$(basename $log): rc=$rc, 'Out of bounds values : 0 OK' x$(grep -c 'Out of bounds values : 0 OK' $log)"; }
NT=/tmp/nt/all_reduce_perf_mpi
P=$(realpath /sys/class/net/eth0/device/.. 2>/dev/null); echo "VEMU_PCI_PATH=$P"; ls -l /sys/class/net/ | head
F="VEMU_DEVICES=vemu0:roce,vemu1:roce VEMU_PCI_PATH=$P NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH"
two $O/ib-fused.log 90 baseline-ib-emulator.env $F NCCL_TOPO_DUMP_FILE=$O/ib-topo.xml -- $NT -b 1M -e 16M -f 4 -n 5 -w 1 -c 1
two $O/gdr-fused.log 90 emulator.env $F NCCL_TOPO_DUMP_FILE=$O/gdr-topo.xml -- $NT -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
two $O/gdr-fused-faults.log 150 emulator.env $F GDRNET_FALLBACK=1 \
  "VEMU_FAULTS=wc:op=write_imm:nth=300:status=retry_exc;qp_fatal:nth=6;wc:op=write:nth=2000:status=rem_op" -- $NT -b 1M -e 64M -f 4 -n 10 -w 2 -c 1
for f in $O/*.log; do echo "== $f"; grep -v "^$" $f | grep -E "WARN|failure|Made vNic|made fused|Avg bus|recovered|Channel 00|NET/GDR/0|via NET" | cut -c1-220 | sort | uniq -c | sort -rn | head -10; done
cat $O/gdr-topo.xml 2>/dev/null | head -30
( cd $O && tar czf logs.tgz *.log *.xml 2>/dev/null; rm -f *.log *.xml )
