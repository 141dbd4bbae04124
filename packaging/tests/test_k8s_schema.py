#!/usr/bin/env python3
"""test_k8s_schema.py K8S_DIR SCHEMA_DIR: every document of every manifest in K8S_DIR validates against the vendored
JSON Schemas in SCHEMA_DIR (packaging/k8s/schemas, made by gen_schemas.py there), strictly: an undeclared field, a
wrong type or a missing required field fails, as `kubectl apply --validate=strict` would refuse it. A document of a
kind with no vendored schema fails too (nothing goes unvalidated). The test also proves it can fail: a misspelt field
and a wrong type in copies of each manifest must be reported.

What is validated: field names and nesting, types, required fields, enums and patterns the schemas carry:
  - Pod, Job, DaemonSet, Service, ConfigMap, Namespace, ServiceAccount: Kubernetes 1.22's API (the Python client's
    models, python3-kubernetes 22.6.0); newer fields would be refused until the schemas are regenerated.
  - MPIJob kubeflow.org/v2beta1: the MPI Operator's CRD schema (v0.8.2), which embeds the pod template schema of
    the Kubernetes version it was built against.
What is not: server-side semantics (admission, quantities' syntax, label value syntax, that a referenced volume
exists, the MPI Operator's own webhook checks) and metadata beyond its field names.
Needs python3-yaml and python3-jsonschema (/usr/bin/python3); exits 77 (skipped) without them.
"""

import copy
import glob
import json
import os
import sys
import unittest

try:
    import jsonschema
    import yaml
except ImportError as e:
    print("SKIP: %s (Debian: apt-get install python3-yaml python3-jsonschema; run /usr/bin/python3)" % e)
    sys.exit(77)

K8S, SCHEMAS = sys.argv[1], sys.argv[2]


def load_schemas():
    with open(os.path.join(SCHEMAS, "k8s-v1.22-strict.json")) as fh:
        core = json.load(fh)
    with open(os.path.join(SCHEMAS, "mpijob-v2beta1-strict.json")) as fh:
        mpi = json.load(fh)
    out = {}
    for key, s in core["kinds"].items():
        out[key] = dict(s, definitions=core["definitions"])
    out["kubeflow.org/v2beta1/MPIJob"] = mpi
    return out


SCHEMA = load_schemas()


def errors(doc):
    key = "%s/%s" % (doc.get("apiVersion"), doc.get("kind"))
    if key not in SCHEMA:
        return ["no vendored schema for %s (kinds: %s)" % (key, ", ".join(sorted(SCHEMA)))]
    v = jsonschema.Draft7Validator(SCHEMA[key])
    return ["%s: %s" % ("/".join(str(p) for p in e.absolute_path) or "<root>", e.message)
            for e in sorted(v.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))]


def manifests():
    out = []
    for f in sorted(glob.glob(os.path.join(K8S, "*.yaml"))):
        with open(f) as fh:
            for i, d in enumerate(yaml.safe_load_all(fh)):
                if d is not None:
                    out.append(("%s#%d" % (os.path.basename(f), i), d))
    return out


def containers(doc):
    kind = doc["kind"]
    if kind == "Pod":
        specs = [doc["spec"]]
    elif kind == "MPIJob":
        specs = [r["template"]["spec"] for r in doc["spec"]["mpiReplicaSpecs"].values()]
    elif kind in ("Job", "DaemonSet"):
        specs = [doc["spec"]["template"]["spec"]]
    else:
        specs = []
    return [c for s in specs for c in s["containers"]]


class Schemas(unittest.TestCase):
    def test_every_document_validates(self):
        ms = manifests()
        self.assertGreaterEqual(len(ms), 5)
        kinds = {d["kind"] for _, d in ms}
        self.assertTrue({"Pod", "Job", "Service", "DaemonSet", "MPIJob"} <= kinds, kinds)
        for name, d in ms:
            self.assertEqual(errors(d), [], name)

    def test_a_misspelt_field_fails(self):
        for name, d in manifests():
            bad = copy.deepcopy(d)
            cs = containers(bad)
            if cs:
                cs[0]["resource"] = cs[0].pop("resources")      # "resource": no such field
                want = "'resource' was unexpected"
            else:
                bad["spec"]["clusterIp"] = "None"                 # Service: clusterIP misspelt
                want = "'clusterIp' was unexpected"
            errs = errors(bad)
            self.assertTrue(any(want in e for e in errs), "%s: %s" % (name, errs))

    def test_a_wrong_type_and_a_missing_field_fail(self):
        for name, d in manifests():
            cs = containers(d)
            if not cs:
                continue
            bad = copy.deepcopy(d)
            containers(bad)[0]["imagePullPolicy"] = ["IfNotPresent"]
            self.assertTrue(any("is not of type 'string'" in e for e in errors(bad)), name)
            bad = copy.deepcopy(d)
            del containers(bad)[0]["name"]
            self.assertTrue(any("'name' is a required property" in e for e in errors(bad)), name)

    def test_unknown_kind_fails(self):
        self.assertTrue(errors({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}))

    def test_mpijob_specific_fields(self):
        job = [d for _, d in manifests() if d["kind"] == "MPIJob"][0]
        bad = copy.deepcopy(job)
        bad["spec"]["mpiImplementation"] = "LAM"                  # enum: OpenMPI, Intel, MPICH
        self.assertTrue(any("mpiImplementation" in e for e in errors(bad)), errors(bad))
        bad = copy.deepcopy(job)
        bad["spec"]["slotsPerWorkers"] = bad["spec"].pop("slotsPerWorker")
        self.assertTrue(any("'slotsPerWorkers' was unexpected" in e for e in errors(bad)))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
