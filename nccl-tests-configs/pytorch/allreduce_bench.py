#!/usr/bin/env python3
"""torch.distributed all_reduce over a sweep of sizes, launched by torchrun; prints GB/s per size.

    torchrun --nproc_per_node=2 allreduce_bench.py [-b 8] [-e 256M] [-f 2] [--iters 20]

(nccl-tests' -b/-e/-f; the long forms are --min-bytes/--max-bytes/--factor: torchrun would take a bare
"--max" as an abbreviation of its own --max-restarts.)

Columns follow nccl-tests: algbw = bytes / time, busbw = algbw x 2(n-1)/n (the bandwidth each link carries in a
ring all_reduce), time = mean per all_reduce (us) measured with CUDA events around --iters back-to-back calls.
Every size is also checked once (like nccl-tests -c 1): rank r contributes r+1, the sum must be n(n+1)/2 in
every element; exit status 1 on any mismatch.  --csv FILE writes the table.  --cpu uses gloo on CPU.
"""

import argparse
import csv
import os
import sys
import time

torch = dist = None  # imported by import_torch(): --help and the usage errors work without PyTorch
DTYPE_NAMES = ("bfloat16", "float16", "float32", "int32")


def import_torch():
    global torch, dist
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print("allreduce_bench.py: cannot import torch with %s (%s): install PyTorch for this interpreter "
              "(pip install torch), or launch me with the python that has it" % (sys.executable, e), file=sys.stderr)
        sys.exit(2)


def size_arg(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", "--min-bytes", type=size_arg, default=8, help="smallest size in bytes (K/M/G ok; default 8)")
    ap.add_argument("-e", "--max-bytes", type=size_arg, default=256 << 20, help="largest size (default 256M)")
    ap.add_argument("-f", "--factor", type=int, default=2, help="size multiplier per step (default 2)")
    ap.add_argument("--iters", type=int, default=20, help="timed iterations per size (default 20)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed iterations per size (default 5)")
    ap.add_argument("--dtype", choices=DTYPE_NAMES, default="float32")
    ap.add_argument("--csv", help="also write the table to this CSV file (rank 0)")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU instead of NCCL on GPUs")
    return ap.parse_args()


def main():
    args = parse_args()
    if "RANK" not in os.environ:
        print("allreduce_bench.py: run me with torchrun, e.g. torchrun --nproc_per_node=2 %s" % sys.argv[0],
              file=sys.stderr)
        return 2
    if args.factor < 2 or args.min_bytes <= 0 or args.max_bytes < args.min_bytes:
        print("allreduce_bench.py: need 0 < -b <= -e and -f >= 2", file=sys.stderr)
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
            print("allreduce_bench.py: no CUDA device (use --cpu to try the script on CPU)", file=sys.stderr)
            return 2
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", device_id=device)

    dtype = getattr(torch, args.dtype)
    esize = torch.tensor([], dtype=dtype).element_size()
    busfactor = 2.0 * (world - 1) / world
    if rank == 0:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if not args.cpu else "-"
        print("# allreduce_bench: world %d, backend %s, torch %s, NCCL %s, dtype %s, NCCL_NET=%s NCCL_NET_PLUGIN=%s"
              % (world, dist.get_backend(), torch.__version__, nccl, args.dtype,
                 os.environ.get("NCCL_NET", "(unset)"), os.environ.get("NCCL_NET_PLUGIN", "(unset)")))
        print("# %12s %12s %10s %10s %10s %7s" % ("size (B)", "count", "time (us)", "algbw GB/s", "busbw GB/s", "check"),
              flush=True)

    rows, bad = [], 0
    size = args.min_bytes
    buf = torch.empty(max(1, args.max_bytes // esize), dtype=dtype, device=device)
    while size <= args.max_bytes:
        count = max(1, size // esize)
        t = buf[:count]
        # check once: sum of (rank+1) over ranks
        t.fill_(rank + 1)
        dist.all_reduce(t)
        expect = world * (world + 1) / 2
        ok = bool(torch.all(t == expect).item())
        flag = torch.tensor([0 if ok else 1], device=device)
        dist.all_reduce(flag)
        ok_all = flag.item() == 0
        bad += 0 if ok_all else 1
        for _ in range(args.warmup):
            dist.all_reduce(t)
        if args.cpu:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(t)
            sec = (time.perf_counter() - t0) / args.iters
        else:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            dist.barrier(device_ids=[local_rank])
            start.record()
            for _ in range(args.iters):
                dist.all_reduce(t)
            end.record()
            end.synchronize()
            sec = start.elapsed_time(end) / 1e3 / args.iters
        # report the slowest rank's time, as a collective is only as fast as its slowest member
        tt = torch.tensor([sec], dtype=torch.float64, device=device)
        dist.all_reduce(tt, op=dist.ReduceOp.MAX)
        sec = tt.item()
        nbytes = count * esize
        algbw = nbytes / sec / 1e9
        busbw = algbw * busfactor
        rows.append((nbytes, count, sec * 1e6, algbw, busbw, "ok" if ok_all else "WRONG"))
        if rank == 0:
            print("  %12d %12d %10.2f %10.2f %10.2f %7s" % rows[-1], flush=True)
        size *= args.factor

    if rank == 0:
        big = [r for r in rows if r[0] >= 32 << 20]
        if big:
            print("# busbw at >= 32 MB: %s GB/s" % ", ".join("%.2f" % r[4] for r in big))
        print("# %s" % ("all sizes correct" if not bad else "%d size(s) WRONG" % bad))
        if args.csv:
            with open(args.csv, "w", newline="") as fh:
                w = csv.writer(fh)
                w.writerow(["size", "count", "time_us", "algbw_gbps", "busbw_gbps", "check"])
                w.writerows(rows)
    dist.destroy_process_group()
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
