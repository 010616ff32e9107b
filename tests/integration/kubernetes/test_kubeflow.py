#!/usr/bin/env python3
"""conf/kubernetes/kubeflow/mpijob.yaml: a valid kubeflow.org/v2beta1 MPIJob
(manifest_check) whose launcher runs the walkthrough's mpiexec line with the
hvdrun image, -np = workers x slots, and whose workers run the image's sshd
through hvd-entrypoint with the operator's SSH secret. Offline (PyYAML)."""
import os
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from k8s_tools import REPO  # noqa: E402
from manifest_check import check_manifests, check_pod_spec  # noqa: E402

MPIJOB = os.path.join(REPO, "conf", "kubernetes", "kubeflow", "mpijob.yaml")


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


class KubeflowTest(unittest.TestCase):
    def test_mpijob_runs_the_walkthrough_mpiexec_line(self):
        with open(MPIJOB) as f:
            docs = docs_of(f.read())
        self.assertEqual(check_manifests(docs), [])
        job = [d for d in docs if d["kind"] == "MPIJob"]
        self.assertEqual(len(job), 1)
        job = job[0]
        self.assertEqual(job["apiVersion"], "kubeflow.org/v2beta1")
        spec = job["spec"]
        self.assertEqual(spec["mpiImplementation"], "OpenMPI")
        slots = spec["slotsPerWorker"]
        self.assertIsInstance(slots, int)
        replicas = spec["mpiReplicaSpecs"]
        self.assertEqual(sorted(replicas), ["Launcher", "Worker"])
        self.assertEqual(replicas["Launcher"]["replicas"], 1)
        workers = replicas["Worker"]["replicas"]
        problems = []
        for role in ("Launcher", "Worker"):
            check_pod_spec(f"MPIJob {role}", replicas[role]["template"]["spec"], {}, problems,
                           {"Never", "OnFailure", "Always"})
        self.assertEqual(problems, [])
        launcher = replicas["Launcher"]["template"]["spec"]["containers"][0]
        worker = replicas["Worker"]["template"]["spec"]["containers"][0]
        self.assertTrue(launcher["image"].startswith("hvdrun:"), launcher["image"])
        self.assertEqual(worker["image"], launcher["image"])
        cmd = launcher["command"] + launcher.get("args", [])
        # The line, with -np = workers x slots and the hvdrun image's trainer.
        want_prefix = ["mpiexec", "-np", str(workers * slots), "--hostfile", "/etc/mpi/hostfile", "--allow-run-as-root",
                       "-bind-to", "none", "-map-by", "slot", "-mca", "pml", "ob1", "-mca", "btl", "^openib",
                       "-x", "NCCL_DEBUG", "sh", "-c"]
        self.assertEqual(cmd[:len(want_prefix)], want_prefix)
        self.assertEqual(len(cmd), len(want_prefix) + 1)
        self.assertRegex(cmd[-1], r"^python3 \S+\.py")
        # Workers: the image's sshd (hvd-entrypoint worker) with the
        # operator's mounted key as authorized_keys.
        self.assertEqual(worker.get("args") or worker.get("command"), ["worker"])
        env = {e["name"]: e.get("value") for e in worker.get("env", [])}
        self.assertEqual(env.get("HVD_SSH_SECRET_DIR"), spec.get("sshAuthMountPath", "/root/.ssh"))


if __name__ == "__main__":
    unittest.main()
