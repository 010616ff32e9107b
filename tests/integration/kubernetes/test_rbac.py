#!/usr/bin/env python3
"""RBAC and the in-cluster path (issue 32, item 3): the chart's Role is
enough for pod discovery and nothing more.

The Role, RoleBinding and ServiceAccount come from `helm template` of the
chart; fake_apiserver.FakeApiServer.set_role then authorizes the service
account's token as a real API server would with that Role bound in the
release's namespace. Discovery runs as it does in the driver pod: no
kubeconfig anywhere, KUBERNETES_SERVICE_HOST/PORT and the service-account
files (token, ca.crt, namespace) only:

* the fake enforces the Role: other namespaces, the cluster scope and
  verbs it does not grant get the real 403 message;
* the chart's generated discover_hosts.sh (kubectl) finds the release's
  ready workers;
* hvdrun's built-in --kubernetes-selector discovery (the chart's elastic
  line) finds them too, lists and then watches under the Role;
* together they use exactly the Role's verbs on exactly its resources
  (the live part runs the elastic trainer: TRAINER set); without list
  both fail, naming the verb.

helm or kubectl missing: SKIPPED, exit 77.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fake_apiserver import FakeApiServer  # noqa: E402
from k8s_tools import REPO, find_tool, skip  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
TRAINER = os.environ.get("TRAINER")
CHART = os.path.join(REPO, "conf", "kubernetes", "hvdrun")
SCRIPT = os.path.join(REPO, "scripts", "kubernetes", "discover_hosts.sh")
NS = "ml"


def render(helm, home, *sets):
    import yaml
    args = [helm, "template", "train", CHART, "-n", NS]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, check=True, env=dict(os.environ, HOME=home)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


class RbacTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.helm = find_tool("helm")
        cls.kubectl = find_tool("kubectl")
        if cls.helm is None or cls.kubectl is None:
            skip("helm or kubectl not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hvd-rbac-")
        docs = render(self.helm, self.tmp, "worker.replicas=2", "elastic.enabled=true")
        self.docs = docs
        self.role = [d for d in docs if d["kind"] == "Role"][0]
        binding = [d for d in docs if d["kind"] == "RoleBinding"][0]
        account = [d for d in docs if d["kind"] == "ServiceAccount"][0]
        self.cm = [d for d in docs if d["kind"] == "ConfigMap"][0]["data"]
        self.sts = [d for d in docs if d["kind"] == "StatefulSet"][0]
        driver = [d for d in docs if d["kind"] == "Deployment"][0]
        # The driver runs as the bound service account.
        self.assertEqual(driver["spec"]["template"]["spec"]["serviceAccountName"], account["metadata"]["name"])
        self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": self.role["metadata"]["name"]})
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                                "namespace": NS}])
        self.api = FakeApiServer(os.path.join(self.tmp, "api"), namespace=NS, token="sa-token",
                                 service_account=account["metadata"]["name"]).start()
        self.api.set_role(self.role["rules"])
        labels = self.sts["spec"]["template"]["metadata"]["labels"]
        service = self.sts["spec"]["serviceName"]
        for i in range(3):
            self.api.add_pod(f"train-hvdrun-{i}", labels=labels, subdomain=service, ip=f"127.0.0.{i + 2}",
                             ready=i != 1)
        self.api.add_pod("train-hvdrun-0", labels=labels, subdomain=service, ip="127.0.0.9", ready=True,
                         namespace="other")
        sa = self.api.write_serviceaccount(os.path.join(self.tmp, "sa"))
        self.home = os.path.join(self.tmp, "home")
        os.makedirs(self.home)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("HOROVOD_", "HVDRUN_", "KUBERNETES_", "OMPI_", "PMIX_")) and k != "KUBECONFIG"}
        # HVDRUN_LOG_LEVEL: the test reads the launcher's discovery lines (docs/cli.md#messages).
        self.env.update(self.api.env(), HOME=self.home, HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR=sa,
                        HVDRUN_LOG_LEVEL="info")
        self.bindir = os.path.join(self.tmp, "bin")
        os.makedirs(self.bindir)
        os.symlink(SCRIPT, os.path.join(self.bindir, "hvd-discover-hosts"))  # as scripts/install.sh installs it
        self.env["PATH"] = self.bindir + ":" + os.environ["PATH"]
        self.script = os.path.join(self.tmp, "discover_hosts.sh")  # /etc/hvdrun/generated/discover_hosts.sh
        with open(self.script, "w") as f:
            f.write(self.cm["discover_hosts.sh"])
        os.chmod(self.script, 0o555)

    def tearDown(self):
        self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self):
        return subprocess.run([self.script, "--kubectl", self.kubectl], capture_output=True, text=True,
                              env=self.env, timeout=30)

    def elastic_line(self):
        """The chart's elastic command (built-in discovery) as NOTES prints
        it, with pod IPs for host names: the fake's pods are 127.0.0.x,
        which this machine reaches without SSH."""
        line = self.cm["elastic-command"].split()
        line[line.index("--kubernetes-host-names") + 1] = "ip"
        return line

    def run_builtin_dry_run(self):
        line = self.elastic_line()
        self.assertEqual(line[0], "hvdrun")
        return subprocess.run([HVDRUN] + line[1:] + ["--dry-run", "true"],
                              capture_output=True, text=True, env=self.env, stdin=subprocess.DEVNULL, timeout=30)

    def pod_requests(self):
        return self.api.requests_for(lambda r: r["verb"] is not None)

    def test_the_role_is_namespaced_pods_list_and_watch(self):
        self.assertEqual(self.role["metadata"].get("namespace", NS), NS)
        self.assertEqual(self.role["rules"], [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}])
        self.assertFalse([d for d in self.docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")])

    def test_the_fake_enforces_the_role(self):
        import json
        import ssl
        import urllib.error
        import urllib.request
        ctx = ssl.create_default_context(cafile=self.api.ca_path)

        def get(path):
            req = urllib.request.Request(self.api.url + path, headers={"Authorization": "Bearer sa-token"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        who = 'User "system:serviceaccount:ml:train-hvdrun"'
        self.assertEqual(get(f"/api/v1/namespaces/{NS}/pods")[0], 200)
        code, body = get(f"/api/v1/namespaces/{NS}/pods/train-hvdrun-0")  # get: not granted
        self.assertEqual(code, 403)
        self.assertEqual(body["message"], f'pods is forbidden: {who} cannot get resource "pods" in API group "" '
                                          f'in the namespace "{NS}"')
        code, body = get("/api/v1/namespaces/other/pods")
        self.assertEqual(code, 403)
        self.assertIn('cannot list resource "pods" in API group "" in the namespace "other"', body["message"])
        code, body = get("/api/v1/pods")
        self.assertEqual(code, 403)
        self.assertIn("at the cluster scope", body["message"])
        self.assertEqual(get("/api/v1")[0], 200)  # discovery paths: open to every authenticated user
        # A Role without watch: a watch is forbidden, a list is not.
        self.api.set_role([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}])
        self.assertEqual(get(f"/api/v1/namespaces/{NS}/pods")[0], 200)
        code, body = get(f"/api/v1/namespaces/{NS}/pods?watch=1&resourceVersion=1&timeoutSeconds=1")
        self.assertEqual(code, 403)
        self.assertIn('cannot watch resource "pods"', body["message"])

    def test_discovery_works_under_the_role_and_uses_exactly_its_verbs(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["train-hvdrun-0.train-hvdrun:1", "train-hvdrun-2.train-hvdrun:1"])
        p = self.run_builtin_dry_run()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("pod train-hvdrun-0 -> 127.0.0.2:1\n", p.stdout)
        self.assertIn("pod train-hvdrun-2 -> 127.0.0.4:1\n", p.stdout)
        self.assertIn("the in-cluster service account", p.stdout)
        used = {r["verb"] for r in self.pod_requests()}
        if TRAINER:
            used |= self.live_job_verbs()
        else:
            print("note: TRAINER unset: the live watch part is not run", flush=True)
            used.add("watch")
        self.assertTrue(all(r["status"] == 200 for r in self.pod_requests()), self.pod_requests())
        self.assertTrue(all(r["token"] == "sa-token" for r in self.pod_requests()))
        self.assertTrue(all(r["path"] == f"/api/v1/namespaces/{NS}/pods" for r in self.pod_requests()))
        self.assertEqual(used, set(self.role["rules"][0]["verbs"]))

    def live_job_verbs(self):
        """The chart's elastic line running the elastic trainer on the ready
        pods (127.0.0.x: local), long enough to see its watch follow a pod."""
        line = self.elastic_line()
        np_at = line.index("-np")
        args = line[1:]
        for flag in ("-np", "--min-np", "--max-np"):
            args[args.index(flag) + 1] = {"-np": "2", "--min-np": "1", "--max-np": "3"}[flag]
        env = dict(self.env, HVD_TRAINER_STEPS="100000", HVD_TRAINER_STEP_MS="20")
        assert np_at >= 0
        proc = subprocess.Popen([HVDRUN] + args + [TRAINER], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not [r for r in self.pod_requests() if r["verb"] == "watch"]:
                time.sleep(0.1)
            self.api.set_ready("train-hvdrun-1")  # followed through the watch
            time.sleep(1.0)
        finally:
            os.killpg(proc.pid, 2)
            try:
                _, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                _, err = proc.communicate()
        self.assertIn("127.0.0.3", err)  # the pod that became ready was seen
        # hvdrun names a refusal "(403 Forbidden)"; a bare "403" can be part
        # of a port number in the log (store 127.0.0.1:42403).
        self.assertNotIn("Forbidden", err)
        self.assertNotRegex(err, r"(?<![\d:.])403(?!\d)")
        return {r["verb"] for r in self.pod_requests()}

    def test_without_list_or_watch_discovery_fails_naming_the_verb(self):
        self.api.set_role([{"apiGroups": [""], "resources": ["pods"], "verbs": ["watch"]}])
        r = self.run_script()
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn('cannot list resource "pods" in API group "" in the namespace "ml"', r.stderr)
        p = self.run_builtin_dry_run()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("may not 'list' pods in namespace 'ml' (403 Forbidden)", p.stderr)
        # get instead of list does not help: list is its own verb.
        self.api.set_role([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch"]}])
        self.assertEqual(self.run_script().returncode, 1)
        # Another resource or API group grants nothing on pods.
        self.api.set_role([{"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["list", "watch"]},
                           {"apiGroups": [""], "resources": ["services"], "verbs": ["list", "watch"]}])
        self.assertEqual(self.run_script().returncode, 1)


if __name__ == "__main__":
    unittest.main()
