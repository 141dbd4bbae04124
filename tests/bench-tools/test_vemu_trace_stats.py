#!/usr/bin/env python3
"""Test of bench/vemu-trace-stats's timing breakdown (CTest: bench_vemu_trace_stats).

fixtures/g2-synthetic.trace and fixtures/baseline-synthetic.trace are written by make_synthetic.py with known
timelines; the numbers asserted here are worked out by hand from those timelines (see make_synthetic.py), not
taken from the tool. fixtures/{gdr,ib}-sendrecv.trace.gz are real traces from a GPU run, trimmed with
trim_trace.py: they check gzip input, QP pairing and FIFO matching on what the emulator really writes.

usage: test_vemu_trace_stats.py [PATH/TO/vemu-trace-stats]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench", "vemu-trace-stats")
FX = os.path.join(HERE, "fixtures")
TMP = tempfile.mkdtemp(prefix="bench-tools-test-")
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL: " + what)


def near(a, b, eps=1e-6):
    return a is not None and abs(a - b) <= eps * max(1.0, abs(b))


def run(*args):
    p = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def run_json(*args):
    out = os.path.join(TMP, "out.json")
    if os.path.exists(out):
        os.unlink(out)
    rc, text, err = run(*(list(args) + ["--json", out]))
    doc = json.load(open(out)) if os.path.exists(out) else {}
    return rc, text, err, doc


def expect_dist(d, key, count, p50=None, p90=None, mean=None, label=""):
    x = d[key]
    check(x.get("count") == count, "%s%s count %s, want %d" % (label, key, x.get("count"), count))
    for name, want in (("p50", p50), ("p90", p90), ("mean", mean)):
        if want is not None:
            check(near(x.get(name), want), "%s%s %s %s, want %s" % (label, key, name, x.get(name), want))


def test_synthetic():
    g2 = os.path.join(FX, "g2-synthetic.trace")
    base = os.path.join(FX, "baseline-synthetic.trace")
    rc, text, err, doc = run_json(g2, "--baseline", base)
    check(rc == 0, "synthetic --baseline: exit %d (same WRs per message: want 0) %s" % (rc, err[-500:]))
    # -g 2: both ranks in one process; the data QP pairs are found by their dest QPN, the self-connected QP is a flush
    dirs = doc.get("directions", [])
    check(len(dirs) == 1 and dirs[0]["qp_pairs"] == ["0x10->0x20", "0x21->0x11"],
          "QP pairs of one process: %s" % [d["qp_pairs"] for d in dirs])
    check(dirs and dirs[0]["receiver_flush_reads"] == 1, "flush READs on the self-connected QP")
    check(re.search(r"qp 0x30 -> 0x30 .*\[self/flush\]", text) is not None, "0x30 shown as self/flush")
    check("matching: CTS i <-> message i, FIFO per QP pair" in text, "the output says how CTS and data are matched")
    tm = doc["timing"]["all"]
    d = tm["dist"]
    # all 6 messages of both pairs: pair A b = 5, 4, 6; pair B b = 5, 5, 5
    expect_dist(d, "b_sender_reaction", 6, p50=5.0, p90=6.0, mean=5.0)
    # d, one CTS per completion: pair A 5, 6; pair B 5 (completion 30 -> CTS 35; not completion 34 -> CTS 35 too)
    expect_dist(d, "d_receiver_reaction", 3, p50=5.0, p90=6.0, mean=16 / 3)
    expect_dist(d, "a1_cts_post_exec", 6, p50=1.0, mean=7 / 6)
    expect_dist(d, "a2_cts_exec_land", 6, p50=2.0, mean=13 / 6)
    expect_dist(d, "a_cts_post_land", 6, p50=3.0, p90=5.0, mean=20 / 6)
    expect_dist(d, "c1_data_post_exec", 6, p50=2.0, mean=10 / 6)
    expect_dist(d, "c2_data_exec_arrive", 6, p50=3.0, mean=17 / 6)
    expect_dist(d, "c3_data_arrive_done", 6, p50=7.0, p90=18.0, mean=57 / 6)
    expect_dist(d, "c_data_post_done", 6, p50=12.0, p90=24.0, mean=14.0)
    # service = completion - max(exec, previous completion): A 10, 8, 10; B 19, 34 - max(12, 30) = 4, 49 - 44 = 5
    expect_dist(d, "c4_data_service", 6, p50=8.0, mean=56 / 6)
    expect_dist(d, "c_mbps", 6, p50=1e6 / 12e3 * 1e3, p90=1e6 / 9e3 * 1e3,
                mean=(1e6 / 12 * 2 + 1e6 / 9 + 5e5 / 21 + 5e5 / 24 + 5e5 / 6) / 6)
    expect_dist(d, "e_idle_gap", 8, p50=5.0, mean=4.5)  # A: 5, 5, 4, 6, 6; B: 4, 1, 5
    st = tm["states_ms"]
    for k, v in (("D", 0.064), ("C", 0.018), ("S", 0.024), ("R", 0.012)):
        check(near(st[k], v), "state %s %s ms, want %s" % (k, st[k], v))
    dd = doc["timing"]["directions"][0]
    conc = {int(k): v for k, v in dd["concurrency_data"].items()}
    check(set(conc) == {0, 1, 2} and near(conc[0], 11 / 62) and near(conc[1], 38 / 62) and near(conc[2], 13 / 62),
          "data-in-flight concurrency %s, want 0: 11/62, 1: 38/62, 2: 13/62" % conc)
    check(near(dd["concurrency_data_mean"], 64 / 62), "mean concurrency %s" % dd["concurrency_data_mean"])
    owes = {int(k): v for k, v in dd["concurrency_sender_owes"].items()}
    check(set(owes) == {0, 1} and near(owes[1], 16 / 62), "waiting-on-sender concurrency %s" % owes)
    pa, pb = dd["pairs"]
    expect_dist(pa["dist"], "b_sender_reaction", 3, p50=5.0, p90=6.0, mean=5.0, label="pair A ")
    expect_dist(pb["dist"], "d_receiver_reaction", 1, p50=5.0, label="pair B ")
    check(pa["no_next_cts"] == 1 and pb["no_next_cts"] == 2, "completions with no CTS after them")
    check(pa["states_ns"] == {"D": 33000, "C": 11000, "S": 15000, "R": 11000}, "pair A states %s" % pa["states_ns"])
    check(pb["states_ns"] == {"D": 31000, "C": 7000, "S": 9000, "R": 1000}, "pair B states %s" % pb["states_ns"])
    check(not tm["notes"], "no notes on a consistent trace: %s" % tm["notes"])
    # the text shows the same figures
    check(re.search(r"b  sender reaction: CTS landed -> data post\s+6\s+5\.000\s+6\.000\s+6\.000\s+5\.000", text),
          "text line of b")
    # baseline: b = 2.5, c = 5.5, d = 2, a = 2; ratios this / baseline
    bd = doc["baseline_timing"]["all"]["dist"]
    expect_dist(bd, "b_sender_reaction", 2, p50=2.5, mean=2.5, label="baseline ")
    expect_dist(bd, "d_receiver_reaction", 1, p50=2.0, label="baseline ")
    check(re.search(r"b  sender reaction: CTS landed -> data post\s+5\.000\s+2\.500\s+2\.00\s+5\.000\s+2\.500\s+2\.00",
                    text), "comparison line of b with ratio 2.00")
    check(re.search(r"cycle per message\s+27\.667\s+12\.000\s+2\.31x", text),
          "where the time goes: cycle 10/3 + 5 + 14 + 16/3 = 27.667 vs 2 + 2.5 + 5.5 + 2 = 12")
    check(re.search(r"sender reaction \(b\)\s+5\.000 \(\s*18%\)\s+2\.500 \(\s*21%\)\s+2\.00x", text),
          "where the time goes: sender reaction row")
    # --no-timing: the output before timing existed, unchanged as a prefix of the full output
    rc2, plain, _ = run(g2, "--no-timing")
    check(rc2 == 0 and "# timing" not in plain and text.startswith(plain.rstrip("\n")),
          "--no-timing prints the count sections only, the same as the start of the full output")


def test_counts_disagree():
    """A trace where one data post is missing: the tool must say so and not match CTS to data on that pair."""
    src = os.path.join(FX, "g2-synthetic.trace")
    bad = os.path.join(TMP, "missing-post.trace")
    with open(src) as f, open(bad, "w") as g:
        for line in f:
            if "post qp=0x10 op=WRITE_IMM wr_id=0x102 " not in line:
                g.write(line)
    rc, text, err, doc = run_json(bad)
    check(rc == 0, "disagreeing trace: exit %d %s" % (rc, err[-500:]))
    check("data counts disagree (messages posted 2, executed 3, arrived 3, completed 3): c not computed" in text,
          "data count disagreement reported")
    check("CTS landed 3 != messages 2: CTS<->data FIFO matching not done, b not computed" in text,
          "CTS/data disagreement reported")
    pa, pb = doc["timing"]["directions"][0]["pairs"]
    check(pa["dist"]["b_sender_reaction"]["count"] == 0 and pa["dist"]["c_data_post_done"]["count"] == 0,
          "nothing matched on the disagreeing pair")
    check(pb["dist"]["b_sender_reaction"]["count"] == 3, "the other pair still matched")


def test_real_traces():
    """Trimmed real traces (gzip): ours and stock NCCL IB, sendrecv, 2 processes, one channel, 16 messages each way."""
    ours = os.path.join(FX, "gdr-sendrecv.trace.gz")
    ib = os.path.join(FX, "ib-sendrecv.trace.gz")
    rc, text, err, doc = run_json(ours, "--baseline", ib)
    check(rc == 0, "real traces --baseline: exit %d %s" % (rc, err[-500:]))
    check(re.search(r"round trips\s+1\.000\s+1\.000", text) is not None, "count comparison still printed")
    for name, tm in (("ours", doc["timing"]), ("ib", doc["baseline_timing"])):
        dirs = tm["directions"]
        check(len(dirs) == 2 and all(len(d["pairs"]) == 1 and d["messages"] == 16 for d in dirs),
              "%s: 2 directions of 1 pair and 16 messages" % name)
        check(not tm["all"]["notes"], "%s: FIFO matching consistent: %s" % (name, tm["all"]["notes"]))
        d = tm["all"]["dist"]
        for k in ("a_cts_post_land", "b_sender_reaction", "c_data_post_done"):
            check(d[k]["count"] == 32 and d[k]["p50"] > 0, "%s: %s over 32 messages" % (name, k))
        check(d["d_receiver_reaction"]["count"] > 0, "%s: receiver reactions found" % name)
        for dd in dirs:
            p = dd["pairs"][0]
            check(sum(p["states_ns"].values()) == p["window_ns"], "%s: the states add up to the pair's span" % name)


def main():
    test_synthetic()
    test_counts_disagree()
    test_real_traces()
    shutil.rmtree(TMP, ignore_errors=True)
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
