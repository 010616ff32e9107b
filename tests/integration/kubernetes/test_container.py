#!/usr/bin/env python3
"""The chart's rendered pods as real containers (issue 32, item 2): the
image scripts/build_image.sh built (podman + runc), the pods of
`helm template` run as a kubelet would run them, and the commands NOTES.txt
prints run verbatim in the driver (`kubectl exec` = `podman exec`).

What stands in for the cluster:
  * one network namespace per pod (tests/integration/netns/netns_hosts.py:
    198.18.X.0/24 on a private bridge; its scaffolding sshd's are stopped so
    the pods' sshd own port 22, as in a pod); podman joins the container to
    it (--network ns:...), so a pod keeps its IP across container restarts;
  * the entrypoint is PID 1 (podman, no --init), with runc's default
    capabilities; `podman stop -t <terminationGracePeriodSeconds>` is the
    kubelet's SIGTERM then SIGKILL; a restart in place is `podman start` of
    the same container (same name, same network namespace, same emptyDir);
  * kubelet-style volumes: Secret and ConfigMap keys as files (defaultMode,
    read-only), emptyDir, and the service account (token, ca.crt, namespace)
    at /var/run/secrets/kubernetes.io/serviceaccount unless
    automountServiceAccountToken is false; env from values and fieldRefs;
    KUBERNETES_SERVICE_HOST/PORT naming the fake API server
    (fake_apiserver.py) on the bridge, which enforces the chart's Role;
  * /etc/hosts per pod (its own name, plus the StatefulSet DNS names of the
    Ready pods only: cluster DNS) and a ClusterFirst resolv.conf;
  * readiness: the pod's exec probe (`hvd-entrypoint ready`) run through
    `podman exec` every 2 s; the result goes to the API (Ready) and DNS.

Cases (one CTest entry each):
  static_and_notes_lines   driver + 2 workers; the NOTES static line, the
                           built-in --kubernetes-selector elastic line and the
                           --host-discovery-script alternative, verbatim;
  elastic_worker_restarted_in_place
                           a worker container SIGKILLed and restarted in place
                           during the elastic line -> the job recovers and its
                           result equals an undisturbed run's;
  elastic_pod_recreated_same_name
                           the same with the pod deleted (SIGTERM, grace) and
                           recreated under the same name (new UID); the
                           deleted pod's worker drains (hvdrun drops the
                           terminating pod, the entrypoint keeps the pod up
                           until hvdrun's session ends): it leaves at the next
                           commit, the survivor waits there (a world that
                           holds: the chart's --min-np is the pod count), nobody
                           rolls back, the pod exits 0 long before its grace
                           period;
  batch_job_driver         the driver as a batch Job (driver.command): it
                           waits for the workers, runs hvdrun, exits 0;
  sigterm_every_pod        SIGTERM to every pod: each exits within its grace
                           period (no SIGKILL needed), nothing left.

Needs root, ip netns, podman, runc, helm and the image (HVD_IMAGE, default
hvdrun:0.1.0; scripts/build_image.sh); without them, or with
HVD_SKIP_CONTAINER_TESTS=1: SKIPPED, exit 77.
Traffic stays on loopback and 198.18.0.0/15.
"""
import base64
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
from fake_apiserver import FakeApiServer  # noqa: E402
from k8s_tools import REPO, find_tool, skip  # noqa: E402
import netns_hosts  # noqa: E402

IMAGE = os.environ.get("HVD_IMAGE", "hvdrun:0.1.0")
CHART = os.path.join(REPO, "conf", "kubernetes", "hvdrun")
RELEASE, NS = "train", "ml"
TRAIN = os.path.join(HERE, "e2e_train.py")
EXAMPLES = "/usr/local/share/hvdrun/examples/python"
# elastic_mnist.py, size-invariant: a run that loses a worker and gets it
# back ends where an undisturbed one does (test_k8s_e2e.py's settings).
TRAIN_ARGS = ["--double", "--epochs", "4", "--samples", "240", "--global-batch", "24", "--commit-every", "2"]
TRAIN_ELASTIC = f"""import runpy, sys
sys.path.insert(0, {EXAMPLES!r})
sys.argv = ["elastic_mnist.py"] + {TRAIN_ARGS!r} + sys.argv[1:]
runpy.run_path({EXAMPLES + "/elastic_mnist.py"!r}, run_name="__main__")
"""
COMMIT = re.compile(r"epoch (\d+) batch (\d+) size (\d+) rank (\d+) pid (\d+)")
FINAL = re.compile(r"final step (\d+) checksum (\S+)")
RESULT = re.compile(r"rank (\d+) size (\d+) local (\d+)/(\d+) pod (\S+) host ([0-9.]+|none) sum ([0-9.]+)")


def podman(*args, check=True, timeout=120):
    r = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def render(helm, home, *sets, notes=False):
    """The chart's documents (or NOTES.txt, rendered through a copy of the
    chart, as test_chart.py does)."""
    import yaml
    args = []
    for s in sets:
        args += ["--set", s]
    env = dict(os.environ, HOME=home)
    if not notes:
        out = subprocess.run([helm, "template", RELEASE, CHART, "-n", NS, *args], capture_output=True, text=True,
                             check=True, env=env).stdout
        return [d for d in yaml.safe_load_all(out) if d]
    tmp = tempfile.mkdtemp(prefix="hvd-notes-", dir=home)
    chart = os.path.join(tmp, "hvdrun")
    shutil.copytree(CHART, chart)
    shutil.copy(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes.txt"))
    with open(os.path.join(chart, "templates", "zz-notes.yaml"), "w") as f:
        f.write('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n'
                '  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n')
    out = subprocess.run([helm, "template", RELEASE, chart, "-n", NS, *args, "--show-only", "templates/zz-notes.yaml"],
                         capture_output=True, text=True, check=True, env=env).stdout
    shutil.rmtree(tmp)
    return yaml.safe_load(out)["data"]["notes"]


class Pod:
    def __init__(self, name, spec, labels, netns, ip, container, emptydirs):
        self.name, self.spec, self.labels = name, spec, labels
        self.netns, self.ip, self.container = netns, ip, container
        self.emptydirs = emptydirs
        self.ready = False
        self.hosts_file = None


class Cluster:
    """A kubelet, cluster DNS and an API server for the chart's pods."""

    def __init__(self, tmp, hosts, api, docs, token):
        self.tmp, self.hosts, self.api, self.docs = tmp, hosts, api, docs
        self.token = token
        self.tag = uuid.uuid4().hex[:8]
        self.pods = {}
        self.deleted_logs = {}  # pod name -> its container's log when it was deleted
        self.lock = threading.Lock()
        self.stop_probing = threading.Event()
        self.prober = threading.Thread(target=self._probe_loop, daemon=True)
        self.prober.start()
        self.sa_dir = api.write_serviceaccount(os.path.join(tmp, "serviceaccount"), namespace=NS)
        self.free_ns = list(range(len(hosts.namespaces)))

    def by_kind(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    # ---- volumes and env, as the kubelet makes them ---------------------------
    def _volume(self, pod, vol):
        name = vol["name"]
        d = os.path.join(self.tmp, "volumes", f"{pod}-{name}-{uuid.uuid4().hex[:6]}")
        os.makedirs(d)
        if "secret" in vol:
            sec = [s for s in self.by_kind("Secret") if s["metadata"]["name"] == vol["secret"]["secretName"]][0]
            data = {k: base64.b64decode(v) for k, v in (sec.get("data") or {}).items()}
            data.update({k: v.encode() for k, v in (sec.get("stringData") or {}).items()})
            mode = vol["secret"].get("defaultMode", 0o644)
        elif "configMap" in vol:
            cm = [c for c in self.by_kind("ConfigMap") if c["metadata"]["name"] == vol["configMap"]["name"]][0]
            data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
            mode = vol["configMap"].get("defaultMode", 0o644)
        elif "emptyDir" in vol:
            return d, False
        else:
            raise AssertionError(f"volume kind not emulated: {vol}")
        for k, v in data.items():
            with open(os.path.join(d, k), "wb") as f:
                f.write(v)
            os.chmod(os.path.join(d, k), mode)
        return d, True

    def _env(self, pod_name, ip, container):
        env = {"KUBERNETES_SERVICE_HOST": self.api.address, "KUBERNETES_SERVICE_PORT": str(self.api.port),
               "KUBERNETES_SERVICE_PORT_HTTPS": str(self.api.port)}
        for e in container.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            else:
                path = e["valueFrom"]["fieldRef"]["fieldPath"]
                env[e["name"]] = {"metadata.namespace": NS, "metadata.name": pod_name, "status.podIP": ip}[path]
        return env

    # ---- DNS ------------------------------------------------------------------------
    def _hosts_text(self, pod):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        spec = pod.spec
        sub = spec.get("subdomain")
        own = spec.get("hostname", pod.name)
        lines.append(f"{pod.ip}\t{own}.{sub}.{NS}.svc.cluster.local\t{own}" if sub else f"{pod.ip}\t{own}")
        for p in self.pods.values():
            sd = p.spec.get("subdomain")
            if p.ready and sd and p is not pod:
                h = p.spec.get("hostname", p.name)
                lines.append(f"{p.ip}\t{h}.{sd}.{NS}.svc.cluster.local\t{h}.{sd}.{NS}.svc\t{h}.{sd}")
        return "\n".join(lines) + "\n"

    def _write_dns(self):
        for p in self.pods.values():
            if p.hosts_file:
                with open(p.hosts_file, "r+") as f:  # in place: the bind mount keeps the inode
                    f.seek(0)
                    f.write(self._hosts_text(p))
                    f.truncate()

    # ---- pods -------------------------------------------------------------------------
    def create(self, name, template, ns_index=None, labels=None, hostname=None, subdomain=None, files=None):
        """A pod from a pod template (StatefulSet/Deployment/Job). files:
        path -> text put into the container before it starts (what the
        user's image would hold: the training scripts)."""
        spec = json.loads(json.dumps(template["spec"]))
        if hostname:
            spec["hostname"] = hostname
        if subdomain:
            spec["subdomain"] = subdomain
        if ns_index is None:
            ns_index = self.free_ns.pop(0)
        netns = self.hosts.namespaces[ns_index]
        ip = self.hosts.addrs[ns_index]
        c = spec["containers"][0]
        mounts = []
        emptydirs = {}
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        for m in c.get("volumeMounts") or []:
            path, ro = self._volume(name, vols[m["name"]])
            if not ro:
                emptydirs[m["name"]] = path
            mounts += ["-v", f"{path}:{m['mountPath']}" + (":ro" if ro or m.get("readOnly") else "")]
        if spec.get("automountServiceAccountToken", True) is not False and spec.get("serviceAccountName"):
            mounts += ["-v", f"{self.sa_dir}:/var/run/secrets/kubernetes.io/serviceaccount:ro"]
        pod = Pod(name, spec, dict(labels or template["metadata"].get("labels") or {}), netns, ip,
                  f"hvdc{self.tag}-{name}", emptydirs)
        pod.hosts_file = os.path.join(self.tmp, f"hosts-{name}-{uuid.uuid4().hex[:6]}")
        resolv = os.path.join(self.tmp, f"resolv-{name}")
        with open(resolv, "w") as f:
            f.write(f"search {NS}.svc.cluster.local svc.cluster.local cluster.local\n"
                    f"nameserver {self.api.address}\noptions ndots:5\n")
        with self.lock:
            self.pods[name] = pod
            with open(pod.hosts_file, "w") as f:
                f.write(self._hosts_text(pod))
        env = []
        for k, v in self._env(name, ip, c).items():
            env += ["-e", f"{k}={v}"]
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
        image = c["image"]
        podman("create", "--name", pod.container, "--hostname", spec.get("hostname", name),
               "--network", f"ns:/run/netns/{netns}", "--no-hosts", "--label", f"hvd-test={self.tag}",
               "-v", f"{pod.hosts_file}:/etc/hosts:ro", "-v", f"{resolv}:/etc/resolv.conf:ro",
               "--stop-timeout", str(grace), *mounts, *env, image, *(c.get("args") or []))
        for path, text in (files or {}).items():
            self.copy_in(pod, text, path)
        self.api.add_pod(name, labels=pod.labels, ip=ip, ready=False, phase="Running", namespace=NS,
                         subdomain=spec.get("subdomain"), hostname=spec.get("hostname"))
        podman("start", pod.container)
        return pod

    def copy_in(self, pod, text, path):
        src = os.path.join(self.tmp, f"copy-{uuid.uuid4().hex[:6]}")
        with open(src, "w") as f:
            f.write(text)
        podman("cp", src, f"{pod.container}:{path}")

    def running(self, pod):
        r = podman("inspect", "--format", "{{.State.Running}}", pod.container, check=False)
        return r.stdout.strip() == "true"

    def _probe(self, pod):
        probe = pod.spec["containers"][0].get("readinessProbe")
        if not probe:
            return self.running(pod)
        # (fails too when the container is not running)
        r = podman("exec", pod.container, *probe["exec"]["command"], check=False, timeout=30)
        return r.returncode == 0

    def _probe_loop(self):
        # Every 2 s (the chart's periodSeconds is 5: quicker tests, the same probe).
        while not self.stop_probing.wait(2.0):
            with self.lock:
                pods = list(self.pods.values())
            for p in pods:
                try:
                    ok = self._probe(p)
                except Exception:  # noqa: BLE001 (a pod removed meanwhile)
                    continue
                with self.lock:
                    if self.pods.get(p.name) is not p or ok == p.ready:
                        continue
                    p.ready = ok
                    try:
                        self.api.set_ready(p.name, ok, namespace=NS)
                    except KeyError:
                        pass
                    self._write_dns()

    def wait_ready(self, *names, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with self.lock:
                if all(n in self.pods and self.pods[n].ready for n in names):
                    return
            time.sleep(0.2)
        raise AssertionError(f"pods {names} not Ready within {timeout} s:\n" +
                             "\n".join(self.logs(self.pods[n])[-2000:] for n in names if n in self.pods))

    def logs(self, pod):
        r = podman("logs", pod.container, check=False)
        return r.stdout + r.stderr

    def restart_in_place(self, pod):
        """The container crashed (SIGKILL, as the OOM killer does) and the
        kubelet restarts it: same pod, same name, IP and emptyDirs."""
        podman("kill", "-s", "KILL", pod.container)
        podman("wait", pod.container, timeout=60)
        with self.lock:
            pod.ready = False
            self.api.restart(pod.name, namespace=NS)  # restartCount + 1, not Ready
            self._write_dns()
        time.sleep(1.0)  # the kubelet's restart delay
        podman("start", pod.container)

    def delete(self, pod, recreate_from=None, files=None):
        """kubectl delete pod: deletionTimestamp, SIGTERM, the grace period,
        the object gone; recreate_from: the StatefulSet's template, a new pod
        under the same name in the same network namespace (a new UID)."""
        self.api.terminate(pod.name, namespace=NS)
        grace = int(pod.spec.get("terminationGracePeriodSeconds", 30))
        t0 = time.monotonic()
        podman("stop", "-t", str(grace), pod.container, timeout=grace + 60)
        took = time.monotonic() - t0
        self.deleted_logs[pod.name] = self.logs(pod)
        podman("rm", "-f", pod.container)
        with self.lock:
            del self.pods[pod.name]
            self.api.delete(pod.name, namespace=NS)
            self._write_dns()
        if recreate_from is not None:
            ns_index = self.hosts.namespaces.index(pod.netns)
            return self.create(pod.name, recreate_from, ns_index=ns_index, labels=pod.labels,
                               hostname=pod.spec.get("hostname"), subdomain=pod.spec.get("subdomain"),
                               files=files), took
        return None, took

    def exec(self, pod, argv, timeout):
        return subprocess.run(["podman", "exec", pod.container, *argv], capture_output=True, text=True,
                              timeout=timeout)

    def close(self):
        self.stop_probing.set()
        self.prober.join(10)
        r = podman("ps", "-a", "-q", "--filter", f"label=hvd-test={self.tag}", check=False)
        for cid in r.stdout.split():
            podman("rm", "-f", "-t", "0", cid, check=False)

    def leftovers(self):
        return podman("ps", "-a", "-q", "--filter", f"label=hvd-test={self.tag}", check=False).stdout.split()


class ContainerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.environ.get("HVD_SKIP_CONTAINER_TESTS") == "1":
            skip("HVD_SKIP_CONTAINER_TESTS=1")
        if os.geteuid() != 0 or not netns_hosts.available():
            skip(netns_hosts.SKIP_MESSAGE)
        for tool in ("podman", "runc"):
            if shutil.which(tool) is None:
                skip(f"{tool} not installed (scripts/setup.sh installs it)")
        cls.helm = find_tool("helm")
        if cls.helm is None:
            skip("helm not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh")
        if podman("image", "exists", IMAGE, check=False).returncode != 0:
            skip(f"image {IMAGE} not built (scripts/build_image.sh)")

    def setUp(self):
        base = os.environ.get("HVD_TEST_TMPDIR") or tempfile.gettempdir()
        self.tmp = tempfile.mkdtemp(prefix="hvd-container-", dir=base)
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.hosts = netns_hosts.NetnsHosts(count=4).__enter__()
        self.addCleanup(self.hosts.__exit__, None, None, None)
        # The scaffolding sshd's (ports 22, 2222) are not part of a pod: the
        # pods' own sshd listen on 22.
        for p in self.hosts.sshd:
            p.terminate()
            p.wait(10)
        self.bridge = re.sub(r"\.\d+$", ".1", self.hosts.addrs[0])

    def start(self, *sets, files=None):
        repo, tag = IMAGE.rsplit(":", 1)
        sets = ["worker.replicas=2", "elastic.enabled=true", f"image.repository={repo}", f"image.tag={tag}",
                "image.pullPolicy=Never"] + list(sets)
        self.sets = sets
        docs = render(self.helm, self.tmp, *sets)
        role = [d for d in docs if d["kind"] == "Role"][0]
        account = [d for d in docs if d["kind"] == "ServiceAccount"][0]["metadata"]["name"]
        api = FakeApiServer(os.path.join(self.tmp, "api"), namespace=NS, address=self.bridge,
                            token="sa-" + uuid.uuid4().hex, service_account=account).start()
        self.addCleanup(api.stop)
        api.set_role(role["rules"])
        self.api = api
        cluster = Cluster(self.tmp, self.hosts, api, docs, api.token)
        self.addCleanup(self.check_nothing_left, cluster)
        self.addCleanup(cluster.close)
        self.cluster = cluster
        sts = cluster.by_kind("StatefulSet")[0]
        self.sts = sts
        self.workers = []
        for i in range(int(sts["spec"]["replicas"])):
            name = f"{sts['metadata']['name']}-{i}"
            self.workers.append(cluster.create(name, sts["spec"]["template"], hostname=name,
                                               subdomain=sts["spec"]["serviceName"], files=files))
        return cluster

    def wait_driver_ready(self, driver, timeout=60):
        """The driver's "driver ready" line: every worker answered."""
        deadline = time.monotonic() + timeout
        while "driver ready" not in self.cluster.logs(driver):
            self.assertLess(time.monotonic(), deadline, self.cluster.logs(driver))
            time.sleep(0.5)

    def start_driver(self, kind="Deployment", files=None):
        d = self.cluster.by_kind(kind)[0]
        name = f"{d['metadata']['name']}-{uuid.uuid4().hex[:5]}"
        return self.cluster.create(name, d["spec"]["template"], files=files)

    def check_nothing_left(self, cluster):
        self.assertEqual(cluster.leftovers(), [])

    def notes_line(self, marker):
        notes = render(self.helm, self.tmp, *self.sets, notes=True)
        lines = [ln.strip() for ln in notes.splitlines() if marker in ln]
        self.assertTrue(lines, notes)
        line = lines[0]
        self.assertTrue(line.startswith(f"kubectl -n {NS} exec -it deploy/"), line)
        return shlex.split(line.split(" -- ", 1)[1])

    def run_line(self, driver, argv, timeout=240):
        r = self.cluster.exec(driver, argv, timeout)
        return r.returncode, r.stdout + r.stderr

    # ---- cases ------------------------------------------------------------------------
    def test_static_and_notes_lines(self):
        files = {"/root/train.py": open(TRAIN).read(), "/root/train_elastic.py": TRAIN_ELASTIC}
        c = self.start(files=files)
        driver = self.start_driver(files=files)
        c.wait_ready(*[w.name for w in self.workers], driver.name)
        self.wait_driver_ready(driver)
        static = self.notes_line("--hostfile /etc/hvdrun/generated/hostfile")
        self.assertEqual(static[-2:], ["python3", "train.py"])
        rc, out = self.run_line(driver, static)
        self.assertEqual(rc, 0, out)
        results = [m.groups() for m in RESULT.finditer(out)]
        self.assertEqual(sorted(int(r[0]) for r in results), [0, 1], out)
        self.assertEqual({r[4] for r in results}, {w.name for w in self.workers}, out)
        self.assertEqual({r[5] for r in results}, {w.ip for w in self.workers}, out)
        self.assertTrue(all(float(r[6]) == 3.0 for r in results), out)
        # The elastic line (built-in discovery through the service account,
        # under the chart's Role) and the horovodrun-compatible alternative
        # (kubectl in the image, the in-cluster path of issue 32 fix 1).
        elastic = self.notes_line("--kubernetes-selector")
        rc, out = self.run_line(driver, elastic)
        self.assertEqual(rc, 0, out)
        self.assertIsNotNone(FINAL.search(out), out)
        script = ["hvdrun", "-np", "2", "--min-np", "2", "--max-np", "2", "--host-discovery-script",
                  "/etc/hvdrun/generated/discover_hosts.sh", "python3", "train_elastic.py"]
        rc, out = self.run_line(driver, script)
        self.assertEqual(rc, 0, out)
        self.assertIsNotNone(FINAL.search(out), out)
        self.assertNotIn("localhost:8080", out)
        # Every API request was the service account's, allowed by the Role.
        reqs = self.api.requests_for(lambda r: r["verb"] is not None)
        self.assertTrue(reqs)
        self.assertTrue(all(r["status"] == 200 and r["token"] == self.api.token for r in reqs), reqs[-5:])
        # The readiness probe (run every second here) opens no connection:
        # sshd's log does not grow while nothing else connects.
        before = {w.name: c.logs(w) for w in self.workers}
        time.sleep(6)
        for w in self.workers:
            self.assertEqual(c.logs(w), before[w.name])

    def reference_checksum(self):
        """The undisturbed run: the same script, one process, the same image."""
        r = subprocess.run(["podman", "run", "--rm", "--network", "none", "--entrypoint", "python3", IMAGE, "-c",
                            TRAIN_ELASTIC], capture_output=True, text=True, timeout=300)
        m = FINAL.search(r.stdout)
        self.assertIsNotNone(m, r.stdout + r.stderr)
        return m

    def elastic_with_fault(self, fault, *sets):
        files = {"/root/train_elastic.py": TRAIN_ELASTIC.replace(
            "sys.argv[1:]", "['--step-sleep', '0.25'] + sys.argv[1:]")}
        c = self.start(*sets, files=files)
        driver = self.start_driver(files=files)
        c.wait_ready(*[w.name for w in self.workers], driver.name)
        self.wait_driver_ready(driver)
        ref = {}
        ref_thread = threading.Thread(target=lambda: ref.setdefault("m", self.reference_checksum()))
        ref_thread.start()
        elastic = self.notes_line("--kubernetes-selector")
        # The NOTES line verbatim; HVDRUN_LOG_LEVEL=info shows the launcher's
        # state lines the test reads ("is back"), quiet by default.
        proc = subprocess.Popen(["podman", "exec", "--env", "HVDRUN_LOG_LEVEL=info", driver.container, *elastic],
                                stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        lines = []
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        victim = self.workers[1]
        deadline = time.monotonic() + 60
        while sum(1 for ln in lines if COMMIT.search(ln) and " size 2 " in ln) < 4:
            self.assertIsNone(proc.poll(), "".join(lines))
            self.assertLess(time.monotonic(), deadline, "".join(lines))
            time.sleep(0.1)
        acted_at = len(lines)
        if fault == "restart":
            c.restart_in_place(victim)
        else:
            new, took = c.delete(victim, recreate_from=self.sts["spec"]["template"], files=files)
            self.assertLess(took, 30)
            self.assertEqual((new.name, new.ip), (victim.name, victim.ip))
        try:
            rc = proc.wait(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("the elastic job did not end:\n" + "".join(lines))
        reader.join(10)
        ref_thread.join(300)
        out = "".join(lines)
        self.assertEqual(rc, 0, out)
        after = [COMMIT.search(ln) for ln in lines[acted_at:]]
        self.assertTrue(any(m and m.group(3) == "2" for m in after), "never back at size 2:\n" + out)
        self.assertNotIn("blacklisted", out)
        m, r = FINAL.search(out), ref["m"]
        self.assertEqual(m.group(1), r.group(1))
        self.assertAlmostEqual(float(m.group(2)), float(r.group(2)), delta=1e-9 * max(1.0, abs(float(r.group(2)))))
        print(f"elastic {fault}: ok, checksum {m.group(2)} (undisturbed {r.group(2)})", flush=True)
        return out

    def test_elastic_worker_restarted_in_place(self):
        out = self.elastic_with_fault("restart")
        self.assertRegex(out, r"is back|replaced or restarted")

    def test_elastic_pod_recreated_same_name(self):
        # The chart's line (min-np = replicas): the deleted pod's worker
        # drains, and the survivor waits at that commit, in a world that
        # holds, for the pod's replacement -- no rollback.
        out = self.elastic_with_fault("recreate")
        victim = self.workers[1].name
        self.assertRegex(out, r"world 2 holds: size 2 -> 1, below --min-np 2")
        logs = self.cluster.deleted_logs[victim]
        self.assertRegex(out, r"w2 on \S+ slot 0 left the job \(drained", out + "\n---- pod log ----\n" + logs)
        self.assertNotIn("restoring the last commit", out)
        self.assertIn("waiting up to 75 s (HVD_DRAIN_TIMEOUT)", logs)
        self.assertIn("worker stopping: its sessions ended", logs)

    def test_batch_job_driver(self):
        files = {"/root/train.py": open(TRAIN).read()}
        c = self.start("driver.command=hvdrun -np 2 --hostfile /etc/hvdrun/generated/hostfile python3 train.py",
                       files=files)
        job = c.by_kind("Job")[0]
        self.assertEqual(job["spec"]["template"]["spec"]["restartPolicy"], "Never")
        driver = c.create(f"{job['metadata']['name']}-x1", job["spec"]["template"], files=files)
        r = podman("wait", driver.container, timeout=300)
        log = c.logs(driver)
        self.assertEqual(r.stdout.strip(), "0", log)
        results = [m.groups() for m in RESULT.finditer(log)]
        self.assertEqual(sorted(int(x[0]) for x in results), [0, 1], log)

    def test_sigterm_every_pod(self):
        c = self.start()
        driver = self.start_driver()
        c.wait_ready(*[w.name for w in self.workers], driver.name)
        self.wait_driver_ready(driver)
        pods = [driver] + self.workers
        t0 = time.monotonic()
        stoppers = [subprocess.Popen(["podman", "kill", "-s", "TERM", p.container]) for p in pods]
        for s in stoppers:
            s.wait(30)
        codes = {}
        for p in pods:
            grace = int(p.spec.get("terminationGracePeriodSeconds", 30))
            r = podman("wait", p.container, timeout=grace + 30)
            codes[p.name] = (r.stdout.strip(), time.monotonic() - t0, grace)
        for name, (code, took, grace) in codes.items():
            self.assertEqual(code, "0", f"{name}: {codes}")  # the entrypoint's clean SIGTERM exit, no SIGKILL
            self.assertLess(took, grace, codes)
        for p in pods:
            podman("rm", p.container)
            self.assertEqual(netns_hosts.ns_pids(p.netns), [], f"processes left in {p.name}'s namespace")
        self.assertEqual(c.leftovers(), [])


if __name__ == "__main__":
    unittest.main()
