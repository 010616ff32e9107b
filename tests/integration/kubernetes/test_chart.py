#!/usr/bin/env python3
"""The Helm chart conf/kubernetes/hvdrun and the Kubeflow example, offline:

* `helm lint --strict` is clean (default and the GPU/elastic/PVC/job values);
* `helm template` equals the golden files (generated keys masked):
      golden/chart-default.yaml                 default values
      golden/chart-gpu-elastic-pvc-job.yaml     values/gpu-elastic-pvc-job.yaml
  Regenerate after an intended chart change, then review the diff:
      HVD_UPDATE_GOLDEN=1 /usr/bin/python3 tests/integration/kubernetes/test_chart.py
* every rendered manifest parses (PyYAML) and has what the API server
  requires (manifest_check.check_manifests: apiVersion/kind/metadata.name, selectors
  matching template labels, containers, ports, volume mounts that name
  existing volumes, the StatefulSet's serviceName naming the headless
  Service, RBAC exactly list/watch on pods, ...), for many value sets;
  the checker itself is shown to catch each kind of breakage;
* the chart-generated keys are keys OpenSSH and the entrypoint accept;
* NOTES.txt holds the exact kubectl exec / hvdrun commands;

No server is contacted. helm missing: SKIPPED, exit 77.
"""
import copy
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from k8s_tools import REPO, find_tool, skip  # noqa: E402
from manifest_check import check_manifests  # noqa: E402

CHART = os.path.join(REPO, "conf", "kubernetes", "hvdrun")
GOLDEN = os.path.join(HERE, "golden")
VALUES = os.path.join(HERE, "values")
HELM = find_tool("helm")
UPDATE = os.environ.get("HVD_UPDATE_GOLDEN") == "1"

# ---------------------------------------------------------------- helpers ---
HELM_HOME = {}  # a throw-away HOME for helm (no repositories, plugins or cache of the machine's)


def helm(*args, check=True):
    if "dir" not in HELM_HOME:
        HELM_HOME["dir"] = tempfile.mkdtemp(prefix="hvd-helm-home-")
    home = HELM_HOME["dir"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_") and k != "KUBECONFIG"}
    env.update(HOME=home, HELM_CACHE_HOME=os.path.join(home, "cache"), HELM_CONFIG_HOME=os.path.join(home, "config"),
               HELM_DATA_HOME=os.path.join(home, "data"))
    r = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({r.returncode}):\n{r.stderr}")
    return r


def render(*values_args, release="train", namespace="ml", chart=CHART):
    return helm("template", release, chart, "--namespace", namespace, *values_args).stdout


def docs_of(text):
    return [d for d in yaml.safe_load_all(text) if d is not None]


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def mask_keys(text):
    """genPrivateKey is random: mask the Secret's key data."""
    return re.sub(r"^(  (?:ssh|host)-privatekey: )\S+$", r"\1<generated ECDSA key, base64>", text, flags=re.M)


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if HELM is None:
            skip("helm not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh (needs npm)")

    def golden(self, name, text):
        path = os.path.join(GOLDEN, name)
        text = mask_keys(text)
        if UPDATE:
            with open(path, "w") as f:
                f.write(text)
            print(f"updated {path}")
            return
        with open(path) as f:
            want = f.read()
        if text != want:
            diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), name, "rendered"))
            self.fail(f"helm template differs from {path} (HVD_UPDATE_GOLDEN=1 to accept):\n{diff}")

    def test_helm_lint_strict(self):
        for args in ([], ["-f", os.path.join(VALUES, "gpu-elastic-pvc-job.yaml")]):
            r = helm("lint", "--strict", CHART, "--namespace", "ml", *args, check=False)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn("1 chart(s) linted, 0 chart(s) failed", r.stdout)
            self.assertNotIn("[WARNING]", r.stdout)
            self.assertNotIn("[ERROR]", r.stdout)

    def test_golden_default(self):
        self.golden("chart-default.yaml", render())

    def test_golden_gpu_elastic_pvc_job(self):
        self.golden("chart-gpu-elastic-pvc-job.yaml", render("-f", os.path.join(VALUES, "gpu-elastic-pvc-job.yaml")))

    def test_manifests_valid_for_many_value_sets(self):
        cases = [
            ([], ()),
            (["-f", os.path.join(VALUES, "gpu-elastic-pvc-job.yaml")], ()),
            (["--set", "ssh.existingSecret=my-keys,serviceAccount.create=false,serviceAccount.name=trainer"],
             (("Secret", "my-keys"), ("ServiceAccount", "trainer"))),
            (["--set", "elastic.enabled=true,elastic.discovery=script,worker.replicas=1,worker.slots=3"], ()),
            (["--set-json", 'driver.command=["hvdrun","-np","2","--hostfile","/etc/hvdrun/generated/hostfile",'
                            '"true"]', "--set", "rbac.create=false,shmSize=1Gi,dataset.existingClaim=data,"
                                                "dataset.subPath=set1,fullnameOverride=short"], ()),
        ]
        for args, external in cases:
            with self.subTest(args=args):
                docs = docs_of(render(*args))
                self.assertEqual(check_manifests(docs, external), [])
                kinds = sorted(d["kind"] for d in docs)
                self.assertIn("StatefulSet", kinds)
                self.assertIn("Service", kinds)
                self.assertEqual(len(by_kind(docs, "Secret")), 0 if external else 1)

    def test_checker_catches_broken_manifests(self):
        base = docs_of(render())
        self.assertEqual(check_manifests(base), [])

        def broken(fn):
            docs = copy.deepcopy(base)
            fn(docs)
            return " | ".join(check_manifests(docs))

        sts = lambda docs: by_kind(docs, "StatefulSet")[0]  # noqa: E731
        dep = lambda docs: by_kind(docs, "Deployment")[0]  # noqa: E731
        self.assertIn("names no volume", broken(lambda d: sts(d)["spec"]["template"]["spec"]["volumes"].pop()))
        self.assertIn("does not match the template labels",
                      broken(lambda d: dep(d)["spec"]["selector"]["matchLabels"].update(x="y")))
        self.assertIn("serviceName", broken(lambda d: sts(d)["spec"].update(serviceName="nope")))
        self.assertIn("rules", broken(lambda d: by_kind(d, "Role")[0]["rules"][0]["verbs"].append("delete")))
        self.assertIn("rules", broken(lambda d: by_kind(d, "Role")[0]["rules"][0].update(resources=["pods", "secrets"])))
        self.assertIn("lacks a tag", broken(lambda d: sts(d)["spec"]["template"]["spec"]["containers"][0].update(image="")))
        self.assertIn("containerPort", broken(
            lambda d: sts(d)["spec"]["template"]["spec"]["containers"][0]["ports"][0].update(containerPort="22")))
        self.assertIn("not headless", broken(lambda d: by_kind(d, "Service")[0]["spec"].update(clusterIP="10.0.0.1")))
        self.assertIn("without apiVersion/kind/metadata.name", broken(lambda d: d[0].pop("apiVersion")))
        self.assertIn("names no rendered ServiceAccount", broken(lambda d: d.remove(by_kind(d, "ServiceAccount")[0])))
        self.assertIn("serviceAccountName", broken(lambda d: d.remove(by_kind(d, "ServiceAccount")[0])))
        self.assertIn("names Secret", broken(lambda d: d.remove(by_kind(d, "Secret")[0])))
        self.assertIn("names ConfigMap", broken(lambda d: d.remove(by_kind(d, "ConfigMap")[0])))
        self.assertIn("Parallel", broken(lambda d: sts(d)["spec"].pop("podManagementPolicy")))
        self.assertIn("readinessProbe port", broken(
            lambda d: sts(d)["spec"]["template"]["spec"]["containers"][0].update(
                readinessProbe={"tcpSocket": {"port": "sshd"}})))
        self.assertIn("readinessProbe exec", broken(
            lambda d: sts(d)["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"].update(
                command="hvd-entrypoint ready")))

    def test_worker_readiness_probe_opens_no_connection(self):
        # A tcpSocket probe makes sshd log two lines every period (issue 32);
        # the exec probe reads /proc only (test_entrypoint checks sshd's log).
        for args in ([], ["-f", os.path.join(VALUES, "gpu-elastic-pvc-job.yaml")]):
            c = by_kind(docs_of(render(*args)), "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
            self.assertEqual(c["readinessProbe"]["exec"], {"command": ["hvd-entrypoint", "ready"]})
            self.assertNotIn("tcpSocket", c["readinessProbe"])

    def test_hostfile_slots_and_discovery_settings(self):
        def config(*args):
            return by_kind(docs_of(render(*args)), "ConfigMap")[0]["data"]

        c = config()
        self.assertEqual(c["hostfile"], "train-hvdrun-0.train-hvdrun slots=1\ntrain-hvdrun-1.train-hvdrun slots=1\n")
        self.assertEqual(c["selector"], "app.kubernetes.io/name=hvdrun,app.kubernetes.io/instance=train,"
                                        "app.kubernetes.io/component=worker")
        c = config("--set", "worker.replicas=3,worker.resources.limits.nvidia\\.com/gpu=4")
        self.assertEqual(c["hostfile"].splitlines(), [f"train-hvdrun-{i}.train-hvdrun slots=4" for i in range(3)])
        self.assertEqual(c["slots"], "4")
        self.assertIn("--slots 4", c["discover_hosts.sh"])
        c = config("--set", "worker.replicas=2,worker.slots=3,worker.resources.limits.nvidia\\.com/gpu=4")
        self.assertEqual(c["hostfile"].splitlines(), [f"train-hvdrun-{i}.train-hvdrun slots=3" for i in range(2)])
        c = config("--set", "elastic.enabled=true,elastic.maxReplicas=5,worker.replicas=2,ssh.port=2200")
        self.assertEqual(len(c["known-hosts-names"].splitlines()), 5)
        self.assertEqual(c["elastic-command"],
                         "hvdrun -np 2 --min-np 2 --max-np 5 --kubernetes-selector app.kubernetes.io/name=hvdrun,"
                         "app.kubernetes.io/instance=train,app.kubernetes.io/component=worker --kubernetes-namespace ml"
                         " --kubernetes-slots 1 --kubernetes-host-names dns --blacklist-cooldown-range 10 60 -p 2200")
        self.assertEqual(c["static-command"], "hvdrun -np 2 --hostfile /etc/hvdrun/generated/hostfile -p 2200")
        # The cooldown range: a blacklisting ends, so np = min-np survives it
        # (issue 32); null gives horovodrun's default (until the end).
        c = config("--set", "elastic.enabled=true,elastic.blacklistCooldownRange[0]=5,elastic.blacklistCooldownRange[1]=9")
        self.assertTrue(c["elastic-command"].endswith(" --blacklist-cooldown-range 5 9"), c["elastic-command"])
        c = config("--set", "elastic.enabled=true,elastic.blacklistCooldownRange=null")
        self.assertNotIn("--blacklist-cooldown-range", c["elastic-command"])

    def test_generated_keys_are_usable_ssh_keys(self):
        import base64
        docs = docs_of(render())
        secret = by_kind(docs, "Secret")[0]
        self.assertEqual(sorted(secret["data"]), ["host-privatekey", "ssh-privatekey"])
        tmp = tempfile.mkdtemp(prefix="hvd-chart-keys-")
        try:
            pubs = []
            for k in ("ssh-privatekey", "host-privatekey"):
                path = os.path.join(tmp, k)
                with open(path, "wb") as f:
                    f.write(base64.b64decode(secret["data"][k]))
                os.chmod(path, 0o600)
                r = subprocess.run(["ssh-keygen", "-y", "-f", path], capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout.startswith("ecdsa-sha2-nistp256 "), r.stdout)
                pubs.append(r.stdout)
            self.assertNotEqual(pubs[0], pubs[1])
            # A second render makes other keys (helm template cannot look up
            # the installed Secret; helm install/upgrade keeps them).
            again = by_kind(docs_of(render()), "Secret")[0]["data"]
            self.assertNotEqual(again["ssh-privatekey"], secret["data"]["ssh-privatekey"])
        finally:
            shutil.rmtree(tmp)

    def test_notes_give_the_commands_of_this_release(self):
        def notes(*args):
            # NOTES.txt is not part of `helm template`: render it through a
            # copy of the chart whose extra template tpl's it into a ConfigMap.
            tmp = tempfile.mkdtemp(prefix="hvd-chart-notes-")
            try:
                chart = os.path.join(tmp, "hvdrun")
                shutil.copytree(CHART, chart)
                shutil.copy(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes.txt"))
                with open(os.path.join(chart, "templates", "zz-notes.yaml"), "w") as f:
                    f.write('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
                            '  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n')
                out = render(*args, "--show-only", "templates/zz-notes.yaml", chart=chart)
                return yaml.safe_load(out)["data"]["notes"]
            finally:
                shutil.rmtree(tmp)

        n = notes()
        self.assertIn("kubectl -n ml exec -it deploy/train-hvdrun-driver -- hvdrun -np 2 --hostfile "
                      "/etc/hvdrun/generated/hostfile python3 train.py", n)
        self.assertIn("kubectl -n ml logs -f deploy/train-hvdrun-driver", n)
        self.assertNotIn("--min-np", n)
        n = notes("--set", "elastic.enabled=true,elastic.maxReplicas=4,ssh.port=2222")
        self.assertIn("kubectl -n ml exec -it deploy/train-hvdrun-driver -- hvdrun -np 2 --min-np 2 --max-np 4 "
                      "--kubernetes-selector app.kubernetes.io/name=hvdrun,app.kubernetes.io/instance=train,"
                      "app.kubernetes.io/component=worker --kubernetes-namespace ml --kubernetes-slots 1 --kubernetes-host-names dns "
                      "--blacklist-cooldown-range 10 60 -p 2222 "
                      "python3 train_elastic.py", n)
        self.assertIn("--host-discovery-script /etc/hvdrun/generated/discover_hosts.sh", n)
        self.assertIn("kubectl -n ml scale statefulset train-hvdrun --replicas N, at most 4", n)
        n = notes("--set", "driver.command=hvdrun -np 2 true")
        self.assertIn("kubectl -n ml logs -f job/train-hvdrun-driver", n)
        self.assertNotIn("exec -it", n)

    def test_driver_kind_follows_driver_command(self):
        docs = docs_of(render("--set", "driver.command=exec hvdrun -np 2 python3 t.py"))
        self.assertEqual(by_kind(docs, "Deployment"), [])
        job = by_kind(docs, "Job")[0]
        self.assertEqual(job["spec"]["backoffLimit"], 0)
        c = job["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["args"], ["driver", "bash", "-c", "exec hvdrun -np 2 python3 t.py"])
        docs = docs_of(render("--set-json", 'driver.command=["hvdrun","-np","2","python3","t.py"]'))
        c = by_kind(docs, "Job")[0]["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["args"], ["driver", "hvdrun", "-np", "2", "python3", "t.py"])
        dep = by_kind(docs_of(render()), "Deployment")[0]
        self.assertEqual(dep["spec"]["template"]["spec"]["containers"][0]["args"], ["driver"])

    def test_worker_drain_seconds(self):
        # A terminating worker pod waits for hvdrun's sessions (its drained
        # worker leaving at a commit) up to worker.drainSeconds; its grace
        # period leaves 30 s more, and hvdrun's drain ends 15 s earlier.
        def pod_and_command(*sets):
            docs = docs_of(render(*[a for s in sets for a in ("--set", s)]))
            spec = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]
            env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
            cmd = by_kind(docs, "ConfigMap")[0]["data"]["elastic-command"]
            return spec["terminationGracePeriodSeconds"], env["HVD_DRAIN_TIMEOUT"], cmd

        grace, drain, cmd = pod_and_command("elastic.enabled=true")
        self.assertEqual((grace, drain), (105, "75"))
        self.assertNotIn("--elastic-drain-timeout", cmd)  # hvdrun's default, 60
        grace, drain, cmd = pod_and_command("elastic.enabled=true", "worker.drainSeconds=300")
        self.assertEqual((grace, drain), (330, "300"))
        self.assertIn(" --elastic-drain-timeout 285", cmd)
        grace, drain, cmd = pod_and_command("elastic.enabled=true", "worker.drainSeconds=0")
        self.assertEqual((grace, drain), (30, "0"))
        self.assertIn(" --elastic-drain-timeout 0", cmd)

    def test_bad_values_are_refused(self):
        for setting, text in (("worker.replicas=0", "worker.replicas"), ("ssh.port=70000", "ssh.port"),
                              ("worker.drainSeconds=-1", "drainSeconds"),
                              ("elastic.discovery=kubectl", "elastic.discovery"),
                              ("ssh.privateKey=abc", "privateKey")):
            with self.subTest(setting=setting):
                r = helm("template", "train", CHART, "--set", setting, check=False)
                self.assertNotEqual(r.returncode, 0, setting)
                self.assertIn(text, r.stderr)


def tearDownModule():
    if "dir" in HELM_HOME:
        shutil.rmtree(HELM_HOME.pop("dir"), ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
