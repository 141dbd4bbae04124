#!/usr/bin/env python3
"""Tests of nccl-tests-configs/bench-tcp-vs-socket.sh without GPUs: --dry-run, usage errors, and whole runs against
stubs (an mpirun that starts the two ':'-separated ranks, nccl-tests binaries that print rows with known busbw,
a torchrun that writes kv_transfer.py's JSON), checking the logs, the summary's medians and ratios, #wrong
detection, the time budget, and that the script never builds anything."""
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "bench-tcp-vs-socket.sh")
COLLS = ("all_reduce", "all_gather", "reduce_scatter", "sendrecv")

FAKE_NT = r'''#!/bin/sh
# stub nccl-tests binary: only rank 0 (hostA) prints, as nccl-tests does; busbw from the transport
[ "$NCCL_HOSTID" = hostA ] || exit 0
bw=3.0; [ "$NCCL_NET" = GDR ] && bw=10.0
[ -n "$FAKE_BW_GDR" ] && [ "$NCCL_NET" = GDR ] && bw=$FAKE_BW_GDR
[ -n "$FAKE_BW_SOCKET" ] && [ "$NCCL_NET" = Socket ] && bw=$FAKE_BW_SOCKET
if [ -n "$FAKE_VARY" ] && [ "$NCCL_NET" = GDR ]; then  # 10, 12, 10, 12 ... GB/s, one per run
  n=$(cat "$FAKE_VARY" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE_VARY"; bw=$((10 + 2 * (n % 2))).0
fi
wrong=0; [ -n "$FAKE_WRONG" ] && [ "$NCCL_NET" = GDR ] && wrong=$FAKE_WRONG
echo "vm:1:1 [0] NCCL INFO Using network $NCCL_NET"
echo "# stub args: $*"
echo "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong"
min=8; max=8
case " $* " in *" -e 128M "*) max=134217728 ;; esac
s=$min
while [ "$s" -le "$max" ]; do
  t=$(awk -v s="$s" -v b="$bw" 'BEGIN { printf "%.2f", s / b / 1000 + 20 }')
  printf '%12d %12d     float     sum      -1 %8s %7s %7s %6s %8s %7s %7s %6s\n' "$s" $((s / 4)) "$t" "$bw" "$bw" "$wrong" "$t" "$bw" "$bw" 0
  s=$((s * 4))
done
echo "# Out of bounds values : 0 OK"
echo "# Avg bus bandwidth    : $bw"
'''

FAKE_MPIRUN = r'''#!/bin/sh
# stub mpirun: drops launcher options, runs each ':'-separated "-np 1 CMD..." part at once, waits for both
echo "$*" >> "$STUB_LOG"
while [ $# -gt 0 ] && [ "$1" != "-np" ]; do shift; done
run_part() { "$@" & }
part=""
set -- "$@" ":"
args=""
pids=""
for a in "$@"; do
  if [ "$a" = ":" ]; then
    eval "set -- $args"; shift 2; "$@" & pids="$pids $!"; args=""
  else
    q=$(printf '%s' "$a" | sed "s/'/'\\\\''/g"); args="$args '$q'"
  fi
done
rc=0; for p in $pids; do wait "$p" || rc=$?; done; exit $rc
'''

FAKE_TORCHRUN = r'''#!/usr/bin/env python3
import json, os, sys
a = sys.argv[1:]
rank = int([x for x in a if x.startswith("--node_rank=")][0].split("=")[1])
assert os.environ["NCCL_HOSTID"] == ("hostA" if rank == 0 else "hostB"), os.environ["NCCL_HOSTID"]
bw = 9.0 if os.environ["NCCL_NET"] == "GDR" else 2.5
if any(x.endswith("ddp_step.py") for x in a):  # ddp_step.py's last lines, 4x faster through GDR
    ms = 10.0 if os.environ["NCCL_NET"] == "GDR" else 40.0
    print("ddp_step: mean step time %.2f ms over 17 steps (after 3 warm-up), %.2f GB/s of gradients" % (ms, 268.0 / ms))
    print("ddp_step: parameters identical on all ranks: yes")
    sys.exit(0)
out = a[a.index("--json") + 1]
if rank == int(os.environ.get("FAKE_KV_RANK0_NODE", "0")):  # the node that got global rank 0 writes the JSON
    json.dump({"results": [{"phase": "block", "count": 200, "bytes": 4194304, "p50_us": 4194304 / bw / 1e3,
                            "p99_us": 2 * 4194304 / bw / 1e3, "mean_us": 4194304 / bw / 1e3, "gbps": bw}],
               "checked": 200, "wrong": 0}, open(out, "w"))
print("stub torchrun rank %d net %s" % (rank, os.environ["NCCL_NET"]))
'''


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


class Stubbed(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="btvs-")
        self.nt = os.path.join(self.d, "nt")
        os.makedirs(self.nt)
        for c in COLLS:
            write_exe(os.path.join(self.nt, c + "_perf_mpi"), FAKE_NT)
        write_exe(os.path.join(self.d, "mpirun"), FAKE_MPIRUN)
        write_exe(os.path.join(self.d, "torchrun"), FAKE_TORCHRUN)
        self.plugin = os.path.join(self.d, "libnccl-net-gdr.so")
        open(self.plugin, "w").close()
        self.out = os.path.join(self.d, "out")

    def tearDown(self):
        shutil.rmtree(self.d)

    def run_script(self, *extra, env=None):
        e = dict(os.environ, STUB_LOG=os.path.join(self.d, "mpirun.calls"))
        e.update(env or {})
        cmd = ["bash", SCRIPT, "--plugin", self.plugin, "--no-mps", "--mpirun", os.path.join(self.d, "mpirun"),
               "--torchrun", os.path.join(self.d, "torchrun")] + list(extra) + [self.nt, self.out]
        return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)

    def test_full_run(self):
        p = self.run_script("--variant", "spin0:GDRNET_TCP_SPIN_US=0", "--nccl-variant", "thr512:NCCL_NTHREADS=512")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        with open(os.path.join(self.out, "summary.txt")) as f:
            s = f.read()
        # 2 reps x 4 collectives x 2 transports, 2 x 2 latency, 2 x 2 variant, 2 x 2 x 2 NCCL variant
        for r in (1, 2):
            for c in COLLS:
                for tp in ("socket", "gdr"):
                    self.assertTrue(os.path.exists(os.path.join(self.out, "main", tp, "r%d" % r, c + ".log")))
        with open(os.path.join(self.d, "mpirun.calls")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 16 + 4 + 4 + 8, calls)
        self.assertTrue(all("--bind-to none" in c and "NCCL_HOSTID=hostA" in c and "NCCL_HOSTID=hostB" in c
                            and "NCCL_TESTS_DEVICE=0" in c and "NCCL_NVLS_ENABLE=0" in c for c in calls))
        spin = [c for c in calls if "GDRNET_TCP_SPIN_US=0" in c]
        self.assertEqual(len(spin), 4)
        self.assertTrue(all("NCCL_NET=GDR" in c for c in spin))
        thr = [c for c in calls if "NCCL_NTHREADS=512" in c]
        self.assertEqual(len(thr), 8)
        self.assertEqual(sum("NCCL_NET=Socket" in c for c in thr), 4)
        self.assertRegex(s, r"all_reduce +32M +3\.00 \[3\.00\.\.3\.00\] +10\.00 \[10\.00\.\.10\.00\] +3\.33x")
        self.assertRegex(s, r"sendrecv +128M +3\.00 .* 3\.33x")
        self.assertIn("spin0", s)
        self.assertIn("thr512", s)
        self.assertRegex(s, r"GDR\s+block\s+200 x\s+4194304 B.*9\.00 GB/s\s+ok")
        self.assertIn("# problems: none", s)
        self.assertIn("# 8-B all_reduce time", s)

    def test_variant_collectives_and_ddp(self):
        p = self.run_script("--reps", "1", "--no-kv", "--ddp",
                            "--variant", "sp@all_gather+reduce_scatter:GDRNET_TCP_SPEED=1",
                            "--nccl-variant", "p2p@sendrecv:NCCL_P2P_NET_CHUNKSIZE=524288")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for c in ("all_gather", "reduce_scatter"):
            self.assertTrue(os.path.exists(os.path.join(self.out, "variant", "sp", "r1", c + ".log")))
        self.assertFalse(os.path.exists(os.path.join(self.out, "variant", "sp", "r1", "all_reduce.log")))
        for tp in ("socket", "gdr"):
            self.assertTrue(os.path.exists(os.path.join(self.out, "nccl", "p2p", tp, "r1", "sendrecv.log")))
            self.assertTrue(os.path.exists(os.path.join(self.out, "ddp", tp + ".log")))
        with open(os.path.join(self.d, "mpirun.calls")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 8 + 2 + 2 + 2, calls)  # main, latency, 2 variant runs, 2 NCCL variant runs
        self.assertIn("# ddp_step.py (DDP training step, 2 ranks), Socket vs GDR", p.stdout)
        self.assertRegex(p.stdout, r"ratio +4\.00x faster per step")

    def test_kv_rank0_on_the_second_node(self):
        # torchrun's c10d rendezvous gave global rank 0 to node_rank 1: its JSON is .rank1.json
        p = self.run_script("--reps", "1", "--collectives", "sendrecv", env={"FAKE_KV_RANK0_NODE": "1"})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"GDR\s+block\s+200 x\s+4194304 B.*9\.00 GB/s\s+ok")
        self.assertNotIn("no result", p.stdout)

    def test_wrong_is_an_error(self):
        p = self.run_script("--reps", "1", "--no-kv", env={"FAKE_WRONG": "3"})
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("#wrong > 0", p.stdout)

    def test_budget_skips_the_optional_parts(self):
        p = self.run_script("--reps", "1", "--budget", "0", "--variant", "a:GDRNET_TCP_NSOCKS=8")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("skipped variant a:GDRNET_TCP_NSOCKS=8 rep 1: time budget", p.stdout)
        self.assertIn("skipped kv_transfer socket: time budget", p.stdout)
        self.assertFalse(os.path.exists(os.path.join(self.out, "variant")))

    def test_median_and_spread(self):
        # the ratio follows the stubs' numbers (GDR 15 GB/s against Socket 3: 5x)
        p = self.run_script("--reps", "1", "--no-kv", "--collectives", "sendrecv", "--variant-collectives",
                            "sendrecv", env={"FAKE_BW_GDR": "15.0"})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertRegex(p.stdout, r"sendrecv +128M +3\.00 \[3\.00\.\.3\.00\] +15\.00 \[15\.00\.\.15\.00\] +5\.00x")


    def test_median_and_spread_over_reps(self):
        p = self.run_script("--reps", "2", "--no-kv", "--collectives", "all_gather",
                            env={"FAKE_VARY": os.path.join(self.d, "vary")})
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        # reps of 10 and 12 GB/s (GDR) against 3 (Socket): median 11, spread 10..12, ratio 3.67
        self.assertRegex(p.stdout, r"all_gather +32M +3\.00 \[3\.00\.\.3\.00\] +11\.00 \[10\.00\.\.12\.00\] +3\.67x")


class Cli(unittest.TestCase):
    def sh(self, *args):
        return subprocess.run(["bash", SCRIPT] + list(args), capture_output=True, text=True, timeout=60)

    def test_usage(self):
        self.assertEqual(self.sh().returncode, 2)
        self.assertEqual(self.sh("--bogus", "a", "b").returncode, 2)
        v = []
        for i in range(5):
            v += ["--variant", "v%d:GDRNET_TCP_SPIN_US=%d" % (i, i)]
        self.assertEqual(self.sh("--dry-run", *v, "/nt", "/tmp/x").returncode, 2)
        self.assertEqual(self.sh("--dry-run", "--variant", "bad", "/nt", "/tmp/x").returncode, 2)
        h = self.sh("--help")
        self.assertEqual(h.returncode, 0)
        self.assertIn("NCCL_HOSTID", h.stdout)

    def test_dry_run_never_builds(self):
        p = self.sh("--dry-run", "--variant", "spin0:GDRNET_TCP_SPIN_US=0", "/nt", "/tmp/x")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("# 26 runs", p.stdout)  # 16 main + 4 latency + 4 variant + 2 kv
        for word in ("make ", "git ", "cmake", "nvcc"):
            self.assertNotIn(word, p.stdout)
        with open(SCRIPT) as f:
            src = f.read()
        for word in ("make -C", "git clone", "nvcc "):
            self.assertNotIn(word, src)


if __name__ == "__main__":
    unittest.main(verbosity=2)
