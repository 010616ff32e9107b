#!/usr/bin/env python3
"""End to end on Kubernetes-like pods (issue 16, section 5): the pods are
network-namespace hosts (tests/integration/netns/netns_hosts.py) whose sshd
was started by the image's entrypoint (`hvd-entrypoint worker`, through
entrypoint_pods.EntrypointPods), the driver's ~/.ssh is made by the
entrypoint's driver role, and the pods carry the chart's names
(`<release>-hvdrun-<i>.<release>-hvdrun`, conf/kubernetes/README.md).

Cases (one CTest entry each):
  static    the walkthrough's static command verbatim:
              horovodrun -n 4 --hostfile <generated> --mpi-args "--mca
              orte_keep_fqdn_hostnames t --allow-run-as-root --display-map
              --tag-output --timestamp-output" bash -c 'python3 train.py'
            (mpirun starts the ranks: docs/mpi.md), 2 pods x slots=2;
  elastic_script_pod_replaced
            horovodrun -np 4 --min-np 4 --max-np 4 --host-discovery-script
            <the chart's discover_hosts.sh wrapper> (real kubectl against
            FakeApiServer): a pod is deleted (terminated + deleted in the
            API, everything in its namespace killed) and recreated under
            the SAME name, as its StatefulSet does (a new UID; here in the
            same network namespace, so the same address) -> the job goes on
            from its last commit, is back at 4 ranks, exits 0, and its
            result equals a fault-free run (as
            tests/integration/python/elastic_e2e.py);
  elastic_script_pod_crashed
            the pod's container crashes (everything in it SIGKILLed, no API
            event first) and the kubelet restarts it in place: same name,
            same address, restart count + 1, not Ready until its sshd is
            back (the lost workers are retried meanwhile and refused) -> the
            same recovery, never a blacklisted host (issue 32);
  elastic_script_pod_added
            the same with --max-np 6 and a pod added -> admitted, 6 ranks;
  elastic_builtin_pod_replaced, elastic_builtin_pod_crashed
            the replacement and crash cases with hvdrun's built-in
            discovery (the chart's elastic-command: --kubernetes-selector
            ... --kubernetes-host-names dns, through a kubeconfig);
  kubeflow  conf/kubernetes/kubeflow/mpijob.yaml's launcher command (read
            from the manifest: mpiexec ... -mca pml ob1 -mca btl ^openib -x
            NCCL_DEBUG sh -c '...') with an operator-style hostfile
            (`<job>-worker-<i>.<job>.<ns>.svc slots=2`) and the launcher's
            env; the ranks form one job through the library's MPI
            bootstrap (docs/mpi.md, "Workers started by MPI").

How the pods' surroundings are emulated without touching the machine: the
driver side (entrypoint driver role, horovodrun/mpiexec, ssh, kubectl) runs
in a private mount namespace (`unshare --mount`) where a test /etc/hosts
resolves the pod names ("cluster DNS") and the driver's home is bind-mounted
over /root (OpenSSH reads ~/.ssh from the passwd home, not $HOME). The
pods' sshd's run outside it. Open MPI's extra wire-up for network
namespaces (oob/btl on the test subnet, no tree spawn) and, for the
Kubeflow line, what the ranks need on a machine that is not the image
(PYTHONPATH to the build's packages, given to the orted's through
orte_launch_agent because -x cannot be mixed with mca_base_env_list) are OMPI_MCA_* environment variables, so the
command lines stay as given. The pods' sshd listen on port 2022 (netns_hosts' own sshd holds 22): the entrypoint's
driver role writes `Port 2022` into ~/.ssh/config, which both hvdrun and
Open MPI's ssh read; for the Kubeflow case that file is the one deviation
from the operator's launcher (whose ssh port is 22).

Each pod has its own host name (a UTS namespace: Open MPI names its
shared-memory segments after it, and pods sharing one crash each other) and
an empty /root as in an image (a mount namespace: sessions run none of this
machine's root dotfiles, so python3 is the system one, as in the image, and
no pyenv rehash lock is left behind by a killed pod).
The MPI operator's launcher env (OMPI_MCA_orte_keep_fqdn_hostnames=true, ...)
is set as the operator sets it.

Every case checks the exit status, the ranks' pods, and that nothing is
left in any namespace. Needs root + ip netns, openssl, unshare, torch in
/usr/bin/python3, Open MPI's mpirun (static, kubeflow) and kubectl (script
cases); otherwise SKIPPED and exit 77.
"""
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
from entrypoint_pods import ENTRYPOINT, EntrypointPods  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from k8s_tools import REPO, find_tool  # noqa: E402
import netns_hosts  # noqa: E402
from netns_hosts import NetnsHosts  # noqa: E402

import yaml  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", os.path.join(REPO, "build", "apps", "hvdrun", "hvdrun"))
BUILD = os.environ.get("HVD_BUILD_DIR", os.path.join(REPO, "build"))
HOROVODRUN = os.path.join(os.path.dirname(HVDRUN), "horovodrun")
PY = "/usr/bin/python3"  # the python3 with torch (the pyenv one first on PATH has none)
PYTHONPATH = f"{BUILD}/python:{BUILD}/python/compat"
TRAIN = os.path.join(HERE, "e2e_train.py")
ELASTIC = os.path.join(REPO, "examples", "python", "elastic_mnist.py")
MPIJOB = os.path.join(REPO, "conf", "kubernetes", "kubeflow", "mpijob.yaml")
DISCOVER = os.path.join(REPO, "scripts", "kubernetes", "discover_hosts.sh")

RELEASE, NAMESPACE, SLOTS, PORT = "e2e", "default", 2, 2022
WORKERS = f"{RELEASE}-hvdrun"  # the chart's StatefulSet and headless service name
SELECTOR = f"app.kubernetes.io/name=hvdrun,app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=worker"
LABELS = dict(kv.split("=") for kv in SELECTOR.split(","))
MPI_ARGS = "--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map --tag-output --timestamp-output"

# elastic_mnist.py: size-invariant training (global batch split over the
# ranks), so a run that loses and regains workers ends where a fault-free one does.
SAMPLES, GLOBAL_BATCH, COMMIT_EVERY, EPOCHS = 240, 24, 2, 4
TOTAL_STEPS = EPOCHS * SAMPLES // GLOBAL_BATCH
TRAIN_ARGS = ["--double", "--epochs", str(EPOCHS), "--samples", str(SAMPLES), "--global-batch", str(GLOBAL_BATCH),
              "--commit-every", str(COMMIT_EVERY)]
COMMIT = re.compile(r"epoch (\d+) batch (\d+) size (\d+) rank (\d+) pid (\d+)")
FINAL = re.compile(r"final step (\d+) checksum (\S+)")
RESULT = re.compile(r"rank (\d+) size (\d+) local (\d+)/(\d+) pod (\S+) host ([0-9.]+|none) sum ([0-9.]+)")


def pod_name(i):
    return f"{WORKERS}-{i}"


def dns_name(i):
    return f"{pod_name(i)}.{WORKERS}"


def skip(why):
    """A missing tool: a visible SKIPPED line; the run exits 77 (main)."""
    print(f"SKIPPED: {why}", flush=True)
    raise unittest.SkipTest(why)


def ns_inode(ns):
    return os.stat(f"/run/netns/{ns}").st_ino


def pid_netns(pid):
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class Job:
    """A driver-side command; output lines collected with arrival times."""

    def __init__(self, argv, env, cwd):
        self.argv = argv
        self.proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in iter(self.proc.stdout.readline, ""):
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def wait(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.argv[:12]}... did not end within {timeout} s; output:\n{self.text()}")
        self.reader.join(5)
        self.proc.stdout.close()
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
        self.reader.join(5)
        self.proc.stdout.close()


class K8sE2E(unittest.TestCase):
    # ---- fixture ------------------------------------------------------------
    def setUp(self):
        if os.geteuid() != 0 or not netns_hosts.available():
            skip(netns_hosts.SKIP_MESSAGE)
        for tool in ("openssl", "unshare", "mount", "ssh", "/usr/sbin/sshd"):
            if shutil.which(tool) is None:
                skip(f"{tool} not installed")
        if not os.access(HVDRUN, os.X_OK) or not os.path.islink(HOROVODRUN):
            self.fail(f"{HVDRUN} or its horovodrun link not built")
        if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
            skip(f"{PY} cannot import torch (install python3-torch)")
        self.dir = tempfile.mkdtemp(prefix="hvd-k8s-e2e-", dir=os.getcwd())
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.jobs = []
        self.addCleanup(self._kill_jobs)

    def _kill_jobs(self):
        for j in self.jobs:
            j.kill()

    def start_pods(self, count, running, hostnames, host_key=True):
        """`count` namespaces, pods (entrypoint workers) running in
        `running`, each with its pod's host name (hostnames[i]); host_key:
        the chart's release host key (else per-pod keys)."""
        hosts = NetnsHosts(count=count).__enter__()
        self.addCleanup(hosts.__exit__, None, None, None)
        pods = EntrypointPods(hosts, port=PORT, base=self.dir, start=running, host_key=host_key,
                              hostnames=dict(enumerate(hostnames)), pod_root=True).__enter__()
        self.addCleanup(pods.__exit__, None, None, None)
        self.hosts, self.pods = hosts, pods
        self.addCleanup(self._logs_on_failure)
        return hosts, pods

    def _logs_on_failure(self):
        result = getattr(getattr(self, "_outcome", None), "result", None)
        if not any(t is self for t, _ in getattr(result, "errors", []) + getattr(result, "failures", [])):
            return
        for i in sorted(self.pods.logs):
            print(f"--- entrypoint worker {i} log:\n{self.pods.log(i)[-3000:]}", file=sys.stderr)
        self.hosts.print_sshd_logs()

    def write_etc_hosts(self, names):
        """The driver's /etc/hosts: this machine's plus the pods' names
        (`names`: namespace index -> list of names)."""
        path = os.path.join(self.dir, "etc-hosts")
        with open("/etc/hosts") as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.rstrip("\n") + "\n# test pods (cluster DNS)\n")
            for i, ns_names in sorted(names.items()):
                f.write(f"{self.hosts.addrs[i]} {' '.join(ns_names)}\n")
        return path

    def driver_ns(self, etc_hosts):
        """argv prefix: a private mount namespace with `etc_hosts` as
        /etc/hosts and the driver's home (the entrypoint's HVD_SSH_HOME) as /root."""
        os.makedirs(self.pods.home, exist_ok=True)
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$1" /etc/hosts && mount --bind "$2" /root && shift 2 && exec "$@"',
                "driver-ns", etc_hosts, self.pods.home]

    def driver_env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("HOROVOD_", "HVDRUN_", "HVD_", "OMPI_", "PMIX_", "PMI_", "KUBERNETES_"))
               and k not in ("KUBECONFIG", "SSH_AUTH_SOCK")}
        subnet = f"{self.hosts.subnet}.0/24"
        env.update(HOME="/root", USER="root", PYTHONPATH=PYTHONPATH, PYTHONUNBUFFERED="1",
                   PATH=f"{os.path.dirname(HVDRUN)}:/usr/bin:/bin:/usr/sbin:/sbin",
                   # Open MPI in network namespaces: daemons and ranks talk over
                   # the test subnet only; every orted is started by mpirun.
                   OMPI_MCA_oob_tcp_if_include=subnet, OMPI_MCA_btl_tcp_if_include=subnet,
                   OMPI_MCA_plm_rsh_no_tree_spawn="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def make_driver_home(self, hostfile_lines, names, wrap, service=WORKERS):
        known = os.path.join(self.dir, "known-hosts-names")
        with open(known, "w") as f:
            f.write("\n".join(names) + "\n")
        return self.pods.driver_home(hostfile_lines, wait_timeout=20, wrap=wrap, HVD_WORKER_SERVICE=service,
                                     HVD_NAMESPACE=NAMESPACE, HVD_KNOWN_HOSTS_NAMES=known)

    def leftovers(self):
        """Processes in any namespace other than the pods' entrypoint and
        sshd daemons and netns_hosts' own sshd."""
        left = []
        for ns, pid, cmd in self.hosts.leftovers():
            if ENTRYPOINT in cmd or re.match(r"(sshd: )?\S*sshd -D -e -f ", cmd):
                continue
            left.append((ns, pid, cmd))
        return left

    def driver_leftovers(self):
        """Driver-side processes of the job (mpirun, ssh, discovery...):
        any process naming the test directory, except the pods' sshd."""
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            cmd = netns_hosts.proc_cmdline(int(name))
            if self.dir in cmd and not re.match(r"(sshd: )?\S*sshd -D -e -f ", cmd):
                found.append((int(name), cmd))
        return found

    def assert_nothing_left(self, job_text=""):
        end = time.monotonic() + 10
        while (self.leftovers() or self.driver_leftovers()) and time.monotonic() < end:
            time.sleep(0.1)
        self.assertEqual(self.leftovers(), [], job_text[-4000:])
        self.assertEqual(self.driver_leftovers(), [], job_text[-4000:])

    def kill_pod(self, i):
        """Kubernetes deleting pod i's containers: the entrypoint gets
        SIGTERM, then everything else in the pod (its sshd's sessions and
        the workers they run) is killed. netns_hosts' own sshd is test
        scaffolding, not part of the pod, and stays."""
        self.assertEqual(self.pods.stop_worker(i, timeout=5), 0)
        left = netns_hosts.kill_namespace_processes(self.hosts.namespaces[i], keep=(self.hosts.sshd[i].pid,),
                                                    rounds=40)
        self.assertEqual(left, [])

    # ---- 1. the static walkthrough ------------------------------------------
    def test_static(self):
        if shutil.which("mpirun") is None:
            skip("Open MPI's mpirun not installed (the walkthrough's --mpi-args select it)")
        hosts, pods = self.start_pods(2, running=[0, 1], hostnames=[pod_name(i) for i in range(2)])
        names = {i: [dns_name(i), f"{dns_name(i)}.{NAMESPACE}.svc"] for i in range(2)}
        wrap = self.driver_ns(self.write_etc_hosts(names))
        # The chart's generated hostfile (ConfigMap key `hostfile`).
        self.make_driver_home([f"{dns_name(i)} slots={SLOTS}" for i in range(2)], [dns_name(i) for i in range(2)],
                              wrap)
        shutil.copy(TRAIN, os.path.join(self.dir, "train.py"))
        argv = [HOROVODRUN, "-n", "4", "--hostfile", pods.hostfile, "--mpi-args", MPI_ARGS,
                "bash", "-c", "python3 train.py"]
        job = Job(wrap + argv, self.driver_env(), cwd=self.dir)
        self.jobs.append(job)
        rc = job.wait(60)
        out = job.text()
        self.assertEqual(rc, 0, out)
        self.assertNotIn("[hvdrun] [info]", out)  # quiet on success, as horovodrun
        self.assertRegex(out, r"Data for JOB|JOB MAP")  # --display-map reached mpirun
        # --timestamp-output, --tag-output: "<date>[jobid,rank]<stdout>:rank ..."
        # (Open MPI 4.1 may run two tagged lines together on one line)
        results = {int(m.group(2)): m.groups() for m in re.finditer(r"\[\d+,(\d+)\]<stdout>:" + RESULT.pattern, out)}
        self.assertEqual(sorted(results), [0, 1, 2, 3], out)
        for rank, (tag, r, size, local, local_size, pod, host, total) in results.items():
            self.assertEqual(pod, pod_name(rank // 2), out)
            self.assertEqual(int(tag), rank, out)
            self.assertEqual((int(size), int(local_size), float(total)), (4, 2, 10.0), out)
            # -map-by slot over "pod0 slots=2, pod1 slots=2": ranks 0,1 on pod 0, 2,3 on pod 1
            self.assertEqual(host, hosts.addrs[rank // 2], out)
            self.assertEqual(int(local), rank % 2, out)
        self.assertRegex(out, r"\d\d:\d\d:\d\d \d{4}\[\d+,0\]<stdout>:rank 0 ")  # --timestamp-output
        for i in range(2):
            self.assertIn("Accepted publickey for root", pods.log(i), pods.log(i))
        self.assert_nothing_left(out)

    # ---- 2. the elastic walkthrough ----------------------------------------
    def api_server(self):
        api = FakeApiServer(os.path.join(self.dir, "api")).start()
        self.addCleanup(api.stop)
        return api

    def add_pod(self, api, i, name_index):
        api.add_pod(pod_name(name_index), labels=LABELS, ip=self.hosts.addrs[i], ready=True, subdomain=WORKERS,
                    hostname=pod_name(name_index))

    def elastic(self, discovery, max_np, change):
        """An elastic job over pods 0 and 1 (namespaces 0, 1); `change`:
        "replace" (pod 1 deleted and recreated under its name, as a
        StatefulSet does), "crash" (pod 1's container killed and restarted in
        place) or "add" (pod 2 created in namespace 2)."""
        if discovery == "script" and find_tool("kubectl") is None:
            skip("kubectl not found (scripts/setup.sh installs kubernetes-client)")
        hosts, pods = self.start_pods(3, running=[0, 1], hostnames=[pod_name(i) for i in range(3)])
        api = self.api_server()
        kubeconfig = api.write_kubeconfig(os.path.join(self.dir, "kubeconfig"))
        for i in (0, 1):
            self.add_pod(api, i, i)
        names = {i: [dns_name(i), f"{dns_name(i)}.{NAMESPACE}.svc"] for i in range(3)}
        wrap = self.driver_ns(self.write_etc_hosts(names))
        # known-hosts-names: every name up to the largest size (the chart's elastic.maxReplicas)
        self.make_driver_home([f"{dns_name(i)} slots={SLOTS}" for i in range(2)], [dns_name(i) for i in range(3)],
                              wrap)
        env = self.driver_env(KUBECONFIG=kubeconfig)
        if discovery == "script":
            # The chart's ConfigMap key discover_hosts.sh (hvd-discover-hosts
            # is scripts/kubernetes/discover_hosts.sh in the image).
            wrapper = os.path.join(self.dir, "discover_hosts.sh")
            with open(wrapper, "w") as f:
                f.write("#!/bin/sh\n"
                        f"exec {DISCOVER} -l '{SELECTOR}' -n {NAMESPACE} --service {WORKERS} --slots {SLOTS} "
                        f"--kubectl {find_tool('kubectl')} \"$@\"\n")
            os.chmod(wrapper, 0o755)
            source = ["--host-discovery-script", wrapper]
        else:  # the chart's elastic-command with elastic.discovery=builtin
            source = ["--kubernetes-selector", SELECTOR, "--kubernetes-namespace", NAMESPACE,
                      "--kubernetes-slots", str(SLOTS), "--kubernetes-host-names", "dns"]
        trainer = shlex.join(["python3", ELASTIC] + TRAIN_ARGS + ["--step-sleep", "0.25"])
        argv = [HOROVODRUN, "-np", "4", "--min-np", "4", "--max-np", str(max_np)] + source + \
            ["--mpi-args", MPI_ARGS, "bash", "-c", trainer]

        # The fault-free reference, beside the job.
        ref = subprocess.Popen([PY, ELASTIC] + TRAIN_ARGS, env=dict(os.environ, PYTHONPATH=PYTHONPATH),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.addCleanup(lambda: ref.poll() is None and ref.kill())
        job = Job(wrap + argv, env, cwd=self.dir)
        self.jobs.append(job)

        inode = {i: ns_inode(ns) for i, ns in enumerate(hosts.namespaces)}
        pod_of = {}  # trainer pid -> namespace index (seen while it ran)

        def commits():
            found = [tuple(int(x) for x in m.groups()) for m in COMMIT.finditer(job.text())]
            for *_, pid in found:
                if pid not in pod_of:
                    ino = pid_netns(pid)
                    pod_of[pid] = next((i for i, n in inode.items() if n == ino), None)
            return found

        deadline = time.monotonic() + 75
        acted_at = None
        while job.proc.poll() is None:
            if time.monotonic() > deadline:
                job.kill()
                self.fail(f"the elastic job did not finish in time:\n{job.text()}")
            lines = commits()
            if acted_at is None and len({ln[3] for ln in lines if ln[2] == 4}) == 4 and \
                    sum(1 for ln in lines if ln[2] == 4) >= 8:
                acted_at = len(lines)
                if change == "replace":
                    api.terminate(pod_name(1))  # kubectl delete pod: deletionTimestamp first ...
                    self.kill_pod(1)  # ... the kubelet kills the containers ...
                    # ... the pod object goes, and the StatefulSet controller
                    # creates it again under the same name (a new UID), not
                    # Ready until its sshd is (a fresh emptyDir: new_pod).
                    api.recreate(pod_name(1))
                    pods.start_worker(1, new_pod=True, hostname=pod_name(1))
                    api.set_ready(pod_name(1))
                elif change == "crash":
                    # The container dies at once (OOM kill: SIGKILL, no API
                    # event first); hvdrun's connections drop and its retries
                    # are refused until the kubelet has restarted it.
                    self.assertEqual(pods.stop_worker(1, sig=signal.SIGKILL, timeout=5), -signal.SIGKILL)
                    self.assertEqual(netns_hosts.kill_namespace_processes(
                        self.hosts.namespaces[1], keep=(self.hosts.sshd[1].pid,), rounds=40), [])
                    time.sleep(1.5)
                    api.restart(pod_name(1))  # restartCount + 1, not Ready
                    time.sleep(1.5)  # CrashLoopBackOff's first delay is longer; hvdrun retries meanwhile
                    # The same emptyDir (the same host key); its sshd.pid is
                    # stale (the readiness probe sees no sshd behind it), so
                    # start_worker waits for the new sshd's ready line.
                    os.unlink(os.path.join(pods.sshd_dir(1), "sshd.pid"))
                    pods.start_worker(1, hostname=pod_name(1))
                    api.set_ready(pod_name(1))
                else:
                    pods.start_worker(2, hostname=pod_name(2))
                    self.add_pod(api, 2, 2)
            time.sleep(0.05)
        rc = job.wait(10)
        out = job.text()
        lines = commits()
        ref_out = ref.communicate(timeout=30)[0]
        self.assertEqual(rc, 0, out)
        self.assertIsNotNone(acted_at, "the job ended before the pod change:\n" + out)

        # Every process commits consecutive steps (never back, never a gap);
        # someone trained from the first commit to the last.
        by_pid = {}
        for _, step, _, _, pid in lines:
            by_pid.setdefault(pid, []).append(step)
        for pid, steps in by_pid.items():
            for a, b in zip(steps, steps[1:]):
                self.assertEqual(b, a + COMMIT_EVERY, f"pid {pid} went from step {a} to {b}:\n{out}")
        self.assertTrue(any(s[0] == COMMIT_EVERY and s[-1] == TOTAL_STEPS for s in by_pid.values()), out)
        before, after = lines[:acted_at], lines[acted_at:]
        self.assertEqual({pod_of[ln[4]] for ln in before}, {0, 1}, out)
        want = 6 if change == "add" else 4
        grown = [ln for ln in after if ln[2] == want]
        self.assertTrue(grown, f"not back at size {want} after the change:\n{out}")
        newcomers = {ln[4] for ln in grown} - {ln[4] for ln in before}
        new_pod = 2 if change == "add" else 1
        self.assertEqual({pod_of[p] for p in newcomers}, {new_pod}, f"new workers not on the new pod:\n{out}")
        self.assertEqual(len(newcomers), SLOTS, out)
        self.assertNotIn("blacklisted", out)
        if change != "add":
            gone = {ln[4] for ln in before if pod_of[ln[4]] == 1}
            # (with the built-in discovery's watch hvdrun may stop them itself
            # as soon as the pod is terminating, before the kill)
            self.assertEqual(len(gone), SLOTS, out)
            self.assertFalse(gone & {ln[4] for ln in after[1:]}, "a killed worker printed after the kill:\n" + out)
            self.assertEqual(max(ln[2] for ln in after), 4, out)
            # it went on from its last commit: the survivors' next step follows theirs
            last = max(ln[1] for ln in before)
            self.assertLessEqual(min(ln[1] for ln in after), last + COMMIT_EVERY, out)
        # the result equals the fault-free run's
        m, r = FINAL.search(out), FINAL.search(ref_out)
        self.assertTrue(m and r, out + "\n--- reference:\n" + ref_out)
        self.assertEqual(int(m.group(1)), TOTAL_STEPS)
        self.assertEqual(int(r.group(1)), TOTAL_STEPS)
        self.assertAlmostEqual(float(m.group(2)), float(r.group(2)), delta=1e-9 * max(1.0, abs(float(r.group(2)))))
        self.assert_nothing_left(out)
        if os.environ.get("HVD_TEST_VERBOSE"):
            print(out, flush=True)
        print(f"elastic {discovery} {change}: ok, sizes {sorted({ln[2] for ln in lines})}, "
              f"{len(by_pid)} processes, checksum {m.group(2)}", flush=True)

    def test_elastic_script_pod_replaced(self):
        self.elastic("script", max_np=4, change="replace")

    def test_elastic_script_pod_added(self):
        self.elastic("script", max_np=6, change="add")

    def test_elastic_script_pod_crashed(self):
        self.elastic("script", max_np=4, change="crash")

    def test_elastic_builtin_pod_replaced(self):
        self.elastic("builtin", max_np=4, change="replace")

    def test_elastic_builtin_pod_crashed(self):
        self.elastic("builtin", max_np=4, change="crash")

    # ---- 3. the Kubeflow route ----------------------------------------------
    def test_kubeflow(self):
        if shutil.which("mpiexec") is None:
            skip("Open MPI's mpiexec not installed")
        with open(MPIJOB) as f:
            job_doc = next(d for d in yaml.safe_load_all(f) if d and d.get("kind") == "MPIJob")
        name = job_doc["metadata"]["name"]
        launcher = job_doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
        cmd = list(launcher["command"]) + list(launcher.get("args", []))
        launcher_env = {e["name"]: e["value"] for e in launcher.get("env", [])}
        # The operator's /etc/mpi/hostfile for 2 workers with slotsPerWorker 2.
        op_names = [f"{name}-worker-{i}.{name}.{NAMESPACE}.svc" for i in range(2)]
        hosts, pods = self.start_pods(2, running=[0, 1], hostnames=[n.split(".")[0] for n in op_names],
                                      host_key=False)
        wrap = self.driver_ns(self.write_etc_hosts({i: [op_names[i]] for i in range(2)}))
        # Per-pod host keys as in the manifest (the operator has no release
        # host key): the driver role trusts nothing, the launcher's
        # OMPI_MCA_plm_rsh_args (accept-new) records each worker's key.
        self.make_driver_home([f"{n} slots=2" for n in op_names], op_names, wrap, service=name)
        hostfile = os.path.join(self.dir, "mpi-hostfile")
        with open(hostfile, "w") as f:
            f.write("".join(f"{n} slots=2\n" for n in op_names))
        # The manifest's line with this test's -np, hostfile and script.
        self.assertEqual(cmd[0], "mpiexec")
        cmd[cmd.index("-np") + 1] = "4"
        cmd[cmd.index("--hostfile") + 1] = hostfile
        self.assertEqual(cmd[-2:-1], ["-c"])
        cmd[-1] = "python3 train.py"
        self.assertEqual(cmd[-3:-1], ["sh", "-c"])
        for flags in (["-bind-to", "none"], ["-map-by", "slot"], ["-mca", "pml", "ob1"], ["-mca", "btl", "^openib"],
                      ["-x", "NCCL_DEBUG"], ["--allow-run-as-root"]):
            self.assertIn(" ".join(flags), " ".join(cmd))
        shutil.copy(TRAIN, os.path.join(self.dir, "train.py"))
        # What the MPI operator (v2, OpenMPI) adds to the launcher's env,
        # then the manifest's own env.
        operator_env = {"OMPI_MCA_orte_keep_fqdn_hostnames": "true", "OMPI_MCA_orte_default_hostfile": hostfile,
                        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
        env = self.driver_env(**operator_env, **launcher_env)
        # The image has python3 with torch and the packages installed; here
        # the ranks need PYTHONPATH to the build's packages.
        # mpiexec's -x (the manifest's NCCL_DEBUG) cannot be mixed with the
        # mca_base_env_list parameter, so they reach the ranks through the
        # environment of the orted's that start them (orte_launch_agent), and
        # the command line stays the manifest's.
        env["OMPI_MCA_orte_launch_agent"] = shlex.join(
            ["env", f"PYTHONPATH={PYTHONPATH}", "orted"])
        job = Job(wrap + cmd, env, cwd=self.dir)
        self.jobs.append(job)
        rc = job.wait(60)
        out = job.text()
        self.assertEqual(rc, 0, out)
        results = {int(m.group(1)): m.groups() for m in RESULT.finditer(out)}
        self.assertEqual(sorted(results), [0, 1, 2, 3], out)
        for rank, (r, size, local, local_size, pod, host, total) in results.items():
            self.assertEqual(pod, op_names[rank // 2].split(".")[0], out)
            self.assertEqual((int(size), int(local_size), float(total)), (4, 2, 10.0), out)
            self.assertEqual(host, hosts.addrs[rank // 2], out)
            self.assertEqual(int(local), rank % 2, out)
        # accept-new recorded both workers' per-pod keys
        known = os.path.join(pods.home, ".ssh", "known_hosts")
        for n in op_names:  # (hashed: Debian's ssh_config has HashKnownHosts yes)
            r = subprocess.run(["ssh-keygen", "-F", f"[{n}]:{PORT}", "-f", known], capture_output=True, text=True)
            self.assertIn("ssh-ed25519", r.stdout, f"{n}: no key recorded in {known}")
        self.assert_nothing_left(out)


if __name__ == "__main__":
    # (sys.exit inside a test would be reported as an error, exit 1)
    result = unittest.main(exit=False).result
    if result.testsRun and len(result.skipped) == result.testsRun:
        sys.exit(77)
    sys.exit(0 if result.wasSuccessful() else 1)
