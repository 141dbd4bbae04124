#!/usr/bin/env python3
"""bench/kv-tail without a GPU: a stand-in torchrun (written here) checks the environment each run gets (Socket's
preset or tcp.env with the variant's library and knobs, a host id per node, one rendezvous port for both) and writes
the --json that kv_transfer.py would, its figures chosen by that environment; the table, the medians and the exit
status must follow from them."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

KV_TAIL = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "kv-tail")

FAKE = r'''#!/usr/bin/env python3
import json, os, sys
args = sys.argv[1:]
node = int(next(x for x in args if x.startswith("--node_rank=")).split("=")[1])
port = next(x for x in args if x.startswith("--rdzv-endpoint=")).rsplit(":", 1)[1]
jpath = args[args.index("--json") + 1]
env = os.environ
assert env["NCCL_HOSTID"] == "host" + "AB"[node], env["NCCL_HOSTID"]
assert env["NCCL_NVLS_ENABLE"] == "0"
assert args[args.index("--device") + 1] == "0"
socket = env.get("NCCL_NET") == "Socket"
if not socket:
    assert env["NCCL_NET"] == "GDR" and os.path.isabs(env["NCCL_NET_PLUGIN"]), env.get("NCCL_NET_PLUGIN")
    assert env["LD_LIBRARY_PATH"].split(":")[0] == os.path.dirname(env["NCCL_NET_PLUGIN"])
spin = env.get("GDRNET_TCP_SPIN_THREADS")
if spin == "fail":
    sys.exit(1)
with open(os.path.join(os.path.dirname(jpath), "ports"), "a") as f:
    f.write("%s %d\n" % (port, node))
if node == 0:
    rep = int(jpath.rsplit("-rep", 1)[1].split(".")[0])
    if socket:
        p50, p99, gb = 1000.0, 1300.0, 5.0
    elif spin == "64":
        p50, p99, gb = 400.0 + rep, 600.0, 12.0
    else:
        p50, p99, gb = 600.0, 900.0, 8.0 + rep
    with open(jpath, "w") as f:
        json.dump({"results": [{"phase": "block", "p50_us": p50, "p99_us": p99, "gbps": 4.0},
                               {"phase": "request", "p50_us": 1.0, "p99_us": 1.0, "gbps": gb}],
                   "wrong": 3 if spin == "wrong" else 0}, f)
'''


class KvTail(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="kvtail-test-")
        self.fake = os.path.join(self.d, "torchrun")
        with open(self.fake, "w") as f:
            f.write(FAKE)
        os.chmod(self.fake, 0o755)
        self.so = os.path.join(self.d, "libnccl-net-gdr.so")
        open(self.so, "w").close()

    def tearDown(self):
        shutil.rmtree(self.d, ignore_errors=True)

    def run_tail(self, *args, kv=()):
        out = os.path.join(self.d, "out")
        cmd = [sys.executable, KV_TAIL, "--no-mps", "--torchrun", self.fake, "--timeout", "30", "--out", out] + \
            list(args) + (["--"] + list(kv) if kv else [])
        return subprocess.run(cmd, capture_output=True, text=True), out

    def test_variants_alternate_and_medians(self):
        p, out = self.run_tail("--reps", "2", "--variant", "one,%s" % self.so,
                               "--variant", "all,%s,GDRNET_TCP_SPIN_THREADS=64" % self.so)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rows = [l.split() for l in p.stdout.splitlines() if re.match(r"^(Socket|one|all)\s+\d", l)]
        self.assertEqual([(r[0], r[1]) for r in rows],
                         [("Socket", "1"), ("one", "1"), ("all", "1"), ("Socket", "2"), ("one", "2"), ("all", "2")])
        self.assertEqual(rows[2][2:6], ["401.0", "600.0", "1.50", "12.00"])
        med = [l for l in p.stdout.splitlines() if l.startswith("# medians")]
        self.assertEqual(len(med), 2)
        # one: p50 600 (0.60x Socket's 1000), p99 900 (0.69x), requests median of 9 and 10 = 9.5 (1.90x)
        self.assertIn("one/Socket: p50 0.60x, p99 0.69x, requests 1.90x", med[0])
        # all: p50 median of 401 and 402 = 401.5
        self.assertIn("all block p50 401.5 us, p99 600.0 us (p99/p50 1.49)", med[1])
        # each run's two nodes met on one port
        ports = {}
        with open(os.path.join(out, "ports")) as f:
            for line in f:
                port, node = line.split()
                ports.setdefault(port, []).append(node)
        self.assertTrue(all(sorted(v) == ["0", "1"] for v in ports.values()), ports)

    def test_wrong_blocks_and_failed_runs_fail(self):
        p, _ = self.run_tail("--reps", "1", "--variant", "bad,%s,GDRNET_TCP_SPIN_THREADS=wrong" % self.so,
                             "--variant", "dead,%s,GDRNET_TCP_SPIN_THREADS=fail" % self.so)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"(?m)^bad\s+1 .*3 block\(s\) WRONG")
        self.assertRegex(p.stdout, r"(?m)^dead\s+1 no results \(exit 1/1")
        self.assertIn("# medians: dead: no completed run of dead", p.stdout)

    def test_kv_args_and_usage(self):
        p, out = self.run_tail("--plugin", self.so, "--reps", "1", kv=["--blocks", "7"])
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(out, "GDR-rep1.node0")) as f:
            self.assertIn("--blocks 7", f.read())
        p, _ = self.run_tail()
        self.assertEqual(p.returncode, 2)
        self.assertIn("--plugin SO (or --variant", p.stderr)
        p, _ = self.run_tail("--variant", "x,/nonexistent.so")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("no plugin library /nonexistent.so", p.stderr)


if __name__ == "__main__":
    unittest.main()
