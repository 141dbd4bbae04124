#!/usr/bin/env python3
"""Per-thread CPU and run-queue wait of a benchmark's processes on this host while a command runs (device runs 27-28).

usage: threadcpu.py OUT.txt -- COMMAND...
Runs COMMAND and, every 0.1 s until it ends, reads /proc/PID/task/TID/{comm,stat,status,schedstat} of every process
descended from it whose environment sets NCCL_NET (the nccl-tests ranks under mpirun, the KV example's torchrun
workers), labelled by that NCCL_NET. It appends to OUT.txt, per transport and thread name, the threads, the CPU
seconds (user+system), the voluntary / involuntary context switches, and the time the threads were runnable but
waited for a CPU (schedstat's run_delay, total ms and us per switch: what a wake-up waits for the scheduler or,
in a VM, for the host to run the vCPU), each between a thread's first and last sample, summed over the processes;
and the host's steal time (/proc/stat) over the command: CPU time the hypervisor gave to others.
Two of these may run at once (the KV example's two node ranks): each counts only its own descendants.
"""
import collections
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "bench"))
import benchenv  # noqa: E402  (bench/benchenv.py: a run's processes, the host's steal)

TICK = os.sysconf("SC_CLK_TCK")


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def thread_now(base):
    name, stat, status = read(base + "comm"), read(base + "stat"), read(base + "status")
    sched = read(base + "schedstat")
    if name is None or stat is None or status is None:
        return None, None
    f = stat.rsplit(b")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / TICK
    cs = {}
    for line in status.split(b"\n"):
        if b"ctxt_switches" in line:
            k, v = line.split(b":")
            cs[k.strip().decode()] = int(v)
    delay = int(sched.split()[1]) if sched else 0
    return name.strip().decode(), (cpu, cs.get("voluntary_ctxt_switches", 0), cs.get("nonvoluntary_ctxt_switches", 0),
                                   delay)


def sample(root, seen, labels):
    for pid in [root] + benchenv.descendants(root):
        pid = str(pid)
        if labels.get(pid) is None:  # read again until set: a process read before its exec has its parent's
            env = read("/proc/%s/environ" % pid) or b""
            net = [e[9:].decode() for e in env.split(b"\0") if e.startswith(b"NCCL_NET=")]
            labels[pid] = net[0] if net else None
        if labels[pid] is None:
            continue
        try:
            tids = os.listdir("/proc/%s/task" % pid)
        except OSError:
            continue
        for tid in tids:
            name, now = thread_now("/proc/%s/task/%s/" % (pid, tid))
            if now is None:
                continue
            key = (pid, tid)
            if key not in seen:
                seen[key] = [name, now, now]
            else:
                seen[key][0], seen[key][2] = name, now


def main():
    out, cmd = sys.argv[1], sys.argv[sys.argv.index("--") + 1:]
    seen, labels = {}, {}
    s0 = benchenv.steal_now()
    p = subprocess.Popen(cmd)
    while p.poll() is None:
        sample(p.pid, seen, labels)
        time.sleep(0.1)
    s1 = benchenv.steal_now()
    agg = collections.defaultdict(lambda: [0, 0.0, 0, 0, 0])
    for (pid, _), (name, a, b) in seen.items():
        # a thread's number in its name (gdr-tcp-io/3) is folded: one row per kind
        kind = name.split("/")[0].rstrip("0123456789 ")
        r = agg[(labels.get(pid) or "?", kind)]
        r[0] += 1
        for i in range(4):
            r[i + 1] += b[i] - a[i]
    steal = benchenv.steal_pct(s0, s1)
    with open(out, "a") as f:
        f.write("# %s (rc %d); host steal %s\n%-8s %-24s %7s %9s %11s %11s %12s %10s\n" %
                (" ".join(cmd[-8:]), p.returncode, "-" if steal is None else "%.2f %%" % steal, "net", "thread", "threads", "cpu_s", "vol_cs", "invol_cs",
                 "runq_ms", "us/switch"))
        for (net, kind), (n, cpu, v, iv, d) in sorted(agg.items()):
            f.write("%-8s %-24s %7d %9.2f %11d %11d %12.1f %10.1f\n" %
                    (net, kind, n, cpu, v, iv, d / 1e6, d / 1e3 / max(1, v + iv)))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
