#!/usr/bin/env python3
"""test_collect_doctor.py K8S_DIR DATA_DIR [DOCTOR]: packaging/k8s/collect-doctor.py on canned `kubectl logs
--prefix` output of doctor-daemonset.yaml (a ready node, a node not ready, a truncated report, noise lines, a node
reporting twice), its exit status and JSON; and, with DOCTOR (the built gdrnet-doctor), the DaemonSet's own report
lines (taken from the manifest) run in bash over the real doctor's --json, read back by the collector.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

K8S, DATA = sys.argv[1], sys.argv[2]
DOCTOR = sys.argv[3] if len(sys.argv) > 3 else None
COLLECT = os.path.join(K8S, "collect-doctor.py")
LOGS = os.path.join(DATA, "doctor-daemonset-logs.txt")


def collect(*args, stdin=None):
    p = subprocess.run([sys.executable, COLLECT] + list(args), capture_output=True, text=True, input=stdin)
    return p.returncode, p.stdout, p.stderr


class Collect(unittest.TestCase):
    def test_table(self):
        rc, out, err = collect(LOGS)
        self.assertEqual(rc, 1, err)                         # two nodes are not ready
        lines = out.splitlines()
        self.assertEqual(lines[0].split()[:3], ["NODE", "VERDICT", "EXIT"])
        rows = {l.split()[0]: l for l in lines[1:-1]}
        self.assertEqual(sorted(rows), ["gpu-node-a", "gpu-node-b", "gpu-node-c"])
        self.assertRegex(rows["gpu-node-a"], r"^gpu-node-a\s+READY\s+0\s+0\s+1\s*$")
        self.assertRegex(rows["gpu-node-b"], r"^gpu-node-b\s+NOT READY\s+1\s+3\s+0\s+rdma-devices: ")
        self.assertRegex(rows["gpu-node-c"], r"^gpu-node-c\s+unreadable\s+1\s+-\s+-\s+report not JSON")
        self.assertEqual(lines[-1], "3 node(s) reported, 1 ready, 2 not ready")

    def test_stdin_json_and_last_report_wins(self):
        with open(LOGS) as fh:
            text = fh.read()
        ready = [l for l in text.splitlines() if "node=gpu-node-a" in l][0]
        again = ready.replace("gdrnet-doctor-q9wz4", "gdrnet-doctor-zz999")
        rc, out, err = collect("--json", stdin=text + again + "\n")
        rows = json.loads(out)
        self.assertEqual([r["node"] for r in rows], ["gpu-node-a", "gpu-node-b", "gpu-node-c"])
        self.assertEqual(rows[0]["pod"], "gdrnet-doctor-zz999")
        self.assertEqual(rc, 1)

    def test_all_ready_is_zero_and_nothing_is_one(self):
        with open(LOGS) as fh:
            ready = [l for l in fh if "node=gpu-node-a" in l]
        rc, out, _ = collect(stdin="".join(ready))
        self.assertEqual(rc, 0, out)
        rc, out, _ = collect(stdin="[pod/x/doctor] starting\n")
        self.assertEqual(rc, 1)
        self.assertIn("0 node(s) reported", out)
        self.assertIn("kubectl get pods -l app.kubernetes.io/component=doctor", out)

    def test_kubectl_mode_runs_the_command(self):
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "kubectl")
            with open(fake, "w") as fh:
                fh.write('#!/bin/sh\nprintf "%%s\\n" "$*" >"%s/args"\ncat "%s"\n' % (d, LOGS))
            os.chmod(fake, 0o755)
            rc, out, err = collect("--kubectl", fake + " -n gdrnet")
            self.assertEqual(rc, 1, err)
            self.assertIn("gpu-node-b", out)
            with open(os.path.join(d, "args")) as fh:
                self.assertEqual(fh.read().split()[:6],
                                 ["-n", "gdrnet", "logs", "-l", "app.kubernetes.io/component=doctor", "--prefix"])

    @unittest.skipUnless(DOCTOR, "no gdrnet-doctor given")
    def test_daemonset_lines_over_the_real_doctor(self):
        """The DaemonSet's script (its doctor and echo lines, from the manifest) over the built doctor."""
        with open(os.path.join(K8S, "doctor-daemonset.yaml")) as fh:
            text = fh.read()
        script = [re.sub(r"\s+# .*$", "", l.strip()) for l in text.splitlines()
                  if re.match(r"^\s+(gdrnet-doctor --json|echo \"gdrnet-doctor-report)", l)]
        self.assertEqual(len(script), 2, script)
        with tempfile.TemporaryDirectory() as d:
            os.symlink(os.path.abspath(DOCTOR), os.path.join(d, "gdrnet-doctor"))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("GDRNET_", "NCCL_"))}
            env.update(PATH=d + ":" + env.get("PATH", "/usr/bin:/bin"), NODE_NAME="ci-node", TMPDIR=d)
            body = "\n".join(s.replace("/tmp/doctor.json", d + "/doctor.json") for s in script)
            p = subprocess.run(["bash", "-c", body], capture_output=True, text=True, env=env, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        out_lines = p.stdout.splitlines()
        self.assertEqual(len(out_lines), 1, "one report line per node")
        rc, out, err = collect(stdin="[pod/gdrnet-doctor-abcde/doctor] " + out_lines[0] + "\n")
        row = out.splitlines()[1]
        self.assertRegex(row, r"^ci-node\s+(READY\s+0|NOT READY\s+1)\s+\d+\s+\d+")
        self.assertEqual(rc, 0 if " READY " in row and "NOT READY" not in row else 1)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
