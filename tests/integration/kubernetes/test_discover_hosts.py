#!/usr/bin/env python3
"""scripts/kubernetes/discover_hosts.sh with the real kubectl (k8s_tools.find_tool)
against fake_apiserver.FakeApiServer over HTTPS: which pods qualify, the
order, slots, --ip, and every API failure being a non-zero exit with the
error on stderr and nothing on stdout (hvdrun then keeps its last good host
set). kubectl missing: SKIPPED, exit 77."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from fake_apiserver import FakeApiServer, make_certificates  # noqa: E402
from k8s_tools import REPO, find_tool, skip  # noqa: E402

SCRIPT = os.path.join(REPO, "scripts", "kubernetes", "discover_hosts.sh")
KUBECTL = find_tool("kubectl")
SEL = "app.kubernetes.io/instance=job,app.kubernetes.io/component=worker"
LABELS = {"app.kubernetes.io/instance": "job", "app.kubernetes.io/component": "worker"}


class DiscoverHostsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if KUBECTL is None:
            skip("kubectl not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh")

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hvd-discover-")
        self.api = FakeApiServer(self.tmp).start()
        self.kubeconfig = self.api.write_kubeconfig(os.path.join(self.tmp, "kubeconfig"))

    def tearDown(self):
        self.api.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_script(self, *args, kubeconfig=None, selector=SEL):
        cmd = [SCRIPT, "--kubectl", KUBECTL, "--kubeconfig", kubeconfig or self.kubeconfig, "--request-timeout", "5s"]
        if selector:
            cmd += ["-l", selector]
        env = dict(os.environ, HOME=self.tmp)  # no ~/.kube of the machine
        env.pop("KUBECONFIG", None)
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30, env=env)

    def ok(self, *args, **kw):
        r = self.run_script(*args, **kw)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines()

    def worker(self, name, **kw):
        kw.setdefault("labels", LABELS)
        kw.setdefault("subdomain", "job")
        kw.setdefault("ready", True)
        return self.api.add_pod(name, **kw)

    def test_only_running_ready_not_terminating_pods_sorted(self):
        self.worker("job-10", ip="198.18.7.10")
        self.worker("job-2", ip="198.18.7.2")
        self.worker("job-1", ip="198.18.7.1")
        self.worker("job-3", ip="198.18.7.3", ready=False)  # Pending
        self.worker("job-4", ip="198.18.7.4", ready=False, phase="Running")  # running, not ready
        self.worker("job-5", ip="198.18.7.5")
        self.api.terminate("job-5")  # deletionTimestamp set, still Ready
        self.worker("job-6", ip="198.18.7.6")
        self.api.set_phase("job-6", "Failed")
        self.worker("job-7", ip="198.18.7.7", labels={"app.kubernetes.io/instance": "other"})
        self.worker("job-8", ip="198.18.7.8", namespace="elsewhere")
        self.assertEqual(self.ok(), ["job-1.job:1", "job-2.job:1", "job-10.job:1"])
        # Changes show in the next run: ready, deleted.
        self.api.set_ready("job-3")
        self.api.delete("job-2")
        self.assertEqual(self.ok(), ["job-1.job:1", "job-3.job:1", "job-10.job:1"])
        # -n picks the namespace.
        self.assertEqual(self.ok("-n", "elsewhere"), ["job-8.job:1"])
        # Every request was a pod list with our selector.
        lists = self.api.requests_for(lambda r: r["path"].endswith("/pods"))
        self.assertTrue(lists)
        self.assertTrue(all(r["query"].get("labelSelector") == SEL for r in lists))

    def test_ip_option_and_service_override(self):
        self.worker("job-0", ip="198.18.7.20")
        self.worker("job-1", ip="198.18.7.3")
        self.assertEqual(self.ok("--ip"), ["198.18.7.3:1", "198.18.7.20:1"])
        self.assertEqual(self.ok("--service", "svc2"), ["job-0.svc2:1", "job-1.svc2:1"])

    def test_slots_fixed_gpu_and_annotation(self):
        self.worker("job-0", ip="198.18.7.2", gpus=4)
        self.worker("job-1", ip="198.18.7.3", gpus=2, annotations={"hvdrun.io/slots": "3"})
        self.worker("job-2", ip="198.18.7.4", annotations={"hvdrun.io/slots": "many"})
        self.assertEqual(self.ok("--slots", "2"), ["job-0.job:2", "job-1.job:2", "job-2.job:2"])
        self.assertEqual(self.ok("--slots-from-gpu"), ["job-0.job:4", "job-1.job:2", "job-2.job:1"])
        r = self.run_script("--slots-from-gpu", "--slots-annotation", "hvdrun.io/slots")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["job-0.job:4", "job-1.job:3", "job-2.job:1"])
        self.assertIn("pod job-2: annotation hvdrun.io/slots=many is not a positive integer; using 1 slots", r.stderr)

    def test_same_hosts_as_the_builtin_source(self):
        """One set of pod rules: the script (kubectl, then hvdrun --kubernetes-pod-hosts)
        and hvdrun's built-in --kubernetes-selector source find the same hosts
        with the same slots for the same pods, by IP and by DNS name."""
        hvdrun = os.environ.get("HVDRUN")
        if not hvdrun:
            skip("HVDRUN (the built hvdrun) is not set; run through ctest", cleanup=[self.tmp])
        self.worker("job-0", ip="198.18.7.2", gpus=2)
        self.worker("job-1", ip="198.18.7.3", gpus=2, annotations={"hvdrun.io/slots": "3"})
        self.worker("job-2", ip="198.18.7.4", ready=False, phase="Running")
        self.worker("job-3", ip="198.18.7.5")
        self.api.terminate("job-3")
        self.worker("job-4", ip="198.18.7.6")
        self.api.set_phase("job-4", "Failed")
        self.worker("job-5", ip="198.18.7.7", ready=False)  # Pending
        self.worker("job-10", ip="198.18.7.10")
        self.worker("job-11", ip="198.18.7.11", labels={"app.kubernetes.io/instance": "other"})
        env = dict(os.environ, HOME=self.tmp, KUBECONFIG=self.kubeconfig)
        for k in [k for k in env if k.startswith("KUBERNETES_")]:
            del env[k]
        cases = [
            (["--ip"], ["--kubernetes-host-names", "ip", "--kubernetes-slots", "1"]),
            ([], ["--kubernetes-host-names", "dns", "--kubernetes-slots", "1"]),
            (["--slots", "4"], ["--kubernetes-host-names", "dns", "--kubernetes-slots", "4"]),
            (["--ip", "--slots-from-gpu", "--slots-annotation", "hvdrun.io/slots", "--slots", "2"],
             ["--kubernetes-host-names", "ip", "--kubernetes-slots", "auto", "--slots-per-host", "2"]),
        ]
        for script_args, builtin_args in cases:
            with self.subTest(script=script_args):
                script = self.ok(*script_args)
                p = subprocess.run([hvdrun, "-np", "1", "--kubernetes-selector", SEL, *builtin_args, "--dry-run=json",
                                    "true"], capture_output=True, text=True, timeout=30, env=env,
                                   stdin=subprocess.DEVNULL)
                self.assertEqual(p.returncode, 0, p.stderr)
                builtin = json.loads(p.stdout)["hosts"]
                self.assertEqual(len(script), 3, script)
                self.assertEqual(sorted(script), sorted(builtin))
        # The slots of the last case: the annotation, else the GPUs, else --slots.
        self.assertEqual(script, ["198.18.7.2:2", "198.18.7.3:3", "198.18.7.10:2"])

    def test_no_pods_is_empty_success(self):
        self.assertEqual(self.ok(), [])

    def assert_api_error(self, r, *texts):
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertIn("discover_hosts.sh: kubectl get pods -l", r.stderr)
        for t in texts:
            self.assertIn(t, r.stderr)

    def test_forbidden_is_an_error(self):
        self.worker("job-0", ip="198.18.7.2")
        self.api.forbid(True)
        self.assert_api_error(self.run_script(), 'cannot list resource "pods"')

    def test_unauthorized_and_server_error(self):
        self.worker("job-0", ip="198.18.7.2")
        bad = self.api.write_kubeconfig(os.path.join(self.tmp, "bad-token"), token="not-the-token")
        self.assert_api_error(self.run_script(kubeconfig=bad), "You must be logged in to the server")
        self.api.fail_next(500, 10)  # kubectl retries some requests
        self.assert_api_error(self.run_script(), "injected failure 500")
        self.api.fail_next(500, 0)
        self.assertEqual(self.ok(), ["job-0.job:1"])

    def test_refused_connection_is_an_error(self):
        self.worker("job-0", ip="198.18.7.2")
        port = self.api.port
        self.api.stop()  # the port is closed now
        self.assert_api_error(self.run_script(), f"The connection to the server 127.0.0.1:{port} was refused")

    def test_wrong_ca_is_an_error(self):
        self.worker("job-0", ip="198.18.7.2")
        other = make_certificates(os.path.join(self.tmp, "other-pki"))
        wrong = self.api.write_kubeconfig(os.path.join(self.tmp, "wrong-ca"), ca=other["ca.crt"])
        self.assert_api_error(self.run_script(kubeconfig=wrong), "certificate signed by unknown authority")

    def test_the_charts_generated_script(self):
        """/etc/hvdrun/generated/discover_hosts.sh as the Helm chart renders it
        (selector, namespace, service, slots of the release) finds exactly
        the release's ready worker pods as the StatefulSet names them."""
        import yaml
        helm = find_tool("helm")
        if helm is None:
            skip("helm not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh", cleanup=[self.tmp])
        out = subprocess.run([helm, "template", "train", os.path.join(REPO, "conf", "kubernetes", "hvdrun"), "-n",
                              "ml", "--set", "worker.replicas=3,worker.resources.limits.nvidia\\.com/gpu=2"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, HOME=self.tmp)).stdout
        docs = [d for d in yaml.safe_load_all(out) if d]
        data = [d for d in docs if d["kind"] == "ConfigMap"][0]["data"]
        sts = [d for d in docs if d["kind"] == "StatefulSet"][0]
        labels = sts["spec"]["template"]["metadata"]["labels"]
        script = os.path.join(self.tmp, "discover_hosts.sh")
        with open(script, "w") as f:
            f.write(data["discover_hosts.sh"])
        os.chmod(script, 0o555)
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        os.symlink(SCRIPT, os.path.join(bindir, "hvd-discover-hosts"))  # as scripts/install.sh installs it
        # Pods as the StatefulSet makes them: its labels, subdomain = serviceName.
        for i in range(3):
            self.api.add_pod(f"train-hvdrun-{i}", labels=labels, subdomain=sts["spec"]["serviceName"],
                             ip=f"198.18.7.{i + 2}", ready=i != 1, namespace="ml", gpus=2)
        self.api.add_pod("other-hvdrun-0", labels=dict(labels, **{"app.kubernetes.io/instance": "other"}),
                         subdomain="other-hvdrun", ip="198.18.7.9", ready=True, namespace="ml")
        driver = [d for d in docs if d["kind"] == "Deployment"][0]["spec"]["template"]["metadata"]["labels"]
        self.api.add_pod("train-hvdrun-driver-abc", labels=driver, ip="198.18.7.10", ready=True, namespace="ml")
        env = dict(os.environ, HOME=self.tmp, PATH=bindir + ":" + os.environ["PATH"])
        env.pop("KUBECONFIG", None)
        r = subprocess.run([script, "--kubectl", KUBECTL, "--kubeconfig", self.kubeconfig], capture_output=True,
                           text=True, env=env, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["train-hvdrun-0.train-hvdrun:2", "train-hvdrun-2.train-hvdrun:2"])
        # The same names as the chart's hostfile.
        self.assertIn("train-hvdrun-0.train-hvdrun slots=2", data["hostfile"])

    def in_cluster(self, namespace="ml", token=None):
        """The environment of a pod: KUBERNETES_SERVICE_HOST/PORT, the
        service-account files (token, ca.crt, namespace), no kubeconfig
        anywhere, and a private TMPDIR to see that nothing is left in it."""
        sa = self.api.write_serviceaccount(os.path.join(self.tmp, "sa"), namespace=namespace, token=token)
        home = os.path.join(self.tmp, "pod-home")
        tmpdir = os.path.join(self.tmp, "pod-tmp")
        os.makedirs(home, exist_ok=True)
        os.makedirs(tmpdir, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBERNETES_", "HVDRUN_")) and k != "KUBECONFIG"}
        env.update(self.api.env(), HOME=home, TMPDIR=tmpdir, HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR=sa)
        return env, sa, tmpdir

    def run_in_pod(self, env, *args):
        # --request-timeout given explicitly: the flag that made kubectl skip
        # its in-cluster configuration and call localhost:8080.
        return subprocess.run([SCRIPT, "--kubectl", KUBECTL, "-l", SEL, "--request-timeout", "5s", *args],
                              capture_output=True, text=True, timeout=30, env=env)

    def test_in_cluster_service_account_without_kubeconfig(self):
        self.worker("job-0", ip="198.18.7.2", namespace="ml")
        self.worker("job-1", ip="198.18.7.3", namespace="ml")
        self.worker("job-9", ip="198.18.7.9")  # namespace default: not the pod's
        env, sa, tmpdir = self.in_cluster(token="sa-token-1")
        self.api.set_tokens("sa-token-1")
        for args in ((), ("--request-timeout", "7s")):
            r = self.run_in_pod(env, *args)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.splitlines(), ["job-0.job:1", "job-1.job:1"])
            self.assertEqual(r.stderr, "")
        # Without the fix the default request timeout alone broke it too.
        r = subprocess.run([SCRIPT, "--kubectl", KUBECTL, "-l", SEL], capture_output=True, text=True, timeout=30,
                           env=env)
        self.assertEqual((r.returncode, r.stdout.splitlines()), (0, ["job-0.job:1", "job-1.job:1"]), r.stderr)
        lists = self.api.requests_for(lambda r: r["path"].endswith("/pods"))
        self.assertTrue(lists)
        self.assertTrue(all(q["token"] == "sa-token-1" and q["path"] == "/api/v1/namespaces/ml/pods"
                            and q["status"] == 200 for q in lists), lists)
        # The namespace file is the default; -n still wins.
        r = self.run_in_pod(env, "-n", "default")
        self.assertEqual(r.stdout.splitlines(), ["job-9.job:1"], r.stderr)
        # Token rotation: the kubelet rewrites the token file; the next run uses it.
        self.api.set_tokens("sa-token-2")
        with open(os.path.join(sa, "token"), "w") as f:
            f.write("sa-token-2")
        r = self.run_in_pod(env)
        self.assertEqual((r.returncode, r.stdout.splitlines()), (0, ["job-0.job:1", "job-1.job:1"]), r.stderr)
        # A token the server refuses is exit 1 with kubectl's verdict.
        self.api.set_tokens("sa-token-3")
        self.assert_api_error(self.run_in_pod(env), "You must be logged in to the server")
        # Nothing is left behind (the kubeconfig is an unlinked file), and the
        # token never was on kubectl's command line.
        self.assertEqual(os.listdir(tmpdir), [])
        # A kubeconfig in HOME wins over the service account, as kubectl's rules say.
        os.makedirs(os.path.join(env["HOME"], ".kube"), exist_ok=True)  # kubectl made .kube/cache
        self.api.set_tokens("sa-token-2", self.api.token)
        self.api.write_kubeconfig(os.path.join(env["HOME"], ".kube", "config"), token="sa-token-2")
        r = self.run_in_pod(env)
        self.assertEqual(r.stdout.splitlines(), ["job-9.job:1"], r.stderr)  # the kubeconfig's namespace: default

    def test_in_cluster_errors(self):
        self.worker("job-0", ip="198.18.7.2", namespace="ml")
        env, sa, _ = self.in_cluster()
        os.unlink(os.path.join(sa, "ca.crt"))
        r = self.run_in_pod(env)
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertIn("no readable ca.crt beside the token", r.stderr)
        # Another CA: the server is not trusted.
        other = make_certificates(os.path.join(self.tmp, "other-pki"))
        shutil.copy(other["ca.crt"], os.path.join(sa, "ca.crt"))
        self.assert_api_error(self.run_in_pod(env), "certificate signed by unknown authority")
        # The API server unreachable: refused, within the request timeout.
        shutil.copy(self.api.ca_path, os.path.join(sa, "ca.crt"))
        self.assertEqual(self.run_in_pod(env).stdout.splitlines(), ["job-0.job:1"])
        port = self.api.port
        self.api.stop()
        self.assert_api_error(self.run_in_pod(env), f"127.0.0.1:{port}")

    def test_usage_errors(self):
        r = self.run_script(selector=None)
        self.assertEqual(r.returncode, 2)
        self.assertIn("-l/--selector is required", r.stderr)
        r = self.run_script("--slots", "0")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--slots '0' is not a positive integer", r.stderr)
        r = subprocess.run([SCRIPT, "-l", SEL, "--kubectl", os.path.join(self.tmp, "no-kubectl")], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("kubectl not found", r.stderr)
        # A pod with no DNS name (not from a StatefulSet) and no --service/--ip.
        self.api.add_pod("loose", labels=LABELS, ip="198.18.7.9", ready=True)
        r = self.run_script()
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stdout, "")
        self.assertIn("pod loose has no spec.subdomain", r.stderr)
        self.assertEqual(self.ok("--ip"), ["198.18.7.9:1"])


if __name__ == "__main__":
    unittest.main()
