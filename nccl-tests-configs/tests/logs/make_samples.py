#!/usr/bin/env python3
"""Writes the synthetic sample logs of this directory (see README.md): nccl-tests' exact print formats
(src/util.cu for >= 2.17, src/common.cu before), a latency + bytes/bandwidth model for the numbers.
Deterministic (seeded): re-running it reproduces the committed files."""
import random, os, sys
OUT = os.path.dirname(os.path.abspath(__file__))
HOST = "sample-host"

def getFloatStr(v, w):
    for f in ("%*.2f", "%*.1f", "%*.0f"):
        s = f % (w, v)
        if len(s) <= w: return s
    return ("%*.1e" if w >= 7 else "%*.0e") % (w, v)

def sizes(mn, mx, f):
    s = mn; out = []
    while s <= mx:
        out.append(s); s *= f
    return out

def coll_counts(coll, size, nranks, ws=4):
    count = size // ws
    if coll in ("all_gather", "reduce_scatter"):
        base = (count // nranks) & ~(16 // ws - 1)
        if coll == "all_gather":
            send, recv, param = base, base * nranks, base
        else:
            send, recv, param = base * nranks, base, base
    else:
        send = recv = param = count
    return max(send, recv) * ws, param

def bw(coll, param, ws, nranks, sec):
    if coll in ("all_gather", "reduce_scatter"):
        alg = param * ws * nranks / 1e9 / sec
        return alg, alg * (nranks - 1) / nranks
    if coll == "all_reduce":
        alg = param * ws / 1e9 / sec
        return alg, alg * 2 * (nranks - 1) / nranks
    alg = param * ws / 1e9 / sec
    return alg, alg

def model_time(coll, nbytes_bus, lat, peak, rng, small_knee=65536):
    # latency + bytes/peak, with a mild protocol-dependent knee and noise
    t = lat + nbytes_bus / (peak * 1e3)   # us
    t *= 1 + 0.03 * rng.random()
    return t

def env_line(pairs):
    return " ".join("%s=%s" % kv for kv in pairs)

def rm_header(case, coll, proto, preset, role, envs, cmd):
    files = "".join(". /opt/libnccl-net-gdr/nccl-tests-configs/%s.env; " % p for p in preset.split(","))
    return ("# run-matrix: case=%s collective=%s proto=%s algo=RING preset=%s role=%s host=%s date=2026-11-30T09:12:44Z env: %s\n"
            "# run-matrix command: ( set -a; %sNCCL_PROTO=%s; NCCL_ALGO=RING; set +a; exec timeout --kill-after=30 900 %s )\n"
            % (case, coll, proto, preset, role, HOST, env_line(envs), files, proto, cmd.replace(",", " ")))

PLUGIN_INFO = """{h}:{pid}:{pid} [0] NCCL INFO Bootstrap: Using eth0:10.20.0.11<0>
{h}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 13000
{h}:{pid}:{pid} [0] NCCL INFO NCCL_NET_PLUGIN set by environment to gdr
{h}:{pid}:{pid} [0] NCCL INFO NET/Plugin: Loaded net plugin GDR (v8)
{h}:{pid}:{pid} [0] NCCL INFO Successfully loaded external network plugin /usr/lib/x86_64-linux-gnu/libnccl-net-gdr.so
{h}:{pid}:{pid} [0] NCCL INFO Initialized NET plugin GDR
{h}:{pid}:{pid} [0] NCCL INFO Assigned NET plugin GDR to comm
{h}:{pid}:{pid} [0] NCCL INFO Using network GDR
{h}:{pid}:{pid} [1] NCCL INFO Using network GDR
{h}:{pid}:{pid} [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a3f1b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x8a1f3c0b2de46a71 - Init START
{h}:{pid}:{pid} [1] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8b71e20 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 43000 commId 0x8a1f3c0b2de46a71 - Init START
{h}:{pid}:{tid} [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/GDR/0
{h}:{pid}:{tid} [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/GDR/0
{h}:{pid}:{tid2} [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/GDR/0
{h}:{pid}:{tid2} [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/GDR/0
{h}:{pid}:{pid} [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a3f1b0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x8a1f3c0b2de46a71 - Init COMPLETE
{h}:{pid}:{pid} [1] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8b71e20 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 43000 commId 0x8a1f3c0b2de46a71 - Init COMPLETE
"""
SOCKET_INFO = """{h}:{pid}:{pid} [0] NCCL INFO Bootstrap: Using eth0:10.20.0.11<0>
{h}:{pid}:{pid} [0] NCCL INFO cudaDriverVersion 13000
{h}:{pid}:{pid} [0] NCCL INFO NCCL_NET_PLUGIN set by environment to none
{h}:{pid}:{pid} [0] NCCL INFO NET/Socket : Using [0]eth0:10.20.0.11<0>
{h}:{pid}:{pid} [0] NCCL INFO Initialized NET plugin Socket
{h}:{pid}:{pid} [0] NCCL INFO Assigned NET plugin Socket to comm
{h}:{pid}:{pid} [0] NCCL INFO Using network Socket
{h}:{pid}:{pid} [1] NCCL INFO Using network Socket
{h}:{pid}:{tid} [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0
{h}:{pid}:{tid} [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/Socket/0
{h}:{pid}:{tid2} [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0
{h}:{pid}:{tid2} [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/Socket/0
"""

def new_log(coll, proto, role, mn=8, mx=134217728, f=2, lat=24.0, peak=9.6, seed=1, check=1,
            wrong_at=None, truncate_after=None, per_iter=False, timestamps=False, rmheader=True,
            preset=None, envs=None, info=True):
    rng = random.Random(seed)
    nranks = 2
    pid = 48211 + seed
    lines = []
    case = "%s.%s" % (coll, proto)
    prog = "%s_perf" % coll
    cmd = "/opt/nccl-tests/build/%s,-b,%d,-e,%d,-f,%d,-g,2,-c,%d,-n,20,-w,5" % (prog, mn, mx, f, check)
    if rmheader:
        lines.append(rm_header(case, coll, proto, preset, role, envs, cmd))
    P = lines.append
    P("# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809\n")
    P("# Collective test starting: %s\n" % prog)
    P("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d unalign: %d\n"
      % (1, 2, mn, mx, f, "factor", 5, 20, 1, check, 0, 0))
    if per_iter:
        P("# Per-Iteration Report: CUDA event timing; i_* uses max over process rows \n")
    P("#\n")
    P("# Using devices\n")
    P("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n" % (0, 0, pid, HOST, 0, 0, 0x1b, 0, "NVIDIA H200"))
    P("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n" % (1, 0, pid, HOST, 1, 0, 0x43, 0, "NVIDIA H200"))
    if info:
        tmpl = PLUGIN_INFO if role == "plugin" else SOCKET_INFO
        lines.append(tmpl.format(h=HOST, pid=pid, tid=pid + 31, tid2=pid + 33))
    tsLbl = "timestamp" if timestamps else ""
    tsPad = 19 if timestamps else 0
    tsFmt = "%Y-%m-%d %H:%M:%S" if timestamps else ""
    timeStr = "time"
    P("#\n")
    if per_iter:
        P("# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)                                in-place (+ per-iteration)\n" % ("", "", "", "", ""))
        P(("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s\n") %
          ("size", "count", "type", "redop", "root", timeStr, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%",
           timeStr, "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%", tsPad, tsLbl))
        P(("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s %*s\n") %
          ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)", "(us)", "(%)", tsPad, tsFmt))
    else:
        P("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n" % ("", "", "", "", ""))
        P("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n" % ("size", "count", "type", "redop", "root",
          timeStr, "algbw", "busbw", "#wrong", timeStr, "algbw", "busbw", "#wrong", tsPad, tsLbl))
        P("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n" % ("(B)", "(elements)", "", "", "",
          "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", tsPad, tsFmt))
    redop = {"all_gather": "none"}.get(coll, "sum")
    bws = []
    nrow = 0
    errors = 0
    for s in sizes(mn, mx, f):
        psize, param = coll_counts(coll, s, nranks)
        row = "%12li  %12li  %8s  %6s  %6s" % (psize, param, "float", redop, "%6i" % -1)
        parts = [row]
        for inplace in (0, 1):
            busbytes = psize * (2 * (nranks - 1) / nranks if coll == "all_reduce" else 1.0)
            t = model_time(coll, busbytes, lat, peak, rng)
            if psize == 0:
                t = 4.0 + rng.random()
            alg, bus = bw(coll, param, 4, nranks, t * 1e-6)
            w = 0
            if wrong_at and s in wrong_at and inplace == 0:
                w = wrong_at[s]; errors += 1
            report = check and not (coll == "sendrecv" and inplace)
            if report:
                parts.append("  %7s  %6s  %6s  %6g" % (getFloatStr(t, 7), getFloatStr(alg, 6), getFloatStr(bus, 6), w))
            else:
                parts.append("  %7s  %6s  %6s    N/A" % (getFloatStr(t, 7), getFloatStr(alg, 6), getFloatStr(bus, 6)))
            if per_iter:
                mn_ = t * 0.96; mx_ = t * 1.18; p99 = t * 1.15; cv = 2.0 + 3 * rng.random()
                parts.append("  %7s  %7s  %7s  %7s" % (getFloatStr(mn_, 7), getFloatStr(mx_, 7), getFloatStr(p99, 7), getFloatStr(cv, 7)))
            bws.append(bus)
        if timestamps:
            parts.append("%21s" % ("2026-11-30 09:%02d:%02d" % (13 + nrow // 60, nrow % 60)))
        line = "".join(parts) + "\n"
        if truncate_after is not None and nrow == truncate_after:
            # killed while printing this row: only the out-of-place half made it
            lines.append(parts[0] + parts[1])
            return "".join(lines)
        lines.append(line)
        nrow += 1
    avg = sum(bws) / len(bws) / 1  # nccl-tests averages busbw over all bodies
    P("# %-20s : %d %s\n" % ("Out of bounds values", errors, "FAILED" if errors else "OK"))
    P("# %-20s : %g %s\n" % ("Avg bus bandwidth", avg, ""))
    P("#\n")
    P("# Collective test concluded: %s\n" % prog)
    P("#\n")
    P("\n")
    return "".join(lines)

def old_log(coll, proto, role, mn=8, mx=134217728, f=2, lat=24.0, peak=9.6, seed=1, preset=None, envs=None):
    """nccl-tests <= 2.16 (src/common.cu printed everything, %6.2f bandwidths, %5g #wrong)."""
    rng = random.Random(seed)
    nranks = 2; pid = 50311 + seed
    case = "%s.%s" % (coll, proto); prog = "%s_perf" % coll
    L = []; P = L.append
    cmd = "/opt/nccl-tests/build/%s,-b,%d,-e,%d,-f,%d,-g,2,-c,1,-n,20,-w,5" % (prog, mn, mx, f)
    P(rm_header(case, coll, proto, preset, role, envs, cmd))
    P("# nThread %d nGpus %d minBytes %ld maxBytes %ld step: %ld(%s) warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d\n"
      % (1, 2, mn, mx, f, "factor", 5, 20, 1, 1, 0))
    P("#\n")
    P("# Using devices\n")
    P("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n" % (0, 0, pid, HOST, 0, 0x1b, "NVIDIA H200"))
    P("#  Rank %2d Group %2d Pid %6d on %10s device %2d [0x%02x] %s\n" % (1, 0, pid, HOST, 1, 0x43, "NVIDIA H200"))
    tmpl = PLUGIN_INFO if role == "plugin" else SOCKET_INFO
    P(tmpl.format(h=HOST, pid=pid, tid=pid + 31, tid2=pid + 33))
    P("#\n")
    P("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n" % ("", "", "", "", ""))
    P("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n" % ("size", "count", "type", "redop", "root",
      "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"))
    P("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n" % ("(B)", "(elements)", "", "", "",
      "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
    redop = {"all_gather": "none"}.get(coll, "sum")
    bws = []
    for s in sizes(mn, mx, f):
        psize, param = coll_counts(coll, s, nranks)
        parts = ["%12li  %12li  %8s  %6s  %6s" % (psize, param, "float", redop, "%6i" % -1)]
        for inplace in (0, 1):
            t = model_time(coll, psize, lat, peak, rng)
            if psize == 0: t = 4.0 + rng.random()
            alg, bus = bw(coll, param, 4, nranks, t * 1e-6)
            ts = "%7.0f" % t if t >= 10000 else ("%7.1f" % t if t >= 100 else "%7.2f" % t)
            if coll == "sendrecv" and inplace:
                parts.append("  %7s  %6.2f  %6.2f  %5s" % (ts, alg, bus, "N/A"))
            else:
                parts.append("  %7s  %6.2f  %6.2f  %5g" % (ts, alg, bus, 0))
            bws.append(bus)
        P("".join(parts) + "\n")
    P("# Out of bounds values : %d %s\n" % (0, "OK"))
    P("# Avg bus bandwidth    : %g %s\n" % (sum(bws) / len(bws), ""))
    P("#\n")
    P("\n")
    return "".join(L)

PENV = [("NCCL_NET_PLUGIN", "gdr"), ("NCCL_NET", "GDR"), ("GDRNET_TRANSPORT", "tcp"), ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET"), ("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0")]
BENV = [("NCCL_NET_PLUGIN", "none"), ("NCCL_NET", "Socket"), ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "INIT,NET"), ("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0")]

def write(rel, text):
    p = os.path.join(OUT, rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "w") as fh: fh.write(text)

def penv(proto): return PENV + [("NCCL_PROTO", proto), ("NCCL_ALGO", "RING")]
def benv(proto): return BENV + [("NCCL_PROTO", proto), ("NCCL_ALGO", "RING")]

cases = [("all_reduce", "Simple", "new"), ("all_gather", "LL", "new"), ("reduce_scatter", "LL128", "old"), ("sendrecv", "Simple", "new")]
for i, (coll, proto, fmt) in enumerate(cases):
    gen = new_log if fmt == "new" else old_log
    mx = 134217728 if coll == "all_reduce" else 16777216
    write("plugin/%s.%s.log" % (coll, proto), gen(coll, proto, "plugin", mx=mx, lat=24.0, peak=9.6, seed=10 + i, preset="tcp,single-host", envs=penv(proto)))
    write("baseline/%s.%s.log" % (coll, proto), gen(coll, proto, "baseline", mx=mx, lat=26.0, peak=3.1, seed=20 + i, preset="baseline-socket,single-host", envs=benv(proto)))
write("bad/truncated.all_reduce.LL.log", new_log("all_reduce", "LL", "plugin", mx=134217728, seed=31, truncate_after=19, preset="tcp,single-host", envs=penv("LL")))
write("bad/wrong.all_reduce.LL128.log", new_log("all_reduce", "LL128", "plugin", mx=16777216, seed=32, wrong_at={65536: 16384, 1048576: 3}, preset="tcp,single-host", envs=penv("LL128")))
write("variants/periter_timestamps.log", new_log("all_reduce", "Simple", "plugin", mn=1024, mx=1048576, f=4, seed=41, per_iter=True, timestamps=True, rmheader=False, info=False))
write("variants/nocheck.log", new_log("all_gather", "Simple", "plugin", mn=8, mx=65536, f=2, seed=42, check=0, rmheader=False, info=False))
