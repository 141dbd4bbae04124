#!/usr/bin/env python3
"""test_tool_docs.py --build DIR: the checked-in man pages and bash completion (packaging/man, packaging/completion)
are what packaging/gen-tool-docs.py makes from the built tools' --help, the scripts' --help and plugin/params.def;
the drift check fails on a changed page; and the completion completes what it should, in bash.
Regenerate after changing a tool's --help or a knob:  packaging/gen-tool-docs.py --build build
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GEN = os.path.join(SRC, "packaging", "gen-tool-docs.py")
COMPLETION = os.path.join(SRC, "packaging", "completion", "gdrnet")
ARGS = None


def gen(*extra):
    return subprocess.run([sys.executable, GEN, "--build", ARGS.build] + list(extra), capture_output=True, text=True)


def complete(line, func):
    """Run the completion function on LINE (cursor at the end) in bash; -> the COMPREPLY words."""
    script = ('source "$1"; COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}; read -r -a COMP_WORDS <<<"$2"; '
              '[[ $2 == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); "$3"; '
              'printf "%s\\n" "${COMPREPLY[@]}"')
    p = subprocess.run(["bash", "-c", script, "_", COMPLETION, line, func], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("bash: %s" % p.stderr)
    return [w for w in p.stdout.split("\n") if w]


class Drift(unittest.TestCase):
    def test_checked_in_files_match(self):
        p = gen("--check")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_a_changed_page_is_drift(self):
        tmp = tempfile.mkdtemp(prefix="gdrnet-tooldocs-")
        try:
            for d in ("man", "completion"):
                shutil.copytree(os.path.join(SRC, "packaging", d), os.path.join(tmp, d))
            self.assertEqual(gen("--check", "--out", tmp).returncode, 0)
            page = os.path.join(tmp, "man", "gdrnet-perf.1")
            with open(page) as fh:
                text = fh.read()
            with open(page, "w") as fh:
                fh.write(text.replace("\\fB\\-\\-check\\fR", "\\fB\\-\\-verify\\fR"))
            p = gen("--check", "--out", tmp)
            self.assertEqual(p.returncode, 1, p.stdout)
            self.assertIn("regenerate with", p.stdout)
            self.assertIn("man/gdrnet-perf.1", p.stdout)
        finally:
            shutil.rmtree(tmp)

    def test_pages_cover_every_option(self):
        for tool in ("gdrnet-perf", "gdrnet-doctor"):
            h = subprocess.run([os.path.join(ARGS.build, "bin", tool), "--help"], capture_output=True,
                               text=True).stdout
            with open(os.path.join(SRC, "packaging", "man", tool + ".1")) as fh:
                page = fh.read()
            opts = set(re.findall(r"^  (?:-\w, )?(--[\w-]+)", h, re.M))
            self.assertGreater(len(opts), 5, tool)
            for o in opts:
                self.assertIn("\\fB%s\\fR" % o.replace("-", "\\-"), page, "%s.1 lacks %s" % (tool, o))
            self.assertIn(".SH EXIT STATUS", page)


class Completion(unittest.TestCase):
    def test_tool_options(self):
        self.assertEqual(complete("gdrnet-perf --tr", "_gdrnet_perf"), ["--transport"])
        self.assertEqual(sorted(complete("gdrnet-perf --transport ", "_gdrnet_perf")), ["auto", "rdma", "tcp"])
        self.assertIn("--json", complete("gdrnet-doctor --j", "_gdrnet_doctor"))
        self.assertIn("--sizes", complete("gdrnet-perf --", "_gdrnet_perf"))

    def test_knob_names_and_values(self):
        with open(os.path.join(SRC, "plugin", "params.def")) as fh:
            knobs = ["GDRNET_" + k for k in re.findall(r"^GDR_PARAM\((\w+),", fh.read(), re.M)]
        got = complete("gdrnet-run-matrix --env GDRNET_", "_gdrnet_run_matrix")
        self.assertEqual(sorted(got), sorted(k + "=" for k in knobs))
        self.assertEqual(complete("gdrnet-run-matrix --env GDRNET_TRANSP", "_gdrnet_run_matrix"),
                         ["GDRNET_TRANSPORT="])
        self.assertEqual(sorted(complete("gdrnet-run-matrix --env GDRNET_TRANSPORT=", "_gdrnet_run_matrix")),
                         ["auto", "rdma", "tcp"])

    def test_presets(self):
        self.assertEqual(complete("gdrnet-run-matrix /opt/nt tcp,sin", "_gdrnet_run_matrix"), ["tcp,single-host"])
        self.assertIn("baseline-socket", complete("gdrnet-run-matrix --baseline base", "_gdrnet_run_matrix"))
        self.assertIn("rdma-gdr", complete("gdrnet-run-matrix -o out /opt/nt rd", "_gdrnet_run_matrix"))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=sys.argv[:1] + rest, verbosity=2)
