#!/usr/bin/env python3
"""test_metadata.py --source DIR --build DIR --version X.Y.Z

Checks the package metadata CMake generated (CPackConfig.cmake) and the changelog, without running cpack:
one version (project(VERSION), the changelog's newest entry, the package version), the dependency policy
(Depends only on libc through shlibdeps; libibverbs1 Recommends / libibverbs Suggests; nothing on CUDA or NCCL),
and no libnccl-net.so install rule unless GDRNET_INSTALL_DEFAULT_PLUGIN_LINK is ON.
"""

import argparse
import os
import re
import sys
import unittest

ARGS = None


def cmake_sets(path):
    """set(NAME "value") lines of a CMake-generated config file -> dict."""
    out = {}
    with open(path) as fh:
        for m in re.finditer(r'^set\((\w+)\s+"((?:[^"\\]|\\.)*)"\)', fh.read(), re.M):
            out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
    return out


def cache(build):
    out = {}
    with open(os.path.join(build, "CMakeCache.txt")) as fh:
        for line in fh:
            m = re.match(r"^([A-Za-z_0-9]+):\w+=(.*)$", line.rstrip("\n"))
            if m:
                out[m.group(1)] = m.group(2)
    return out


class Metadata(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cfg = cmake_sets(os.path.join(ARGS.build, "CPackConfig.cmake"))
        cls.cache = cache(ARGS.build)
        with open(os.path.join(ARGS.source, "packaging", "changelog")) as fh:
            cls.changelog = fh.read()

    def test_one_version(self):
        c = self.cfg
        self.assertEqual(c["CPACK_PACKAGE_VERSION"], ARGS.version)
        self.assertEqual(c["CPACK_PACKAGE_NAME"], "libnccl-net-gdr")
        m = re.match(r"^libnccl-net-gdr \(([^)-]+)-([^)]+)\) \S+; urgency=\w+$", self.changelog.splitlines()[0])
        self.assertIsNotNone(m, "first changelog line: %r" % self.changelog.splitlines()[0])
        self.assertEqual(m.group(1), ARGS.version, "packaging/changelog needs an entry for %s" % ARGS.version)
        self.assertEqual(c["CPACK_DEBIAN_PACKAGE_RELEASE"], m.group(2))
        self.assertEqual(c["CPACK_RPM_PACKAGE_RELEASE"], m.group(2))

    def test_changelog_format(self):
        # Debian changelog: header, blank, "  * " items, blank, " -- Name <mail>  RFC-2822 date"
        entries = re.findall(r"^libnccl-net-gdr \(.*?\n -- .+?\n", self.changelog, re.S | re.M)
        self.assertGreaterEqual(len(entries), 1)
        for e in entries:
            self.assertRegex(e, r"\n  \* ")
            self.assertRegex(e, r"\n -- [^<]+<[^>]+>  [A-Z][a-z]{2}, \d{1,2} [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d [+-]\d{4}\n$")
        rpm = open(os.path.join(ARGS.build, "packaging", "rpm-changelog")).read()
        self.assertRegex(rpm, r"^\* [A-Z][a-z]{2} [A-Z][a-z]{2} \d{1,2} \d{4} .+ <[^>]+> - %s-\d+\n- " % re.escape(ARGS.version))
        self.assertEqual(self.cfg["CPACK_RPM_CHANGELOG_FILE"], os.path.join(ARGS.build, "packaging", "rpm-changelog"))

    def test_dependencies(self):
        c = self.cfg
        self.assertIn("DEB", c["CPACK_GENERATOR"].split(";"))
        if c.get("CPACK_DEBIAN_PACKAGE_SHLIBDEPS") != "ON":           # no dpkg-shlibdeps: libc6 by hand
            self.assertRegex(c.get("CPACK_DEBIAN_PACKAGE_DEPENDS", ""), r"^libc6 \(>= [\d.]+\)$")
        self.assertIn("libibverbs1", c.get("CPACK_DEBIAN_PACKAGE_RECOMMENDS", ""))
        self.assertIn("\nSuggests: libibverbs", c.get("CPACK_RPM_SPEC_MORE_DEFINE", "").replace("\\n", "\n"))
        for k in ("CPACK_DEBIAN_PACKAGE_DEPENDS", "CPACK_DEBIAN_PACKAGE_PREDEPENDS", "CPACK_RPM_PACKAGE_REQUIRES"):
            self.assertNotRegex(c.get(k, ""), r"(?i)ibverbs|rdma|cuda|nccl", k)
        for k, v in c.items():
            if re.search(r"(DEPENDS|REQUIRES|RECOMMENDS|SUGGESTS)$", k):
                self.assertNotRegex(v, r"(?i)cuda|nvidia", "%s must not name CUDA: %s" % (k, v))

    def test_metadata_text(self):
        c = self.cfg
        self.assertEqual(c["CPACK_PACKAGING_INSTALL_PREFIX"], "/usr")
        self.assertRegex(c["CPACK_DEBIAN_PACKAGE_MAINTAINER"], r"^.+ <[^@>]+@[^>]+>$")
        self.assertTrue(c["CPACK_RPM_PACKAGE_LICENSE"])
        self.assertIn("NCCL_NET_PLUGIN=gdr", c["CPACK_PACKAGE_DESCRIPTION"])
        # the long description is one paragraph, filled: every line but the last nearly full, none over 79
        # columns (dpkg shows the lines as written; a short line in the middle reads as a break)
        lines = c["CPACK_PACKAGE_DESCRIPTION"].splitlines()
        for i, line in enumerate(lines):
            self.assertLessEqual(len(line), 79, "Description line %d is too long: %r" % (i + 1, line))
            if i + 1 < len(lines):
                self.assertGreaterEqual(len(line), 60, "Description line %d is short (a broken fill): %r"
                                        % (i + 1, line))
        self.assertLessEqual(len(c["CPACK_PACKAGE_DESCRIPTION_SUMMARY"]), 80)
        self.assertEqual(c["CPACK_DEBIAN_FILE_NAME"], "DEB-DEFAULT")
        self.assertTrue(c["CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA"].endswith("packaging/debian/triggers"))
        with open(c["CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA"]) as fh:
            self.assertEqual(fh.read().strip(), "activate-noawait ldconfig")

    def test_default_plugin_link_rule(self):
        on = self.cache.get("GDRNET_INSTALL_DEFAULT_PLUGIN_LINK", "OFF").upper() in ("ON", "1", "TRUE", "YES")
        with open(os.path.join(ARGS.build, "packaging", "cmake_install.cmake")) as fh:
            rules = fh.read()
        if on:
            self.assertIn("libnccl-net.so", rules)
        else:
            self.assertNotIn("libnccl-net.so", rules, "libnccl-net.so must only be installed when the option is ON")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--version", required=True)
    ARGS, rest = ap.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
