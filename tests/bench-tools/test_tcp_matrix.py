#!/usr/bin/env python3
"""bench/tcp-matrix without a GPU: a stand-in mpirun (runs each ":"-separated rank concurrently, rank 0's output on
stdout), stand-in nccl-tests binaries and a stand-in torchrun (written here, bash) check the environment each run
gets and print nccl-tests' output (or write kv_transfer.py's --json) with figures chosen by the transport, the
variant's FAKE_PROFILE knob and the rep; the 128 MB all_reduce burns CPU for bench/cpu-per-gb's sampling. The table's
medians, spreads, ratios, PASS/FAIL per row and goal, the summary line, the order of the runs (Socket and the plugin
alternated), failed runs and --dry-run must follow from them. Needs bash 5 (EPOCHREALTIME) and awk."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

TCP_MATRIX = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "bench", "tcp-matrix")

MPIRUN = r'''#!/bin/bash
# stand-in mpirun: "[opts] -np 1 CMD... : -np 1 CMD..." runs every CMD at once, rank 0's output on stdout
np=1; bind=0
for x in "$@"; do [ "$x" = ":" ] && np=$((np + 1)); done
export FAKE_NP=$np
rank=0; cur=(); pids=()
launch() {
  if [ $rank -eq 0 ]; then "${cur[@]}" & else "${cur[@]}" >/dev/null 2>&1 & fi
  pids+=($!); rank=$((rank + 1)); cur=()
}
while [ $# -gt 0 ]; do
  case "$1" in
    -np) shift 2 ;;
    --allow-run-as-root) shift ;;
    --bind-to) [ "$2" = none ] && bind=1; shift 2 ;;
    :) launch; shift ;;
    *) cur+=("$1"); shift ;;
  esac
done
[ $bind -eq 1 ] || { echo "mpirun: ranks bound"; exit 3; }
launch
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
exit $rc
'''

# figures: Socket's out-of-place time (us) per collective and size, busbw (GB/s) at 128 MB; a variant's
# FAKE_PROFILE scales them; rep 2 is 1.1x rep 1 (both transports) so that median, min and max differ
NCCL_TESTS = r'''#!/bin/bash
die() { echo "fake nccl-tests: $*"; exit 3; }
coll=$(basename "$0"); coll=${coll%_perf_mpi}
size=0; iters=0; check=1
while [ $# -gt 0 ]; do
  case "$1" in -b) size=$2; shift 2 ;; -n) iters=$2; shift 2 ;; -c) check=$2; shift 2 ;; *) shift ;; esac
done
rank=${NCCL_HOSTID#host}
[ "$NCCL_TESTS_DEVICE" = 0 ] && [ "$NCCL_NVLS_ENABLE" = 0 ] || die "not on GPU 0 with NVLS off"
[[ "$rank" =~ ^[0-9]+$ ]] && [ "$rank" -lt "$FAKE_NP" ] || die "NCCL_HOSTID $NCCL_HOSTID"
prof=socket
if [ "$NCCL_NET" = Socket ]; then
  [ "$NCCL_NET_PLUGIN" = none ] && [ -z "${GDRNET_TRANSPORT:-}" ] || die "Socket run with the plugin's settings"
else
  [ "$NCCL_NET" = GDR ] && [ "$GDRNET_TRANSPORT" = tcp ] && [[ "$NCCL_NET_PLUGIN" = /* ]] || die "not tcp.env"
  [ "${LD_LIBRARY_PATH%%:*}" = "$(dirname "$NCCL_NET_PLUGIN")" ] || die "LD_LIBRARY_PATH $LD_LIBRARY_PATH"
  prof=${FAKE_PROFILE:-good}
fi
net=$NCCL_NET; [ "$prof" = wrongnet ] && net=Socket
echo "host$rank: NCCL INFO Using network $net"
if [ "$prof" = hang ]; then echo $$ >>"$FAKE_DIR/hung"; exec sleep 30; fi
[ "$prof" = crash ] && exit 1
big=0; [ "$size" = 134217728 ] && big=1
# CPU for bench/cpu-per-gb's window (the 128 MB all_reduce of two ranks): 1 s after its start every rank uses 0.3 s
# of CPU (30 clock ticks of its own, counted from /proc, not a wall-clock burn), with FAKE_CPU=light Socket's ranks
# 0.02 s; then each sleeps out 2.2 s from its start. The CPU in the window and the window's length do not depend on the machine's load
# (a wall-clock burn on a loaded CI machine got a share of a core that varied between runs, and flipped the CPU row;
# with 0.4 s before the burn a sampler that a loaded machine kept waiting saw the header only after the burn)
burn() { # until this shell has used $1 more clock ticks of CPU
  local s end
  read -r -a s </proc/$BASHPID/stat; end=$(( s[13] + s[14] + $1 ))
  while :; do read -r -a s </proc/$BASHPID/stat; (( s[13] + s[14] >= end )) && break; done
}
cpu() {
  [ $big -eq 1 ] && [ "$FAKE_NP" = 2 ] || return 0
  local t0=${EPOCHREALTIME/./} left
  sleep 1 # the burn inside rank 0's timed part, the window
  if [ "$prof" = socket ] && [ "${FAKE_CPU:-}" = light ]; then burn 2; else burn 30; fi
  left=$(( t0 + 2200000 - ${EPOCHREALTIME/./} ))
  if (( left > 0 )); then sleep "$(( left / 1000000 )).$(printf '%06d' $(( left % 1000000 )))"; fi
}
[ "$rank" = 0 ] || { cpu; exit 0; }
# the host's CPU times (--proc-stat): 100 ticks a run, of which the plugin's runs steal 10
if [ -f "$FAKE_DIR/stat" ]; then
  read -r -a st <"$FAKE_DIR/stat"
  [ "$NCCL_NET" = Socket ] && ds=0 || ds=10
  echo "cpu  $(( st[1] + 100 - ds )) 0 0 0 0 0 0 $(( st[8] + ds )) 0 0" >"$FAKE_DIR/stat"
fi
key="$coll.$size.$FAKE_NP.$prof"
n=$(( $(cat "$FAKE_DIR/count.$key" 2>/dev/null || echo 0) + 1 )); echo $n >"$FAKE_DIR/count.$key"
echo "$coll $size $FAKE_NP $NCCL_NET $prof $iters" >>"$FAKE_DIR/calls"
case "$coll.$size" in
  all_reduce.8) t=20.0 ;; all_reduce.4096) t=40.0 ;; all_reduce.65536) t=100.0 ;; all_reduce.524288) t=250.0 ;;
  sendrecv.1048576) t=400.0 ;; sendrecv.8388608) t=2400.0 ;; sendrecv.67108864) t=18800.0 ;;
  alltoall.1048576) t=200.0 ;; alltoall.8388608) t=1280.0 ;; alltoall.67108864) t=9300.0 ;;
  all_reduce.134217728) t=30000.0 ;; *) die "unexpected $coll $size" ;;
esac
bw=4.0; [ "$FAKE_NP" != 2 ] && { bw=2.8; [ "$size" = 8 ] && t=60.0; }
tf=1.0; bf=1.0   # time and busbw factors against Socket's
case "$prof" in
  good) tf=0.5; bf=2.5; [ "$FAKE_NP" != 2 ] && { tf=0.9; bf=1.4; } ;;
  bad) tf=0.8; bf=2.0; [ "$coll.$size" = all_reduce.8 ] && tf=1.07; [ "$coll.$size" = alltoall.1048576 ] && tf=1.6
       [ "$FAKE_NP" != 2 ] && { tf=0.9; bf=1.4; } ;;
esac
read -r t bw <<<"$(awk -v t=$t -v b=$bw -v tf=$tf -v bf=$bf -v r=$n \
  'BEGIN { k = r > 1 ? 1.1 : 1.0; printf "%.2f %.2f", t * tf * k, b * bf * k }')"
wrong=0; [ "$check" = 0 ] && wrong=N/A; [ "$prof" = corrupt ] && wrong=3
echo "# nThread 1 nGpus 1 minBytes $size maxBytes $size step: 2(factor) warmup iters: 5 iters: $iters agg iters: 1" \
  "validation: $check graph: 0"
echo "#"
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw" \
  "#wrong"
echo "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)"
cpu
if [ "${FAKE_SPLIT:-}" = 1 ]; then # another thread's log line in the middle of the row, as NCCL's format prints it
  printf "%12s  %12s     float     sum      -1" $size $((size / 4))
  echo "vm:1:2 [0] NCCL INFO NET/GDR : TCP: a line from an I/O thread"
  echo "vm:1:3 [0] NCCL INFO a second one"
  printf "  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n" $t 0.00 $bw $wrong $t 0.00 $bw 0
else
  printf "%12s  %12s     float     sum      -1  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n" \
    $size $((size / 4)) $t 0.00 $bw $wrong $t 0.00 $bw 0
fi
echo "# Out of bounds values : 0 OK"
echo "# Avg bus bandwidth    : $bw"
'''

TORCHRUN = r'''#!/bin/bash
# stand-in torchrun for kv_transfer.py: node 0 writes the --json
node=""; json=""
while [ $# -gt 0 ]; do
  case "$1" in --node_rank=*) node=${1#*=}; shift ;; --json) json=$2; shift 2 ;; *) shift ;; esac
done
[ "$NCCL_HOSTID" = host$([ "$node" = 0 ] && echo A || echo B) ] || { echo "NCCL_HOSTID $NCCL_HOSTID"; exit 3; }
prof=socket; [ "$NCCL_NET" = Socket ] || prof=${FAKE_PROFILE:-good}
net=$NCCL_NET; [ "$prof" = wrongnet ] && net=Socket
echo "NCCL INFO Using network $net"
if [ "$prof" = hang ]; then sleep 30 & echo $! >>"$FAKE_DIR/hung"; wait; fi  # a worker that hangs
[ "$prof" = crash ] && exit 1
[ "$node" = 0 ] || exit 0
rep=${json##*-rep}; rep=${rep%.json}
echo "kv $NCCL_NET $prof $rep" >>"$FAKE_DIR/calls"
case "$prof" in
  socket) p50=1000; p99=1300; gb=5.0 ;;
  good) p50=500; p99=900; gb=11.0 ;;
  edge) p50=480; p99=900; gb=10.0 ;;
  *) p50=800; p99=1400; gb=8.0 ;;
esac
p50=$((p50 + (rep - 1) * 20))
[ "$prof" = edge ] && p50=$((p50 + (rep - 1) * 140))  # 480, 640 against Socket's 1000, 1020: 0.48x, then 0.63x
printf '{"results": [{"phase": "block", "p50_us": %s, "p99_us": %s, "gbps": 4.0}, %s], "wrong": %d}\n' $p50 $p99 \
  "{\"phase\": \"request\", \"p50_us\": 1, \"p99_us\": 1, \"gbps\": $gb}" $([ "$prof" = corrupt ] && echo 3 || echo 0) \
  >"$json"
'''

ROWS = ["ar8", "ar4k", "ar64k", "ar512k", "sr1m", "sr8m", "sr64m", "a2a1m", "a2a8m", "a2a64m", "kv", "ar128m",
        "n8-ar128m", "n8-ar8"]


class TcpMatrix(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(prefix="tcpmatrix-test-")
        self.nt = os.path.join(self.d, "nt")
        os.mkdir(self.nt)
        for name, text in [("mpirun", MPIRUN), ("torchrun", TORCHRUN)] + [
                (os.path.join("nt", "%s_perf_mpi" % c), NCCL_TESTS) for c in ("all_reduce", "sendrecv", "alltoall")]:
            p = os.path.join(self.d, name)
            with open(p, "w") as f:
                f.write(text)
            os.chmod(p, 0o755)
        self.so = os.path.join(self.d, "lib", "libnccl-net-gdr.so")
        os.mkdir(os.path.dirname(self.so))
        open(self.so, "w").close()

    def tearDown(self):
        shutil.rmtree(self.d, ignore_errors=True)

    def run_matrix(self, *args, nt=True):
        out = os.path.join(self.d, "out")
        cmd = [sys.executable, TCP_MATRIX, "--no-mps", "--mpirun", os.path.join(self.d, "mpirun"), "--torchrun",
               os.path.join(self.d, "torchrun"), "--out", out, "--interval", "0.05"] + list(args) + \
            ([self.nt] if nt else [])
        env = dict(os.environ, FAKE_DIR=self.d)
        env.pop("LD_LIBRARY_PATH", None)
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    def calls(self):
        with open(os.path.join(self.d, "calls")) as f:
            return [l.split() for l in f]

    def row(self, out, key, variant):
        """The table's columns of a row (key, variant): [Socket stat, variant stat, ratio, speed, verdict]."""
        for line in out.splitlines():
            m = re.match(r"^(\S+) +.*? +(\S+ \[\S+\]|-) +(\S+) +(\S+ \[\S+\]|-) +(\S+) +(\S+)  (.*)$", line)
            if m and m.group(1) == key and m.group(3) == variant:
                return [m.group(2), m.group(4), m.group(5), m.group(6), m.group(7)]
        self.fail("no row %s %s in:\n%s" % (key, variant, out))

    def test_all_rows_pass(self):
        p = self.run_matrix("--plugin", self.so, "--reps", "2")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        out = p.stdout
        self.assertEqual(out.strip().splitlines()[-1],
                         "tcp-matrix: 17 of 17 rows PASS; goals 1..4: PASS PASS PASS PASS")
        # medians and spreads over the reps (rep 2 is 1.1x rep 1), ratios, speed
        self.assertEqual(self.row(out, "ar8", "GDR"),
                         ["21.0 [20.0..22.0]", "10.5 [10.0..11.0]", "0.50x", "2.00x", "PASS (goal 1)"])
        self.assertEqual(self.row(out, "sr64m", "GDR")[:4],
                         ["19740.0 [18800.0..20680.0]", "9870.0 [9400.0..10340.0]", "0.50x", "2.00x"])
        self.assertEqual(self.row(out, "kv-p50", "GDR"),
                         ["1010.0 [1000.0..1020.0]", "510.0 [500.0..520.0]", "0.50x", "1.98x", "PASS (goal 1,2)"])
        self.assertEqual(self.row(out, "kv-req", "GDR")[1:4], ["11.00 [11.00..11.00]", "2.20x", "2.20x"])
        self.assertEqual(self.row(out, "ar128m", "GDR"),
                         ["4.20 [4.00..4.40]", "10.50 [10.00..11.00]", "2.50x", "2.50x", "PASS (goal 1,3)"])
        self.assertEqual(self.row(out, "ar128m-cpu", "GDR")[4], "PASS (goal 3)")
        self.assertEqual(self.row(out, "n8-ar128m", "GDR")[2:5], ["1.40x", "1.40x", "PASS (goal 1,4)"])
        self.assertEqual(self.row(out, "n8-ar8", "GDR")[2:5], ["0.90x", "1.11x", "PASS (goal 1,4)"])
        self.assertRegex(out, r"(?m)^n8-ar8 +8 ranks, all_reduce 8 B, time ")
        # the 128 MB run's log says where the CPU went, per thread name
        with open(os.path.join(self.d, "out", "ar128m", "GDR-rep1.log")) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^# cpu-per-gb: CPU-s/GB \d+\.\d{3}; by thread name \(digits as N\): "
                               r"\S+=\d+\.\d{3}")
        self.assertRegex(text, r"(?m)^# cpu-per-gb: the busiest threads, name\[pid/tid\]=cores over \d+\.\d\d s: "
                               r"\S+\[\d+/\d+\]=\d+\.\d\d")
        # every row's runs: Socket then the plugin, rep 1 then rep 2, in the table's order
        jobs = [("all_reduce", 8, 2), ("all_reduce", 4096, 2), ("all_reduce", 65536, 2), ("all_reduce", 524288, 2),
                ("sendrecv", 1 << 20, 2), ("sendrecv", 8 << 20, 2), ("sendrecv", 64 << 20, 2),
                ("alltoall", 1 << 20, 2), ("alltoall", 8 << 20, 2), ("alltoall", 64 << 20, 2), "kv",
                ("all_reduce", 128 << 20, 2), ("all_reduce", 128 << 20, 8), ("all_reduce", 8, 8)]
        want = []
        for rep in (1, 2):
            for j in jobs:
                for net in ("Socket", "GDR"):
                    want.append(["kv", net, "socket" if net == "Socket" else "good", str(rep)] if j == "kv" else
                                [j[0], str(j[1]), str(j[2]), net, "socket" if net == "Socket" else "good"])
        self.assertEqual([c[:5] if c[0] != "kv" else c for c in self.calls()], want)

    def test_failing_rows_and_goals(self):
        p = self.run_matrix("--variant", "bad,%s,FAKE_PROFILE=bad" % self.so, "--env", "FAKE_CPU=light", "--reps",
                            "1", "--np-large", "4", "--rows", "n8-ar8,ar8,a2a1m,sr1m,kv,ar128m,n8-ar128m")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        out = p.stdout
        self.assertEqual(out.strip().splitlines()[-1], "tcp-matrix: 3 of 10 rows PASS; goals 1..4: FAIL FAIL FAIL PASS")
        self.assertEqual(self.row(out, "ar8", "bad")[2:],
                         ["1.07x", "0.93x", "FAIL: goal 1 speed 0.93x (needs >= 1.00x)"])
        self.assertEqual(self.row(out, "a2a1m", "bad")[4], "FAIL: goal 1 speed 0.62x (needs >= 1.00x)")
        self.assertEqual(self.row(out, "sr1m", "bad")[4], "PASS (goal 1)")
        self.assertEqual(self.row(out, "kv-p50", "bad")[4], "FAIL: goal 2 ratio 0.80x (needs <= 0.60x)")
        self.assertEqual(self.row(out, "kv-p99", "bad")[4],
                         "FAIL: goal 1 speed 0.93x (needs >= 1.00x), goal 2 ratio 1.08x (needs <= 1.00x)")
        self.assertEqual(self.row(out, "kv-req", "bad")[4], "FAIL: goal 2 ratio 1.60x (needs >= 2.00x)")
        self.assertEqual(self.row(out, "ar128m", "bad")[4], "FAIL: goal 3 ratio 2.00x (needs >= 2.40x)")
        self.assertRegex(self.row(out, "ar128m-cpu", "bad")[4], r"^FAIL: goal 3 ratio \d+\.\d\dx \(needs <= 1\.10x\)$")
        self.assertEqual(self.row(out, "n8-ar128m", "bad")[4], "PASS (goal 1,4)")
        self.assertRegex(out, r"(?m)^n8-ar128m +4 ranks, all_reduce 128 MB busbw ")
        self.assertIn("# bad goal 1: FAIL (ar8, a2a1m, kv-p99)", out)
        self.assertIn("# bad goal 4: PASS", out)
        self.assertIn(["all_reduce", "8", "4", "Socket", "socket", "5000"], self.calls())

    def test_failed_runs_reported(self):
        variants = []
        for n in ("hang", "crash", "wrongnet", "corrupt"):
            variants += ["--variant", "%s,%s,FAKE_PROFILE=%s" % (n, self.so, n)]
        p = self.run_matrix("--rows", "ar8,kv", "--reps", "1", "--timeout", "1.5", *variants)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        out = p.stdout
        self.assertRegex(self.row(out, "ar8", "hang")[4],
                         r"^FAIL: 1 run\(s\) failed: hang rep 1: timeout after 1.5 s ")
        self.assertRegex(self.row(out, "ar8", "crash")[4], r"^FAIL: 1 run\(s\) failed: crash rep 1: exit 1, no 8-byte")
        self.assertRegex(self.row(out, "ar8", "wrongnet")[4], r"NCCL used network Socket, not GDR")
        self.assertRegex(self.row(out, "ar8", "corrupt")[4], r"#wrong 3/0")
        self.assertEqual(self.row(out, "ar8", "hang")[:2], ["20.0 [20.0..20.0]", "-"])
        for key in ("kv-p50", "kv-p99", "kv-req"):
            self.assertRegex(self.row(out, key, "hang")[4], r"^FAIL: 1 run\(s\) failed: hang rep 1: no results "
                                                            r"\(exit timeout/timeout")
            self.assertRegex(self.row(out, key, "crash")[4], r"^FAIL: 1 run\(s\) failed: crash rep 1: no results "
                                                             r"\(exit 1/1")
            self.assertRegex(self.row(out, key, "wrongnet")[4], r"wrongnet rep 1: NCCL used network Socket, not GDR")
            self.assertRegex(self.row(out, key, "corrupt")[4], r"corrupt rep 1: 3 block\(s\) WRONG")
        lines = out.strip().splitlines()
        self.assertEqual(lines[-4:], ["tcp-matrix: %s: 0 of 4 rows PASS; goals 1..4: FAIL FAIL n/a n/a" % n
                                      for n in ("hang", "crash", "wrongnet", "corrupt")])
        # the hung ranks and torchrun nodes were killed with their run
        with open(os.path.join(self.d, "hung")) as f:
            pids = [int(x) for x in f.read().split()]
        self.assertEqual(len(pids), 4)
        for pid in pids:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            self.assertIn(state, ("Z", "X"), "process %d still runs" % pid)

    def test_host_steal_per_run(self):
        # each nccl-tests run moves the host's CPU times by 100 ticks, 10 of them steal in the plugin's runs; the KV
        # example's stand-in does not move them, so its runs have no steal figure
        stat = os.path.join(self.d, "stat")
        with open(stat, "w") as f:
            f.write("cpu  1000 0 0 0 0 0 0 7 0 0\ncpu0 1000 0 0 0 0 0 0 7 0 0\n")
        p = self.run_matrix("--plugin", self.so, "--reps", "2", "--rows", "ar8,sr1m,kv", "--proc-stat", stat)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("# ar8 Socket rep 1: ok, host steal 0.00 %\n", p.stdout)
        self.assertIn("# sr1m GDR rep 2: ok, host steal 10.00 %\n", p.stdout)
        self.assertIn("# kv GDR rep 1: ok\n", p.stdout)
        self.assertIn("# host steal per run (%s), median [min..max] %%: Socket 0.00 [0.00..0.00], "
                      "GDR 10.00 [10.00..10.00]\n" % stat, p.stdout)
        # no readable /proc/stat: no figures, no line
        p = self.run_matrix("--plugin", self.so, "--rows", "ar8", "--proc-stat", os.path.join(self.d, "none"))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("# ar8 GDR rep 1: ok\n", p.stdout)
        self.assertNotIn("host steal", p.stdout)

    def test_rep_pairs(self):
        # each transport's rep 2 is 1.1x its rep 1, so every pair within a rep has the profiles' own ratio: good is
        # 0.5x Socket's time, bad 0.8x (1.6x good's), 2.5x and 2.0x its busbw; the KV stand-in adds 20 us to p50 in rep
        # 2 (500 against 1000, then 520 against 1020)
        p = self.run_matrix("--variant", "good,%s,FAKE_PROFILE=good" % self.so,
                            "--variant", "bad,%s,FAKE_PROFILE=bad" % self.so, "--reps", "2", "--rows", "sr1m,kv")
        self.assertIn("# per rep, the figure's ratio within the same rep (rep 1, rep 2, ...):\n", p.stdout)
        self.assertIn("# sr1m: good/Socket 0.50x 0.50x; bad/Socket 0.80x 0.80x; bad/good 1.60x 1.60x\n", p.stdout)
        self.assertIn("# kv-p50: good/Socket 0.50x 0.51x; bad/Socket 0.80x 0.80x; bad/good 1.60x 1.58x\n", p.stdout)
        # the lines come before the table, whose last line stays the summary
        self.assertLess(p.stdout.index("# sr1m: good/Socket"), p.stdout.index("row        figure"))
        self.assertTrue(p.stdout.rstrip().splitlines()[-1].startswith("tcp-matrix: bad: "), p.stdout)
        # one rep: no pairs to show
        p = self.run_matrix("--plugin", self.so, "--reps", "1", "--rows", "sr1m")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("per rep", p.stdout)

    def test_reps_split_on_a_goal(self):
        # KV p50 0.48x Socket's in rep 1 and 0.63x in rep 2: the medians (560 against 1010 us, 0.55x) pass goal 2's
        # 0.6x, one pair fails it; goal 1 passes in both pairs, as do the p99 and the requests (exactly 2.00x)
        p = self.run_matrix("--variant", "edge,%s,FAKE_PROFILE=edge" % self.so, "--reps", "2", "--rows", "kv")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.row(p.stdout, "kv-p50", "edge")[2:],
                         ["0.55x", "1.80x",
                          "PASS (goal 1,2) [reps split: goal 2 ratio <= 0.60x in 1 of 2 reps; more reps decide]"])
        self.assertEqual(self.row(p.stdout, "kv-p99", "edge")[4], "PASS (goal 1,2)")
        self.assertEqual(self.row(p.stdout, "kv-req", "edge")[4], "PASS (goal 1,2)")
        self.assertEqual(p.stdout.strip().splitlines()[-1],
                         "tcp-matrix: 3 of 3 rows PASS; goals 1..4: PASS PASS n/a n/a")
        # one rep: no pairs, no note
        p = self.run_matrix("--variant", "edge,%s,FAKE_PROFILE=edge" % self.so, "--reps", "1", "--rows", "kv")
        self.assertEqual(self.row(p.stdout, "kv-p50", "edge")[4], "PASS (goal 1,2)")

    def test_row_cut_by_a_log_line(self):
        # an I/O thread's INFO line printed in the middle of nccl-tests' result row (run 27 s): the row still counts
        p = self.run_matrix("--rows", "sr1m", "--reps", "1", "--variant", "split,%s,FAKE_SPLIT=1" % self.so)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(self.row(p.stdout, "sr1m", "split"),
                         ["400.0 [400.0..400.0]", "200.0 [200.0..200.0]", "0.50x", "2.00x", "PASS (goal 1)"])
        with open(os.path.join(self.d, "out", "sr1m", "split-rep1.log")) as f:
            self.assertRegex(f.read(), r"-1vm:1:2 \[0\] NCCL INFO ")  # the log has the cut row

    def test_budget_stops_starting_runs(self):
        # the first group always runs; after it, no group whose estimate (the groups run) ends after the budget
        p = self.run_matrix("--plugin", self.so, "--rows", "ar8,ar4k", "--reps", "2", "--budget", "0.001")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        out = p.stdout
        self.assertIn("# --budget 0.001 s: 3 group(s) of runs not started: ar4k rep 1, ar8 rep 2, ar4k rep 2", out)
        self.assertEqual(self.row(out, "ar8", "GDR"),
                         ["20.0 [20.0..20.0]", "10.0 [10.0..10.0]", "0.50x", "2.00x", "PASS (goal 1)"])
        self.assertNotRegex(out, r"(?m)^ar4k ")
        self.assertEqual(out.strip().splitlines()[-1], "tcp-matrix: 1 of 1 rows PASS; goals 1..4: PASS n/a n/a n/a")
        self.assertEqual([c[:4] for c in self.calls()],
                         [["all_reduce", "8", "2", "Socket"], ["all_reduce", "8", "2", "GDR"]])
        # a budget that holds everything changes nothing
        p = self.run_matrix("--plugin", self.so, "--rows", "ar8", "--reps", "2", "--budget", "600")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("--budget", p.stdout)

    def test_dry_run_prints_the_commands(self):
        p = self.run_matrix("--variant", "one,%s" % self.so, "--variant", "all,%s,GDRNET_TCP_SPIN_THREADS=64" % self.so,
                            "--rows", "ar8,kv,ar128m", "--nccl-lib", "/opt/nccl/lib", "--port", "29999", "--dry-run")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.d, "calls")))
        self.assertFalse(os.path.exists(os.path.join(self.d, "out")))
        cmds = [l for l in p.stdout.splitlines() if not l.startswith("#")]
        self.assertEqual(len(cmds), 2 * (3 + 2 * 3 + 3))  # 2 reps; ar8, kv (two nodes), ar128m for 3 transports
        self.assertIn("# 18 runs", p.stdout)
        stdbuf = "stdbuf -oL " if shutil.which("stdbuf") else ""
        nt = os.path.join(self.nt, "all_reduce_perf_mpi")
        rank = ("-np 1 env NCCL_HOSTID=host%d GDRNET_TCP_NSOCKS=auto GDRNET_TCP_NTHREADS=auto "
                "GDRNET_TCP_SPIN_THREADS=64 GDRNET_TRANSPORT=tcp LD_LIBRARY_PATH=/opt/nccl/lib:%s NCCL_DEBUG=INFO "
                "NCCL_DEBUG_SUBSYS=INIT,NET NCCL_NET=GDR NCCL_NET_PLUGIN=%s NCCL_NVLS_ENABLE=0 "
                "NCCL_P2P_NET_CHUNKSIZE=524288 NCCL_TESTS_DEVICE=0 %s%s -b 8 -e 8 -n 20000 -w 1000 -g 1 -c 1")
        self.assertEqual(cmds[2], "%s --bind-to none %s : %s > %s 2>&1" % (
            os.path.join(self.d, "mpirun"), rank % (0, os.path.dirname(self.so), self.so, stdbuf, nt),
            rank % (1, os.path.dirname(self.so), self.so, stdbuf, nt), os.path.join(self.d, "out", "ar8",
                                                                                   "all-rep1.log")))
        self.assertIn("NCCL_NET=Socket NCCL_NET_PLUGIN=none", cmds[0])
        self.assertIn("NCCL_NET=GDR", cmds[1])
        self.assertNotIn("SPIN_THREADS", cmds[1])
        kv = [c for c in cmds if "kv_transfer.py" in c]
        self.assertEqual(len(kv), 12)
        self.assertRegex(kv[0], r"^env .*NCCL_HOSTID=hostA NCCL_NET=Socket .* --node_rank=0 .*"
                                r"--rdzv-endpoint=127\.0\.0\.1:29999 .*kv_transfer\.py --device 0 --json \S+Socket-rep1"
                                r"\.json > \S+/kv/Socket-rep1\.node0 2>&1 &$")
        self.assertIn("-b 134217728 -e 134217728 -f 2 -n 200 -w 5 -g 1 -c 0", cmds[9])
        self.assertTrue(cmds[-1].endswith("/ar128m/all-rep2.log 2>&1   # bench/cpu-per-gb's run: CPU sampled from "
                                          "/proc"))

    def test_usage(self):
        p = self.run_matrix()
        self.assertEqual(p.returncode, 2)
        self.assertIn("--plugin SO (or --variant", p.stderr)
        p = self.run_matrix("--plugin", self.so, "--rows", "ar8,nope")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--rows: unknown nope; the rows: " + ",".join(ROWS), p.stderr)
        p = self.run_matrix("--plugin", self.so, "--rows", "ar8", nt=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("NCCL_TESTS_BUILD is needed", p.stderr)
        os.unlink(os.path.join(self.nt, "alltoall_perf_mpi"))
        p = self.run_matrix("--plugin", self.so, "--rows", "a2a1m")
        self.assertEqual(p.returncode, 2)
        self.assertIn("no alltoall_perf_mpi or alltoall_perf in", p.stderr)


if __name__ == "__main__":
    unittest.main()
