#!/usr/bin/env python3
"""DDP training steps on a small model, launched by torchrun, over NCCL (and so over libnccl-net-gdr
when NCCL_NET_PLUGIN=gdr NCCL_NET=GDR are set).

    torchrun --nproc_per_node=2 ddp_step.py [--steps 20] [--hidden 4096] [--layers 4] [--batch 64]

Prints, on rank 0, the loss and step time of every step, then the mean step time after warm-up.
Every step all-reduces the gradients (about 4 x hidden^2 x layers x 4 bytes), so the network is exercised.
At the end all ranks check that their parameters are identical (they must be after DDP steps);
exit status 1 if they are not.  --cpu runs the same on CPU with gloo (to try the script without GPUs).
"""

import argparse
import os
import sys
import time

torch = dist = nn = DDP = None  # imported by import_torch(): --help and the usage errors work without PyTorch


def import_torch():
    global torch, dist, nn, DDP
    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
    except ImportError as e:
        print("ddp_step.py: cannot import torch with %s (%s): install PyTorch for this interpreter "
              "(pip install torch), or launch me with the python that has it" % (sys.executable, e), file=sys.stderr)
        sys.exit(2)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the mean time (default 3)")
    ap.add_argument("--hidden", type=int, default=4096, help="width of the MLP (default 4096)")
    ap.add_argument("--layers", type=int, default=4, help="number of hidden layers (default 4)")
    ap.add_argument("--batch", type=int, default=64, help="per-rank batch size (default 64)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--bucket-mb", type=int, default=25, help="DDP gradient bucket size in MB (default 25)")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU instead of NCCL on GPUs")
    return ap.parse_args()


def main():
    args = parse_args()
    if "RANK" not in os.environ:
        print("ddp_step.py: run me with torchrun, e.g. torchrun --nproc_per_node=2 %s" % sys.argv[0],
              file=sys.stderr)
        return 2
    import_torch()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ["WORLD_SIZE"])

    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if not torch.cuda.is_available():
            print("ddp_step.py: no CUDA device (use --cpu to try the script on CPU)", file=sys.stderr)
            return 2
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        # device_id binds the communicator to this GPU at init (NCCL is set up eagerly).
        dist.init_process_group("nccl", device_id=device)

    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if not args.cpu else "-"
        print("ddp_step: world %d, backend %s, torch %s, NCCL %s, NCCL_NET=%s NCCL_NET_PLUGIN=%s"
              % (world, dist.get_backend(), torch.__version__, nccl,
                 os.environ.get("NCCL_NET", "(unset)"), os.environ.get("NCCL_NET_PLUGIN", "(unset)")),
              flush=True)

    torch.manual_seed(1234)                     # same initial weights everywhere (DDP also broadcasts them)
    blocks = []
    for _ in range(args.layers):
        blocks += [nn.Linear(args.hidden, args.hidden), nn.GELU()]
    model = nn.Sequential(*blocks, nn.Linear(args.hidden, 1)).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    ddp = DDP(model, device_ids=None if args.cpu else [local_rank], bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    gen = torch.Generator(device="cpu").manual_seed(rank + 1)    # different data per rank
    x = torch.randn(args.batch, args.hidden, generator=gen).to(device)
    y = torch.randn(args.batch, 1, generator=gen).to(device)

    if rank == 0:
        print("ddp_step: %d parameters, %.1f MB of gradients all-reduced per step"
              % (nparams, nparams * 4 / 1e6), flush=True)

    times = []
    for step in range(args.steps):
        if not args.cpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()                          # DDP all-reduces the gradient buckets here
        opt.step()
        if not args.cpu:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        # mean loss over ranks, for the print
        l = loss.detach().clone()
        dist.all_reduce(l)
        l /= world
        if step >= args.warmup:
            times.append(dt)
        if rank == 0:
            print("step %3d  loss %.6f  step time %8.2f ms" % (step, l.item(), dt * 1e3), flush=True)

    # All replicas must hold the same parameters after synchronous DDP steps.
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    checksum = torch.stack([flat.sum(), flat.abs().sum()]).to(torch.float64)
    ref = checksum.clone()
    dist.broadcast(ref, 0)
    same = torch.tensor([1 if torch.equal(checksum, ref) else 0], device=device)
    dist.all_reduce(same, op=dist.ReduceOp.MIN)
    ok = bool(same.item())

    if rank == 0:
        if times:
            mean = sum(times) / len(times)
            print("ddp_step: mean step time %.2f ms over %d steps (after %d warm-up), %.2f GB/s of gradients"
                  % (mean * 1e3, len(times), args.warmup, nparams * 4 / mean / 1e9))
        print("ddp_step: parameters identical on all ranks: %s" % ("yes" if ok else "NO"))
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
