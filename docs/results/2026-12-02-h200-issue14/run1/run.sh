#!/bin/bash
# tcp2 GPU run 1 (issue 14 exploration): builds two plugin builds (nccl-tests built beforehand), then explore.py plan1.py
set -u
R=$PWD; O=${OUT:-/tmp/out}; mkdir -p $O
W=/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl
export PATH=/opt/torch/.venv/bin:$PATH
mkdir -p /tmp/nccl/lib; ln -sfn $W/include /tmp/nccl/include; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so; ln -sf $W/lib/libnccl.so.2 /tmp/nccl/lib/libnccl.so.2
t0=$(date +%s)
{ date -u +%FT%TZ; nproc; uname -r; grep -m1 "model name" /proc/cpuinfo; free -g | head -2; } | tee $O/machine.txt

# (nccl-tests 2.19.6, built beforehand with MPI=1 NAME_SUFFIX=_mpi into /tmp/nt; the project never builds it)
for v in base rx; do
  ( cmake -S $R/.device/tcp2/src-$v -B /tmp/b-$v -DCMAKE_BUILD_TYPE=Release -DGDRNET_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build /tmp/b-$v -j4 --target nccl-net-gdr gdrnet-perf ) > $O/build-$v.log 2>&1 &
done
wait
for v in base rx; do [ -f /tmp/b-$v/lib/libnccl-net-gdr.so ] || { echo "build $v failed"; tail -20 $O/build-$v.log; exit 1; }; done

echo "build $(( $(date +%s) - t0 )) s"
nvidia-cuda-mps-control -d 2>/dev/null || true
cd $R && PYTHONUNBUFFERED=1 python3 .device/tcp2/explore.py .device/tcp2/${PLAN:-plan1.py} $O
echo "total $(( $(date +%s) - t0 )) s"
( cd $O && tar czf logs.tgz logs *.log && rm -rf logs *.log )
