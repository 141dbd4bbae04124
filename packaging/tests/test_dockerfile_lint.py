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


def final_stage(path):
    """(keyword, args) of the last stage's instructions, continuations joined as the Dockerfile frontend joins them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("lint_dockerfile", LINT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with open(path) as fh:
        ins = [(k.upper(), a) for _, k, a in mod.instructions(fh.read()) if k]
    last = max(i for i, (k, _) in enumerate(ins) if k == "FROM")
    return ins[last:]


class OfflinePath(unittest.TestCase):
    """The image's install step, run by /bin/sh (as RUN runs it) with logging stubs for dpkg, apt-get, ldconfig and rm:
    which commands it runs decides whether the build needs the network."""

    def setUp(self):
        stage = final_stage(DOCKERFILE)
        runs = [a for k, a in stage if k == "RUN"]
        self.assertEqual(len(runs), 1, "one install step in the final stage")
        self.script = runs[0]
        self.assertIn("OFFLINE", [a.split("=")[0] for k, a in stage if k == "ARG"])
        self.tmp = tempfile.mkdtemp(prefix="gdrnet-offline-")

    def tearDown(self):
        import shutil
        shutil.rmtree(self.tmp)

    def run_install(self, offline, dpkg_ok, have_verbs):
        stubs = os.path.join(self.tmp, "bin")
        os.makedirs(stubs, exist_ok=True)
        log = os.path.join(self.tmp, "calls")
        open(log, "w").close()
        bodies = {
            "dpkg": "exit %d" % (0 if dpkg_ok else 1),
            "apt-get": "exit 0",
            "ldconfig": "echo '\tlibibverbs.so.1 (libc6,x86-64) => /usr/lib/libibverbs.so.1'" if have_verbs else "true",
            "rm": "exit 0",
        }
        for name, body in bodies.items():
            with open(os.path.join(stubs, name), "w") as fh:
                fh.write('#!/bin/sh\necho "%s $*" >>"%s"\n%s\n' % (name, log, body))
            os.chmod(os.path.join(stubs, name), 0o755)
        env = {"PATH": stubs + ":/usr/bin:/bin", "OFFLINE": offline}
        p = subprocess.run(["/bin/sh", "-c", self.script], capture_output=True, text=True, env=env, timeout=60)
        with open(log) as fh:
            calls = [l.split()[0] + (" " + l.split()[1] if len(l.split()) > 1 else "") for l in fh]
        return p.returncode, calls, p.stdout + p.stderr

    def test_dependencies_present_no_network(self):
        for offline in ("0", "1"):
            rc, calls, out = self.run_install(offline, dpkg_ok=True, have_verbs=True)
            self.assertEqual(rc, 0, out)
            self.assertEqual(calls[0], "dpkg -i")
            self.assertFalse([c for c in calls if c.startswith("apt-get")], "OFFLINE=%s: %s" % (offline, calls))
            self.assertIn("installed with dpkg -i (no network)", out)

    def test_offline_never_runs_apt(self):
        rc, calls, out = self.run_install("1", dpkg_ok=True, have_verbs=False)
        self.assertEqual(rc, 0, out)
        self.assertFalse([c for c in calls if c.startswith("apt-get")], calls)
        self.assertIn("will run over TCP only", out)
        rc, calls, out = self.run_install("1", dpkg_ok=False, have_verbs=True)
        self.assertNotEqual(rc, 0)
        self.assertFalse([c for c in calls if c.startswith("apt-get")], calls)
        self.assertIn("OFFLINE=1 and the base image lacks a dependency", out)

    def test_online_fallbacks(self):
        rc, calls, out = self.run_install("0", dpkg_ok=False, have_verbs=True)
        self.assertEqual(rc, 0, out)
        self.assertEqual([c for c in calls if c.startswith("apt-get")], ["apt-get update", "apt-get install"])
        rc, calls, out = self.run_install("0", dpkg_ok=True, have_verbs=False)
        self.assertEqual(rc, 0, out)
        self.assertEqual([c for c in calls if c.startswith("apt-get")], ["apt-get update", "apt-get install"])

    def test_builder_stage_not_needed_offline(self):
        """PACKAGES=packages-from-context: the packages stage copies the local .deb, so the compiler stage (the only
        other apt-get) is unused and not built (BuildKit, and buildah's default --skip-unused-stages)."""
        with open(DOCKERFILE) as fh:
            text = fh.read()
        self.assertRegex(text, r"(?m)^FROM scratch AS packages-from-context\nCOPY build-pkg/packages/libnccl-net-gdr_\*\.deb /pkgs/$")
        self.assertRegex(text, r"(?m)^FROM \$\{PACKAGES\} AS packages$")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
