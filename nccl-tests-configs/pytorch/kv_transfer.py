#!/usr/bin/env python3
"""KV-cache transfer of disaggregated serving: a prefill process sends KV-cache blocks to a decode process.

    torchrun --nnodes=2 --node_rank=R --nproc_per_node=1 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \\
        kv_transfer.py [--layers 32] [--kv-heads 16] [--head-dim 128] [--block-tokens 16] [--blocks 200]

Rank 0 is the prefill instance, rank 1 the decode instance (exactly 2 ranks). A block is the KV cache of
--block-tokens tokens for every layer: layers x 2 (K and V) x kv-heads x block-tokens x head-dim elements of
--dtype (default bf16; the defaults make 32 x 2 x 16 x 16 x 128 x 2 B = 4 MiB). torch.distributed send/recv over
NCCL (through NCCL_NET: the plugin or NCCL's Socket transport) or, with --cpu, gloo.

Two phases, both checked block by block:
  block    --blocks blocks one at a time: prefill sends a block, decode answers with a 4-byte ack once it has it;
           the time send -> ack, per block, gives the p50/p99 latency and the GB/s of one block in isolation.
  request  --requests requests of --request-blocks blocks each (a prompt's whole KV cache): all sends posted
           at once (isend), one ack when the last block is in; per-request time and GB/s of the stream.
--per-layer sends each block as --layers messages (one per layer, as a layer-wise pipelined transfer does).
Every block's content is a pattern of its number (exact in bf16), one of 7 that rotate, received into a pool
whose size is not a multiple of 7, so a block that did not land (stale data) or landed in the wrong place is
a mismatch; the decode side compares each received block with the expected one (on the device, after its ack,
overlapping the next transfer) and reports the count. Exit status 1 on any mismatch.

Output (rank 0): a header with the world, backend, NCCL version and NCCL_NET/NCCL_NET_PLUGIN, then one row per
phase: count, p50/p99/mean time in us, GB/s (bytes / mean time), check.
--json FILE writes the same.
"""

import argparse
import json
import os
import statistics
import sys
import time

NPAT = 7  # distinct block patterns


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=16, help="KV heads per layer (default 16)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block-tokens", type=int, default=16, help="tokens per KV block (default 16)")
    ap.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    ap.add_argument("--blocks", type=int, default=200, help="blocks of the block phase (default 200)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed blocks and requests first (default 10)")
    ap.add_argument("--requests", type=int, default=20, help="requests of the request phase (default 20; 0: skip)")
    ap.add_argument("--request-blocks", type=int, default=32,
                    help="blocks per request (default 32: 512 tokens with 16-token blocks)")
    ap.add_argument("--per-layer", action="store_true", help="one message per layer instead of one per block")
    ap.add_argument("--device", type=int, help="CUDA device (default: LOCAL_RANK)")
    ap.add_argument("--json", help="also write the results to this file (rank 0)")
    ap.add_argument("--cpu", action="store_true", help="gloo on CPU instead of NCCL on GPUs")
    ap.add_argument("--selftest-corrupt", type=int, default=-1, metavar="N",
                    help="(tests of this script) the prefill side sends block number N with the wrong pattern")
    a = ap.parse_args()
    for k in ("layers", "kv_heads", "head_dim", "block_tokens", "blocks", "request_blocks"):
        if getattr(a, k) < 1:
            ap.error("--%s must be >= 1" % k.replace("_", "-"))
    if a.requests < 0 or a.warmup < 0:
        ap.error("--requests and --warmup must be >= 0")
    return a


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100.0 * len(s) + 0.5)) - 1))]  # nearest rank


def main():
    args = parse_args()
    if "RANK" not in os.environ:
        print("kv_transfer.py: run me with torchrun (2 processes), e.g. torchrun --standalone --nproc_per_node=2 %s"
              % sys.argv[0], file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world != 2:
        print("kv_transfer.py: needs exactly 2 ranks (prefill = 0, decode = 1), got %d" % world, file=sys.stderr)
        return 2
    if args.cpu:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    else:
        if not torch.cuda.is_available():
            print("kv_transfer.py: no CUDA device (use --cpu to try the script on CPU)", file=sys.stderr)
            return 2
        dev = args.device if args.device is not None else int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(dev)
        device = torch.device("cuda", dev)
        try:
            dist.init_process_group("nccl", device_id=device)
        except TypeError:  # torch < 2.3
            dist.init_process_group("nccl")
    dtype = getattr(torch, args.dtype)
    shape = (args.layers, 2, args.kv_heads, args.block_tokens, args.head_dim)
    numel = 1
    for d in shape:
        numel *= d
    esize = torch.tensor([], dtype=dtype).element_size()
    block_bytes = numel * esize
    peer = 1 - rank

    def sync():
        if not args.cpu:
            torch.cuda.synchronize()

    # the NPAT block patterns: small integers, exact in bf16
    idx = torch.arange(numel, device=device, dtype=torch.int64)
    pats = [(((idx * 3 + p * 101) % 251) - 125).to(dtype).view(shape) for p in range(NPAT)]
    del idx
    pool_n = max(4, 2 * args.request_blocks)  # the blocks being checked and those being received
    if pool_n % NPAT == 0:
        pool_n += 1
    pool = [torch.empty(shape, dtype=dtype, device=device) for _ in range(pool_n if rank == 1 else 0)]
    ack = torch.zeros(1, dtype=torch.int32, device=device)
    bad = torch.zeros(1, dtype=torch.int64, device=device)  # decode: mismatching blocks (no sync per block)
    checked = 0

    def parts(t):
        return [t[l] for l in range(args.layers)] if args.per_layer else [t]

    def send_block(b):
        p = (b + 1) % NPAT if b == args.selftest_corrupt else b % NPAT
        return [dist.isend(x, peer) for x in parts(pats[p])]

    def recv_block(slot):
        return [dist.irecv(x, peer) for x in parts(pool[slot])]

    def check(slot, b):
        nonlocal checked
        bad.add_(torch.ne(pool[slot], pats[b % NPAT]).any().to(torch.int64))
        checked += 1

    results = []
    nb = 0  # blocks moved so far (both sides count alike: it names the pattern and the pool slot)

    # One phase: `count` transfers (after --warmup untimed ones) of `per` blocks each, all posted at once, then one ack
    # from the decode side; the prefill side times each transfer (send -> ack). The decode side posts the receives of
    # the next transfer before it checks the current one, so the check overlaps the next transfer instead of
    # delaying it.
    def post(first, count):
        works, todo = [], []
        for k in range(count):
            slot = (first + k) % pool_n
            works += recv_block(slot)
            todo.append((slot, first + k))
        return works, todo

    def phase(name, count, per):
        nonlocal nb
        lat = []
        total = args.warmup + count if count else 0
        pending = post(nb, per) if rank == 1 and total else None
        for i in range(total):
            if rank == 0:
                sync()
                t0 = time.perf_counter()
                works = []
                for k in range(per):
                    works += send_block(nb + k)
                for w in works:
                    w.wait()
                dist.recv(ack, peer)
                sync()
                if i >= args.warmup:
                    lat.append(time.perf_counter() - t0)
            else:
                works, todo = pending
                for w in works:
                    w.wait()
                dist.send(ack, peer)
                pending = post(nb + per, per) if i + 1 < total else None
                for slot, b in todo:
                    check(slot, b)
            nb += per
        if rank == 0 and lat:
            nbytes = block_bytes * per
            results.append({"phase": name, "count": len(lat), "bytes": nbytes, "p50_us": pct(lat, 50) * 1e6,
                            "p99_us": pct(lat, 99) * 1e6, "mean_us": statistics.mean(lat) * 1e6,
                            "gbps": nbytes * len(lat) / sum(lat) / 1e9})

    phase("block", args.blocks, 1)  # one block, one ack: per-block latency
    phase("request", args.requests, args.request_blocks)  # a prompt's blocks at once

    # ---- verdict: the decode side's mismatch count goes to the prefill side ----
    sync()
    verdict = torch.tensor([int(bad.item()) if rank == 1 else 0, checked], dtype=torch.int64, device=device)
    if rank == 1:
        dist.send(verdict, peer)
    else:
        dist.recv(verdict, peer)
    nbad, nchecked = int(verdict[0].item()), int(verdict[1].item())
    if rank == 0:
        nccl = "-" if args.cpu else ".".join(map(str, torch.cuda.nccl.version()))
        print("# kv_transfer: world 2, backend %s, torch %s, NCCL %s, NCCL_NET=%s NCCL_NET_PLUGIN=%s" % (
            dist.get_backend(), torch.__version__, nccl, os.environ.get("NCCL_NET", "(unset)"),
            os.environ.get("NCCL_NET_PLUGIN", "(unset)")))
        print("# block: %d layers x 2 x %d heads x %d tokens x %d dim %s = %d bytes (%.2f MiB)%s" % (
            args.layers, args.kv_heads, args.block_tokens, args.head_dim, args.dtype, block_bytes,
            block_bytes / 1048576.0, ", one message per layer" if args.per_layer else ""))
        print("# %-8s %6s %12s %10s %10s %10s %8s %7s" % ("phase", "count", "bytes", "p50 us", "p99 us", "mean us",
                                                          "GB/s", "check"))
        for r in results:
            r["check"] = "ok" if nbad == 0 else "WRONG"
            print("  %-8s %6d %12d %10.1f %10.1f %10.1f %8.2f %7s" % (
                r["phase"], r["count"], r["bytes"], r["p50_us"], r["p99_us"], r["mean_us"], r["gbps"], r["check"]))
        print("# %d blocks checked on the decode side: %s" % (
            nchecked, "all correct" if nbad == 0 else "%d WRONG" % nbad))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "block_bytes": block_bytes, "results": results,
                           "checked": nchecked, "wrong": nbad}, f, indent=1)
    dist.destroy_process_group()
    return 0 if nbad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
