#!/usr/bin/env python3
"""Issue 14 exploration on the one-GPU machine: nccl-tests through NCCL Socket and the plugin (two MPI ranks on GPU 0
as two hosts), plugin builds and knob variants, NCCL settings on both, the CPU use of each thread kind in a steady
128 MB all_reduce. Prints a summary as it goes; every log under OUT/logs.

usage: explore.py PLAN OUT   (PLAN: a python file defining RUNS, a list of dicts, see below)
"""
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

W = "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl"
NT = "/tmp/nt"
T0 = time.time()
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")


def log(*a):
    print("%5.0fs" % (time.time() - T0), *a, flush=True)


def cpu_stat():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal
    return {"user": v[0] + v[1], "sys": v[2], "idle": v[3] + v[4], "irq": v[5], "soft": v[6], "steal": v[7]}


def threads_of(names):
    """{thread name: ticks} over every process whose comm starts with one of names."""
    out = {}
    for p in glob.glob("/proc/[0-9]*"):
        try:
            with open(p + "/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if not any(comm.startswith(n) for n in names):
            continue
        for t in glob.glob(p + "/task/*"):
            try:
                with open(t + "/stat") as f:
                    s = f.read()
            except OSError:
                continue
            name = s[s.index("(") + 1:s.rindex(")")]
            f2 = s[s.rindex(")") + 2:].split()
            key = re.sub(r"[0-9]+", "#", name)
            out[key] = out.get(key, 0) + int(f2[11]) + int(f2[12])
    return out


class Sampler(threading.Thread):
    def __init__(self, names):
        super().__init__(daemon=True)
        self.names, self.samples, self.stop = names, [], False

    def run(self):
        while not self.stop:
            self.samples.append((time.time(), cpu_stat(), threads_of(self.names)))
            time.sleep(0.25)

    def best_window(self, span=1.0):
        """The window of ~span seconds with the most CPU in the processes: per thread kind, cores used."""
        best = None
        s = self.samples
        for i in range(len(s)):
            for j in range(i + 1, len(s)):
                if s[j][0] - s[i][0] >= span:
                    tot = sum(s[j][2].values()) - sum(s[i][2].values())
                    if best is None or tot > best[0]:
                        best = (tot, i, j)
                    break
        if best is None:
            return None
        _, i, j = best
        dt = s[j][0] - s[i][0]
        hz = os.sysconf("SC_CLK_TCK")
        th = {k: (s[j][2].get(k, 0) - s[i][2].get(k, 0)) / hz / dt for k in s[j][2]}
        st = {k: (s[j][1][k] - s[i][1][k]) / hz / dt for k in s[j][1]}
        return {"threads": {k: round(v, 2) for k, v in sorted(th.items(), key=lambda x: -x[1]) if v >= 0.02},
                "host": {k: round(v, 2) for k, v in st.items()}}


def parse(path):
    rows, net, chans, proto = {}, None, None, None
    with open(path, errors="replace") as f:
        text = re.sub(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] NCCL INFO (?!Using network|\d+ coll channels)[^\n]*\n", "", f.read())
        for line in text.split("\n"):
            m = re.search(r"Using network (\S+)", line)
            if m:
                net = m.group(1)
            m = re.search(r"(\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels, (\d+) p2p channels, (\d+) p2p channels per peer", line)
            if m:
                chans = "%s coll/%s p2p/%s per peer" % (m.group(1), m.group(4), m.group(5))
            m = ROW.match(line)
            if m and not line.lstrip().startswith("#"):
                rows[int(m.group(1))] = {"time": float(m.group(3)), "busbw": float(m.group(5)), "wrong": m.group(6),
                                         "time_ip": float(m.group(7)), "busbw_ip": float(m.group(9)),
                                         "wrong_ip": m.group(10)}
    ok = bool(rows) and all(r["wrong"] in ("0", "N/A") and r["wrong_ip"] in ("0", "N/A") for r in rows.values())
    return {"rows": rows, "net": net, "chans": chans, "ok": ok}


def run_nt(name, tp, coll, env, args, plugin, out, timeout=100, sample=False):
    bin_ = "%s/%s_perf_mpi" % (NT, coll)
    envs = ["NCCL_NVLS_ENABLE=0", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET,TUNING", "NCCL_TESTS_DEVICE=0",
            "LD_LIBRARY_PATH=%s/lib" % W]
    if tp == "socket":
        envs += ["NCCL_NET=Socket", "NCCL_NET_PLUGIN=none"]
    else:
        envs += ["NCCL_NET=GDR", "NCCL_NET_PLUGIN=" + plugin, "GDRNET_TRANSPORT=tcp"]
    envs += env
    cmd = ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "1", "env", "NCCL_HOSTID=hostA"] + envs + \
          [bin_] + args + ["-g", "1", "-c", "1", ":", "-np", "1", "env", "NCCL_HOSTID=hostB"] + envs + [bin_] + args + \
          ["-g", "1", "-c", "1"]
    log_path = os.path.join(out, "logs", name + ".log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    smp = Sampler([(coll + "_perf")[:15]]) if sample else None
    if smp:
        smp.start()
    t = time.time()
    with open(log_path, "w") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.flush()
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    if smp:
        smp.stop = True
        smp.join()
    r = parse(log_path)
    r.update({"rc": rc, "wall": round(time.time() - t, 1), "name": name})
    if smp:
        r["cpu"] = smp.best_window()
        with open(log_path, "a") as f:
            f.write("# cpu " + json.dumps(r["cpu"]) + "\n")
    return r


def fmt_row(r):
    rows = r["rows"]
    def g(sz, k):
        return rows[sz][k] if sz in rows else float("nan")
    return "8B %6.1fus 512K %6.1fus 2M %5.2f 8M %5.2f 32M %5.2f 128M %5.2f GB/s%s%s" % (
        g(8, "time"), g(524288, "time"), g(2097152, "busbw"), g(8388608, "busbw"), g(33554432, "busbw"),
        g(134217728, "busbw"), "" if r["ok"] else "  BAD(rc=%s net=%s)" % (r["rc"], r["net"]),
        ("  [" + r["chans"] + "]") if r.get("chans") else "")


def main():
    plan_path, out = sys.argv[1], sys.argv[2]
    plan = {}
    exec(open(plan_path).read(), plan)
    budget = plan.get("BUDGET", 450)
    results = []
    for it in plan["RUNS"]:
        kind = it.get("kind", "nt")
        if time.time() - T0 > budget - it.get("est", 6):
            log("skip (budget):", it["name"])
            continue
        if kind == "shell":
            p = os.path.join(out, "logs", it["name"] + ".log")
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                try:
                    subprocess.run(it["cmd"], shell=True, stdout=f, stderr=subprocess.STDOUT, timeout=it.get("timeout", 120))
                except subprocess.TimeoutExpired:
                    f.write("# timeout\n")
            with open(p) as f:
                tail = [l.rstrip() for l in f if it.get("grep", "") in l]
            log(it["name"], "\n      " + "\n      ".join(tail[-it.get("lines", 12):]))
            continue
        r = run_nt(it["name"], it["tp"], it["coll"], it.get("env", []), it.get("args", plan["ARGS"]),
                   it.get("plugin", plan.get("PLUGIN")), out, sample=it.get("sample", False))
        r["group"] = it.get("group", it["name"].rsplit("-r", 1)[0])
        results.append(r)
        log("%-34s %s" % (it["name"], fmt_row(r)))
        if r.get("cpu"):
            log("   cpu cores:", json.dumps(r["cpu"]))
    # summary: median per group and size
    log("==== summary (median [min..max] over reps) ====")
    groups = {}
    for r in results:
        groups.setdefault(r["group"], []).append(r)
    for g, rs in groups.items():
        parts = []
        for sz, k, lab in ((8, "time", "8B us"), (524288, "time", "512K us"), (33554432, "busbw", "32M"),
                           (134217728, "busbw", "128M")):
            xs = [r["rows"][sz][k] for r in rs if sz in r["rows"]]
            if xs:
                parts.append("%s %.2f [%.2f..%.2f]" % (lab, statistics.median(xs), min(xs), max(xs)))
        bad = sum(1 for r in rs if not r["ok"])
        print("%-28s n=%d %s%s" % (g, len(rs), "  ".join(parts), "  BAD %d" % bad if bad else ""), flush=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
