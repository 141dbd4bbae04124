#!/usr/bin/env python3
"""gen-tool-docs.py: the man pages and the bash completion of the installed commands, generated from what the
commands say about themselves, so that they cannot drift from them.

  packaging/gen-tool-docs.py --build BUILD            regenerate packaging/man/*.1 and packaging/completion/gdrnet
  packaging/gen-tool-docs.py --build BUILD --check    compare instead; exit 1 with a diff when they drifted (CTest)

Sources:
  man/gdrnet-perf.1, man/gdrnet-doctor.1 (and gdrnet-top.1 once BUILD/bin/gdrnet-top exists): `TOOL --help` and
  `TOOL --version` of BUILD/bin/TOOL.
  completion/gdrnet (installed as bash-completion's completions/<command> for each command): the options of the
  tools' --help and of nccl-tests-configs/run-matrix and summarize (--help), the preset names
  (nccl-tests-configs/*.env), and the knob names and choices of plugin/params.def (`gdrnet-run-matrix --env
  GDRNET_<TAB>` completes knob names, then an ENUM knob's values).

--help's layout, as the tools print it: "usage: ..." lines, description paragraphs, option lines "  -x, --long ARG  text"
(continuations indented further), closing paragraphs ("Exit status: ..." becomes EXIT STATUS). Output is
deterministic (no date), so --check compares byte for byte. Needs only python3; the build never runs this.
"""

import argparse
import difflib
import glob
import os
import re
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = ["gdrnet-perf", "gdrnet-doctor", "gdrnet-top"]
ME = "packaging/gen-tool-docs.py"


def run(cmd):
    env = dict(os.environ, COLUMNS="100", LC_ALL="C")
    for k in list(env):
        if k.startswith(("GDRNET_", "NCCL_")):
            del env[k]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    if p.returncode != 0:
        raise SystemExit("%s: %s exited %d\n%s" % (ME, " ".join(cmd), p.returncode, p.stderr))
    return p.stdout


# ---- --help parsing ------------------------------------------------------------------------------------------
OPT_LINE = re.compile(r"^  (-[^ ].*?)(?:\s{2,}(\S.*))?$")


def parse_help(text):
    """-> (usage lines, description paragraphs, [(names, arg, [text lines])], closing paragraphs)"""
    lines = text.rstrip("\n").split("\n")
    usage, i = [], 0
    while i < len(lines) and lines[i].strip():
        usage.append(re.sub(r"^[Uu]sage:\s*", "", lines[i]).strip())
        i += 1
    desc, opts, tail, para = [], [], [], []
    in_opts = False
    for line in lines[i:]:
        m = OPT_LINE.match(line)
        if m:
            in_opts = True
            if para:
                (tail if opts else desc).append(" ".join(para))
                para = []
            spec, text_ = m.group(1).strip(), m.group(2)
            opts.append((spec, [text_] if text_ else []))
            continue
        if in_opts and line.startswith("   ") and line.strip() and opts:
            opts[-1][1].append(line.strip())
            continue
        if not line.strip():
            if para:
                (tail if opts else desc).append(" ".join(para))
                para = []
            in_opts = False if not opts else in_opts
            continue
        in_opts = False
        if re.match(r"^[Ee]xit status", line) and para:
            (tail if opts else desc).append(" ".join(para))
            para = []
        para.append(line.strip())
    if para:
        (tail if opts else desc).append(" ".join(para))
    return usage, desc, opts, tail


def option_names(spec):
    """'-v, --verbose' -> [('-v', None), ('--verbose', None)]; '--sizes MIN:MAX[:F]' -> [('--sizes', 'MIN:MAX[:F]')];
    '-b SIZE -e SIZE -f N' -> three options with arguments."""
    out = []
    toks = spec.replace(",", " ").split()
    for j, t in enumerate(toks):
        if re.match(r"^--?[A-Za-z][\w-]*$", t):
            arg = None
            if j + 1 < len(toks) and not toks[j + 1].startswith("-"):
                arg = toks[j + 1]
            out.append((t, arg))
    # '-v, --verbose': the short one shares the long one's argument
    if len(out) == 2 and out[0][1] is None and out[1][1] is not None and spec.startswith(out[0][0] + ","):
        out[0] = (out[0][0], out[1][1])
    return out


def help_options(text):
    """Every option of an argparse or hand-written --help, with its argument name (None: a flag)."""
    out = {}
    for line in text.split("\n"):
        m = re.match(r"^\s{2,}(-[^ ].*?)(?:\s{2,}\S.*)?$", line)
        if not m:
            continue
        spec = m.group(1).strip()
        if not re.match(r"^-", spec):
            continue
        for name, arg in option_names(spec):
            out.setdefault(name, arg)
    return out


# ---- man pages -----------------------------------------------------------------------------------------------
def roff(s):
    s = s.replace("\\", "\\e")
    s = s.replace("-", "\\-")
    if s.startswith((".", "'")):
        s = "\\&" + s
    return s


def man_page(tool, help_text, version_text, tools):
    usage, desc, opts, tail = parse_help(help_text)
    if not usage or not opts:
        raise SystemExit("%s: %s --help: no usage line or no options found" % (ME, tool))
    version = version_text.strip().split()[-1] if version_text.strip() else ""
    first = desc[0] if desc else tool
    summary = re.split(r"(?<=[a-z0-9)])[.:] |, ", first, maxsplit=1)[0].rstrip(".")
    summary = summary[0].lower() + summary[1:] if summary[:1].isupper() and not summary[:2].isupper() else summary
    out = ['.\\" Generated by %s from "%s --help" and "%s --version": do not edit; regenerate instead.' % (ME, tool, tool),
           '.TH %s 1 "" "libnccl-net-gdr %s" "User Commands"' % (tool.upper(), version),
           ".SH NAME", "%s \\- %s" % (tool, roff(summary)),
           ".SH SYNOPSIS", ".nf"]
    out += [roff(u) for u in usage]
    out += [".fi", ".SH DESCRIPTION"]
    for i, p in enumerate(desc):
        if i:
            out.append(".PP")
        out.append(roff(p))
    out.append(".SH OPTIONS")
    for spec, text in opts:
        out.append(".TP")
        names = option_names(spec)
        parts = []
        for tok in re.split(r"(,\s*|\s+)", spec):
            if not tok or tok.isspace():
                parts.append(" ")
            elif tok.startswith(","):
                parts.append(", ")
            elif any(tok == n for n, _ in names):
                parts.append("\\fB%s\\fR" % roff(tok))
            else:
                parts.append("\\fI%s\\fR" % roff(tok))
        out.append("".join(parts).strip())
        out.append(roff(" ".join(text)) if text else "")
    status = [p for p in tail if p.lower().startswith("exit status")]
    rest = [p for p in tail if p not in status]
    if rest:
        out.append(".SH NOTES")
        for i, p in enumerate(rest):
            if i:
                out.append(".PP")
            out.append(roff(p))
    if status:
        out.append(".SH EXIT STATUS")
        out.append(roff(re.sub(r"^[Ee]xit status:\s*", "", status[0])))
    out += [".SH ENVIRONMENT",
            "The plugin's knobs (\\fBGDRNET_*\\fR, and the \\fBNCCL_IB_*\\fR/\\fBNCCL_SOCKET_*\\fR names it honours) "
            "apply to the plugin the tool loads: /usr/share/doc/libnccl\\-net\\-gdr/docs/configuration.md.",
            ".SH SEE ALSO"]
    others = [t for t in tools if t != tool]
    out.append(", ".join("\\fB%s\\fR(1)" % roff(t) for t in others) + ",")
    out.append("/usr/share/doc/libnccl\\-net\\-gdr/README.md")
    return "\n".join(l for l in out if l is not None) + "\n"


# ---- bash completion -----------------------------------------------------------------------------------------
def params_def(path):
    knobs = []
    with open(path) as fh:
        text = fh.read()
    for m in re.finditer(r"^GDR_PARAM\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\"[^\"]*\"|\w+)\s*,[^,]*,[^,]*,[^,]*,\s*(\"[^\"]*\"|NULL)",
                         text, re.M):
        choices = m.group(4).strip('"').split("|") if m.group(2) == "ENUM" and m.group(4) != "NULL" else []
        if m.group(2) in ("AUTOINT", "AUTOSIZE"):
            choices = ["auto"]
        knobs.append(("GDRNET_" + m.group(1), choices))
    if not knobs:
        raise SystemExit("%s: no GDR_PARAM(...) in %s" % (ME, path))
    return knobs


def arg_action(arg, help_line):
    """How to complete an option's argument: files, dirs, a word list, or nothing."""
    if arg is None:
        return None
    a = arg.upper()
    if a in ("FILE", "PATH", "LOG", "FILE.PNG", "FILE.JSON"):
        return "files"
    if a == "DIR":
        return "dirs"
    m = re.match(r"^\s*(\w+(?:\|\w+)+)\b", help_line or "")
    if m:
        return "words:" + " ".join(m.group(1).split("|"))
    return "none"


def completion(cmds, presets, knobs):
    """cmds: [(command, {option: (arg, action)})]"""
    out = ["# bash completion for libnccl-net-gdr's commands.",
           "# Generated by %s from the commands' --help, nccl-tests-configs/*.env and plugin/params.def:" % ME,
           "# do not edit; regenerate instead. Installed as bash-completion's completions/<command> for each command.",
           "# shellcheck shell=bash disable=SC2207  # COMPREPLY=($(compgen ...)): the completion idiom, words have no blanks",
           "",
           "_gdrnet_knobs='%s'" % " ".join(k for k, _ in knobs),
           "_gdrnet_presets='%s'" % " ".join(presets),
           "",
           "# the values an ENUM (or auto) knob takes",
           "_gdrnet_knob_values() {",
           "  case $1 in"]
    for k, ch in knobs:
        if ch:
            out.append("    %s) echo '%s' ;;" % (k, " ".join(ch)))
    out += ["  esac",
            "}",
            "",
            "# NAME=VALUE for a GDRNET_ knob: the names (with '='), then the values of the one named",
            "_gdrnet_complete_knob() {",
            "  local word=$1 name",
            "  if [[ $word == *=* ]]; then",
            "    name=${word%%=*}",
            "    local IFS=$' \\t\\n' pre=",
            "    [[ $COMP_WORDBREAKS == *=* ]] || pre=$name=   # bash replaces only what follows a word-break '='",
            "    COMPREPLY=($(compgen -P \"$pre\" -W \"$(_gdrnet_knob_values \"$name\")\" -- \"${word#*=}\"))",
            "  else",
            "    COMPREPLY=($(compgen -W \"$_gdrnet_knobs\" -S = -- \"$word\"))",
            "    compopt -o nospace 2>/dev/null",
            "  fi",
            "}",
            "",
            "# a comma-separated preset list: complete its last element",
            "_gdrnet_complete_presets() {",
            "  local word=$1 pre=",
            "  [[ $word == *,* ]] && pre=${word%,*},",
            "  COMPREPLY=($(compgen -P \"$pre\" -W \"$_gdrnet_presets\" -- \"${word##*,}\"))",
            "}",
            "",
            "# the word being completed and the one before it, with '=' kept inside the word",
            "_gdrnet_words() {",
            "  local line=${COMP_LINE:0:COMP_POINT}",
            "  _gdrnet_cur=${line##*[[:space:]]}",
            "  line=${line%\"$_gdrnet_cur\"}",
            "  line=${line%\"${line##*[![:space:]]}\"}",
            "  _gdrnet_prev=${line##*[[:space:]]}",
            "}",
            ""]
    for cmd, opts in cmds:
        fn = "_gdrnet_" + re.sub(r"\W", "_", cmd.replace("gdrnet-", ""))
        out += ["%s() {" % fn,
                "  local _gdrnet_cur _gdrnet_prev",
                "  _gdrnet_words",
                "  COMPREPLY=()",
                "  case $_gdrnet_prev in"]
        groups = {}
        for o, (arg, action) in sorted(opts.items()):
            if action:
                groups.setdefault(action, []).append(o)
        for action, names in sorted(groups.items()):
            pat = "|".join(names)
            if action == "files":
                body = "COMPREPLY=($(compgen -f -- \"$_gdrnet_cur\")); compopt -o filenames 2>/dev/null"
            elif action == "dirs":
                body = "COMPREPLY=($(compgen -d -- \"$_gdrnet_cur\")); compopt -o filenames 2>/dev/null"
            elif action == "knob":
                body = "_gdrnet_complete_knob \"$_gdrnet_cur\""
            elif action == "presets":
                body = "_gdrnet_complete_presets \"$_gdrnet_cur\""
            elif action.startswith("words:"):
                body = "COMPREPLY=($(compgen -W '%s' -- \"$_gdrnet_cur\"))" % action[6:]
            else:
                body = ":"   # a number or a free value: nothing to offer
            out.append("    %s) %s; return ;;" % (pat, body))
        out.append("  esac")
        longs = " ".join(sorted(o for o in opts))
        out.append("  if [[ $_gdrnet_cur == -* ]]; then")
        out.append("    COMPREPLY=($(compgen -W '%s' -- \"$_gdrnet_cur\"))" % longs)
        if cmd == "gdrnet-run-matrix":
            withargs = "|".join(sorted(o for o, (arg, _) in opts.items() if arg))
            out += ["  else",
                    "    # NCCL_TESTS_BUILD (a directory), then the preset list: count the operands before this word",
                    "    local w n=0 skip=0 line=${COMP_LINE:0:COMP_POINT}",
                    "    line=${line%\"$_gdrnet_cur\"}",
                    "    for w in ${line#*[[:space:]]}; do",
                    "      if [[ $skip -eq 1 ]]; then skip=0; continue; fi",
                    "      case $w in %s) skip=1 ;; -*) ;; *) n=$((n + 1)) ;; esac" % withargs,
                    "    done",
                    "    if [[ $n -ge 1 ]]; then",
                    "      _gdrnet_complete_presets \"$_gdrnet_cur\"",
                    "    else",
                    "      COMPREPLY=($(compgen -d -- \"$_gdrnet_cur\")); compopt -o filenames 2>/dev/null",
                    "    fi"]
        elif cmd == "gdrnet-summarize":
            out += ["  else",
                    "    COMPREPLY=($(compgen -f -- \"$_gdrnet_cur\")); compopt -o filenames 2>/dev/null"]
        out += ["  fi",
                "}",
                "complete -F %s %s" % (fn, cmd),
                ""]
    return "\n".join(out)


def gather(build):
    bindir = os.path.join(build, "bin")
    files = {}
    cmds = []
    tools = []
    for tool in TOOLS:
        exe = os.path.join(bindir, tool)
        if os.path.exists(exe):
            tools.append(tool)
        elif tool != "gdrnet-top":
            raise SystemExit("%s: %s not built (cmake --build %s --target %s)" % (ME, exe, build, tool))
    for tool in tools:
        exe = os.path.join(bindir, tool)
        h = run([exe, "--help"])
        v = run([exe, "--version"])
        files["man/%s.1" % tool] = man_page(tool, h, v, tools)
        _, _, opts, _ = parse_help(h)
        table = {}
        for spec, text in opts:
            for name, arg in option_names(spec):
                table[name] = (arg, arg_action(arg, text[0] if text else ""))
        cmds.append((tool, table))
    cfg = os.path.join(SRC, "nccl-tests-configs")
    rm_help = run(["bash", os.path.join(cfg, "run-matrix"), "--help"])
    table = {}
    for name, arg in help_options(rm_help).items():
        action = arg_action(arg, "")
        if name == "--env":
            action = "knob"
        elif name == "--baseline":
            action = "presets"
        elif name in ("-o", "--out"):
            action = "dirs"
        table[name] = (arg, action)
    cmds.append(("gdrnet-run-matrix", table))
    sm_help = run([sys.executable, os.path.join(cfg, "summarize"), "--help"])
    table = {name: (arg, arg_action(arg, "")) for name, arg in help_options(sm_help).items()}
    cmds.append(("gdrnet-summarize", table))
    presets = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(cfg, "*.env")))
    knobs = params_def(os.path.join(SRC, "plugin", "params.def"))
    files["completion/gdrnet"] = completion(cmds, presets, knobs)
    return files


def main():
    ap = argparse.ArgumentParser(description="Generate (or --check) packaging/man/*.1 and packaging/completion/gdrnet.")
    ap.add_argument("--build", required=True, help="a build directory with bin/gdrnet-perf and bin/gdrnet-doctor")
    ap.add_argument("--out", default=os.path.join(SRC, "packaging"), help="where man/ and completion/ are")
    ap.add_argument("--check", action="store_true", help="compare with the files in --out; exit 1 on a difference")
    a = ap.parse_args()
    files = gather(a.build)
    drift = 0
    for rel, text in sorted(files.items()):
        path = os.path.join(a.out, rel)
        old = open(path).read() if os.path.exists(path) else None
        if a.check:
            if old != text:
                drift += 1
                sys.stdout.writelines(difflib.unified_diff((old or "").splitlines(True), text.splitlines(True),
                                                           "checked-in " + rel, "generated " + rel))
        elif old != text:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)
            print("wrote %s" % path)
    if a.check:
        stale = [p for p in glob.glob(os.path.join(a.out, "man", "*.1"))
                 if "man/" + os.path.basename(p) not in files]
        for p in stale:
            print("%s: no such tool any more: delete it" % p)
        if drift or stale:
            print("FAIL: %d file(s) drifted from the commands' --help / params.def; regenerate with:\n"
                  "  %s --build %s" % (drift + len(stale), ME, a.build))
            return 1
        print("OK: %s match the commands' --help and plugin/params.def" % ", ".join(sorted(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
