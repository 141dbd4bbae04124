#!/usr/bin/env python3
"""Pools bench/tcp-matrix's per-rep ratio lines ("# ROW: default/Socket 0.98x 1.00x; ...") of several tables of one
host: each row's ratios of every rep, their count and median. The per-rep ratios compare runs made within a minute
of each other, so pooling them across invocations on one host does not mix periods the way pooling medians would.

  python3 docs/results/2026-12-08/pool.py [--variant default] run30/tm-a.txt run30/tm-b.txt ...
"""
import argparse
import re
import statistics


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", default="default")
    ap.add_argument("tables", nargs="+")
    a = ap.parse_args()
    pool = {}
    want = a.variant + "/Socket "
    for path in a.tables:
        with open(path) as f:
            for line in f:
                m = re.match(r"# (\S+): (.*)", line)
                if not m:
                    continue
                for part in m.group(2).split(";"):
                    part = part.strip()
                    if part.startswith(want):
                        xs = [float(x.rstrip("x")) for x in part[len(want):].split()]
                        pool.setdefault(m.group(1), []).extend(xs)
    print("%-11s %5s %8s  %s" % ("row", "pairs", "median", "every pair's %s/Socket (times: below 1 is faster)"
                                 % a.variant))
    for row, xs in pool.items():
        print("%-11s %5d %7.3fx  %s" % (row, len(xs), statistics.median(xs), " ".join("%.2f" % x for x in sorted(xs))))


if __name__ == "__main__":
    main()
