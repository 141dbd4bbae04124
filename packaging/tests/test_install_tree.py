#!/usr/bin/env python3
"""test_install_tree.py --source DIR --build DIR --cmake CMAKE

Installs the built tree into a temporary prefix (cmake --install) and checks the file list the packages are made
from: the plugin in the library directory, the tools in bin, docs and examples in the doc directory, the
nccl-tests presets and scripts in share; nothing else (no emulator, no tests, no headers, no libnccl-net.so). Then
checks the libnccl-net.so link: absent by default, and installed as a relative symlink when a build is configured
with -DGDRNET_INSTALL_DEFAULT_PLUGIN_LINK=ON.
"""

import argparse
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PRESETS = ["baseline-ib-emulator.env", "baseline-ib.env", "baseline-socket.env", "emulator.env", "rdma-gdr.env",
           "rdma-host.env", "single-host.env", "tcp.env"]


def cache(build):
    out = {}
    with open(os.path.join(build, "CMakeCache.txt")) as fh:
        for line in fh:
            m = re.match(r"^([A-Za-z_0-9]+):\w+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


def listing(root):
    out = {}
    for d, dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = p
    return out


class InstallTree(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="gdrnet-install-")
        cls.prefix = os.path.join(cls.tmp, "usr")
        p = subprocess.run([ARGS.cmake, "--install", ARGS.build, "--prefix", cls.prefix],
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise AssertionError("cmake --install failed:\n" + p.stdout + p.stderr)
        cls.files = listing(cls.prefix)
        c = cache(ARGS.build)
        cls.libdir = c.get("CMAKE_INSTALL_LIBDIR", "lib")
        cls.link_on = c.get("GDRNET_INSTALL_DEFAULT_PLUGIN_LINK", "OFF").upper() in ("ON", "1", "TRUE", "YES")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def expect(self, rel, executable=False):
        self.assertIn(rel, self.files, "%s is not installed" % rel)
        if executable:
            self.assertTrue(os.stat(self.files[rel]).st_mode & stat.S_IXUSR, "%s is not executable" % rel)

    def test_plugin_and_tools(self):
        self.expect("%s/libnccl-net-gdr.so" % self.libdir)
        self.expect("bin/gdrnet-perf", executable=True)
        self.expect("bin/gdrnet-doctor", executable=True)
        self.expect("bin/gdrnet-top", executable=True)
        with open(self.files["%s/libnccl-net-gdr.so" % self.libdir], "rb") as fh:
            self.assertEqual(fh.read(4), b"\x7fELF")

    def test_docs_and_examples(self):
        doc = "share/doc/libnccl-net-gdr"
        self.expect(doc + "/changelog")
        if os.path.exists(os.path.join(ARGS.source, "README.md")):
            self.expect(doc + "/README.md")
        docs_dir = os.path.join(ARGS.source, "docs")
        for f in os.listdir(docs_dir):
            if f.endswith(".md"):
                self.expect(doc + "/docs/" + f)
        plots = os.path.join(docs_dir, "plots")
        for f in (os.listdir(plots) if os.path.isdir(plots) else []):
            if f.endswith((".png", ".svg")):
                self.expect(doc + "/docs/plots/" + f)
        # the dated lab archive stays in the source tree
        self.assertFalse([f for f in self.files if f.startswith(doc + "/docs/results")],
                         "docs/results (the lab archive) is installed")
        for f in ("pod.yaml", "ddp-job.yaml", "doctor-daemonset.yaml", "nccl-tests-mpijob.yaml", "README.md"):
            self.expect(doc + "/examples/k8s/" + f)
        self.expect(doc + "/examples/k8s/collect-doctor.py", executable=True)
        for f in ("Dockerfile", "README.md"):
            self.expect(doc + "/examples/container/" + f)

    def test_nccl_tests_configs(self):
        base = "share/libnccl-net-gdr/nccl-tests-configs/"
        self.expect(base + "run-matrix", executable=True)
        self.expect(base + "summarize", executable=True)
        self.expect(base + "bench-tcp-vs-socket.sh", executable=True)
        self.expect(base + "README.md")
        for p in PRESETS:
            self.expect(base + p)
        for f in ("README.md", "ddp_step.py", "allreduce_bench.py", "kv_transfer.py"):
            self.expect(base + "pytorch/" + f)
        self.assertFalse([f for f in self.files if f.startswith(base + "tests")], "test logs are not installed")
        # on PATH: relative links to the installed scripts
        for s in ("run-matrix", "summarize"):
            link = os.path.join(self.prefix, "bin", "gdrnet-" + s)
            self.assertTrue(os.path.islink(link), "bin/gdrnet-%s is not installed as a link" % s)
            self.assertFalse(os.path.isabs(os.readlink(link)), "bin/gdrnet-%s: absolute link" % s)
            self.assertEqual(os.path.realpath(link), os.path.realpath(self.files[base + s]))
            p = subprocess.run([link, "--help"], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("gdrnet-" + s, p.stdout)

    def test_man_pages_and_completion(self):
        for tool in ("gdrnet-perf", "gdrnet-doctor", "gdrnet-top"):
            self.expect("share/man/man1/%s.1" % tool)
        for cmd in ("gdrnet-perf", "gdrnet-doctor", "gdrnet-top", "gdrnet-run-matrix", "gdrnet-summarize"):
            rel = "share/bash-completion/completions/" + cmd
            self.expect(rel)
            with open(self.files[rel]) as fh:
                self.assertIn("complete -F _gdrnet_", fh.read())

    def test_nothing_else(self):
        allowed = [
            r"^%s/libnccl-net-gdr\.so(\.\d+)*$" % re.escape(self.libdir),
            r"^bin/gdrnet-(perf|doctor|top|run-matrix|summarize)$",
            r"^share/doc/libnccl-net-gdr/",
            r"^share/libnccl-net-gdr/nccl-tests-configs/(run-matrix|summarize|bench-tcp-vs-socket\.sh|README\.md|[a-z-]+\.env|"
            r"pytorch/[\w.]+)$",
            r"^share/man/man\d/gdrnet-[\w-]+\.\d(\.gz)?$",
            r"^share/bash-completion/completions/gdrnet-(perf|doctor|top|run-matrix|summarize)$",
        ]
        if self.link_on:
            allowed.append(r"^%s/libnccl-net\.so$" % re.escape(self.libdir))
        stray = [f for f in sorted(self.files) if not any(re.match(a, f) for a in allowed)]
        self.assertEqual(stray, [], "unexpected installed files (emulator, tests, headers?)")
        self.assertFalse([f for f in self.files if "ibverbs" in f or "verbs-emu" in f])

    def test_default_link_absent_unless_asked(self):
        link = "%s/libnccl-net.so" % self.libdir
        if self.link_on:
            self.assertEqual(os.readlink(os.path.join(self.prefix, link)), "libnccl-net-gdr.so")
        else:
            self.assertNotIn(link, self.files)

    def test_default_link_when_on(self):
        """A separate configure with the option ON installs exactly the relative symlink (component only)."""
        b = os.path.join(self.tmp, "build-link-on")
        dest = os.path.join(self.tmp, "link-on")
        p = subprocess.run([ARGS.cmake, "-S", ARGS.source, "-B", b, "-DGDRNET_INSTALL_DEFAULT_PLUGIN_LINK=ON",
                            "-DGDRNET_BUILD_TESTS=OFF", "-DCMAKE_INSTALL_PREFIX=/usr"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = subprocess.run([ARGS.cmake, "--install", b, "--component", "gdrnet-default-link", "--prefix", dest],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        libdir = cache(b)["CMAKE_INSTALL_LIBDIR"]
        got = listing(dest)
        self.assertEqual(sorted(got), ["%s/libnccl-net.so" % libdir])
        path = os.path.join(dest, libdir, "libnccl-net.so")
        self.assertTrue(os.path.islink(path))
        self.assertEqual(os.readlink(path), "libnccl-net-gdr.so")
        # and the same component of the default build installs nothing
        none = os.path.join(self.tmp, "link-off")
        p = subprocess.run([ARGS.cmake, "--install", ARGS.build, "--component", "gdrnet-default-link",
                            "--prefix", none], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        if not self.link_on:
            self.assertEqual(listing(none), {})


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--cmake", default="cmake")
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
