#!/usr/bin/env python3
"""collect-doctor.py: one table of gdrnet-doctor verdicts, one row per node, from the logs of doctor-daemonset.yaml.

  kubectl logs -n gdrnet -l app.kubernetes.io/component=doctor --prefix --tail=-1 | ./collect-doctor.py
  ./collect-doctor.py --kubectl "kubectl -n gdrnet"          # runs that kubectl logs command itself
  ./collect-doctor.py saved-logs.txt --json                  # from a saved copy; JSON rows instead of the table

Each doctor pod prints one line "gdrnet-doctor-report node=<node> exit=<status> <gdrnet-doctor --json, one line>"
(kubectl's --prefix puts "[pod/<pod>/<container>] " before it). Other lines are ignored; a report line whose JSON
does not parse is a row with verdict "unreadable". A node reporting twice (a restarted pod) keeps its last report.
Rows: node, READY / NOT READY, the doctor's exit status, FAIL and WARN counts, the first failing check and its title.
Exit status: 0 every node reported ready; 1 a node is not ready or unreadable, or no report was found; 2 usage.
"""

import argparse
import json
import re
import shlex
import subprocess
import sys

SELECTOR = "app.kubernetes.io/component=doctor"
LINE = re.compile(r"^(?:\[(?P<prefix>[^\]]*)\] )?gdrnet-doctor-report node=(?P<node>\S*) exit=(?P<exit>-?\d+) (?P<json>.*)$")


def parse(lines):
    rows = {}
    for line in lines:
        m = LINE.match(line.rstrip("\r\n"))
        if not m:
            continue
        node = m.group("node") or "?"
        pod = (m.group("prefix") or "").split("/")[1] if m.group("prefix") and "/" in m.group("prefix") else ""
        row = {"node": node, "pod": pod, "exit": int(m.group("exit")), "verdict": "unreadable", "fail": None,
               "warn": None, "first_problem": ""}
        try:
            rep = json.loads(m.group("json"))
            summary = rep.get("summary", {})
            row["fail"] = int(summary.get("fail", 0))
            row["warn"] = int(summary.get("warn", 0))
            row["verdict"] = "READY" if rep.get("ready") is True else "NOT READY"
            bad = [f for f in rep.get("findings", []) if f.get("status") == "FAIL"]
            if bad:
                row["first_problem"] = "%s: %s" % (bad[0].get("id", "?"), bad[0].get("title", ""))
        except (ValueError, AttributeError, TypeError) as e:
            row["first_problem"] = "report not JSON (%s)" % str(e)[:60]
        rows[node] = row
    return [rows[n] for n in sorted(rows)]


def table(rows, width):
    head = ["NODE", "VERDICT", "EXIT", "FAIL", "WARN", "FIRST PROBLEM"]
    cells = [[r["node"], r["verdict"], str(r["exit"]), "-" if r["fail"] is None else str(r["fail"]),
              "-" if r["warn"] is None else str(r["warn"]), r["first_problem"]] for r in rows]
    w = [max(len(c[i]) for c in cells + [head]) for i in range(5)]
    out = []
    for c in [head] + cells:
        line = "  ".join(c[i].ljust(w[i]) for i in range(5)) + "  " + c[5]
        out.append(line[:width].rstrip() if width else line.rstrip())
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(prog="collect-doctor.py",
                                 description="One table of gdrnet-doctor verdicts from doctor-daemonset.yaml's logs.")
    ap.add_argument("logs", nargs="?", default="-", help="saved 'kubectl logs --prefix' output (default: stdin)")
    ap.add_argument("--kubectl", metavar="CMD",
                    help="run CMD logs -l %s --prefix --tail=-1 instead of reading LOGS (e.g. 'kubectl -n gdrnet')"
                         % SELECTOR)
    ap.add_argument("-l", "--selector", default=SELECTOR, help="pod selector with --kubectl (default: %(default)s)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--width", type=int, default=0, help="cut table lines at this many characters (0: no cut)")
    a = ap.parse_args(argv)
    if a.kubectl:
        cmd = shlex.split(a.kubectl) + ["logs", "-l", a.selector, "--prefix", "--tail=-1",
                                        "--max-log-requests=1000"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.SubprocessError) as e:
            print("collect-doctor.py: %s: %s" % (" ".join(cmd), e), file=sys.stderr)
            return 1
        if p.returncode != 0:
            print("collect-doctor.py: %s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()),
                  file=sys.stderr)
            return 1
        lines = p.stdout.splitlines()
    elif a.logs == "-":
        lines = sys.stdin.read().splitlines()
    else:
        try:
            with open(a.logs, errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError as e:
            print("collect-doctor.py: %s" % e, file=sys.stderr)
            return 2
    rows = parse(lines)
    if a.json:
        print(json.dumps(rows, indent=1))
    elif rows:
        print(table(rows, a.width))
    ready = sum(1 for r in rows if r["verdict"] == "READY")
    if not a.json:
        print("%d node(s) reported, %d ready, %d not ready%s" % (
            len(rows), ready, len(rows) - ready,
            "" if rows else " (no 'gdrnet-doctor-report' line: are the pods running? kubectl get pods -l %s)"
            % a.selector))
    return 0 if rows and ready == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
