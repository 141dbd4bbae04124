#!/usr/bin/env python3
"""A NIC lost and back while a job runs (the plugin over the verbs emulator, VEMU_FAULTS=device_fatal:...:for_ms=).
Phase 1: all_reduce of 16 MiB on the default group, checked, until --phase1-s seconds (the device dies and comes
back meanwhile: those connections move to TCP and stay there). Phase 2: a new group (a new NCCL communicator, new
connections made after the device is back: they must run over RDMA again), all_reduce checked. Exit 1 on a wrong value."""
import argparse, os, sys, time
import torch
import torch.distributed as dist

ap = argparse.ArgumentParser()
ap.add_argument("--phase1-s", type=float, default=8.0)
ap.add_argument("--phase2-iters", type=int, default=100)
a = ap.parse_args()
dist.init_process_group("nccl")
r = dist.get_rank()
torch.cuda.set_device(0)
x = torch.empty(4 << 20, device="cuda")
flag = torch.zeros(1, device="cuda")

def check_round(i, pg):
    x.fill_(float(r + 1 + (i % 100)))
    dist.all_reduce(x, group=pg)
    exp = float(2 * (i % 100) + 3)
    return int((x != exp).sum().item())

t0 = time.time()
bad1 = n1 = 0
while True:
    for _ in range(10):
        bad1 += check_round(n1, None)
        n1 += 1
    flag.fill_(1.0 if time.time() - t0 > a.phase1_s else 0.0)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    if flag.item() > 0:
        break
t1 = time.time()
g = dist.new_group([0, 1])
bad2 = 0
for i in range(a.phase2_iters):
    bad2 += check_round(i, g)
torch.cuda.synchronize()
print(f"rank {r}: phase 1 {n1} all_reduce of 16 MiB in {t1 - t0:.1f} s, {bad1} wrong values; "
      f"phase 2 (a new communicator) {a.phase2_iters} in {time.time() - t1:.1f} s, {bad2} wrong values", flush=True)
dist.destroy_process_group()
sys.exit(1 if bad1 or bad2 else 0)
