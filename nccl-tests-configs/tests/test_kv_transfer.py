#!/usr/bin/env python3
"""Tests of pytorch/kv_transfer.py.

  test_kv_transfer.py cli   --help and the usage errors work without torch (and without a launcher)
  test_kv_transfer.py cpu   two processes with --cpu (gloo): every block correct, in one-message and --per-layer
                            form; a corrupted block (--selftest-corrupt) must be reported WRONG with exit 1.
                            Exit 77 (skipped) when torch cannot be imported by this interpreter.
"""
import os
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "pytorch", "kv_transfer.py")
SMALL = ["--cpu", "--layers", "4", "--kv-heads", "2", "--head-dim", "32", "--block-tokens", "8", "--blocks", "10",
         "--warmup", "2", "--requests", "2", "--request-blocks", "3"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(args, env=None, timeout=120):
    return subprocess.run([sys.executable, SCRIPT] + args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def cli():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    p = run(["--help"], env)
    if p.returncode != 0 or "--cpu" not in p.stdout or "--per-layer" not in p.stdout:
        fail("--help: exit %d\n%s" % (p.returncode, p.stdout))
    p = run(["--cpu"], env)
    if p.returncode != 2 or "torchrun" not in p.stdout:
        fail("without RANK: expected exit 2 and a torchrun hint, got %d\n%s" % (p.returncode, p.stdout))
    p = run(["--blocks", "0"], env)
    if p.returncode != 2:
        fail("--blocks 0: expected a usage error (2), got %d" % p.returncode)
    print("cli: ok")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pair(extra):
    port = str(free_port())
    procs = []
    for r in (0, 1):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, SCRIPT] + SMALL + extra, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            fail("timed out: %s" % " ".join(extra))
        outs.append((p.returncode, out))
    return outs


def cpu():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("cpu: skipped (torch is not importable by %s)" % sys.executable)
        sys.exit(77)
    for extra in ([], ["--per-layer"]):
        (rc0, out0), (rc1, out1) = pair(extra)
        blocks = 2 + 10 + (2 + 2) * 3
        if rc0 != 0 or rc1 != 0 or "%d blocks checked on the decode side: all correct" % blocks not in out0:
            fail("%s: exits %d/%d\n%s\n%s" % (extra or "one message per block", rc0, rc1, out0, out1))
        for phase in ("block", "request"):
            if not any(line.split()[:1] == [phase] and line.rstrip().endswith("ok") for line in out0.splitlines()):
                fail("no %s row with check ok:\n%s" % (phase, out0))
        print("cpu %s: ok" % (" ".join(extra) or "(one message per block)"))
    (rc0, out0), (rc1, _) = pair(["--selftest-corrupt", "7"])
    if rc0 != 1 or "1 WRONG" not in out0:
        fail("a corrupted block must be reported: exit %d\n%s" % (rc0, out0))
    print("cpu corrupted block: reported (ok)")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("cli", "cpu"):
        print("usage: test_kv_transfer.py cli|cpu", file=sys.stderr)
        sys.exit(2)
    cli() if sys.argv[1] == "cli" else cpu()
