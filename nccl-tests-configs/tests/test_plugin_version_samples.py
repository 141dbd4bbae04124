#!/usr/bin/env python3
"""test_plugin_version_samples.py PLUGIN DOCTOR ABI_DOC [SAMPLE_DOC...]

The sample NCCL lines the documents show, "NET/Plugin: Loaded net plugin GDR (vN)", are NCCL 2.28's: N must be the
table NCCL 2.28 takes from this plugin. Three sources have to agree with every sample:
  - the plugin itself: the newest ncclNetPlugin_vN it exports that NCCL 2.28 knows (v11 down to v6, NCCL's
    src/plugin/net.cc),
  - gdrnet-doctor --json with NCCL_NET_PLUGIN=PLUGIN (it tries the same dlopen and dlsym NCCL 2.28 does),
  - docs/abi.md's table "| NCCL | looks for | loads |", its row for 2.28.
"""

import ctypes
import json
import os
import re
import subprocess
import sys
import unittest

NCCL_MINOR = 28         # the NCCL the samples name (2.28.x)
NCCL_NEWEST_TABLE = 11  # the newest ncclNetPlugin_vN NCCL 2.28 looks up

PLUGIN, DOCTOR, README = sys.argv[1:4]
SAMPLES = sys.argv[4:]


def exported_tables(path):
    lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
    out = []
    for v in range(1, 20):
        try:
            getattr(lib, "ncclNetPlugin_v%d" % v)
            out.append(v)
        except AttributeError:
            pass
    return out


def readme_table_version(path, minor):
    """The 'loads' column of the '| NCCL | ... | loads |' table (docs/abi.md) for 2.<minor>."""
    with open(path) as fh:
        text = fh.read()
    m = re.search(r"^(\| NCCL \|.*\| loads \|.*)\n\|[-| ]+\|\n((?:\|.*\n)+)", text, re.M)
    if not m:
        raise AssertionError("%s: no '| NCCL | ... | loads |' table" % path)
    head = [c.strip() for c in m.group(1).strip().strip("|").split("|")]
    col = head.index("loads")
    for row in m.group(2).splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        nums = [int(x) for x in re.findall(r"2\.(\d+)", cells[0])]
        lo, hi = nums[0], (nums[1] if len(nums) > 1 else (99 if "+" in cells[0] else nums[0]))
        if lo <= minor <= hi:
            return int(re.findall(r"v(\d+)", cells[col])[0])
    raise AssertionError("%s: no row for NCCL 2.%d" % (path, minor))


def doctor_version(doctor, plugin):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GDRNET_", "NCCL_"))}
    env["NCCL_NET_PLUGIN"] = plugin
    p = subprocess.run([doctor, "--json"], capture_output=True, text=True, env=env, timeout=120)
    if p.returncode not in (0, 1):
        raise AssertionError("gdrnet-doctor --json: exit %d\n%s" % (p.returncode, p.stderr))
    report = json.loads(p.stdout)
    for f in report["findings"]:
        if f.get("id") == "env/NCCL_NET_PLUGIN":
            m = re.search(r"ncclNetPlugin_v(\d+)", json.dumps(f))
            if m:
                return int(m.group(1))
    raise AssertionError("gdrnet-doctor --json names no ncclNetPlugin_vN for NCCL_NET_PLUGIN=%s" % plugin)


class Samples(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tables = [v for v in exported_tables(PLUGIN) if v <= NCCL_NEWEST_TABLE]
        cls.plugin_v = max(tables) if tables else 0
        cls.doctor_v = doctor_version(DOCTOR, PLUGIN)
        cls.readme_v = readme_table_version(README, NCCL_MINOR)

    def test_sources_agree(self):
        self.assertGreater(self.plugin_v, 0, "the plugin exports no table NCCL 2.%d knows" % NCCL_MINOR)
        self.assertEqual(self.doctor_v, self.plugin_v, "gdrnet-doctor and the plugin's exports disagree")
        self.assertEqual(self.readme_v, self.plugin_v, "docs/abi.md's NCCL table, row 2.%d" % NCCL_MINOR)

    def test_samples_match(self):
        seen = 0
        for path in SAMPLES:
            with open(path) as fh:
                for i, line in enumerate(fh, 1):
                    for m in re.finditer(r"Loaded net plugin GDR \(v(\d+)\)", line):
                        seen += 1
                        self.assertEqual(int(m.group(1)), self.plugin_v,
                                         "%s:%d shows (v%s); NCCL 2.%d loads v%d from this plugin"
                                         % (path, i, m.group(1), NCCL_MINOR, self.plugin_v))
                    for m in re.finditer(r"\(v(\d+)\)` is the newest", line):
                        self.assertEqual(int(m.group(1)), self.plugin_v, "%s:%d" % (path, i))
        self.assertGreater(seen, 0, "no sample line found in %s" % SAMPLES)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
