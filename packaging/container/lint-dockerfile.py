#!/usr/bin/env python3
"""lint-dockerfile.py DOCKERFILE: a static check of packaging/container/Dockerfile for CI machines without docker.

It parses the file the way the Dockerfile frontend does (parser directives, comments, backslash continuations) and
checks: every instruction is a known one; the first instruction is FROM or ARG; stage names are unique; COPY --from
and FROM name existing stages (or images); ${VAR} used outside RUN is declared (ARG in that stage, ARG before the
first FROM for FROM lines, or ENV); ENV/ARG/LABEL have KEY=VALUE form; and the final stage sets what the plugin needs
(NCCL_NET_PLUGIN=gdr, NCCL_NET=GDR) and installs the package. Exit 0 when clean, 1 with one line per problem.
"""

import re
import sys

KNOWN = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
         "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[-+][^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
# Docker's predefined build args, usable without ARG in FROM lines / with ARG in stages.
PREDEFINED = {"TARGETPLATFORM", "TARGETOS", "TARGETARCH", "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS",
              "BUILDARCH", "BUILDVARIANT", "HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY"}


def instructions(text):
    """Yield (lineno, keyword, args) with continuations joined and comments dropped."""
    lines = text.splitlines()
    i, in_directives = 0, True
    while i < len(lines):
        line = lines[i]
        start = i + 1
        stripped = line.strip()
        if in_directives and re.match(r"^#\s*[a-z]+\s*=", stripped):
            i += 1
            continue
        if not stripped or stripped.startswith("#"):
            in_directives = in_directives and not stripped == ""
            i += 1
            continue
        in_directives = False
        buf = line.rstrip()
        while buf.endswith("\\"):
            buf = buf[:-1]
            i += 1
            while i < len(lines) and (lines[i].strip().startswith("#") or not lines[i].strip()):
                i += 1          # comment lines inside a continuation are skipped
            if i >= len(lines):
                yield start, None, "file ends inside a line continuation"
                return
            buf += " " + lines[i].strip()
        i += 1
        parts = buf.strip().split(None, 1)
        yield start, parts[0], parts[1] if len(parts) > 1 else ""


def kv_pairs(args):
    """KEY=VALUE pairs of ENV/LABEL/ARG (values may be quoted)."""
    return re.findall(r'([A-Za-z_][A-Za-z0-9_.\-/]*)=("(?:[^"\\]|\\.)*"|\S*)', args)


def lint(path):
    text = open(path).read()
    problems = []
    stages = []            # dicts: name, vars, env, lineno, from
    global_args = set()
    first = True
    for lineno, kw, args in instructions(text):
        if kw is None:
            problems.append("%d: %s" % (lineno, args))
            continue
        KW = kw.upper()
        if KW not in KNOWN:
            problems.append("%d: unknown instruction %r" % (lineno, kw))
            continue
        if kw != KW:
            problems.append("%d: write instructions in upper case (%s)" % (lineno, kw))
        if first and KW not in ("FROM", "ARG"):
            problems.append("%d: the first instruction must be FROM or ARG, not %s" % (lineno, KW))
        first = False
        if KW == "FROM":
            m = re.match(r"^(?:--platform=\S+\s+)?(\S+)(?:\s+[Aa][Ss]\s+(\S+))?\s*$", args)
            if not m:
                problems.append("%d: malformed FROM: %s" % (lineno, args))
                continue
            image, name = m.group(1), m.group(2)
            for v in VAR_RE.findall(image):
                var = v[0] or v[1]
                if var not in global_args and var not in PREDEFINED:
                    problems.append("%d: FROM uses ${%s}, not declared by an ARG before the first FROM" % (lineno, var))
            if name:
                if any(s["name"] == name.lower() for s in stages):
                    problems.append("%d: duplicate stage name %s" % (lineno, name))
            stages.append({"name": (name or "").lower(), "vars": set(), "env": {}, "lineno": lineno,
                           "from": image, "runs": []})
            continue
        if not stages:
            if KW == "ARG":
                for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)(?:=\S*)?", args):
                    global_args.add(name)
            else:
                problems.append("%d: %s before the first FROM" % (lineno, KW))
            continue
        st = stages[-1]
        if KW in ("ENV", "LABEL", "ARG"):
            pairs = kv_pairs(args)
            if KW == "ARG" and not pairs and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", args.strip()):
                pairs = [(args.strip(), "")]
            if not pairs:
                problems.append("%d: %s wants KEY=VALUE: %s" % (lineno, KW, args))
            if KW == "ARG":
                for k, _ in pairs:
                    st["vars"].add(k)
            if KW == "ENV":
                for k, v in pairs:
                    st["env"][k] = v.strip('"')
        if KW == "COPY" or KW == "ADD":
            m = re.search(r"--from=(\S+)", args)
            if m:
                ref = m.group(1).lower()
                known = {s["name"] for s in stages[:-1] if s["name"]}
                if not (ref in known or ref.isdigit() or "/" in ref or ":" in ref):
                    problems.append("%d: COPY --from=%s names no earlier stage" % (lineno, m.group(1)))
            if len(args.replace("--", " --").split()) < 2:
                problems.append("%d: %s needs a source and a destination" % (lineno, KW))
        if KW == "RUN":
            st["runs"].append(args)
            continue
        for v in VAR_RE.findall(args):
            var = v[0] or v[1]
            if var not in st["vars"] and var not in st["env"] and var not in PREDEFINED:
                problems.append("%d: ${%s} is not declared in this stage (add ARG %s after FROM)" % (lineno, var, var))
    # Stage references in FROM (e.g. FROM ${PACKAGES} AS packages): the ARG's default must name a stage.
    names = {s["name"] for s in stages if s["name"]}
    for s in stages:
        if s["from"].lower() in names and s["from"].lower() == s["name"]:
            problems.append("%d: stage %s is built from itself" % (s["lineno"], s["name"]))
    if not stages:
        problems.append("no FROM")
        return problems
    final = stages[-1]
    for k, v in (("NCCL_NET_PLUGIN", "gdr"), ("NCCL_NET", "GDR")):
        if final["env"].get(k) != v:
            problems.append("final stage must set ENV %s=%s (has %r)" % (k, v, final["env"].get(k)))
    if not any("libnccl-net-gdr" in r for r in final["runs"]):
        problems.append("final stage does not install libnccl-net-gdr")
    return problems


def main(argv):
    if len(argv) != 2:
        print("usage: lint-dockerfile.py DOCKERFILE", file=sys.stderr)
        return 2
    problems = lint(argv[1])
    for p in problems:
        print("%s:%s" % (argv[1], p))
    if problems:
        print("FAIL: %d problem(s)" % len(problems))
        return 1
    print("PASS: %s" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
