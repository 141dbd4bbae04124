#!/usr/bin/env python3
"""Per-thread CPU of the nccl-tests processes on this host while a command runs (device run 27).

usage: threadcpu.py OUT.txt -- COMMAND...
Runs COMMAND and, every 0.1 s until it ends, reads /proc/PID/task/TID/{comm,stat,status} of every process whose
name ends in _perf. Per process it labels the transport by NCCL_NET in its environment; it prints, per transport and
thread name, the threads, the CPU seconds (user+system) and the voluntary / involuntary context switches each
thread had between its first and its last sample, summed over the processes.
"""
import collections
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def sample(seen, labels):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        comm = read("/proc/%s/comm" % pid)
        if comm is None or not comm.strip().endswith(b"_perf"):
            continue
        if pid not in labels:
            env = read("/proc/%s/environ" % pid) or b""
            net = [e[9:].decode() for e in env.split(b"\0") if e.startswith(b"NCCL_NET=")]
            labels[pid] = net[0] if net else "?"
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for tid in tids:
            base = "/proc/%s/task/%s/" % (pid, tid)
            name, stat, status = read(base + "comm"), read(base + "stat"), read(base + "status")
            if name is None or stat is None or status is None:
                continue
            f = stat.rsplit(b")", 1)[1].split()
            cpu = (int(f[11]) + int(f[12])) / TICK
            cs = {}
            for line in status.split(b"\n"):
                if b"ctxt_switches" in line:
                    k, v = line.split(b":")
                    cs[k.strip().decode()] = int(v)
            now = (cpu, cs.get("voluntary_ctxt_switches", 0), cs.get("nonvoluntary_ctxt_switches", 0))
            key = (pid, tid)
            if key not in seen:
                seen[key] = [name.strip().decode(), now, now]
            else:
                seen[key][2] = now


def main():
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    seen, labels = {}, {}
    p = subprocess.Popen(cmd)
    while p.poll() is None:
        sample(seen, labels)
        time.sleep(0.1)
    agg = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    for (pid, _), (name, a, b) in seen.items():
        # a thread's number in its name (gdr-tcp-io/3) is folded: one row per kind
        kind = name.split("/")[0].rstrip("0123456789 ")
        r = agg[(labels.get(pid, "?"), kind)]
        r[0] += 1
        r[1] += b[0] - a[0]
        r[2] += b[1] - a[1]
        r[3] += b[2] - a[2]
    with open(out, "a") as f:
        f.write("# %s (rc %d)\n%-8s %-24s %7s %9s %11s %11s\n" % (" ".join(cmd[-8:]), p.returncode, "net", "thread",
                                                               "threads", "cpu_s", "vol_cs", "invol_cs"))
        for (net, kind), (n, cpu, v, iv) in sorted(agg.items()):
            f.write("%-8s %-24s %7d %9.2f %11d %11d\n" % (net, kind, n, cpu, v, iv))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
