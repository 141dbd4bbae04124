#!/usr/bin/env python3
"""The PyTorch examples' command lines without PyTorch: --help prints the usage (exit 0), a run without torchrun
says to use it (exit 2), and a run without torch says so in one line (exit 2), never a traceback. torch is hidden
from the interpreter by a stand-in package that fails to import, so the test means the same with torch installed."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTORCH = os.path.join(os.path.dirname(HERE), "pytorch")
SCRIPTS = {"allreduce_bench.py": "--min-bytes", "ddp_step.py": "--steps", "kv_transfer.py": "--per-layer"}


class NoTorch(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(self.tmp.name, "torch"))
        with open(os.path.join(self.tmp.name, "torch", "__init__.py"), "w") as f:
            f.write("raise ImportError(\"No module named 'torch' (hidden by test_pytorch_cli.py)\")\n")

    def tearDown(self):
        self.tmp.cleanup()

    def run_script(self, name, args, rank=False):
        env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
        env["PYTHONPATH"] = self.tmp.name
        if rank:
            env.update(RANK="0", WORLD_SIZE="2", LOCAL_RANK="0")
        return subprocess.run([sys.executable, os.path.join(PYTORCH, name)] + args, capture_output=True, text=True,
                              env=env, timeout=60)

    def test_help_without_torch(self):
        for name, option in SCRIPTS.items():
            p = self.run_script(name, ["--help"])
            self.assertEqual(p.returncode, 0, "%s --help: %s" % (name, p.stderr))
            self.assertIn(option, p.stdout, name)
            self.assertNotIn("Traceback", p.stderr, name)

    def test_without_torchrun(self):
        for name in SCRIPTS:
            p = self.run_script(name, ["--cpu"])
            self.assertEqual(p.returncode, 2, name)
            self.assertIn("torchrun", p.stderr, name)
            self.assertNotIn("Traceback", p.stderr, name)

    def test_run_without_torch(self):
        for name in ("allreduce_bench.py", "ddp_step.py"):
            p = self.run_script(name, ["--cpu"], rank=True)
            self.assertEqual(p.returncode, 2, "%s: %s" % (name, p.stderr))
            self.assertIn("cannot import torch", p.stderr, name)
            self.assertIn("install PyTorch", p.stderr, name)
            self.assertNotIn("Traceback", p.stderr, name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
