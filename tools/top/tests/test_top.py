#!/usr/bin/env python3
"""gdrnet-top over hand-written stats files: the stalled connection first and marked, --json, a dead process's file
reported stale, and the exit statuses. usage: test_top.py GDRNET_TOP"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

TOP = sys.argv.pop(1) if len(sys.argv) > 1 else "gdrnet-top"


def stats(pid, host, written, conns):
    out = ['# HELP gdrnet_info x', '# TYPE gdrnet_info gauge',
           'gdrnet_info{pid="%d",host="%s",rank="3",job="77",version="0"} 1' % (pid, host),
           'gdrnet_stats_written_seconds{pid="%d"} %d' % (pid, written),
           'gdrnet_stats_interval_seconds{pid="%d"} 1' % pid]
    for c in conns:
        lab = 'pid="%d",host="%s",rank="3",conn="%d",dir="%s",peer="%s",transport="%s"' % (
            pid, host, c["id"], c["dir"], c["peer"], c["tp"])
        out.append('gdrnet_conn_info{%s,dev="0",state="%s",path="%s"} 1' % (lab, c["state"], c["path"]))
        for k in ("stalled", "inflight_requests", "oldest_request_seconds", "since_last_completion_seconds",
                  "bytes_total", "latency_p99_seconds", "recoveries_total", "moves_total"):
            out.append('gdrnet_conn_%s{%s} %s' % (k, lab, c.get(k, 0)))
        out.append('gdrnet_conn_latency_seconds_bucket{%s,le="+Inf"} 5' % lab)
    return "\n".join(out) + "\n"


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def pair_stats(pid, rank, written, conns):
    """a process of launcher rank `rank` whose connections name their peer's rank"""
    host = os.uname().nodename
    out = ['gdrnet_info{pid="%d",host="%s",rank="%s",version="0"} 1' % (pid, host, rank),
           'gdrnet_stats_written_seconds{pid="%d"} %d' % (pid, written),
           'gdrnet_stats_interval_seconds{pid="%d"} 1' % pid]
    for c in conns:
        lab = 'pid="%d",host="%s",rank="%s",conn="%d",dir="%s",peer="%s",peer_rank="%s",transport="tcp"' % (
            pid, host, rank, c["id"], c["dir"], c["peer"], c["peer_rank"])
        out.append('gdrnet_conn_info{%s,dev="0",state="tcp",path="2 streams"} 1' % lab)
        for k in ("stalled", "inflight_requests", "oldest_request_seconds"):
            out.append('gdrnet_conn_%s{%s} %s' % (k, lab, c.get(k, 0)))
    return "\n".join(out) + "\n"


class WhoWaits(unittest.TestCase):
    """rank 1's send to rank 3 is stalled; rank 3's own file shows its receive from rank 1 with nothing posted, or
    stalled too: gdrnet-top says which rank waits for which"""

    def run_pair(self, peer_end):
        d = tempfile.mkdtemp(prefix="top-pair.")
        now = int(time.time())
        try:
            with open(os.path.join(d, "gdrnet-h-1.prom"), "w") as f:
                f.write(pair_stats(os.getpid(), "1", now, [
                    {"id": 1, "dir": "send", "peer": "10.0.0.3:4000", "peer_rank": "3", "stalled": 1,
                     "oldest_request_seconds": 9}]))
            with open(os.path.join(d, "gdrnet-h-2.prom"), "w") as f:
                f.write(pair_stats(os.getppid(), "3", now, [dict(peer_end, id=1, dir="recv", peer="10.0.0.1:5000",
                                                                 peer_rank="1")]))
            r = subprocess.run([TOP, "--once", d], capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            me = "waits: rank 1 (pid %d) waits for rank 3: " % os.getpid()
            waits = [l for l in r.stdout.splitlines() if l.startswith(me)]
            self.assertEqual(len(waits), 1, r.stdout)
            r = subprocess.run([TOP, "--json", d], capture_output=True, text=True, timeout=30)
            doc = json.loads(r.stdout)
            self.assertIn(waits[0][7:], [c.get("waits_for") for c in doc["connections"]])
            return waits[0]
        finally:
            for n in os.listdir(d):
                os.unlink(os.path.join(d, n))
            os.rmdir(d)

    def test_not_posted(self):
        self.assertIn("it has no receive from rank 1 posted", self.run_pair({"inflight_requests": 0}))

    def test_both_stalled(self):
        self.assertIn("its end is stalled too", self.run_pair({"inflight_requests": 1, "stalled": 1}))

    def test_moving(self):
        self.assertIn("1 request(s) in flight and is not stalled", self.run_pair({"inflight_requests": 1}))


class Top(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="top-test.")
        host = os.uname().nodename
        now = int(time.time())
        with open(os.path.join(self.dir, "gdrnet-a-1.prom"), "w") as f:
            f.write(stats(os.getpid(), host, now, [
                {"id": 1, "dir": "send", "peer": "10.0.0.2:4000", "tp": "tcp", "state": "tcp", "path": "2 streams",
                 "bytes_total": 1000, "latency_p99_seconds": 0.001},
                {"id": 2, "dir": "recv", "peer": "10.0.0.9:4001", "tp": "rdma", "state": "recovering",
                 "path": "mlx5_0 port 1, QP 0x12", "stalled": 1, "inflight_requests": 3,
                 "oldest_request_seconds": 7.5, "recoveries_total": 1}]))
        with open(os.path.join(self.dir, "gdrnet-a-2.prom"), "w") as f:
            f.write(stats(dead_pid(), host, now - 100, [
                {"id": 1, "dir": "send", "peer": "10.0.0.3:4000", "tp": "tcp", "state": "tcp", "path": "1 stream"}]))
        with open(os.path.join(self.dir, "other.prom"), "w") as f:
            f.write("node_load1 3\n")

    def tearDown(self):
        for n in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, n))
        os.rmdir(self.dir)

    def run_top(self, *args):
        return subprocess.run([TOP] + list(args), capture_output=True, text=True, timeout=30)

    def test_once(self):
        r = self.run_top("--once", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("2 process(es) (1 stale)", lines[0])
        self.assertIn("3 connection(s)  1 stalled  3 in flight", lines[0])
        rows = [l for l in lines if l.startswith(("!", "  ")) and "PEER" not in l]
        self.assertTrue(rows[0].startswith("!"), r.stdout)
        self.assertIn("10.0.0.9:4001", rows[0])
        self.assertIn("rdma/recovering", rows[0])
        self.assertIn("STALLED", rows[0])
        self.assertIn("1/0", rows[0])
        self.assertTrue(any("10.0.0.3:4000" in l and "(stale)" in l for l in rows), r.stdout)
        self.assertTrue(any(l.startswith("stale:") and "process gone" in l for l in lines), r.stdout)

    def test_json(self):
        r = self.run_top("--json", self.dir)
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["stalled"], 1)
        self.assertEqual(len(doc["processes"]), 2)
        c = doc["connections"][0]
        self.assertTrue(c["stalled"])
        self.assertEqual((c["peer"], c["transport"], c["state"]), ("10.0.0.9:4001", "rdma", "recovering"))
        self.assertEqual(c["oldest_request_seconds"], 7.5)
        self.assertEqual(c["rank"], "3")
        self.assertEqual(sum(1 for p in doc["processes"] if p["stale"]), 1)

    def test_nothing_found(self):
        empty = tempfile.mkdtemp(prefix="top-empty.")
        try:
            r = self.run_top("--once", empty)
        finally:
            os.rmdir(empty)
        self.assertEqual(r.returncode, 1)
        self.assertIn("no stats file", r.stderr)

    def test_usage(self):
        self.assertEqual(self.run_top("--bogus").returncode, 2)
        self.assertEqual(self.run_top("--interval", "0").returncode, 2)
        r = self.run_top("--help")
        self.assertEqual(r.returncode, 0)
        self.assertTrue(r.stdout.startswith("usage: gdrnet-top"))
        self.assertRegex(self.run_top("--version").stdout, r"^gdrnet-top \d")


if __name__ == "__main__":
    unittest.main(verbosity=2)
