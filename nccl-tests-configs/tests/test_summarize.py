#!/usr/bin/env python3
"""Tests for nccl-tests-configs/summarize on the captured sample logs (tests/logs, see its README)."""

import csv
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SUMMARIZE = os.path.join(os.path.dirname(HERE), "summarize")
LOGS = os.path.join(HERE, "logs")
PY = sys.executable


def run(*args, env=None):
    p = subprocess.run([PY, SUMMARIZE] + list(args), capture_output=True, text=True, env=env, cwd=LOGS)
    return p.returncode, p.stdout, p.stderr


def table_rows(out, case):
    """The markdown rows of one case's table, as lists of cells."""
    lines = out.splitlines()
    start = lines.index("## " + case)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if line.startswith("| ") and not line.startswith("| size"):
            rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def have_matplotlib(py=None):
    """Whether py (default: the interpreter running the tests) can import matplotlib."""
    p = subprocess.run([py or PY, "-c", "import matplotlib"], capture_output=True)
    return p.returncode == 0


def need_matplotlib(test):
    """Skips a test without matplotlib; under CI=true a missing test dependency fails instead (tests/deps.cmake)."""
    if have_matplotlib():
        return
    if os.environ.get("CI", "").lower() in ("true", "1"):
        test.fail("matplotlib is not importable by %s and CI=true: install python3-matplotlib" % PY)
    test.skipTest("matplotlib not importable by %s" % PY)


def copy_with(src, dst, old, new):
    with open(os.path.join(LOGS, src)) as fi, open(dst, "w") as fo:
        text = fi.read()
        assert old in text, (src, old)
        fo.write(text.replace(old, new))


class Summarize(unittest.TestCase):
    def test_plugin_vs_baseline_dirs(self):
        rc, out, err = run("plugin", "--baseline", "baseline")
        self.assertEqual(rc, 0, err)
        for case in ("all_reduce.Simple", "all_gather.LL", "reduce_scatter.LL128", "sendrecv.Simple"):
            self.assertIn("## " + case, out)
        self.assertIn("network GDR", out)
        self.assertIn("(network Socket)", out)
        self.assertIn("PASS: 4 log(s) + 4 baseline", out)
        rows = table_rows(out, "all_reduce.Simple")
        self.assertEqual(len(rows), 25)                   # 8 B .. 128 MiB, factor 2
        last = rows[-1]
        self.assertEqual(last[0], "128 MiB")
        self.assertEqual(last[1], "14364.30")             # time oop, as printed
        self.assertEqual(last[2], "9.34")                 # busbw oop
        self.assertEqual(last[4], "9.54")                 # busbw ip
        self.assertEqual(last[5], "0/0")
        self.assertEqual(last[7], "3.05")                 # baseline busbw oop
        # busbw ratio from the time columns: 44044.20 / 14364.30
        self.assertEqual(last[9], "%.2fx" % (44044.20 / 14364.30))
        self.assertIn("geometric mean over sizes >= 1 MiB", out)
        self.assertIn("latency at 8 B: 24.41 us vs baseline 26.71 us", out)

    def test_captured_real_logs(self):
        """Real output (logs/captured, see README): nccl-tests 2.19.6 on NCCL 2.28.3, 2x H200, the plugin's TCP
        transport against NCCL Socket, one process -g 2 and two MPI processes."""
        rc, out, err = run("captured/g2/plugin", "--baseline", "captured/g2/baseline")
        self.assertEqual(rc, 0, err)
        self.assertIn("network GDR", out)
        self.assertIn("(network Socket)", out)
        self.assertIn("NCCL 2.28.3+cuda13.0", out)
        self.assertIn("nccl-tests 2.19.6", out)
        rows = table_rows(out, "all_reduce.Simple")
        self.assertEqual(len(rows), 24)                   # 8 B .. 64 MiB
        self.assertEqual(rows[-1][:6], ["64 MiB", "6609.80", "10.15", "6619.34", "10.14", "0/0"])
        sr = table_rows(out, "sendrecv.Simple")
        self.assertTrue(all(r[5] == "0/N/A" for r in sr))
        rc, out, err = run("captured/mpi/plugin", "--baseline", "captured/mpi/baseline")
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(table_rows(out, "all_reduce.Simple")), 24)

    def test_silent_fallback_is_caught(self):
        # A plugin log in which NCCL used another network than NCCL_NET asked for.
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(LOGS, "plugin", "all_reduce.Simple.log")
            dst = os.path.join(d, "all_reduce.Simple.log")
            with open(src) as fi, open(dst, "w") as fo:
                fo.write(fi.read().replace("Using network GDR", "Using network Socket"))
            rc, out, err = run(dst)
            self.assertEqual(rc, 1)
            self.assertIn("NCCL_NET=GDR but NCCL used network Socket", err)
            rc, out, err = run("variants/nocheck.log", "--expect-network", "GDR")      # no NCCL lines: nothing to say
            self.assertEqual(rc, 0, err)
            rc, out, err = run("plugin/all_reduce.Simple.log", "--expect-network", "IB")
            self.assertEqual(rc, 1)
            self.assertIn("NCCL_NET=IB but NCCL used network GDR", err)

    def test_sendrecv_inplace_not_checked(self):
        rc, out, err = run("plugin/sendrecv.Simple.log")
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "sendrecv.Simple")
        self.assertTrue(rows)
        self.assertTrue(all(r[5] == "0/N/A" for r in rows), rows[:3])

    def test_all_gather_zero_byte_rows_kept(self):
        rc, out, err = run("plugin/all_gather.LL.log", "--baseline", "baseline/all_gather.LL.log")
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "all_gather.LL")
        self.assertEqual([r[0] for r in rows[:3]], ["0 B", "0 B", "32 B"])
        self.assertEqual(len(rows), 22)                   # 8 B .. 16 MiB

    def test_old_format(self):
        rc, out, err = run("plugin/reduce_scatter.LL128.log")
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "reduce_scatter.LL128")
        self.assertEqual(len(rows), 22)
        self.assertEqual(rows[-1][0], "16 MiB")
        self.assertEqual(rows[-1][2], "4.63")

    def test_truncated_log_fails(self):
        rc, out, err = run("bad/truncated.all_reduce.LL.log")
        self.assertEqual(rc, 1)
        self.assertIn("short row", err)
        self.assertIn("Avg bus bandwidth", err)
        self.assertIn("19 result rows", err)
        self.assertIn("FAIL", out)

    def test_wrong_data_fails(self):
        rc, out, err = run("bad/wrong.all_reduce.LL128.log")
        self.assertEqual(rc, 1)
        self.assertIn("#wrong 16384", err)
        self.assertIn("Out of bounds values: 2", err)
        self.assertIn("1 with wrong data", out)
        rows = table_rows(out, "all_reduce.LL128")
        self.assertIn(["64 KiB"], [r[:1] for r in rows])
        wrong = [r for r in rows if r[0] == "64 KiB"][0]
        self.assertEqual(wrong[5], "16384/0")

    def test_one_bad_log_fails_the_set(self):
        rc, out, err = run("plugin", "bad/wrong.all_reduce.LL128.log", "--baseline", "baseline")
        self.assertEqual(rc, 1)

    def test_per_iteration_and_timestamps(self):
        rc, out, err = run("variants/periter_timestamps.log")
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "periter_timestamps")
        self.assertEqual([r[0] for r in rows], ["1 KiB", "4 KiB", "16 KiB", "64 KiB", "256 KiB", "1 MiB"])
        self.assertEqual(rows[-1][1:6], ["133.46", "7.86", "133.36", "7.86", "0/0"])

    def test_no_check_is_not_an_error(self):
        rc, out, err = run("variants/nocheck.log")
        self.assertEqual(rc, 0, err)
        rows = table_rows(out, "nocheck")
        self.assertTrue(all(r[5] == "N/A/N/A" for r in rows))

    def test_csv(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "out.csv")
            rc, out, err = run("plugin", "--baseline", "baseline", "--csv", path, "-q")
            self.assertEqual(rc, 0, err)
            with open(path) as fh:
                rows = list(csv.DictReader(fh))
        plugin = [r for r in rows if r["role"] == "plugin"]
        base = [r for r in rows if r["role"] == "baseline"]
        self.assertEqual(len(plugin), 25 + 22 + 22 + 22)   # all_reduce to 128 MiB, the others to 16 MiB
        self.assertEqual(len(base), len(plugin))
        big = [r for r in plugin if r["case"] == "all_reduce.Simple" and r["size"] == "134217728"][0]
        self.assertEqual(big["network"], "GDR")
        self.assertAlmostEqual(float(big["busbw_oop"]), 9.34)
        self.assertAlmostEqual(float(big["baseline_busbw_oop"]), 3.05)
        self.assertAlmostEqual(float(big["busbw_ratio_oop"]), 44044.20 / 14364.30, places=6)
        self.assertEqual(big["wrong_oop"], "0")
        sr = [r for r in plugin if r["case"] == "sendrecv.Simple"][0]
        self.assertEqual(sr["wrong_ip"], "N/A")

    def test_pairs_by_collective_without_run_matrix_header(self):
        with tempfile.TemporaryDirectory() as d:
            for role in ("plugin", "baseline"):
                src = os.path.join(LOGS, role, "all_reduce.Simple.log")
                dst = os.path.join(d, "%s-run.txt" % role)
                with open(src) as fi, open(dst, "w") as fo:
                    fo.writelines(l for l in fi if not l.startswith("# run-matrix"))
            rc, out, err = run(os.path.join(d, "plugin-run.txt"), "--baseline", os.path.join(d, "baseline-run.txt"))
        self.assertEqual(rc, 0, err)
        self.assertIn("## plugin-run", out)
        self.assertIn("baseline `", out)
        self.assertNotIn("no baseline log matches", err)

    def test_recursive_skips_what_is_not_nccl_tests(self):
        # a results folder as shipped: logs one level down, a DDP log and a text report beside them
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "run1"))
            os.makedirs(os.path.join(d, "run2"))
            # without run-matrix's header (its case= would name them): named by their path below the folder
            for src, dst in (("all_reduce.Simple.log", "run1"), ("sendrecv.Simple.log", "run2")):
                with open(os.path.join(LOGS, "plugin", src)) as fi, open(os.path.join(d, dst, "ar.log"), "w") as fo:
                    fo.writelines(l for l in fi if not l.startswith("# run-matrix"))
            with open(os.path.join(d, "run2", "torch-ddp.log"), "w") as f:
                f.write("W1130 09:33:18 torch/distributed/run.py:851] ****\nstep 10 loss 0.25\n")
            with open(os.path.join(d, "doctor.txt"), "w") as f:
                f.write("[ OK ] memlock\n")
            # without --recursive: the error names the subfolders and the option
            rc, out, err = run(d)
            self.assertEqual(rc, 2)
            self.assertIn("--recursive", err)
            self.assertIn("run1, run2", err)
            rc, out, err = run("--recursive", d)
            self.assertEqual(rc, 0, err)
            self.assertIn("PASS: 2 log(s)", out)
            skips = [l for l in err.splitlines() if "skipping" in l]
            self.assertEqual(len(skips), 1, err)
            self.assertIn("torch-ddp.log: not nccl-tests output", skips[0])
            # the two ar.log are two cases, named by their relative path
            self.assertIn("## run1/ar", out)
            self.assertIn("## run2/ar", out)
            # a folder of nothing but non-nccl-tests logs says so
            with tempfile.TemporaryDirectory() as e:
                shutil.copy(os.path.join(d, "run2", "torch-ddp.log"), e)
                rc, out, err = run("-r", e)
                self.assertEqual(rc, 2)
                self.assertIn("none of the 1 *.log file(s)", err)
            # a file named explicitly is read whatever it holds (the user asked for it)
            rc, out, err = run(os.path.join(d, "run2", "torch-ddp.log"))
            self.assertEqual(rc, 1)
            self.assertIn("truncated", err)

    def test_row_cut_by_log_lines(self):
        # NCCL's (or the plugin's) log lines, written by other threads to the same stdout, cut a row in two or three:
        # on lines of their own (the plugin's fault WARNs) or glued to the row's piece (NCCL_DEBUG_SUBSYS=TUNING, the
        # row's printf had no newline yet). The pieces are joined: the same table as the uncut log.
        row = "          16             4     float     sum      -1    24.42    0.00    0.00       0    24.15    0.00    0.00       0"
        info = "sample-host:48221:48299 [0] NCCL INFO AllReduce: 16 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}"
        warn = "[2026-12-03 16:29:01] sample-host:48221:48299 [0] plugin/rdma/recover.c:220 NCCL WARN NET/GDR : retry"
        cut = ("          16             4     float     sum      -1\n%s\n\n%s\n   24.42    0.00    0.00       0%s\n%s\n"
               "    24.15    0.00    0.00       0" % (warn, info, info, info))
        rc0, out0, err0 = run("plugin/all_reduce.Simple.log")
        self.assertEqual(rc0, 0, err0)
        with tempfile.TemporaryDirectory() as d:
            copy_with(os.path.join("plugin", "all_reduce.Simple.log"), os.path.join(d, "cut.log"), row, cut)
            rc, out, err = run(os.path.join(d, "cut.log"))
            self.assertEqual(rc, 0, err)
            self.assertNotIn("short row", err)
            self.assertEqual(table_rows(out, "all_reduce.Simple"), table_rows(out0, "all_reduce.Simple"))
            # a row whose rest never comes (another line that is no log line and no result columns): a short row
            copy_with(os.path.join("plugin", "all_reduce.Simple.log"), os.path.join(d, "short.log"), row,
                      "          16             4     float     sum      -1    24.42    0.00    0.00       0\n"
                      "some other output")
            rc, out, err = run(os.path.join(d, "short.log"))
            self.assertEqual(rc, 1, err)
            self.assertIn("short row (4 of 8 result columns)", err)

    def test_shipped_results_folders(self):
        # every folder of docs/results summarizes cleanly with --recursive, or its README says what it holds:
        # each log summarize fails on is named there. The same for the logs inside each tarball of a folder
        # (extracted, then summarize -r), which the README names too when they fail.
        results = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "results")
        if not os.path.isdir(results):
            self.skipTest("no docs/results next to this copy (an installed nccl-tests-configs)")
        for name in sorted(os.listdir(results)):
            folder = os.path.join(results, name)
            if not os.path.isdir(folder):
                continue
            self._check_summarized(name, folder, folder, "")
            for sub, _, files in sorted(os.walk(folder)):
                for tgz in sorted(f for f in files if f.endswith((".tgz", ".tar.gz"))):
                    rel_tgz = os.path.relpath(os.path.join(sub, tgz), folder)
                    with tempfile.TemporaryDirectory() as d:
                        with tarfile.open(os.path.join(sub, tgz)) as t:
                            if hasattr(tarfile, "data_filter"):
                                t.extractall(d, filter="data")
                            else:
                                t.extractall(d)
                        self._check_summarized(name, folder, d, rel_tgz + ": ")

    def _check_summarized(self, name, folder, where, what):
        p = subprocess.run([PY, SUMMARIZE, "-q", "-r", where], capture_output=True, text=True)
        if p.returncode == 0:
            return
        readme = os.path.join(folder, "README.md")
        self.assertTrue(os.path.isfile(readme), "%s: %ssummarize -r exits %d and there is no README.md: %s"
                        % (name, what, p.returncode, p.stderr[-400:]))
        with open(readme) as f:
            text = f.read()
        self.assertIn("Summarize", text, "%s/README.md does not say how it summarizes" % name)
        # named as it is, or by a `pattern` (emu-ib-*.log)
        pats = [t for q in re.findall(r"`([^`]+)`", text) for t in q.split()]
        for line in p.stderr.splitlines():
            if not line.startswith("summarize: " + where) or "skipping" in line:
                continue
            rel = os.path.relpath(line[len("summarize: "):].split(":", 1)[0], where)
            named = rel in text or os.path.basename(rel) in text or any(
                fnmatch.fnmatch(rel, t) or fnmatch.fnmatch(os.path.basename(rel), t) for t in pats)
            self.assertTrue(named, "%s/README.md does not name %s%s, which summarize fails on: %s"
                            % (name, what, rel, line))

    def test_usage_errors(self):
        rc, out, err = run("does-not-exist.log")
        self.assertEqual(rc, 2)
        self.assertIn("no such file", err)
        rc, out, err = run()
        self.assertEqual(rc, 2)

    def test_other_collective_not_compared(self):
        # a single plugin log and a single baseline used to be paired whatever they ran
        rc, out, err = run("plugin/all_reduce.Simple.log", "--baseline", "baseline/sendrecv.Simple.log")
        self.assertEqual(rc, 0, err)
        self.assertIn("differ (collective all_reduce vs sendrecv): not compared", err)
        self.assertNotIn("no baseline log matches", err)
        self.assertIn("baseline `baseline/sendrecv.Simple.log` not compared: collective all_reduce vs sendrecv", out)
        self.assertNotIn("busbw ratio", out)
        self.assertIn("1 not compared with their baseline", out)
        # the same with both directories: every pair matches, none dropped
        rc, out, err = run("plugin", "--baseline", "baseline", "-q")
        self.assertNotIn("not compared", out + err)

    def test_other_data_type_not_compared(self):
        with tempfile.TemporaryDirectory() as d:
            half = os.path.join(d, "all_reduce.Simple.log")
            copy_with("baseline/all_reduce.Simple.log", half, " float ", " half ")
            rc, out, err = run("plugin/all_reduce.Simple.log", "--baseline", half)
        self.assertEqual(rc, 0, err)
        self.assertIn("differ (data type float vs half): not compared", err)
        self.assertNotIn("busbw ratio", out)

    def test_plot(self):
        need_matplotlib(self)
        with tempfile.TemporaryDirectory() as d:
            png, info = os.path.join(d, "busbw.png"), os.path.join(d, "busbw.json")
            rc, out, err = run("plugin", "--baseline", "baseline", "--plot", png, "--plot-info", info, "-q")
            self.assertEqual(rc, 0, err)
            with open(png, "rb") as fh:
                self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n")
            self.assertGreater(os.path.getsize(png), 10000)
            with open(info) as fh:
                drawn = json.load(fh)
        panels = drawn["panels"]
        self.assertEqual(len(panels), 4)
        self.assertEqual(drawn["axes"], 4)                     # no empty panel left in the grid (3 x 2)
        first = panels[0]["xticklabels"]
        self.assertEqual(first[0], "8 B")                      # the smallest size of any log ...
        self.assertEqual(first[-1], "128 MiB")                 # ... and the largest (all_reduce's)
        for p in panels:
            self.assertEqual(p["xticklabels"], first, p["title"])   # the same ticks on every panel
            self.assertEqual(p["xlim"], panels[0]["xlim"], p["title"])
            for t in p["xticklabels"]:
                self.assertRegex(t, r"^\d+ (B|KiB|MiB|GiB)$")
            self.assertEqual(p["legend"], ["GDR over TCP", "baseline NCCL Socket"], p["title"])
            self.assertEqual(p["lines"], 2)

    def test_plot_transport_and_empty_logs(self):
        need_matplotlib(self)
        with tempfile.TemporaryDirectory() as d:
            rdma = os.path.join(d, "rdma.log")
            # GDRNET_TRANSPORT=auto recorded; the plugin's own line says what it chose
            copy_with("plugin/all_reduce.Simple.log", rdma, "GDRNET_TRANSPORT=tcp NCCL_DEBUG",
                      "GDRNET_TRANSPORT=auto NCCL_DEBUG")
            with open(rdma, "a") as fh:
                fh.write("sample-host:48221:48221 [0] NCCL INFO NET/GDR : using the rdma transport (GDRNET_TRANSPORT="
                         "auto found RDMA devices); 1 device(s): [0]mlx5_0\n")
            info = os.path.join(d, "i.json")
            # a log with no result rows gets no panel (it still fails the run: truncated)
            rc, out, err = run(rdma, "bad/truncated.all_reduce.LL.log", "variants/nocheck.log",
                               "--plot", os.path.join(d, "p.png"), "--plot-info", info, "-q")
            self.assertEqual(rc, 1, err)
            with open(info) as fh:
                drawn = json.load(fh)
        legends = [p["legend"] for p in drawn["panels"]]
        self.assertIn(["GDR over RDMA"], legends)
        self.assertTrue(all(p["lines"] >= 1 for p in drawn["panels"]))
        self.assertEqual(drawn["axes"], len(drawn["panels"]))

    def test_plot_finds_an_interpreter_with_matplotlib(self):
        # An interpreter that cannot import matplotlib (-S: no site-packages) runs the script; summarize must
        # re-run itself with one that can.
        if not have_matplotlib("/usr/bin/python3"):
            if os.environ.get("CI", "").lower() in ("true", "1"):
                self.fail("/usr/bin/python3 cannot import matplotlib and CI=true: install python3-matplotlib")
            self.skipTest("/usr/bin/python3 cannot import matplotlib")
        p = subprocess.run(["/usr/bin/python3", "-S", "-c", "import matplotlib"], capture_output=True)
        if p.returncode == 0:
            self.skipTest("matplotlib importable even with -S here: nothing to find")
        with tempfile.TemporaryDirectory() as d:
            png = os.path.join(d, "p.png")
            env = dict(os.environ, SUMMARIZE_PYTHONS="/nonexistent/python3:/usr/bin/python3")
            env.pop("SUMMARIZE_REEXEC", None)
            q = subprocess.run(["/usr/bin/python3", "-S", SUMMARIZE, "plugin", "--plot", png, "-q"],
                               capture_output=True, text=True, env=env, cwd=LOGS)
            self.assertEqual(q.returncode, 0, q.stderr)
            self.assertIn("cannot import matplotlib; --plot runs with /usr/bin/python3", q.stderr)
            self.assertTrue(os.path.exists(png))

    def test_plot_without_matplotlib_says_so(self):
        with tempfile.TemporaryDirectory() as d:
            # A matplotlib that cannot be imported shadows the real one.
            os.makedirs(os.path.join(d, "matplotlib"))
            with open(os.path.join(d, "matplotlib", "__init__.py"), "w") as fh:
                fh.write("raise ImportError('No module named matplotlib (test)')\n")
            env = dict(os.environ, PYTHONPATH=d)
            csvp = os.path.join(d, "x.csv")
            rc, out, err = run("plugin", "--plot", os.path.join(d, "x.png"), "--csv", csvp, env=env)
            self.assertEqual(rc, 3)
            self.assertIn("--plot needs matplotlib", err)
            self.assertIn("PASS", out)                    # the table is still printed ...
            self.assertTrue(os.path.exists(csvp))         # ... and the CSV written
            self.assertFalse(os.path.exists(os.path.join(d, "x.png")))

    def test_stdlib_only_without_plot(self):
        # The default path must not import matplotlib (it is optional).
        code = ("import runpy, sys; sys.argv=['summarize','-q','plugin']\n"
                "try:\n runpy.run_path(%r, run_name='__main__')\n"
                "except SystemExit as e:\n"
                " assert 'matplotlib' not in sys.modules, 'matplotlib imported'\n"
                " raise\n" % SUMMARIZE)
        p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=LOGS)
        self.assertEqual(p.returncode, 0, p.stderr)


class EmulatedLabel(unittest.TestCase):
    """--plot's legend marks a run over the verbs emulator "(emulated)": checked on summarize's own legend_label (no
    matplotlib needed) for a log recorded with the emulator preset, one with a VEMU_ variable, and a real one."""

    def label(self, header_env, preset="rdma-gdr"):
        import importlib.machinery
        import importlib.util
        loader = importlib.machinery.SourceFileLoader("summarize_mod", SUMMARIZE)
        spec = importlib.util.spec_from_loader("summarize_mod", loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        log = mod.Log("x.log", "plugin")
        log.parse("# run-matrix: case=all_reduce.Simple collective=all_reduce proto=Simple algo=RING preset=%s "
                  "role=plugin host=h date=2026-12-06T00:00:00Z env: NCCL_NET=GDR GDRNET_TRANSPORT=rdma %s\n"
                  % (preset, header_env))
        log.network = ["GDR"]
        return mod.legend_label(log, "plugin")

    def test_emulated_mark(self):
        self.assertEqual(self.label("VEMU_DEVICES=vemu0:roce", "emulator"), "GDR over RDMA (emulated)")
        self.assertEqual(self.label("VEMU_DEVICES=vemu0:roce"), "GDR over RDMA (emulated)")
        self.assertEqual(self.label("LD_LIBRARY_PATH=/b/lib/verbs-emu:/b/lib"), "GDR over RDMA (emulated)")
        self.assertEqual(self.label("NCCL_IB_HCA=mlx5_0"), "GDR over RDMA")


if __name__ == "__main__":
    unittest.main(verbosity=2)
