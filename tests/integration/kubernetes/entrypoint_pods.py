"""Worker "pods" for end-to-end tests: the network-namespace hosts of
tests/integration/netns/netns_hosts.py, each running the image's entrypoint
(conf/docker/entrypoint.sh worker) as a Kubernetes worker pod would, with a
chart-like SSH secret (user key + one host key for the "release", PEM EC
keys like the chart's genPrivateKey "ecdsa"), and the driver's ~/.ssh
(key, config, known_hosts) made by the entrypoint's driver role.

    with NetnsHosts(count=2) as hosts, EntrypointPods(hosts, port=2022) as pods:
        home = pods.driver_home(hostfile_lines=[f"{a} slots=2" for a in hosts.addrs])
        run hvdrun ... --hostfile pods.hostfile -p 2022 with HOME=home
        pods.stop_worker(1); pods.start_worker(1)   # "pod replaced": same host key

Everything lives in one directory under `base` (default: the current
directory, i.e. the CTest build directory: sshd's StrictModes refuses
world-writable ancestors such as /tmp), removed by stop(). The machine's own
sshd configuration and ~/.ssh are never touched. netns_hosts' own sshd keeps
ports 22 and 2222; pick another port (default 2022).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ENTRYPOINT = os.path.join(REPO, "conf", "docker", "entrypoint.sh")


def pem_key(path):
    """A PEM "EC PRIVATE KEY" (P-256), the format of the chart's genPrivateKey "ecdsa"."""
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path], check=True)
    os.chmod(path, 0o600)
    return path


class EntrypointPods:
    def __init__(self, hosts, port=2022, base=None, host_key=True, start=None, hostnames=None, pod_root=True):
        """start: the namespace indices whose worker runs from __enter__
        (default: all); the others are pods created later (start_worker).
        hostnames: namespace index -> the pod's host name (its own UTS
        namespace, as a pod has; default: the machine's, shared).
        pod_root: the worker runs in a mount namespace of its own where an
        empty directory is /root, as in an image (sshd's sessions then run
        no dotfiles of this machine's root, e.g. a pyenv `rehash` whose lock
        a killed pod would leave behind)."""
        self.hosts = hosts
        self.hostnames = dict(hostnames or {})
        self.pod_root = pod_root
        self.start_on_enter = list(range(len(hosts.namespaces))) if start is None else list(start)
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="hvd-pods-", dir=base or os.getcwd())
        self.secret = os.path.join(self.dir, "secret")
        os.makedirs(self.secret)
        pem_key(os.path.join(self.secret, "ssh-privatekey"))
        if host_key:
            pem_key(os.path.join(self.secret, "host-privatekey"))
        self.hostfile = os.path.join(self.dir, "hostfile")
        self.home = os.path.join(self.dir, "home")
        self.workers = {}  # index -> Popen
        self.logs = {}

    # ---- lifecycle -------------------------------------------------------
    def __enter__(self):
        try:
            for i in self.start_on_enter:
                self.start_worker(i, hostname=self.hostnames.get(i))
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith("HVD_")}
        env.update(HVD_SSH_PORT=str(self.port), HVD_SSH_SECRET_DIR=self.secret, HVD_HOSTFILE=self.hostfile,
                   HVD_SSH_HOME=self.home)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def sshd_dir(self, i):
        return os.path.join(self.dir, f"sshd-{i}")

    def start_worker(self, i, timeout=20, new_pod=False, hostname=None):
        """Starts `hvd-entrypoint worker` in namespace i; returns its ready
        line. new_pod: a replacement pod (a fresh emptyDir for sshd's files,
        so without the release host key it generates a new one). hostname:
        the pod's host name, in a UTS namespace of its own (sshd's sessions
        inherit it); needed when several ranks per pod use shared memory
        named after the host name (Open MPI's vader segments in /dev/shm)."""
        if new_pod:
            shutil.rmtree(self.sshd_dir(i), ignore_errors=True)
        log = open(os.path.join(self.dir, f"worker-{i}.log"), "a+")
        wrap = []
        if hostname or self.pod_root:
            root = os.path.join(self.dir, f"root-{i}")
            os.makedirs(root, mode=0o700, exist_ok=True)
            wrap = ["unshare"] + (["--uts"] if hostname else []) + (["--mount"] if self.pod_root else []) + [
                "sh", "-c", '{ [ -z "$0" ] || hostname "$0"; } && { [ -z "$1" ] || mount --bind "$1" /root; } && '
                'shift && exec "$@"', hostname or "", root if self.pod_root else ""]
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts.namespaces[i]] + wrap + [ENTRYPOINT, "worker"],
                             env=self.env(HVD_SSHD_DIR=self.sshd_dir(i)), stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT)
        self.workers[i] = p
        self.logs[i] = log
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            with open(log.name) as f:
                for line in f:
                    if "worker ready" in line and self._newest_ready(line, i):
                        return line.strip()
            if p.poll() is not None:
                raise RuntimeError(f"worker {i} exited with {p.returncode}:\n{self.log(i)}")
            time.sleep(0.05)
        raise RuntimeError(f"worker {i} not ready within {timeout} s:\n{self.log(i)}")

    def _newest_ready(self, line, i):
        try:
            with open(os.path.join(self.sshd_dir(i), "sshd.pid")) as f:
                return f"(pid {int(f.read().strip())})" in line
        except (OSError, ValueError):
            return False

    def log(self, i):
        with open(os.path.join(self.dir, f"worker-{i}.log")) as f:
            return f.read()

    def stop_worker(self, i, sig=signal.SIGTERM, timeout=10):
        """Stops worker i (SIGTERM: as kubelet does); returns the entrypoint's exit status."""
        p = self.workers.pop(i, None)
        if p is None:
            return None
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._kill_sshd(i)
        self.logs.pop(i).close()
        return p.returncode

    def _kill_sshd(self, i):
        try:
            with open(os.path.join(self.sshd_dir(i), "sshd.pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"sshd" in f.read():
                    os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass

    def stop(self):
        for i in list(self.workers):
            self.stop_worker(i)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- the driver ----------------------------------------------------------
    def driver_home(self, hostfile_lines=None, wait_timeout=20, wrap=(), **extra_env):
        """Writes the hostfile (default: every namespace address, slots=1),
        runs `hvd-entrypoint driver true` (waits until every worker answers,
        writes ~/.ssh) and returns the HOME to give hvdrun. wrap: an argv
        prefix the driver runs under (e.g. a mount namespace whose
        /etc/hosts resolves the hostfile's names)."""
        lines = hostfile_lines or [f"{a} slots=1" for a in self.hosts.addrs]
        with open(self.hostfile, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.makedirs(self.home, exist_ok=True)
        r = subprocess.run(list(wrap) + [ENTRYPOINT, "driver", "true"],
                           env=self.env(HVD_WAIT_TIMEOUT=wait_timeout, **extra_env), capture_output=True, text=True, timeout=wait_timeout + 30, stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            raise RuntimeError(f"hvd-entrypoint driver failed ({r.returncode}):\n{r.stderr}")
        return self.home
