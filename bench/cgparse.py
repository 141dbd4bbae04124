"""Minimal reader of callgrind output files (format version 1), standard library only.

Gives, per process file: the events, the totals, self cost per object (shared library or executable) and
per (object, function), and for calls: count and inclusive cost per called (object, function).
Used by bench/cpu-per-msg; see the callgrind manual, "Callgrind Format Specification".
"""
import collections
import os
import re

_NAME_RE = re.compile(r"^\((\d+)\)(?: (.*))?$")


class Profile:
    def __init__(self, path):
        self.path = path
        self.pid = None
        self.cmd = ""
        self.events = []
        self.totals = []
        self.obj_self = collections.defaultdict(lambda: None)
        self.fn_self = {}  # (obj, fn) -> list of costs
        self.calls = {}  # (callee obj, callee fn) -> [count, inclusive costs...]
        self.calls_site = {}  # (caller fn, callee fn) -> [count, inclusive costs...]
        self.calls_between = {}  # (caller group, callee group) -> [count, inclusive costs...], groups differ
        self._parse()
        self.obj_self = dict(self.obj_self)

    def _add(self, table, key, costs):
        cur = table.get(key)
        if cur is None:
            table[key] = list(costs)
        else:
            for i, c in enumerate(costs):
                cur[i] += c

    def _parse(self):
        names = {"ob": {}, "fl": {}, "fn": {}}
        kind_of = {"ob": "ob", "cob": "ob", "fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl",
                   "fn": "fn", "cfn": "fn"}

        def resolve(key, val):
            kind = kind_of[key]
            m = _NAME_RE.match(val)
            if not m:
                return val
            idx, name = m.group(1), m.group(2)
            if name is not None:
                names[kind][idx] = name
                return name
            return names[kind].get(idx, "(%s)" % idx)

        ob = fn = None
        cob = cfn = None
        pending_call = None  # count of the calls= line whose cost line comes next
        nev = 1
        with open(self.path, "r", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if not line or line[0] == "#":
                    continue
                c0 = line[0]
                if c0.isdigit() or c0 in "+-*":
                    parts = line.split()
                    costs = [int(x) for x in parts[1:1 + nev]]
                    costs += [0] * (nev - len(costs))
                    if pending_call is not None:
                        callee_ob = cob if cob is not None else ob
                        key = (callee_ob, cfn)
                        self._add(self.calls, key, [pending_call] + costs)
                        self._add(self.calls_site, (fn, cfn), [pending_call] + costs)
                        ga, gb = group_of(ob), group_of(callee_ob)
                        if ga != gb:
                            self._add(self.calls_between, (ga, gb), [pending_call] + costs)
                        pending_call = None
                        cob = cfn = None
                        continue
                    o = self.obj_self[ob]
                    if o is None:
                        self.obj_self[ob] = list(costs)
                    else:
                        for i, c in enumerate(costs):
                            o[i] += c
                    self._add(self.fn_self, (ob, fn), costs)
                    continue
                key, sep, val = line.partition("=")
                if sep and key in kind_of:
                    name = resolve(key, val)
                    if key == "ob":
                        ob = name
                    elif key == "fn":
                        fn = name
                    elif key == "cob":
                        cob = name
                    elif key == "cfn":
                        cfn = name
                    continue
                if key == "calls" and sep:
                    pending_call = int(val.split()[0])
                    continue
                if line.startswith("events:"):
                    self.events = line.split(":", 1)[1].split()
                    nev = len(self.events)
                elif line.startswith("pid:"):
                    self.pid = int(line.split(":", 1)[1])
                elif line.startswith("cmd:"):
                    self.cmd = line.split(":", 1)[1].strip()
                elif line.startswith("totals:") or line.startswith("summary:"):
                    self.totals = [int(x) for x in line.split(":", 1)[1].split()]

    def event(self, name):
        return self.events.index(name) if name in self.events else None


def group_of(obj):
    """Which bucket an object file falls into for the per-message table."""
    if obj is None:
        return "other"
    b = os.path.basename(obj)
    if b.startswith("libnccl-net-gdr"):
        return "plugin"
    if "verbs-emu" in obj or b.startswith("libibverbs"):
        return "emulator"
    if b.startswith("libc.so") or b.startswith("libc-") or b.startswith("libpthread") or b.startswith("libm.so"):
        return "libc"
    if b.startswith("ld-linux") or b.startswith("ld-"):
        return "ld.so"
    if b.startswith("vgpreload") or "valgrind" in obj:
        return "valgrind"
    if b.startswith("cpumsg"):
        return "driver"
    return "other"


def groups(profile, ev="Ir"):
    i = profile.event(ev)
    out = collections.Counter()
    if i is None:
        return out
    for obj, costs in profile.obj_self.items():
        out[group_of(obj)] += costs[i]
    return out


def functions(profile, group, ev="Ir"):
    """Self cost per function of the objects in one group."""
    i = profile.event(ev)
    out = collections.Counter()
    if i is None:
        return out
    for (obj, fn), costs in profile.fn_self.items():
        if group_of(obj) == group:
            out[fn] += costs[i]
    return out


def between(profile, caller_group, callee_group, ev="Ir"):
    """Inclusive cost of the calls from one group's code into another's (e.g. plugin -> emulator)."""
    i = profile.event(ev)
    v = profile.calls_between.get((caller_group, callee_group))
    if i is None or v is None:
        return 0
    return v[1 + i]


def site(profile, caller_fn, callee_fn, ev="Ir"):
    """(count, inclusive cost) of the calls made from caller_fn to callee_fn."""
    i = profile.event(ev)
    v = profile.calls_site.get((caller_fn, callee_fn))
    if i is None or v is None:
        return 0, 0
    return v[0], v[1 + i]


def total(profile, ev="Ir"):
    i = profile.event(ev)
    if i is None or i >= len(profile.totals):
        return 0
    return profile.totals[i]
