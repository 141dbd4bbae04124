#!/usr/bin/env python3
"""The wake-up lines of a bench/tcp-matrix log folder, run by run (device runs 27-28).

usage: wakes.py DIR      (DIR: the folder of --out, e.g. tm-u after tar xzf tm-u-logs.tgz)
Prints, per row, variant and rep, each process's "TCP: N wake-ups of sleeping I/O threads" figures (p50/p90/p99 us,
the late share and switches), so that each rep's result can be read beside what a wake-up cost in that run.
"""
import os
import re
import sys

WAKE = re.compile(r"TCP: (\d+) wake-ups of sleeping I/O threads for new work: p50 ([\d.]+) us, p90 ([\d.]+) us, "
                  r"p99 ([\d.]+) us, max ([\d.]+) us(?:; ([\d.]+) % after more than (\d+) us, late (\d+) time)?")


def main():
    top = sys.argv[1]
    for row in sorted(os.listdir(top)):
        d = os.path.join(top, row)
        if not os.path.isdir(d):
            continue
        runs = {}
        for f in sorted(os.listdir(d)):
            m = re.match(r"(.+?-rep\d+)(?:\.log|\.node\d)$", f)
            if not m:
                continue
            with open(os.path.join(d, f), errors="replace") as fh:
                for line in fh:
                    w = WAKE.search(line)
                    if w:
                        p = "%s/%s/%s" % (w.group(2), w.group(3), w.group(4))
                        if w.group(6):
                            p += " late %s%% x%s" % (w.group(6), w.group(8))
                        runs.setdefault(m.group(1), []).append("n=%s %s" % (w.group(1), p))
        for run in sorted(runs):
            print("%-10s %-18s %s" % (row, run, " | ".join(runs[run])))


if __name__ == "__main__":
    main()
