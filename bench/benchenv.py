"""Shared by bench/cpu-per-gb, bench/kv-tail and bench/tcp-matrix: the env presets, the --variant syntax, the
nccl-tests command of ranks as hosts on one GPU, a run's processes and the host's steal over it (Python 3 standard
library).

A bench that compares the plugin against NCCL's Socket transport runs Socket with
nccl-tests-configs/baseline-socket.env and each plugin variant with nccl-tests-configs/tcp.env, the plugin given by
its path, plus the variant's own K=V settings."""
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_env_file(path):
    """K=V lines of an env preset (comments and blank lines skipped); LD_LIBRARY_PATH is left to the caller."""
    env = {}
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if "=" not in line:
            continue
        k, v = line.split("=", 1)
        if k == "LD_LIBRARY_PATH":
            continue  # set by the caller
        env[k.strip()] = v.strip().strip('"')
    return env


def parse_variants(prog, variants, plugin=None, plugin_env=()):
    """[(name, plugin .so, [K=V])]: each NAME,SO[,K=V...] of variants, else ("GDR", plugin, plugin_env)."""
    if not variants:
        return [("GDR", plugin, list(plugin_env))]
    out = []
    for v in variants:
        f = v.split(",")
        if len(f) < 2 or not f[0] or f[0] == "Socket" or any("=" not in kv for kv in f[2:]):
            sys.exit("%s: --variant NAME,PLUGIN.so[,K=V...] (NAME not Socket): %r" % (prog, v))
        if not os.path.exists(f[1]):
            sys.exit("%s: --variant %s: no plugin library %s" % (prog, f[0], f[1]))
        out.append((f[0], f[1], f[2:]))
    if len({n for n, _, _ in out}) != len(out):
        sys.exit("%s: --variant names must differ" % prog)
    return out


def transport_env(variant, extra=(), nccl_lib=None):
    """The environment a run adds: Socket's preset (variant None) or tcp.env, the plugin's path and the variant's
    K=V, then extra K=V (for every run); LD_LIBRARY_PATH: nccl_lib, the plugin's directory, then the caller's."""
    envs = {}
    if variant:
        envs.update(read_env_file(os.path.join(ROOT, "nccl-tests-configs", "tcp.env")))
        envs["NCCL_NET_PLUGIN"] = os.path.abspath(variant[1])
        for kv in variant[2]:
            k, v = kv.split("=", 1)
            envs[k] = v
    else:
        envs.update(read_env_file(os.path.join(ROOT, "nccl-tests-configs", "baseline-socket.env")))
    for kv in extra:
        k, v = kv.split("=", 1)
        envs[k] = v
    ld = [x for x in [nccl_lib, os.path.dirname(os.path.abspath(variant[1])) if variant else None,
                      os.environ.get("LD_LIBRARY_PATH")] if x]
    envs["LD_LIBRARY_PATH"] = ":".join(ld)
    return envs


def nccl_tests_env(variant, extra=(), nccl_lib=None):
    """transport_env for an nccl-tests run of ranks on GPU 0 (the one-GPU bench), NVLS off."""
    envs = {"NCCL_NVLS_ENABLE": "0", "NCCL_TESTS_DEVICE": "0"}
    envs.update(transport_env(variant, extra, nccl_lib))
    return envs


def mpirun_cmd(mpirun, np, envs, bin_path, args):
    """The mpirun command of np ranks, each its own host (NCCL_HOSTID=host0..), every rank unbound (OpenMPI binds each
    of two ranks to one core by default: the plugin's threads would share NCCL's core), the environment envs given on
    each rank's command line, its output line-buffered (stdbuf, where there is one)."""
    envpairs = ["%s=%s" % kv for kv in sorted(envs.items())]
    stdbuf = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []
    cmd = mpirun.split() + ["--bind-to", "none"]
    for r in range(np):
        if r:
            cmd.append(":")
        cmd += ["-np", "1", "env", "NCCL_HOSTID=host%d" % r] + envpairs + stdbuf + [bin_path] + list(args)
    return cmd


def descendants(pid):
    """Every process below pid now (from /proc/*/stat's ppid), not pid itself."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    st = f.read()
                kids.setdefault(int(st[st.rindex(")") + 2:].split()[1]), []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def steal_now(path="/proc/stat"):
    """The host's (steal, total) CPU time from the cpu line of /proc/stat (its first eight fields), or None."""
    try:
        with open(path) as f:
            v = f.readline().split()
        return (int(v[8]), sum(int(x) for x in v[1:9])) if len(v) >= 9 and v[0] == "cpu" else None
    except (OSError, ValueError):
        return None


def steal_pct(a, b):
    """The host's steal between two readings of steal_now, in % of its CPU time then (on a VM: time its hypervisor
    ran other work while its CPUs wanted to run); None if unknown or no time passed."""
    if a is None or b is None or b[1] <= a[1] or b[0] < a[0]:
        return None
    return 100.0 * (b[0] - a[0]) / (b[1] - a[1])
