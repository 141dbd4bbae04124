#!/usr/bin/env python3
"""GPU machine: after each ABORTED line of abort_reinit (pid, CLOCK_MONOTONIC t_ns), the verbs emulator's trace
(VEMU_TRACE, same clock) must show no QP and no MR of that process still alive. Prints one line per abort and exits
non-zero on any leftover.   usage: check_abort_trace.py TRACE ABORT_REINIT_STDOUT"""
import re
import sys


def main():
    trace, out = sys.argv[1], sys.argv[2]
    events = {}  # pid -> [(t, kind, key)]
    pat = re.compile(r"vemu pid=(\d+) t=(\d+) (qp create qp=0x([0-9a-f]+)|qp destroy qp=0x([0-9a-f]+)|"
                     r"mr reg call=\S+ key=0x([0-9a-f]+)|mr dereg key=0x([0-9a-f]+))")
    with open(trace, errors="replace") as f:
        for line in f:
            m = pat.match(line)
            if not m:
                continue
            pid, t = int(m.group(1)), int(m.group(2))
            if m.group(4):
                ev = ("qp+", m.group(4))
            elif m.group(5):
                ev = ("qp-", m.group(5))
            elif m.group(6):
                ev = ("mr+", m.group(6))
            else:
                ev = ("mr-", m.group(7))
            events.setdefault(pid, []).append((t,) + ev)
    aborts = [tuple(int(x) for x in m.groups()) for m in
              re.finditer(r"ABORTED rank=(\d+) pid=(\d+) round=(\d+) t_ns=(\d+)", open(out).read())]
    if not aborts:
        print("no ABORTED line in", out)
        return 2
    bad = 0
    for rank, pid, rnd, t in aborts:
        qps, mrs = set(), set()
        seen = 0
        for et, kind, key in events.get(pid, []):
            if et > t:
                continue
            seen += 1
            {"qp+": qps.add, "qp-": qps.discard, "mr+": mrs.add, "mr-": mrs.discard}[kind](key)
        verdict = "ok" if not qps and not mrs and seen else "LEFT OVER"
        bad |= verdict != "ok"
        print(f"rank {rank} (pid {pid}) round {rnd}: {seen} QP/MR events before the abort returned; alive then: "
              f"{len(qps)} QP(s), {len(mrs)} MR(s): {verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
