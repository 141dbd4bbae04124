#!/usr/bin/env python3
"""test_dockerfile_lint.py DOCKERFILE: the real Dockerfile passes lint-dockerfile.py, and the linter catches
the mistakes it is meant to catch (so a passing lint means something)."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LINT = os.path.join(os.path.dirname(HERE), "container", "lint-dockerfile.py")
DOCKERFILE = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(HERE), "container", "Dockerfile")

GOOD_TAIL = ('FROM base\nCOPY --from=b /x /y\nRUN apt-get install -y /tmp/libnccl-net-gdr_1.deb\n'
             'ENV NCCL_NET_PLUGIN=gdr NCCL_NET=GDR\n')


def lint_text(text):
    with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as fh:
        fh.write(text)
    try:
        p = subprocess.run([sys.executable, LINT, fh.name], capture_output=True, text=True)
        return p.returncode, p.stdout
    finally:
        os.unlink(fh.name)


class Lint(unittest.TestCase):
    def test_real_dockerfile(self):
        p = subprocess.run([sys.executable, LINT, DOCKERFILE], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_minimal_good(self):
        rc, out = lint_text("FROM ubuntu AS b\n" + GOOD_TAIL)
        self.assertEqual(rc, 0, out)

    def test_catches(self):
        cases = {
            "unknown instruction": "FROM ubuntu AS b\nCOPYY a b\n" + GOOD_TAIL,
            "names no earlier stage": "FROM ubuntu AS a\n" + GOOD_TAIL,
            "not declared in this stage": "FROM ubuntu AS b\nLABEL x=${NOPE}\n" + GOOD_TAIL,
            "not declared by an ARG before the first FROM": "FROM ${IMG} AS b\n" + GOOD_TAIL,
            "must set ENV NCCL_NET=GDR": "FROM ubuntu AS b\n" + GOOD_TAIL.replace(" NCCL_NET=GDR", ""),
            "does not install libnccl-net-gdr": "FROM ubuntu AS b\n" + GOOD_TAIL.replace("libnccl-net-gdr_1", "x"),
            "line continuation": "FROM ubuntu AS b\n" + GOOD_TAIL + "RUN true \\\n",
            "duplicate stage name": "FROM ubuntu AS b\nFROM ubuntu AS b\n" + GOOD_TAIL,
            "first instruction": "RUN true\nFROM ubuntu AS b\n" + GOOD_TAIL,
        }
        for expect, text in cases.items():
            rc, out = lint_text(text)
            self.assertEqual(rc, 1, "%s: not caught:\n%s" % (expect, text))
            self.assertIn(expect, out)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
