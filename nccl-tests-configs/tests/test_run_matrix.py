#!/usr/bin/env python3
"""Tests for nccl-tests-configs/run-matrix and the presets.

No nccl-tests here (the project never contains it): --dry-run checks the commands, and a fake
nccl-tests build directory (shell stubs that print a captured log) checks a real run end to end.
"""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.dirname(HERE)
RUN_MATRIX = os.path.join(CONFIGS, "run-matrix")
LOGS = os.path.join(HERE, "logs")
COLLS = ["all_reduce", "all_gather", "reduce_scatter", "sendrecv"]
PRESETS = ["rdma-gdr", "rdma-host", "tcp", "emulator", "single-host",
           "baseline-socket", "baseline-ib", "baseline-ib-emulator"]


def make_fake_nccl_tests(d, fail=()):
    """Stubs named like nccl-tests binaries: print a captured log (as the real ones print it)
    plus an NCCL-style line showing the environment the case got."""
    os.makedirs(d, exist_ok=True)
    for c in COLLS:
        # the plugin's sample log, or the baseline's when the preset selects NCCL's Socket transport
        sample = os.path.join(LOGS, "${role}", {"all_reduce": "all_reduce.Simple.log",
                                                "all_gather": "all_gather.LL.log",
                                                "reduce_scatter": "reduce_scatter.LL128.log",
                                                "sendrecv": "sendrecv.Simple.log"}[c])
        path = os.path.join(d, c + "_perf")
        with open(path, "w") as fh:
            fh.write("#!/bin/sh\n")
            fh.write('case "$NCCL_NET" in Socket) role=baseline ;; *) role=plugin ;; esac\n')
            fh.write('echo "fakehost:1:1 [0] NCCL INFO stub args=$* proto=$NCCL_PROTO algo=$NCCL_ALGO '
                     'net=$NCCL_NET plugin=$NCCL_NET_PLUGIN p2p=${NCCL_P2P_DISABLE:-unset}"\n')
            if c in fail:
                # killed half-way: some rows, no footer, non-zero exit
                fh.write("grep -v '^# run-matrix' \"%s\" | head -n 40\n" % sample)
                fh.write("echo 'fakehost: Test NCCL failure common.cu:1 remote process exited' >&2\n")
                fh.write("exit 3\n")
            else:
                fh.write("grep -v '^# run-matrix' \"%s\"\n" % sample)
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def rm(*args, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.pop("NET_GDR_BUILD_DIR", None)
    env.update(env_extra or {})
    p = subprocess.run(["bash", RUN_MATRIX] + list(args), capture_output=True, text=True, env=env, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


class DryRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.nt = os.path.join(self.tmp, "nccl-tests", "build")
        make_fake_nccl_tests(self.nt)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_full_matrix_with_baseline(self):
        rc, out, err = rm("--dry-run", "-o", os.path.join(self.tmp, "out"),
                          self.nt, "tcp,single-host", "--baseline", "baseline-socket,single-host")
        self.assertEqual(rc, 0, err)
        headers = [l for l in out.splitlines() if l.startswith("# run-matrix:")]
        cmds = [l for l in out.splitlines() if l.startswith("( set -a;")]
        self.assertEqual(len(headers), 24)                # 4 collectives x 3 protocols x (plugin + baseline)
        self.assertEqual(len(cmds), 24)
        cases = {re.search(r"case=(\S+)", h).group(1) for h in headers}
        self.assertEqual(cases, {"%s.%s" % (c, p) for c in COLLS for p in ("Simple", "LL", "LL128")})
        for h in headers:
            self.assertIn("algo=RING", h)
            self.assertIn("NCCL_ALGO=RING", h)
            self.assertIn("NCCL_P2P_DISABLE=1", h)
            self.assertIn("NCCL_SHM_DISABLE=1", h)
        plugin = [h for h in headers if "role=plugin" in h]
        base = [h for h in headers if "role=baseline" in h]
        self.assertEqual(len(plugin), 12)
        self.assertTrue(all("NCCL_NET=GDR" in h and "NCCL_NET_PLUGIN=gdr" in h for h in plugin))
        self.assertTrue(all("NCCL_NET=Socket" in h and "NCCL_NET_PLUGIN=none" in h for h in base))
        for c in cmds:
            self.assertIn(" -c 1 ", c)
            self.assertIn(" -g 2 ", c)
            self.assertIn("-b 8 -e 128M -f 2", c)
            self.assertRegex(c, r"exec timeout --kill-after=30 900 %s/\w+_perf" % re.escape(self.nt))
            self.assertRegex(c, r"> \S+/(tcp\+single-host|baseline-socket\+single-host)/\w+\.(Simple|LL|LL128)\.log 2>&1$")
        self.assertIn("# dry run: 24 cases", out)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "out")))   # a dry run creates nothing

    def test_accepts_nccl_tests_root(self):
        rc, out, err = rm("--dry-run", "--collectives", "all_reduce", "--protos", "LL",
                          os.path.dirname(self.nt), "tcp")
        self.assertEqual(rc, 0, err)
        self.assertIn(self.nt + "/all_reduce_perf", out)

    def test_sizes_and_iterations(self):
        rc, out, err = rm("--dry-run", "--collectives", "sendrecv", "--protos", "Simple",
                          "-b", "1M", "-e", "1G", "-f", "4", "-n", "50", "-w", "10", "-g", "8",
                          "--timeout", "0", self.nt, "rdma-gdr")
        self.assertEqual(rc, 0, err)
        self.assertIn("exec %s/sendrecv_perf -b 1M -e 1G -f 4 -g 8 -c 1 -n 50 -w 10 )" % self.nt, out)

    def test_mpirun(self):
        rc, out, err = rm("--dry-run", "--collectives", "all_reduce", "--protos", "LL128",
                          "--mpirun", "2", "--mpirun-cmd", "mpirun --allow-run-as-root",
                          "--mpirun-args", "--bind-to none", self.nt, "tcp,single-host")
        self.assertEqual(rc, 0, err)
        cmd = [l for l in out.splitlines() if l.startswith("( set -a;")][0]
        self.assertIn("mpirun --allow-run-as-root -np 2 --bind-to none -x ", cmd)
        for v in ("NCCL_NET", "NCCL_NET_PLUGIN", "NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_DISABLE", "GDRNET_TRANSPORT"):
            self.assertIn("-x %s " % v, cmd)
        self.assertIn("all_reduce_perf -b 8 -e 128M -f 2 -g 1 -c 1", cmd)
        rc, out, err = rm("--dry-run", "--collectives", "all_reduce", "--protos", "LL",
                          "--mpirun", "4", "--mpi-flavor", "mpich", self.nt, "tcp")
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"mpirun -np 4 -genvlist [A-Z_,]*NCCL_NET_PLUGIN,")

    def test_srun_example(self):
        rc, out, err = rm("--srun-example", self.nt, "rdma-gdr")
        self.assertEqual(rc, 0, err)
        self.assertIn("srun ", out)
        self.assertIn("--export=ALL", out)
        self.assertIn("rdma-gdr.env", out)
        self.assertIn("-g 1 -c 1", out)

    def test_srun_example_needs_no_local_nccl_tests(self):
        """The path is the one on the cluster's nodes: printing the example must not need it here."""
        missing = os.path.join(self.tmp, "not-here", "build")
        rc, out, err = rm("--srun-example", missing, "rdma-gdr")
        self.assertEqual(rc, 0, err)
        self.assertIn(os.path.join(missing, "all_reduce_perf") + " -b 8", out)

    def test_local_gpus_without_single_host_warn(self):
        """-g N > 1 in one process: NCCL uses NVLink/P2P/SHM between the GPUs unless single-host turns them off."""
        warn = "-g 2 on one host without single-host: NCCL uses NVLink/P2P, not the plugin"
        base = ["--dry-run", "--collectives", "all_reduce", "--protos", "LL", "-o", os.path.join(self.tmp, "o")]
        rc, out, err = rm(*(base + ["-g", "2", self.nt, "rdma-gdr"]))
        self.assertEqual(rc, 0, err)
        self.assertIn("preset 'rdma-gdr': " + warn, err)
        rc, out, err = rm(*(base + [self.nt, "tcp", "--baseline", "baseline-socket,single-host"]))
        self.assertIn("preset 'tcp': " + warn, err)          # default -g 2
        self.assertNotIn("baseline-socket,single-host': -g", err)
        for args in (["-g", "2", self.nt, "rdma-gdr,single-host"], ["-g", "1", self.nt, "rdma-gdr"],
                     ["--mpirun", "2", self.nt, "rdma-gdr"]):
            rc, out, err = rm(*(base + args))
            self.assertEqual(rc, 0, err)
            self.assertNotIn("without single-host", err, args)

    def test_default_results_dir(self):
        """Under the current directory; under $HOME when that is the scripts' own tree or not writable."""
        home = os.path.join(self.tmp, "home")
        work = os.path.join(self.tmp, "work")
        os.makedirs(home)
        os.makedirs(work)
        args = ["--dry-run", "--collectives", "all_reduce", "--protos", "LL", self.nt, "tcp,single-host"]
        rc, out, err = rm(*args, env_extra={"HOME": home}, cwd=work)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"logs would go to %s/nccl-tests-results/\d{8}T\d{6}Z$" % re.escape(work))
        for cwd in (CONFIGS, os.path.join(CONFIGS, "pytorch")):    # the tree the package installs
            rc, out, err = rm(*args, env_extra={"HOME": home}, cwd=cwd)
            self.assertEqual(rc, 0, err)
            self.assertRegex(out, r"logs would go to %s/nccl-tests-results/" % re.escape(home))
            self.assertNotIn(CONFIGS, out.splitlines()[-1])
        if os.geteuid() != 0:                                     # root writes anywhere
            os.chmod(work, 0o555)
            rc, out, err = rm(*args, env_extra={"HOME": home}, cwd=work)
            os.chmod(work, 0o755)
            self.assertRegex(out, r"logs would go to %s/" % re.escape(home))

    def test_runs_through_a_link_on_path(self):
        """The package links /usr/bin/gdrnet-run-matrix to the installed script: presets resolve beside the target."""
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        link = os.path.join(bindir, "gdrnet-run-matrix")
        os.symlink(os.path.relpath(RUN_MATRIX, bindir), link)
        p = subprocess.run([link, "--dry-run", "--collectives", "all_reduce", "--protos", "LL",
                            "-o", os.path.join(self.tmp, "o"), self.nt, "tcp,single-host"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(". %s;" % os.path.join(CONFIGS, "tcp.env"), p.stdout)

    def test_extra_env(self):
        rc, out, err = rm("--dry-run", "--collectives", "all_reduce", "--protos", "LL",
                          "--env", "GDRNET_TCP_NSOCKS=8", self.nt, "tcp")
        self.assertEqual(rc, 0, err)
        self.assertIn("GDRNET_TCP_NSOCKS=8", out.splitlines()[0])
        self.assertIn("GDRNET_TCP_NSOCKS=8;", out)

    def test_emulator_preset_needs_build_dir(self):
        rc, out, err = rm("--dry-run", self.nt, "emulator")
        self.assertEqual(rc, 2)
        self.assertIn("NET_GDR_BUILD_DIR", err)
        rc, out, err = rm("--dry-run", "--collectives", "all_reduce", "--protos", "LL", self.nt, "emulator",
                          "--baseline", "baseline-ib-emulator", env_extra={"NET_GDR_BUILD_DIR": "/opt/gdr/build"})
        self.assertEqual(rc, 0, err)
        h = [l for l in out.splitlines() if l.startswith("# run-matrix:")]
        self.assertIn("GDRNET_IBVERBS_LIB=/opt/gdr/build/lib/verbs-emu/libibverbs.so.1", h[0])
        self.assertIn("LD_LIBRARY_PATH=/opt/gdr/build/lib/verbs-emu:/opt/gdr/build/lib", h[0])
        self.assertIn("NCCL_NET=IB", h[1])
        self.assertIn("LD_LIBRARY_PATH=/opt/gdr/build/lib/verbs-emu", h[1])

    def test_sizes_and_counts_are_checked(self):
        # nccl-tests takes these unchecked (-b 0 with a factor never ends, -f 0 silently steps by -i bytes)
        bad = [(["-b", "0"], "-b '0': the smallest size must be at least 1 byte"),
               (["-e", "1Q"], "-e '1Q' is not a size: wants a byte count with an optional K, M or G suffix"),
               (["-b", "8x"], "-b '8x' is not a size"),
               (["-f", "0"], "-f '0': wants an integer factor of at least 2"),
               (["-f", "1"], "-f '1': wants an integer factor of at least 2"),
               (["-f", "two"], "-f 'two'"),
               (["-b", "1M", "-e", "8"], "-e '8' is smaller than -b '1M'"),
               (["-n", "0"], "-n '0': wants a positive integer"),
               (["-w", "x"], "-w 'x': wants a non-negative integer"),
               (["-g", "0"], "-g '0': wants a positive integer"),
               (["--timeout", "5m"], "--timeout '5m': wants seconds")]
        for args, msg in bad:
            rc, out, err = rm("--dry-run", *args, self.nt, "tcp")
            self.assertEqual(rc, 2, (args, out, err))
            self.assertIn(msg, err, args)
            self.assertEqual(out, "", args)                                   # nothing printed as if it would run
        rc, out, err = rm("--dry-run", "-b", "1K", "-e", "1G", "-f", "4", "-w", "0", self.nt, "tcp")
        self.assertEqual(rc, 0, err)
        self.assertIn("-b 1K -e 1G -f 4", out)

    def test_unknown_preset_is_one_error(self):
        for presets in ("no-such-preset", "tcp,no-such-preset"):
            rc, out, err = rm("--dry-run", self.nt, presets)
            self.assertEqual(rc, 2)
            errors = [l for l in err.splitlines() if "error" in l]
            self.assertEqual(len(errors), 1, err)
            self.assertIn("no preset 'no-such-preset'", errors[0])
            self.assertIn("presets: ", errors[0])
        rc, out, err = rm("--dry-run", self.nt, "tcp", "--baseline", "nope")
        self.assertEqual(rc, 2)
        self.assertEqual(len([l for l in err.splitlines() if "error" in l]), 1, err)

    def test_plugin_not_on_the_loader_path_warns(self):
        # tcp.env sets NCCL_NET_PLUGIN=gdr: without NET_GDR_BUILD_DIR (and nothing installed) the dry run's
        # LD_LIBRARY_PATH= is empty and NCCL would not find libnccl-net-gdr.so: said, not silently shown
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "NET_GDR_BUILD_DIR")}
        installed = any(os.path.exists(os.path.join(d, "libnccl-net-gdr.so"))
                        for d in ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/lib/x86_64-linux-gnu",
                                  "/usr/lib/x86_64-linux-gnu"))
        p = subprocess.run(["bash", RUN_MATRIX, "--dry-run", self.nt, "tcp"], capture_output=True, text=True,
                           env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        if not installed:
            self.assertIn("warning: preset 'tcp': NCCL_NET_PLUGIN=gdr, but no library NCCL would try", p.stderr)
            self.assertIn("LD_LIBRARY_PATH=<empty>", p.stderr)
            self.assertIn("NET_GDR_BUILD_DIR=<build dir>", p.stderr)
        # a build tree with the plugin: no warning
        build = os.path.join(self.tmp, "gdr-build")
        os.makedirs(os.path.join(build, "lib"))
        open(os.path.join(build, "lib", "libnccl-net-gdr.so"), "w").close()
        env["NET_GDR_BUILD_DIR"] = build
        p = subprocess.run(["bash", RUN_MATRIX, "--dry-run", self.nt, "tcp"], capture_output=True, text=True,
                           env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("no library NCCL would try", p.stderr)
        # the baseline's NCCL Socket needs no plugin
        p = subprocess.run(["bash", RUN_MATRIX, "--dry-run", self.nt, "baseline-socket"], capture_output=True,
                           text=True, env=env)
        self.assertNotIn("no library NCCL would try", p.stderr)

    def test_usage_errors(self):
        self.assertEqual(rm(self.nt)[0], 2)                                  # no preset
        rc, out, err = rm("--dry-run", self.nt, "no-such-preset")
        self.assertEqual(rc, 2)
        self.assertIn("no preset 'no-such-preset'", err)
        rc, out, err = rm("--bogus", self.nt, "tcp")
        self.assertEqual(rc, 2)
        rc, out, err = rm(os.path.join(self.tmp, "missing"), "tcp")
        self.assertEqual(rc, 2)
        self.assertIn("does not exist", err)
        rc, out, err = rm("--help")
        self.assertEqual(rc, 0)
        self.assertIn("NCCL_TESTS_BUILD", out)


class RealRun(unittest.TestCase):
    """run-matrix really running (stub) binaries: logs, headers, summary, exit status."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def test_run_and_summarize(self):
        nt = os.path.join(self.tmp, "nt")
        make_fake_nccl_tests(nt)
        out_dir = os.path.join(self.tmp, "out")
        rc, out, err = rm("-o", out_dir, "--collectives", "all_reduce,sendrecv", "--protos", "Simple,LL",
                          nt, "tcp,single-host", "--baseline", "baseline-socket,single-host", "--timeout", "60")
        self.assertEqual(rc, 0, out + err)
        for tag in ("tcp+single-host", "baseline-socket+single-host"):
            for case in ("all_reduce.Simple", "all_reduce.LL", "sendrecv.Simple", "sendrecv.LL"):
                log = os.path.join(out_dir, tag, case + ".log")
                with open(log) as fh:
                    text = fh.read()
                first = text.splitlines()[0]
                self.assertTrue(first.startswith("# run-matrix: case=%s " % case), first)
                proto = case.split(".")[1]
                self.assertIn("NCCL_PROTO=%s " % proto, first)
                # the environment really reached the binary
                self.assertIn("proto=%s algo=RING" % proto, text)
                self.assertIn("p2p=1", text)
                self.assertIn("args=-b 8 -e 128M -f 2 -g 2 -c 1 -n 20 -w 5", text)
                self.assertIn("net=%s" % ("GDR" if tag.startswith("tcp") else "Socket"), text)
        with open(os.path.join(out_dir, "summary.md")) as fh:
            summary = fh.read()
        self.assertIn("## all_reduce.LL", summary)
        self.assertIn("busbw ratio oop", summary)
        self.assertIn("PASS: 4 log(s) + 4 baseline", summary)
        self.assertTrue(os.path.exists(os.path.join(out_dir, "summary.csv")))

    def test_failed_case_fails_the_run(self):
        nt = os.path.join(self.tmp, "nt")
        make_fake_nccl_tests(nt, fail=("sendrecv",))
        out_dir = os.path.join(self.tmp, "out")
        rc, out, err = rm("-o", out_dir, "--collectives", "all_reduce,sendrecv", "--protos", "Simple", nt, "tcp")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("sendrecv.Simple: exit 3", err)
        with open(os.path.join(out_dir, "tcp", "sendrecv.Simple.log")) as fh:
            text = fh.read()
        self.assertIn("Test NCCL failure", text)           # stderr is in the log too
        self.assertIn("# run-matrix: exit status 3", text)
        with open(os.path.join(out_dir, "summary.md")) as fh:
            self.assertIn("FAIL", fh.read())

    def test_timeout_kills_a_hung_case(self):
        nt = os.path.join(self.tmp, "nt")
        make_fake_nccl_tests(nt)
        with open(os.path.join(nt, "all_reduce_perf"), "w") as fh:
            fh.write("#!/bin/sh\necho '# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor)'\nexec sleep 60\n")
        out_dir = os.path.join(self.tmp, "out")
        rc, out, err = rm("-o", out_dir, "--collectives", "all_reduce", "--protos", "LL", "--timeout", "1", nt, "tcp")
        self.assertEqual(rc, 1, out + err)
        self.assertIn("exit 124", err)
        with open(os.path.join(out_dir, "summary.md")) as fh:
            summary = fh.read()
        self.assertIn("killed by run-matrix --timeout", summary)

    def test_empty_nccl_tests_dir(self):
        # not one binary: an error naming the folder and what it should hold, before any results folder is made
        nt = os.path.join(self.tmp, "empty")
        os.makedirs(nt)
        out_dir = os.path.join(self.tmp, "out")
        rc, out, err = rm("-o", out_dir, nt, "tcp")
        self.assertEqual(rc, 2, out + err)
        self.assertIn("no nccl-tests binary in '%s'" % nt, err)
        self.assertIn("all_reduce_perf", err)
        self.assertNotIn("summarize", out + err)
        self.assertFalse(os.path.exists(out_dir))

    def test_missing_binary(self):
        nt = os.path.join(self.tmp, "nt")
        make_fake_nccl_tests(nt)
        os.remove(os.path.join(nt, "sendrecv_perf"))
        rc, out, err = rm("-o", os.path.join(self.tmp, "o"), "--collectives", "all_reduce,sendrecv",
                          "--protos", "LL", "--no-summary", nt, "tcp")
        self.assertEqual(rc, 1)
        self.assertIn("sendrecv_perf is missing", err)


class Presets(unittest.TestCase):
    def source(self, names, shell="bash", extra=None):
        files = " ".join(". %s/%s.env;" % (CONFIGS, n) for n in names)
        script = "set -eu; set -a; %s set +a; env" % files
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
        env.update(extra or {})
        p = subprocess.run([shell, "-c", script], capture_output=True, text=True, env=env)
        self.assertEqual(p.returncode, 0, "%s: %s" % (names, p.stderr))
        return dict(l.split("=", 1) for l in p.stdout.splitlines() if "=" in l)

    def test_every_preset_sources_in_bash_and_sh(self):
        for n in PRESETS:
            for sh in ("bash", "sh"):
                self.source([n], sh, {"NET_GDR_BUILD_DIR": "/b"})

    def test_every_line_is_commented(self):
        for n in PRESETS:
            with open(os.path.join(CONFIGS, n + ".env")) as fh:
                for i, line in enumerate(fh, 1):
                    s = line.strip()
                    if not s or s.startswith("#"):
                        continue
                    self.assertRegex(s, r'^[A-Za-z_][A-Za-z0-9_]*=("[^"]*"|[^\s"]*)\s+# \S',
                                     "%s.env:%d has no 'what and why' comment: %s" % (n, i, s))

    def test_contents(self):
        e = self.source(["rdma-gdr"])
        self.assertEqual((e["NCCL_NET"], e["NCCL_NET_PLUGIN"], e["GDRNET_TRANSPORT"]), ("GDR", "gdr", "rdma"))
        self.assertEqual(e["GDRNET_FALLBACK"], "0")
        e = self.source(["rdma-host"])
        self.assertEqual((e["GDRNET_GDR"], e["NCCL_NET_GDR_LEVEL"]), ("0", "LOC"))
        e = self.source(["tcp"], extra={"NET_GDR_BUILD_DIR": "/b", "LD_LIBRARY_PATH": "/x"})
        self.assertEqual(e["GDRNET_TRANSPORT"], "tcp")
        self.assertEqual(e["LD_LIBRARY_PATH"], "/b/lib:/x")
        e = self.source(["tcp"], extra={"NET_GDR_BUILD_DIR": "/b"})
        self.assertEqual(e["LD_LIBRARY_PATH"], "/b/lib")   # no empty element (it would mean ".")
        e = self.source(["emulator"], extra={"NET_GDR_BUILD_DIR": "/b"})
        self.assertEqual(e["GDRNET_IBVERBS_LIB"], "/b/lib/verbs-emu/libibverbs.so.1")
        self.assertEqual(e["LD_LIBRARY_PATH"], "/b/lib/verbs-emu:/b/lib")
        for k, v in (("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NVLS_ENABLE", "0"),
                     ("NCCL_NET", "GDR"), ("GDRNET_TRANSPORT", "rdma")):
            self.assertEqual(e[k], v)
        self.assertIn("VEMU_DEVICES", e)
        e = self.source(["baseline-socket"])
        self.assertEqual((e["NCCL_NET"], e["NCCL_NET_PLUGIN"]), ("Socket", "none"))
        e = self.source(["baseline-ib"])
        self.assertEqual((e["NCCL_NET"], e["NCCL_NET_PLUGIN"]), ("IB", "none"))
        e = self.source(["baseline-ib-emulator"], extra={"NET_GDR_BUILD_DIR": "/b"})
        self.assertEqual((e["NCCL_NET"], e["LD_LIBRARY_PATH"]), ("IB", "/b/lib/verbs-emu"))
        e = self.source(["tcp", "single-host"])
        self.assertEqual((e["NCCL_P2P_DISABLE"], e["NCCL_SHM_DISABLE"], e["NCCL_NVLS_ENABLE"]), ("1", "1", "0"))

    def test_only_real_plugin_knobs(self):
        """Every GDRNET_* a preset sets (or shows commented out) is a knob in plugin/params.def (the plugin warns
        about unknown ones), and its value is plausible for the knob's kind."""
        params = os.path.join(os.path.dirname(CONFIGS), "plugin", "params.def")
        if not os.path.exists(params):
            self.skipTest("plugin/params.def not present")
        with open(params) as fh:
            defs = {m.group(1): (m.group(2), m.group(3)) for m in
                    re.finditer(r'GDR_PARAM\((\w+),\s*(\w+),\s*"[^"]*",\s*[-\d]+,\s*[-\d]+,\s*[-\d]+,\s*(NULL|"[^"]*")', fh.read())}
        self.assertIn("TRANSPORT", defs)
        for n in PRESETS:
            with open(os.path.join(CONFIGS, n + ".env")) as fh:
                for line in fh:
                    m = re.match(r"^#?\s*(GDRNET_(\w+))=(\S*)", line.strip())
                    if not m:
                        continue
                    knob, value = m.group(2), m.group(3).strip('"')
                    self.assertIn(knob, defs, "%s.env sets %s, which is not a plugin knob" % (n, m.group(1)))
                    kind, choices = defs[knob]
                    if kind == "ENUM":
                        self.assertIn(value.lower(), choices.strip('"').lower().split("|"), line)
                    elif kind == "INT":
                        self.assertRegex(value, r"^-?\d+$", line)
                    elif kind == "AUTOINT":
                        self.assertRegex(value, r"^(auto|-?\d+)$", line)

    def test_readme_documents_every_preset(self):
        with open(os.path.join(CONFIGS, "README.md")) as fh:
            readme = fh.read()
        for n in PRESETS:
            self.assertIn("`%s.env`" % n, readme)
        for word in ("run-matrix", "summarize", "--baseline", "--dry-run", "mpirun", "srun"):
            self.assertIn(word, readme)


if __name__ == "__main__":
    unittest.main(verbosity=2)
