#!/usr/bin/env python3
"""hvdrun's built-in Kubernetes pod discovery (--kubernetes-selector, no
kubectl) against FakeApiServer (fake_apiserver.py): HTTPS with an
openssl-made CA, bearer tokens and client certificates, pod list and watch.

* --dry-run lists the pods found through a kubeconfig (token, client
  certificate, embedded *-data) and through the in-cluster service account
  (KUBERNETES_SERVICE_HOST/PORT + HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR);
* a wrong CA, a 403 and bad flag combinations are refused with one line;
* live elastic jobs (the bundled elastic_trainer; pods get 127.0.0.x
  addresses, which hvdrun runs as local hosts): a terminated pod's host
  leaves within 1 s although --discovery-interval is 10 s (the watch, not
  polling), an added pod is admitted, a dropped watch and a compacted
  history (410 Gone as an ERROR event and as HTTP 410) are survived by a
  re-list, a rotated token is picked up, and a 403 while running keeps the
  job going with one log line.

Needs openssl (the fake server's certificates): without it every case
prints SKIPPED and exits 77.

Run one case:
  HVDRUN=... TRAINER=... python3 test_builtin_discovery.py BuiltinDiscovery.test_dry_run_kubeconfig_token
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_apiserver import FakeApiServer, make_certificates  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_with_token, read_lines_timed  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
TRAINER = os.environ.get("TRAINER", "elastic_trainer")
STEP_RE = re.compile(r"\[(\d+)\]<stdout>:step (\d+) size (\d+) rank (\d+) version (\d+) checksum (\S+)")
SELECTOR = "app=hvd,role in (worker)"  # a selector that needs URL encoding


class BookmarkingApiServer(FakeApiServer):
    """FakeApiServer plus BOOKMARK events, which the fake does not send:
    bookmark(labels) gives every open watch whose selector matches `labels`
    a BOOKMARK carrying a new resourceVersion (as a real server's periodic
    bookmark carries its current one)."""

    def bookmark(self, labels):
        with self._changed:
            self._rv += 1
            self._events.append((self._rv, "BOOKMARK", {
                "kind": "Pod", "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._rv), "namespace": self.namespace, "labels": dict(labels)}}))
            self._changed.notify_all()


def clean_env(home, extra=None):
    """This process's environment without anything that would point hvdrun
    at a cluster or change a job (HOME: a directory without .kube)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HOROVOD_", "HVDRUN_", "KUBERNETES_", "OMPI_", "PMIX_")) and k != "KUBECONFIG"}
    env["HOME"] = home
    # These tests read the launcher's state lines (quiet by default, docs/cli.md#messages).
    env["HVDRUN_LOG_LEVEL"] = "info"
    env.update(extra or {})
    return env


class Job:
    """hvdrun running the elastic trainer; output lines collected with
    their arrival times."""

    def __init__(self, args, env, steps=100000, step_ms=20):
        self.token = uuid.uuid4().hex
        env = dict(env, HVD_TEST_TOKEN=self.token, HVD_TRAINER_STEPS=str(steps), HVD_TRAINER_STEP_MS=str(step_ms))
        self.proc = subprocess.Popen([HVDRUN] + args + [TRAINER], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.out, self.err, self.cv, self.readers = read_lines_timed(self.proc)


    def text(self, which=None):
        with self.cv:
            lines = list(self.err if which == "err" else self.out if which == "out" else self.out + self.err)
        return "\n".join(l for _, l in lines)

    def wait_for(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                r = pred()
                if r:
                    return r
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not any(t.is_alive() for t in self.readers)):
                    raise AssertionError("timed out waiting for %s\nstdout:\n%s\nstderr:\n%s" % (
                        what, "\n".join(l for _, l in self.out[-30:]), "\n".join(l for _, l in self.err[-60:])))
                self.cv.wait(min(left, 0.1))

    def err_line(self, pattern, after=0.0, timeout=15):
        """(time, line) of the first stderr line matching `pattern` that
        arrived after `after`."""
        rx = re.compile(pattern)
        return self.wait_for(lambda: next(((t, l) for t, l in self.err if t >= after and rx.search(l)), None),
                             timeout, "stderr /%s/" % pattern)

    def step_at(self, size, after=0.0, timeout=20):
        def pred():
            for t, line in self.out:
                m = STEP_RE.search(line)
                if m and t >= after and int(m.group(3)) == size:
                    return t
            return None
        return self.wait_for(pred, timeout, "a step at size %d" % size)

    def stop(self):
        """SIGINT, as Ctrl-C: hvdrun stops every worker and exits 130."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise
        self.close()
        return code

    def close(self):
        for t in self.readers:
            t.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.close()
        for pid in processes_with_token(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class BuiltinDiscovery(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hvd-k8s-")
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        self.servers = []
        self.jobs = []

    def tearDown(self):
        for j in self.jobs:
            j.kill()
        for s in self.servers:
            s.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def server(self, **kw):
        api = FakeApiServer(os.path.join(self.dir, "api%d" % len(self.servers)), **kw).start()
        self.servers.append(api)
        return api

    def hvdrun(self, args, env, timeout=30):
        return subprocess.run([HVDRUN] + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout)

    def kubeconfig_env(self, api, **kw):
        path = api.write_kubeconfig(os.path.join(self.dir, "kubeconfig-%s" % uuid.uuid4().hex[:6]), **kw)
        return clean_env(self.home, {"KUBECONFIG": path})

    def in_cluster_env(self, api, token=None):
        sa = api.write_serviceaccount(os.path.join(self.dir, "sa"), token=token)
        env = clean_env(self.home, api.env())
        env["HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR"] = sa
        return env, sa

    @staticmethod
    def cluster(api, namespace=None):
        """Ready workers w-0 (1 slot) and w-1 (2 GPUs), one not ready, one
        terminating, one with other labels."""
        labels = {"app": "hvd", "role": "worker"}
        api.add_pod("w-0", labels=labels, ip="127.0.0.2", ready=True, namespace=namespace)
        api.add_pod("w-1", labels=labels, ip="127.0.0.3", ready=True, gpus=2, namespace=namespace)
        api.add_pod("w-2", labels=labels, ip="127.0.0.4", phase="Running", namespace=namespace)
        api.add_pod("w-3", labels=labels, ip="127.0.0.5", ready=True, namespace=namespace)
        api.terminate("w-3", namespace=namespace)
        api.add_pod("other", labels={"app": "else"}, ip="127.0.0.6", ready=True, namespace=namespace)

    def assert_found(self, p, api):
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        self.assertIn("pod w-0 -> 127.0.0.2:1\n", out)
        self.assertIn("pod w-1 -> 127.0.0.3:2\n", out)  # slots from the nvidia.com/gpu limit
        self.assertIn("pod w-2 not used: not Ready\n", out)
        self.assertIn("pod w-3 not used: terminating\n", out)
        self.assertNotIn("other", out)
        self.assertIn("hosts: 127.0.0.2:1, 127.0.0.3:2\n", out)
        lists = api.requests_for(lambda r: r["path"].endswith("/pods") and "watch" not in r["query"])
        self.assertTrue(lists)
        self.assertEqual(lists[-1]["query"].get("labelSelector"), SELECTOR)

    # ---- one look: --dry-run -----------------------------------------------

    def test_dry_run_kubeconfig_token(self):
        api = self.server()
        self.cluster(api)
        p = self.hvdrun(["-np", "2", "--kubernetes-selector", SELECTOR, "--dry-run", "true"], self.kubeconfig_env(api))
        self.assert_found(p, api)
        self.assertIn("# elastic job: hosts from Kubernetes pods 'app=hvd,role in (worker)' in namespace 'default' "
                      "(kubeconfig ", p.stdout)
        self.assertEqual(api.requests[-1]["token"], "test-token-1")
        self.assertEqual(api.requests_for(lambda r: "watch" in r["query"]), [])  # one look, no watch
        # auto slots: the annotation, else GPUs, else --slots-per-host
        api.set_annotation("w-1", "hvdrun.io/slots", "3")
        p = self.hvdrun(["-np", "2", "--kubernetes-selector", SELECTOR, "--slots-per-host", "4", "--dry-run", "true"],
                        self.kubeconfig_env(api))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("hosts: 127.0.0.2:4, 127.0.0.3:3\n", p.stdout)
        p = self.hvdrun(["-np", "2", "--kubernetes-selector", SELECTOR, "--kubernetes-slots", "gpu",
                         "--slots-per-host", "4", "--dry-run", "true"], self.kubeconfig_env(api))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("pod w-0 not used: no nvidia.com/gpu limit\n", p.stdout)
        self.assertIn("hosts: 127.0.0.3:2\n", p.stdout)
        self.assertEqual(len(re.findall(r"\[warning\].*--slots-per-host ignored", p.stderr)), 1, p.stderr)

    def test_dry_run_client_certificate_embedded_data_and_context_namespace(self):
        api = self.server(namespace="team")
        self.cluster(api, namespace="team")
        env = self.kubeconfig_env(api, client_cert=True, embed=True, namespace="team")
        p = self.hvdrun(["-np", "3", "--kubernetes-selector", SELECTOR, "--dry-run", "true"], env)
        self.assert_found(p, api)
        self.assertIsNone(api.requests[-1]["token"])  # the client certificate authenticated
        self.assertTrue(api.requests[-1]["path"].startswith("/api/v1/namespaces/team/"))
        # JSON, with the slots rule and the namespace flag
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", SELECTOR, "--kubernetes-namespace", "team",
                         "--kubernetes-slots", "3", "--dry-run=json", "true"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        found = json.loads(p.stdout)
        self.assertEqual(found["hosts"], ["127.0.0.2:3", "127.0.0.3:3"])
        self.assertEqual([(x["name"], x["used"]) for x in found["pods"]],
                         [("w-0", True), ("w-1", True), ("w-2", False), ("w-3", False)])
        self.assertEqual(found["slots"], 6)

    def test_dry_run_in_cluster_service_account(self):
        api = self.server(namespace="jobs", token="sa-token")
        self.cluster(api, namespace="jobs")
        env, _ = self.in_cluster_env(api)
        p = self.hvdrun(["-np", "2", "--kubernetes-selector", SELECTOR, "--dry-run", "true"], env)
        self.assert_found(p, api)
        self.assertIn("in namespace 'jobs' (the in-cluster service account (", p.stdout)
        self.assertEqual(api.requests[-1]["token"], "sa-token")
        self.assertTrue(api.requests[-1]["path"].startswith("/api/v1/namespaces/jobs/pods"))
        # StatefulSet DNS names
        labels = {"app": "hvd", "role": "worker"}
        api.add_pod("sts-0", labels=labels, ip="127.0.0.7", ready=True, namespace="jobs", subdomain="sts")
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", SELECTOR, "--kubernetes-host-names", "dns",
                         "--dry-run", "true"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("pod sts-0 -> sts-0.sts:1\n", p.stdout)
        self.assertIn("pod w-0 not used: no spec.subdomain", p.stdout)
        self.assertIn("hosts: sts-0.sts:1\n", p.stdout)
        # kubeconfig insecure-skip-tls-verify: works, with one warning line
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", SELECTOR, "--kubernetes-namespace", "jobs",
                         "--dry-run", "true"], self.kubeconfig_env(api, insecure=True, token="sa-token"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(re.findall(r"insecure-skip-tls-verify is set", p.stderr)), 1, p.stderr)

    def test_wrong_ca_forbidden_and_usage_errors_are_one_line(self):
        api = self.server()
        self.cluster(api)
        other = make_certificates(os.path.join(self.dir, "other-pki"))
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", "app=hvd", "true"],
                        self.kubeconfig_env(api, ca=other["ca.crt"]))
        self.assertEqual(p.returncode, 3, p.stderr)
        errors = [l for l in p.stderr.splitlines() if l.startswith("hvdrun: error:")]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertIn("TLS certificate verification failed for the Kubernetes API server at " + api.url, errors[0])
        self.assertIn("(trusted CA: %s)" % other["ca.crt"], errors[0])

        # tls-server-name: the certificate must carry that name instead of the address.
        for name, code in (("kubernetes.default.svc", 0), ("wrong.example", 3)):
            env = self.kubeconfig_env(api)
            with open(env["KUBECONFIG"]) as f:
                config = json.load(f)
            config["clusters"][0]["cluster"]["tls-server-name"] = name
            with open(env["KUBECONFIG"], "w") as f:
                json.dump(config, f)
            p = self.hvdrun(["-np", "1", "--kubernetes-selector", "app=hvd", "--dry-run", "true"], env)
            self.assertEqual(p.returncode, code, p.stderr)
            if code:
                self.assertIn("TLS certificate verification failed", p.stderr.splitlines()[-1])
                self.assertIn("hostname mismatch", p.stderr.splitlines()[-1])

        api.forbid(True)
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", "app=hvd", "--dry-run", "true"], self.kubeconfig_env(api))
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.strip().splitlines()[-1],
                         "hvdrun: error: the service account 'hvdrun' (namespace 'default') may not 'list' pods in "
                         "namespace 'default' (403 Forbidden): add the verb to its Role (pod discovery needs list "
                         "and watch on pods)")
        api.forbid(False)

        env = self.kubeconfig_env(api)
        for args, message in (
                (["-H", "localhost:1"], "--kubernetes-selector and -H/--hosts cannot be used together"),
                (["--host-discovery-script", "/bin/true"],
                 "--kubernetes-selector and --host-discovery-script cannot be used together"),
                (["--mpi"], "cannot be used with --mpi")):
            p = self.hvdrun(["-np", "1", "--kubernetes-selector", "app=hvd"] + args + ["true"], env)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertEqual(len(p.stderr.splitlines()), 1, p.stderr)
            self.assertIn(message, p.stderr)
        p = self.hvdrun(["-np", "1", "--kubernetes-namespace", "x", "true"], env)
        self.assertEqual((p.returncode, p.stderr), (2, "hvdrun: error: --kubernetes-namespace needs "
                                                       "--kubernetes-selector\n"))
        # kubeconfig exec credential plugins: the token they print is used;
        # a failing one is one line (exit 3, as any failing first look).
        def exec_kubeconfig(name, body):
            plugin = os.path.join(self.dir, name)
            with open(plugin, "w") as f:
                f.write("#!/bin/sh\n" + body)
            os.chmod(plugin, 0o755)
            kc = os.path.join(self.dir, name + ".kubeconfig")
            with open(kc, "w") as f:
                json.dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                           "clusters": [{"name": "k", "cluster": {"server": api.url,
                                                                   "certificate-authority": api.ca_path}}],
                           "users": [{"name": "u", "user": {"exec": {
                               "command": "./" + name, "args": ["--who", "me"],
                               "apiVersion": "client.authentication.k8s.io/v1beta1"}}}],
                           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}, f)
            return clean_env(self.home, {"KUBECONFIG": kc})

        api.set_tokens("test-token-1", "from-plugin")
        env = exec_kubeconfig("plugin.sh", 'printf \'{"kind":"ExecCredential","status":{"token":"from-%s"}}\' "$1" '
                                           '| sed s/--who/plugin/\n')
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", SELECTOR, "--dry-run", "true"], env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("pod w-0 -> 127.0.0.2:1\n", p.stdout)
        self.assertEqual(api.requests[-1]["token"], "from-plugin")
        env = exec_kubeconfig("broken.sh", "echo 'ExpiredToken: run aws sso login' >&2\nexit 255\n")
        p = self.hvdrun(["-np", "1", "--kubernetes-selector", "app=hvd", "true"], env)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertEqual(p.stderr.splitlines()[-1],
                         "hvdrun: error: exec credential plugin '%s' of kubeconfig user 'u' exited with code 255: "
                         "ExpiredToken: run aws sso login" % os.path.join(self.dir, "broken.sh"))

    # ---- live jobs -----------------------------------------------------------

    def start_job(self, env, extra=()):
        j = Job(["-np", "2", "--min-np", "1", "--max-np", "3", "--kubernetes-selector", SELECTOR,
                 "--discovery-interval", "10", "--start-timeout", "20"] + list(extra), env)
        self.jobs.append(j)
        return j

    def test_live_watch_terminate_leaves_within_a_second_add_admits_relist_on_410(self):
        api = BookmarkingApiServer(os.path.join(self.dir, "api-bookmarks")).start()
        self.servers.append(api)
        labels = {"app": "hvd", "role": "worker"}
        api.add_pod("w-0", labels=labels, ip="127.0.0.2", ready=True)
        api.add_pod("w-1", labels=labels, ip="127.0.0.3", ready=True)
        j = self.start_job(self.kubeconfig_env(api))
        j.step_at(2, timeout=30)

        # A terminating pod: its host leaves at once, not 10 s later.
        t0 = time.monotonic()
        api.terminate("w-1")
        t_left, line = j.err_line(r"reason: .*host 127\.0\.0\.3 no longer listed by discovery", after=t0)
        self.assertLess(t_left - t0, 1.0, line)
        j.step_at(1, after=t_left)

        # A new pod, ready a little later: admitted, again without polling.
        api.delete("w-1")
        api.add_pod("w-2", labels=labels, ip="127.0.0.4")
        time.sleep(0.3)
        t1 = time.monotonic()
        api.set_ready("w-2")
        t_joined, line = j.err_line(r"discovery: 127\.0\.0\.2:1 127\.0\.0\.4:1", after=t1)
        self.assertLess(t_joined - t1, 1.0, line)
        j.step_at(2, after=t_joined)

        # The history compacted past hvdrun's resourceVersion (changes it
        # does not watch moved the server's on; the fake sends no bookmarks)
        # and the watch dropped: the stale resourceVersion gets 410 Gone (an
        # ERROR event); hvdrun lists again.
        lists_before = len(api.requests_for(lambda r: "watch" not in r["query"] and r["path"].endswith("/pods")))
        api.add_pod("noise", labels={"app": "other"}, ip="127.0.0.9", ready=True)
        api.compact()
        api.drop_watches()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(api.requests_for(
                lambda r: "watch" not in r["query"] and r["path"].endswith("/pods"))) == lists_before:
            time.sleep(0.05)
        self.assertGreater(len(api.requests_for(lambda r: "watch" not in r["query"] and r["path"].endswith("/pods"))),
                           lists_before, "no re-list after 410 Gone")
        time.sleep(0.3)  # the new watch is in place
        t2 = time.monotonic()
        api.delete("w-2")
        t_gone, line = j.err_line(r"reason: .*host 127\.0\.0\.4 no longer listed by discovery", after=t2)
        self.assertLess(t_gone - t2, 1.0, line)
        # Watches asked for bookmarks and resumed from a resourceVersion.
        watches = api.requests_for(lambda r: "watch" in r["query"])
        self.assertTrue(all(w["query"].get("allowWatchBookmarks") == "true" for w in watches))
        self.assertTrue(all(w["query"].get("resourceVersion") for w in watches))
        self.assertNotIn("discovery failed", j.text("err"))  # drops and 410s are not failures

        # A bookmark moves hvdrun's resourceVersion on: after it, the same
        # compaction and drop resume the watch without a re-list.
        api.add_pod("noise-2", labels={"app": "other"}, ip="127.0.0.10", ready=True)
        api.bookmark(labels)
        time.sleep(0.3)
        lists_before = len(api.requests_for(lambda r: "watch" not in r["query"] and r["path"].endswith("/pods")))
        watches_before = len(api.requests_for(lambda r: "watch" in r["query"]))
        api.compact()
        api.drop_watches()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(api.requests_for(lambda r: "watch" in r["query"])) == watches_before:
            time.sleep(0.05)
        time.sleep(0.3)
        self.assertGreater(len(api.requests_for(lambda r: "watch" in r["query"])), watches_before)
        self.assertEqual(len(api.requests_for(lambda r: "watch" not in r["query"] and r["path"].endswith("/pods"))),
                         lists_before, "a re-list although the bookmark was newer than the compaction")

        # The API server goes away: the job keeps its host and trains on,
        # with one line per distinct reason however often hvdrun retries
        # (while it shuts down a connection may also be reset).
        t3 = time.monotonic()
        api.stop()
        j.err_line(r"discovery failed \(kept previous 1 host\): cannot connect to the Kubernetes API server at "
                   + re.escape(api.url) + r": Connection refused", after=t3)
        time.sleep(1.5)
        failures = re.findall(r"discovery failed .*", j.text("err"))
        self.assertEqual(len(failures), len(set(failures)), failures)  # each distinct reason once, not per retry
        self.assertEqual(len([f for f in failures if f.endswith("Connection refused")]), 1, failures)
        j.step_at(1, after=time.monotonic())
        self.assertIsNone(j.proc.poll())
        self.assertEqual(j.stop(), 130)
        self.assertEqual(processes_with_token(j.token), [])

    def test_live_token_rotation_403_and_http_410_keep_the_job_going(self):
        api = self.server(gone_as_http=True, token="tok-1")
        labels = {"app": "hvd", "role": "worker"}
        api.add_pod("w-0", labels=labels, ip="127.0.0.2", ready=True)
        api.add_pod("w-1", labels=labels, ip="127.0.0.3", ready=True)
        env, sa = self.in_cluster_env(api, token="tok-1")
        j = self.start_job(env)
        j.step_at(2, timeout=30)

        # Token rotation: the API server accepts only the new token, the
        # mounted file is replaced (kubelet swaps a symlink), the watch drops.
        api.set_tokens("tok-2")
        new = os.path.join(sa, "token.new")
        with open(new, "w") as f:
            f.write("tok-2")
        os.replace(new, os.path.join(sa, "token"))
        api.drop_watches()
        time.sleep(0.5)
        t0 = time.monotonic()
        api.add_pod("w-5", labels=labels, ip="127.0.0.5", ready=True)
        t_seen, line = j.err_line(r"discovery: 127\.0\.0\.2:1 127\.0\.0\.3:1 127\.0\.0\.5:1", after=t0)
        self.assertLess(t_seen - t0, 2.0, line)
        j.step_at(3, after=t_seen)
        self.assertTrue(api.requests_for(lambda r: r["token"] == "tok-2" and r["status"] == 200))

        # 403 while running: one line, the hosts kept, training goes on.
        api.forbid(True)
        api.drop_watches()
        t1 = time.monotonic()
        _, line = j.err_line(r"discovery failed \(kept previous 3 hosts\): the service account 'hvdrun' "
                             r"\(namespace 'default'\) may not 'watch' pods in namespace 'default' \(403 Forbidden\): "
                             r"add the verb to its Role", after=t1)
        time.sleep(2.5)  # several retries (bounded backoff)
        retries = api.requests_for(lambda r: r["status"] == 403)
        self.assertGreaterEqual(len(retries), 3)
        self.assertEqual(len(re.findall(r"may not 'watch' pods", j.text("err"))), 1, j.text("err")[-3000:])
        j.step_at(3, after=time.monotonic())  # still training at size 3
        self.assertIsNone(j.proc.poll())

        # Back, with a compacted history: the watch gets HTTP 410 and lists again.
        api.add_pod("noise", labels={"app": "other"}, ip="127.0.0.9", ready=True)
        api.compact()
        api.forbid(False)
        _, line = j.err_line(r"kubernetes: pod discovery works again", after=t1, timeout=10)
        time.sleep(0.3)
        t2 = time.monotonic()
        api.terminate("w-0")
        t_left, line = j.err_line(r"reason: .*host 127\.0\.0\.2 no longer listed by discovery", after=t2)
        self.assertLess(t_left - t2, 1.5, line)
        self.assertTrue(api.requests_for(lambda r: r["status"] == 410))
        j.step_at(2, after=t_left)
        self.assertEqual(j.stop(), 130)
        self.assertEqual(processes_with_token(j.token), [])


if __name__ == "__main__":
    if shutil.which("openssl") is None:
        print("SKIPPED: openssl not found (the fake API server makes its certificates with it)")
        sys.exit(77)
    unittest.main()
