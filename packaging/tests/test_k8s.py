#!/usr/bin/env python3
"""test_k8s.py K8S_DIR: validate the Kubernetes manifests without a cluster.

Every YAML document loads; every line carries a comment (the "why" of the line); every pod template asks for what RDMA
under Kubernetes needs (IPC_LOCK, an rdma/ device-plugin resource, a memory-backed /dev/shm, the NCCL variables that
select the plugin) and nothing it must not have (privileged, a /dev/infiniband hostPath next to the device plugin,
hugepages); the DDP Job and its headless Service agree on names, ports and ranks.
Needs PyYAML (Debian: python3-yaml, use /usr/bin/python3); exits 77 (CTest "skipped") without it.
"""

import glob
import os
import re
import sys
import unittest

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is not importable by %s (Debian: apt-get install python3-yaml, and run /usr/bin/python3)"
          % sys.executable)
    sys.exit(77)

K8S = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "k8s")
FILES = sorted(glob.glob(os.path.join(K8S, "*.yaml")))


def docs():
    out = []
    for f in FILES:
        with open(f) as fh:
            for d in yaml.safe_load_all(fh):
                if d is not None:
                    out.append((os.path.basename(f), d))
    return out


def all_pod_specs():
    """Every pod spec: (file, name, spec, role); role "launcher" for an MPIJob's launcher (it runs mpirun only)."""
    for name, d in docs():
        if d["kind"] == "Pod":
            yield name, d["metadata"]["name"], d["spec"], "pod"
        elif d["kind"] in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
            yield name, d["metadata"]["name"], d["spec"]["template"]["spec"], "pod"
        elif d["kind"] == "MPIJob":
            for role, r in sorted(d["spec"]["mpiReplicaSpecs"].items()):
                yield name, "%s/%s" % (d["metadata"]["name"], role), r["template"]["spec"], role.lower()


def pod_specs():
    """The pod specs that move data through the plugin (or check that it can): all but MPI launchers."""
    for name, pname, spec, role in all_pod_specs():
        if role != "launcher":
            yield name, pname, spec


def env_of(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


class Manifests(unittest.TestCase):
    def test_files_present(self):
        names = [os.path.basename(f) for f in FILES]
        self.assertIn("pod.yaml", names)
        self.assertIn("ddp-job.yaml", names)

    def test_every_line_commented(self):
        for f in FILES:
            with open(f) as fh:
                for i, line in enumerate(fh, 1):
                    if line.strip() in ("", "---"):
                        continue
                    self.assertIn("#", line, "%s:%d has no comment saying why: %s" % (os.path.basename(f), i,
                                                                                      line.rstrip()))

    def test_documents_well_formed(self):
        ds = docs()
        self.assertGreaterEqual(len(ds), 3)
        for name, d in ds:
            for k in ("apiVersion", "kind", "metadata"):
                self.assertIn(k, d, "%s: %s missing" % (name, k))
            self.assertRegex(d["metadata"]["name"], r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

    def test_pods_have_what_rdma_needs(self):
        specs = list(pod_specs())
        self.assertGreaterEqual(len(specs), 2)
        for fname, pname, spec in specs:
            where = "%s/%s" % (fname, pname)
            vols = {v["name"]: v for v in spec.get("volumes", [])}
            self.assertFalse(spec.get("hostIPC"), where)
            for c in spec["containers"]:
                sc = c.get("securityContext", {})
                self.assertIn("IPC_LOCK", sc.get("capabilities", {}).get("add", []), where)
                self.assertFalse(sc.get("privileged", False), "%s: privileged is not needed" % where)
                limits = c["resources"]["limits"]
                rdma = [k for k in limits if k.startswith("rdma/")]
                self.assertEqual(len(rdma), 1, "%s: one rdma/ device-plugin resource" % where)
                self.assertGreaterEqual(int(limits[rdma[0]]), 1)
                env = env_of(c)
                # a GPU allocated, or (the doctor, holding none) every GPU shown by the NVIDIA runtime
                self.assertTrue(int(limits.get("nvidia.com/gpu", 0)) >= 1 or env.get("NVIDIA_VISIBLE_DEVICES") == "all",
                                where)
                self.assertFalse([k for k in limits if k.startswith("hugepages-")], "%s: no hugepages" % where)
                env = env_of(c)
                self.assertEqual(env.get("NCCL_NET_PLUGIN"), "gdr", where)
                self.assertEqual(env.get("NCCL_NET"), "GDR", where)
                self.assertTrue(all(k.startswith(("NCCL_", "GDRNET_", "OMP_", "NVIDIA_")) or k == "NODE_NAME"
                                    for k in env), where)
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                self.assertIn("/dev/shm", mounts, where)
                shm = vols[mounts["/dev/shm"]]
                self.assertEqual(shm.get("emptyDir", {}).get("medium"), "Memory", where)
                # The device plugin provides /dev/infiniband; a hostPath as well would bypass it.
                self.assertNotIn("/dev/infiniband", mounts, "%s: hostPath /dev/infiniband only without the plugin" % where)
                for v in vols.values():
                    self.assertNotEqual(v.get("hostPath", {}).get("path"), "/dev/infiniband", where)
                self.assertIn(c.get("imagePullPolicy"), ("IfNotPresent", "Always"))

    def test_guaranteed_qos(self):
        """Every container, init containers included, has cpu and memory limits equal to its requests: the pod's QoS
        class is Guaranteed (a missing cpu limit makes it Burstable)."""
        for fname, pname, spec, _ in all_pod_specs():
            for c in spec.get("initContainers", []) + spec["containers"]:
                where = "%s/%s/%s" % (fname, pname, c["name"])
                res = c.get("resources", {})
                limits, requests = res.get("limits", {}), res.get("requests", {})
                for r in ("cpu", "memory"):
                    self.assertIn(r, limits, "%s: no %s limit (QoS would be Burstable)" % (where, r))
                    self.assertEqual(str(requests.get(r, limits[r])), str(limits[r]),
                                     "%s: %s request != limit (QoS would be Burstable)" % (where, r))
                for r, v in requests.items():
                    self.assertEqual(str(limits.get(r, v)), str(v), "%s: %s request != limit" % (where, r))

    def test_hostpath_alternative_documented(self):
        for f in FILES:
            with open(f) as fh:
                text = fh.read()
            self.assertRegex(text, r"#\s+path: /dev/infiniband", "%s: the hostPath alternative" % f)
            self.assertIn("k8s.v1.cni.cncf.io/networks", text, "%s: Multus note for RoCE" % f)
            self.assertIn("hostNetwork", text)
            self.assertIn("memlock", text)

    def test_ddp_job_and_service_agree(self):
        ds = [d for n, d in docs() if n == "ddp-job.yaml"]
        svc = [d for d in ds if d["kind"] == "Service"][0]
        job = [d for d in ds if d["kind"] == "Job"][0]
        self.assertEqual(svc["spec"]["clusterIP"], "None")                  # headless
        self.assertTrue(svc["spec"].get("publishNotReadyAddresses"))
        js = job["spec"]
        self.assertEqual(js["completionMode"], "Indexed")
        self.assertEqual(js["completions"], js["parallelism"])
        nnodes = js["completions"]
        self.assertEqual(nnodes, 2)
        pod = js["template"]["spec"]
        self.assertEqual(pod["subdomain"], svc["metadata"]["name"])
        self.assertEqual(svc["spec"]["selector"], {"job-name": job["metadata"]["name"]})
        self.assertEqual(pod["restartPolicy"], "Never")
        script = pod["containers"][0]["args"][0]
        self.assertIn("torchrun", script)
        self.assertIn("--nnodes=%d" % nnodes, script)
        self.assertIn('--node-rank="$JOB_COMPLETION_INDEX"', script)
        master = re.search(r"master=(\S+)", script).group(1)
        self.assertEqual(master, "%s-0.%s" % (job["metadata"]["name"], svc["metadata"]["name"]))
        port = re.search(r"--master-port=(\d+)", script).group(1)
        self.assertIn(int(port), [p["port"] for p in svc["spec"]["ports"]])
        nproc = int(re.search(r"--nproc-per-node=(\d+)", script).group(1))
        self.assertEqual(nproc, int(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]))
        self.assertIn("nccl-tests-configs/pytorch/ddp_step.py", script)
        self.assertIn("Using network GDR", script)
        anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        self.assertEqual(anti["topologyKey"], "kubernetes.io/hostname")

    def test_doctor_daemonset(self):
        ds = [d for n, d in docs() if n == "doctor-daemonset.yaml"][0]
        self.assertEqual(ds["kind"], "DaemonSet")
        tmpl = ds["spec"]["template"]
        for k, v in ds["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(tmpl["metadata"]["labels"].get(k), v)
        self.assertEqual(tmpl["metadata"]["labels"]["app.kubernetes.io/component"], "doctor")  # collect-doctor.py's
        c = tmpl["spec"]["containers"][0]
        script = c["args"][0]
        self.assertIn("gdrnet-doctor --json", script)
        self.assertIn('echo "gdrnet-doctor-report node=${NODE_NAME} exit=${rc} ', script)
        self.assertRegex(script, r"exec sleep infinity")
        node = [e for e in c["env"] if e["name"] == "NODE_NAME"][0]
        self.assertEqual(node["valueFrom"]["fieldRef"]["fieldPath"], "spec.nodeName")
        self.assertNotIn("nvidia.com/gpu", c["resources"]["limits"], "the doctor must not hold a GPU")
        with open(os.path.join(K8S, "README.md")) as fh:
            readme = fh.read()
        self.assertIn("kubectl logs -l app.kubernetes.io/component=doctor --prefix --tail=-1 | ./collect-doctor.py",
                      readme)

    def test_mpijob_ranks_and_env(self):
        job = [d for n, d in docs() if n == "nccl-tests-mpijob.yaml"][0]
        self.assertEqual((job["apiVersion"], job["kind"]), ("kubeflow.org/v2beta1", "MPIJob"))
        spec = job["spec"]
        launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        worker = spec["mpiReplicaSpecs"]["Worker"]
        script = launcher["args"][0]
        np_ = int(re.search(r"-np (\d+)", script).group(1))
        self.assertEqual(np_, spec["slotsPerWorker"] * worker["replicas"])
        self.assertEqual(spec["slotsPerWorker"],
                         int(worker["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]))
        self.assertIn(" -g 1 -c 1", script)
        env = env_of(launcher)
        self.assertEqual(env.get("NCCL_NET_PLUGIN"), "gdr")
        self.assertEqual(env.get("NCCL_NET"), "GDR")
        mpirun = [l for l in script.splitlines() if l.startswith("mpirun ")][0].split(" # ")[0]
        passed = re.findall(r" -x (\w+)", mpirun)
        self.assertEqual(sorted(passed), sorted(env), "every launcher variable, and only those, goes to the ranks")
        wenv = env_of(worker["template"]["spec"]["containers"][0])
        for k, v in wenv.items():
            self.assertEqual(env.get(k), v, "worker and launcher disagree on %s" % k)
        self.assertIn("Using network GDR", script)
        anti = worker["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        self.assertEqual(anti["labelSelector"]["matchLabels"]["training.kubeflow.org/job-name"], job["metadata"]["name"])

    def test_check_pod_runs_the_tools(self):
        pod = [d for n, d in docs() if n == "pod.yaml"][0]
        self.assertEqual(pod["spec"]["restartPolicy"], "Never")
        script = pod["spec"]["containers"][0]["args"][0]
        self.assertIn("gdrnet-doctor", script)
        self.assertRegex(script, r"gdrnet-perf --local --transport rdma .*--check")
        self.assertRegex(script, r"gdrnet-perf --local --transport tcp .*--check")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
