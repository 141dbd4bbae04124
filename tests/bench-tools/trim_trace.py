#!/usr/bin/env python3
"""Cuts a VEMU_TRACE file (plain or .gz) down to a small fixture: keeps the lines (in file order) whose time is at
or before the first moment when at least MSGS data completions (RECV_RDMA_WITH_IMM) have happened and, over the
whole trace, clear-to-sends posted = landed = data messages posted = arrived = completed (nothing in flight).

usage: trim_trace.py IN OUT MSGS      (OUT is written plain; gzip it with gzip -9n)
fixtures/{gdr,ib}-sendrecv.trace.gz: from the GPU run of 2026-11-30 (nccl-tests sendrecv_perf 1 MiB, 2 processes,
one channel, on the verbs emulator; ours and stock NCCL 2.28.9 IB), MSGS = 32 (16 messages per direction)."""
import collections
import gzip
import sys


def main():
    src, dst, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
    opener = gzip.open if open(src, "rb").read(2) == b"\x1f\x8b" else open
    with opener(src, "rt") as f:
        lines = f.read().splitlines()
    ev = sorted((int(l.split()[2][2:]), i, l) for i, l in enumerate(lines) if l.startswith("vemu pid="))
    c = collections.Counter()
    cut = None
    for t, _, l in ev:
        w = l.split()
        kv = dict(x.split("=", 1) for x in w[3:] if "=" in x)
        if w[3] == "post" and kv.get("op") in ("WRITE", "WRITE_IMM"):
            c["post " + kv["op"]] += 1
        elif w[3] == "exec" and w[4] == "target" and kv.get("op") in ("WRITE", "WRITE_IMM"):
            c["landed " + kv["op"]] += 1
        elif w[3] == "cqe" and kv.get("opcode") == "129":
            c["done"] += 1
        vals = [c["post WRITE"], c["post WRITE_IMM"], c["landed WRITE"], c["landed WRITE_IMM"], c["done"]]
        if c["done"] >= want and len(set(vals)) == 1:
            cut = t
            break
    if cut is None:
        raise SystemExit("no quiescent point after %d completions" % want)
    keep = [l for t, i, l in sorted(ev, key=lambda x: x[1]) if t <= cut]
    with open(dst, "w") as f:
        f.write("\n".join(keep) + "\n")
    print("%s: %d of %d lines, cut at t=%d (%s)" % (dst, len(keep), len(lines), cut, dict(c)))


if __name__ == "__main__":
    main()
