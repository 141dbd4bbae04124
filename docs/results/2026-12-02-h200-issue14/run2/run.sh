#!/bin/bash
# tcp2 GPU run 2 (issue 14, the branch's defaults): the plugin from .device/tcp2/src (nccl-tests built beforehand), then
# bench-tcp-vs-socket.sh (3 reps, latency, KV, DDP, plugin variants, NCCL settings on both), then CPU profiles
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
S=$R/.device/tcp2/src
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; uname -r; cat $S/COMMIT 2>/dev/null; } | tee $O/machine.txt

# (nccl-tests 2.19.6, built beforehand with MPI=1 NAME_SUFFIX=_mpi into /tmp/nt; the project never builds it)
( cmake -S $S -B /tmp/b -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/b -j4 --target nccl-net-gdr gdrnet-perf ) > $O/build.log 2>&1 &
wait
[ -f /tmp/b/lib/libnccl-net-gdr.so ] || { echo "plugin build failed"; tail -20 $O/build.log; exit 1; }

echo "build $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
A=all_reduce+all_gather+reduce_scatter+sendrecv
timeout 470 bash $S/nccl-tests-configs/bench-tcp-vs-socket.sh --plugin /tmp/b/lib/libnccl-net-gdr.so --nccl-lib $W/lib \
  --no-mps --reps 3 --budget 420 --run-timeout 60 --ddp \
  --variant nodemand@$A:GDRNET_TCP_SPIN_MAX_US=0 --variant speed400@$A:GDRNET_TCP_SPEED=400000 \
  --nccl-variant p2p512k@sendrecv:NCCL_P2P_NET_CHUNKSIZE=524288 \
  --nccl-variant minch4@all_reduce+all_gather:NCCL_MIN_NCHANNELS=4 \
  /tmp/nt $O/bench > $O/bench.log 2>&1
echo "bench rc=$?"
cat $O/bench/summary.txt 2>/dev/null || tail -30 $O/bench.log
left=$(( 560 - ($(date +%s) - t0) ))
echo "left $left s"
[ $left -gt 40 ] && ( cd $R && PYTHONUNBUFFERED=1 python3 .device/tcp2/explore.py .device/tcp2/plan2.py $O/prof )
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz bench prof *.log 2>/dev/null; rm -rf bench prof *.log )
