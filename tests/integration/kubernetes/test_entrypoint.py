#!/usr/bin/env python3
"""The image's entrypoint (conf/docker/entrypoint.sh) for real: its worker
role runs a real sshd inside a network namespace (tests/integration/netns,
198.18.X.0/24), its driver role runs here, in the root namespace, and talks to
it over the bridge. Every path the entrypoint uses is redirected into a
temporary directory under the build tree (sshd's StrictModes refuses
world-writable ancestors such as /tmp), so the machine's own sshd
configuration is never read or written.

Keys are PEM "EC PRIVATE KEY" files made with openssl: the format the chart's
genPrivateKey "ecdsa" produces (test_chart.py checks that).

Needs root and `ip netns`; prints SKIPPED and exits 77 otherwise.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration", "netns"))
sys.path.insert(0, HERE)
import netns_hosts  # noqa: E402

ENTRYPOINT = os.path.join(REPO, "conf", "docker", "entrypoint.sh")
HVDRUN = os.environ.get("HVDRUN", os.path.join(REPO, "build", "apps", "hvdrun", "hvdrun"))
PORT = 2022  # netns_hosts' own sshd uses 22 and 2222 in the same namespaces


def pem_key(path):
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", path], check=True)
    os.chmod(path, 0o600)
    return path


def public_of(path):
    return subprocess.run(["ssh-keygen", "-y", "-f", path], check=True, capture_output=True, text=True).stdout.strip()


def fingerprint_of_pub(pub_line):
    r = subprocess.run(["ssh-keygen", "-l", "-f", "-"], input=pub_line + "\n", capture_output=True, text=True,
                       check=True)
    return r.stdout.split()[1]


class EntrypointTest(unittest.TestCase):
    hosts = None

    @classmethod
    def setUpClass(cls):
        netns_hosts.skip_unless_available()
        cls.hosts = netns_hosts.NetnsHosts(count=2)
        cls.hosts.__enter__()
        cls.addr = cls.hosts.addrs[0]
        cls.addr2 = cls.hosts.addrs[1]

    @classmethod
    def tearDownClass(cls):
        if cls.hosts:
            cls.hosts.__exit__(None, None, None)

    def setUp(self):
        base = os.environ.get("HVD_TEST_TMPDIR") or os.getcwd()
        self.tmp = tempfile.mkdtemp(prefix="hvd-entrypoint-", dir=base)
        self.secret = os.path.join(self.tmp, "secret")
        os.makedirs(self.secret)
        pem_key(os.path.join(self.secret, "ssh-privatekey"))
        pem_key(os.path.join(self.secret, "host-privatekey"))
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()  # the worker role stops its sshd on SIGTERM
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        for root, _, files in os.walk(self.tmp):  # an sshd whose entrypoint was SIGKILLed
            if "sshd.pid" in files:
                try:
                    with open(os.path.join(root, "sshd.pid")) as f:
                        pid = int(f.read().strip())
                    if "sshd" in netns_hosts.proc_cmdline(pid):
                        os.kill(pid, signal.SIGKILL)
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- helpers -----------------------------------------------------------
    def env(self, **extra):
        env = dict(os.environ)
        for k in list(env):
            if k.startswith("HVD_") and k != "HVD_TEST_TMPDIR":
                del env[k]
        env.update({"HVD_SSH_PORT": str(PORT), "HVD_SSH_SECRET_DIR": self.secret,
                    "HVD_SSHD_DIR": os.path.join(self.tmp, "sshd"),
                    "HVD_SSH_HOME": os.path.join(self.tmp, "home"),
                    "HVD_HOSTFILE": os.path.join(self.tmp, "hostfile")})
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start_worker(self, ns=0, **extra):
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts.namespaces[ns], ENTRYPOINT, "worker"],
                             env=self.env(**extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def wait_ready(self, p, timeout=15):
        end = time.monotonic() + timeout
        lines = []
        while time.monotonic() < end:
            line = p.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "worker ready" in line:
                return line
        self.fail("worker not ready:\n" + "".join(lines))

    def stop(self, p, sig=signal.SIGTERM):
        p.send_signal(sig)
        out, err = p.communicate(timeout=15)
        return p.returncode, err

    def write_hostfile(self, hosts):
        with open(os.path.join(self.tmp, "hostfile"), "w") as f:
            f.write("# generated\n")
            for h in hosts:
                f.write(f"{h} slots=1\n")

    def driver(self, *cmd, timeout=60, **extra):
        return subprocess.run([ENTRYPOINT, "driver", *cmd], env=self.env(**extra), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def ssh(self, *args, key=None, known_hosts=None, host=None):
        cmd = ["ssh", "-F", "/dev/null", "-p", str(PORT), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
               "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={known_hosts or os.path.join(self.tmp, 'home', '.ssh', 'known_hosts')}"]
        if key:
            cmd += ["-i", key]
        cmd += ["-l", "root", host or self.addr, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)

    def ssh_background(self, key, command):
        """A login session running `command`, left running (Popen)."""
        return subprocess.Popen(["ssh", "-F", "/dev/null", "-p", str(PORT), "-o", "BatchMode=yes", "-o",
                                 "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes", "-o",
                                 f"UserKnownHostsFile={os.path.join(self.tmp, 'home', '.ssh', 'known_hosts')}",
                                 "-i", key, "-l", "root", self.addr, command],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)

    def sshd_pid(self):
        with open(os.path.join(self.tmp, "sshd", "sshd.pid")) as f:
            return int(f.read().strip())

    # ---- worker ------------------------------------------------------------
    def test_worker_key_only_login_with_the_release_host_key(self):
        w = self.start_worker()
        ready = self.wait_ready(w)
        host_fp = fingerprint_of_pub(public_of(os.path.join(self.secret, "host-privatekey")))
        self.assertIn(host_fp, ready)
        self.assertIn(f"port {PORT}", ready)
        st = os.stat(os.path.join(self.tmp, "sshd", "authorized_keys"))
        self.assertEqual(st.st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.join(self.tmp, "sshd")).st_mode & 0o777, 0o700)
        with open(os.path.join(self.tmp, "sshd", "sshd_config")) as f:
            cfg = f.read()
        self.assertIn("PasswordAuthentication no", cfg)
        self.assertIn("KbdInteractiveAuthentication no", cfg)
        self.assertIn("PermitRootLogin prohibit-password", cfg)
        # The driver role writes ~/.ssh (key, config, known_hosts) for this host.
        self.write_hostfile([self.addr])
        d = self.driver("true", HVD_WAIT_TIMEOUT=10)
        self.assertEqual(d.returncode, 0, d.stderr)
        dot = os.path.join(self.tmp, "home", ".ssh")
        key = os.path.join(dot, "id_ecdsa")
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        with open(os.path.join(dot, "known_hosts")) as f:
            kh = f.read()
        self.assertIn(f"[{self.addr}]:{PORT} ecdsa-sha2-nistp256 ", kh)
        # Right key, host key checked against the generated known_hosts: in.
        r = self.ssh("echo", "in-the-worker", key=key)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "in-the-worker")
        # Wrong key: refused.
        r = self.ssh("true", key=self.hosts.wrong_key)
        self.assertEqual(r.returncode, 255)
        self.assertIn("Permission denied (publickey)", r.stderr)
        # Passwords / keyboard-interactive: not even offered.
        r = subprocess.run(["ssh", "-F", "/dev/null", "-p", str(PORT), "-o", "BatchMode=yes", "-o",
                            "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive",
                            "-o", f"UserKnownHostsFile={os.path.join(dot, 'known_hosts')}", "-o",
                            "StrictHostKeyChecking=yes", "-l", "root", self.addr, "true"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 255)
        self.assertIn("Permission denied (publickey)", r.stderr)
        # A known_hosts with another key for the host: the client refuses.
        other = os.path.join(self.tmp, "other_known_hosts")
        with open(other, "w") as f:
            f.write(f"[{self.addr}]:{PORT} {public_of(pem_key(os.path.join(self.tmp, 'other')))}\n")
        r = self.ssh("true", key=key, known_hosts=other)
        self.assertEqual(r.returncode, 255)
        self.assertIn("REMOTE HOST IDENTIFICATION HAS CHANGED", r.stderr)
        # SIGTERM (pod deletion): clean exit 0, sshd gone.
        pid = self.sshd_pid()
        rc, err = self.stop(w)
        self.assertEqual(rc, 0, err)
        self.assertIn("worker stopping", err)
        self.assertFalse(os.path.exists(f"/proc/{pid}") and "sshd" in netns_hosts.proc_cmdline(pid))

    def test_sessions_and_driver_command_keep_the_callers_umask(self):
        # The entrypoint writes its files with umask 077, but login sessions
        # (hvdrun's workers) and the driver command get the original one.
        mask = os.umask(0o022)
        os.umask(mask)
        self.wait_ready(self.start_worker())
        self.write_hostfile([self.addr])
        dot = os.path.join(self.tmp, "home", ".ssh")
        d = self.driver("sh", "-c", f"umask; ssh -F {dot}/config -o BatchMode=yes -o StrictHostKeyChecking=yes "
                                    f"-o UserKnownHostsFile={dot}/known_hosts -i {dot}/id_ecdsa -l root {self.addr} "
                                    "'umask; sh -c \"umask\"'", HVD_WAIT_TIMEOUT=10)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertEqual(d.stdout.split(), [f"{mask:04o}"] * 3)
        self.assertEqual(os.stat(os.path.join(dot, "id_ecdsa")).st_mode & 0o777, 0o600)
        self.assertEqual(os.stat(os.path.join(self.tmp, "sshd", "sshd_config")).st_mode & 0o077, 0)

    def test_worker_exits_nonzero_when_sshd_dies(self):
        w = self.start_worker()
        self.wait_ready(w)
        os.kill(self.sshd_pid(), signal.SIGKILL)
        out, err = w.communicate(timeout=10)
        self.assertEqual(w.returncode, 3, err)
        self.assertIn("sshd (pid", err)
        self.assertIn("died with status 137", err)

    def test_readiness_probe_reads_proc_and_opens_no_connection(self):
        """`hvd-entrypoint ready` (the chart's exec readiness probe), run in
        the worker's network namespace as the kubelet runs it in the pod:
        1 before sshd runs, 0 while it listens, 1 once it died; sshd logs
        nothing for any number of probes (a tcpSocket probe made it log two
        lines per probe)."""
        def probe():
            return subprocess.run(["ip", "netns", "exec", self.hosts.namespaces[0], ENTRYPOINT, "ready"],
                                  env=self.env(), capture_output=True, text=True, timeout=10)
        r = probe()
        self.assertEqual(r.returncode, 1)
        self.assertIn("not ready: no sshd pid file", r.stderr)
        w = self.start_worker()
        self.wait_ready(w)
        for _ in range(20):
            r = probe()
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "", ""))
        # Another port: nothing listens there.
        r = subprocess.run(["ip", "netns", "exec", self.hosts.namespaces[0], ENTRYPOINT, "ready"],
                           env=self.env(HVD_SSH_PORT=PORT + 1), capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        self.assertIn(f"not ready: nothing listens on port {PORT + 1}", r.stderr)
        # In another network namespace sshd's socket is not listed.
        r = subprocess.run(["ip", "netns", "exec", self.hosts.namespaces[1], ENTRYPOINT, "ready"],
                           env=self.env(), capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 1)
        pid = self.sshd_pid()
        code, err = self.stop(w)
        self.assertEqual(code, 0, err)
        # sshd logged no connection (-e: its log is the worker's stderr).
        self.assertNotIn("Connection", err)
        self.assertNotIn("connection", err.replace("key-only", ""))
        self.assertNotIn("Received disconnect", err)
        # The pid file outlives a dead sshd: the pid is checked.
        self.assertFalse(os.path.exists(f"/proc/{pid}") and "sshd" in netns_hosts.proc_cmdline(pid))
        r = probe()
        self.assertEqual(r.returncode, 1)
        self.assertTrue("is not running" in r.stderr or "no sshd pid file" in r.stderr, r.stderr)

    def test_worker_generates_its_host_key_once_per_pod(self):
        os.remove(os.path.join(self.secret, "host-privatekey"))
        # Only the public key in the secret this time (authorized as is).
        with open(os.path.join(self.secret, "ssh-publickey"), "w") as f:
            f.write(public_of(os.path.join(self.secret, "ssh-privatekey")) + "\n")
        os.remove(os.path.join(self.secret, "ssh-privatekey"))
        fps, readies = [], []
        for _ in range(2):  # container restart within the pod: same HVD_SSHD_DIR
            w = self.start_worker()
            ready = self.wait_ready(w)
            readies.append(ready)
            fps.append(ready.split("host key ")[1].split()[0])
            self.assertEqual(self.stop(w)[0], 0)
        self.assertIn("generated now", readies[0])
        self.assertIn("generated at this pod's first start", readies[1])
        self.assertIn("ssh-publickey", readies[0])
        self.assertEqual(fps[0], fps[1])
        self.assertTrue(fps[0].startswith("SHA256:"))
        w = self.start_worker(HVD_SSHD_DIR=os.path.join(self.tmp, "sshd-new-pod"))
        ready = self.wait_ready(w)
        self.assertIn("generated now", ready)
        self.assertNotEqual(ready.split("host key ")[1].split()[0], fps[0])
        self.assertEqual(self.stop(w)[0], 0)

    def start_worker_as_init(self, **extra):
        """The worker as a container's init: PID 1 of a new PID namespace
        (unshare), in the worker's network namespace. Returns (unshare's
        Popen, the entrypoint's pid as seen here)."""
        p = subprocess.Popen(["ip", "netns", "exec", self.hosts.namespaces[0], "unshare", "--pid", "--fork",
                              "--mount-proc", "--kill-child", ENTRYPOINT, "worker"],
                             env=self.env(**extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        self.wait_ready(p)
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        self.assertEqual(len(kids), 1, kids)
        return p, int(kids[0])

    def test_worker_as_init_waits_for_sessions_after_sigterm(self):
        # A terminating pod whose worker an elastic hvdrun drains: after
        # SIGTERM the listener goes, but the entrypoint (PID 1) keeps the
        # container up until the running session ends, bounded by
        # HVD_DRAIN_TIMEOUT.
        if not shutil.which("unshare"):
            self.skipTest("no unshare")
        self.write_hostfile([self.addr])
        p, init = self.start_worker_as_init(HVD_DRAIN_TIMEOUT=20)
        d = self.driver("true", HVD_WAIT_TIMEOUT=10)
        self.assertEqual(d.returncode, 0, d.stderr)
        key = os.path.join(self.tmp, "home", ".ssh", "id_ecdsa")
        session = self.ssh_background(key, "sleep 3; echo session-done")
        time.sleep(1.0)  # the session runs
        t0 = time.monotonic()
        os.kill(init, signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        took = time.monotonic() - t0
        s_out, s_err = session.communicate(timeout=10)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual((session.returncode, s_out.strip()), (0, "session-done"), s_err)
        self.assertIn("waiting up to 20 s (HVD_DRAIN_TIMEOUT)", err)
        self.assertIn("worker stopping: its sessions ended", err)
        self.assertGreater(took, 1.0)  # it waited for the session ...
        self.assertLess(took, 10.0)  # ... not for the timeout
        # A session that outlives HVD_DRAIN_TIMEOUT ends with the container.
        p, init = self.start_worker_as_init(HVD_DRAIN_TIMEOUT=1)
        session = self.ssh_background(key, "sleep 60")
        time.sleep(1.0)
        t0 = time.monotonic()
        os.kill(init, signal.SIGTERM)
        out, err = p.communicate(timeout=30)
        self.assertEqual(p.returncode, 0, err)
        self.assertLess(time.monotonic() - t0, 8.0)
        self.assertIn("still running after HVD_DRAIN_TIMEOUT=1 s", err)
        session.communicate(timeout=20)
        self.assertNotEqual(session.returncode, 0)
        # Not the container's init (as in the other tests): no waiting.
        w = self.start_worker(HVD_DRAIN_TIMEOUT=20)
        self.wait_ready(w)
        rc, err = self.stop(w)
        self.assertEqual(rc, 0, err)
        self.assertNotIn("waiting up to", err)

    def test_worker_configuration_errors(self):
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        w = self.start_worker(HVD_SSH_SECRET_DIR=empty)
        out, err = w.communicate(timeout=10)
        self.assertEqual(w.returncode, 2)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn("no public key to authorize", err)
        w = self.start_worker(HVD_SSH_PORT="70000")
        out, err = w.communicate(timeout=10)
        self.assertEqual(w.returncode, 2)
        self.assertIn("HVD_SSH_PORT='70000'", err)
        w = self.start_worker(HVD_DRAIN_TIMEOUT="1m")
        out, err = w.communicate(timeout=10)
        self.assertEqual(w.returncode, 2)
        self.assertIn("HVD_DRAIN_TIMEOUT='1m' is not a whole number of seconds", err)
        r = subprocess.run([ENTRYPOINT, "wrker"], capture_output=True, text=True, env=self.env())
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown role 'wrker'", r.stderr)

    # ---- driver ------------------------------------------------------------
    def test_driver_times_out_naming_each_missing_worker(self):
        self.write_hostfile([self.addr, self.hosts.unreachable])  # nothing on PORT / no host at all
        t0 = time.monotonic()
        d = self.driver("true", HVD_WAIT_TIMEOUT=3, HVD_WAIT_LOG_INTERVAL=1, HVD_PROBE_TIMEOUT=1)
        elapsed = time.monotonic() - t0
        self.assertEqual(d.returncode, 3, d.stderr)
        lines = d.stderr.splitlines()
        waiting_a = [line for line in lines if line.startswith(f"hvd-entrypoint: waiting for {self.addr}:{PORT} (")]
        waiting_b = [line for line in lines if
                     line.startswith(f"hvd-entrypoint: waiting for {self.hosts.unreachable}:{PORT} (")]
        self.assertGreaterEqual(len(waiting_a), 1, d.stderr)
        self.assertGreaterEqual(len(waiting_b), 1, d.stderr)
        self.assertIn("Connection refused", waiting_a[0])
        self.assertIn("no answer within 1 s", waiting_b[0])
        self.assertIn(f"error: 2 of 2 worker(s) did not answer on ssh port {PORT} within 3 s: "
                      f"{self.addr} {self.hosts.unreachable}", lines[-1])
        self.assertLess(elapsed, 10)

    def test_driver_sigterm_while_waiting(self):
        self.write_hostfile([self.addr])
        tmpdir = os.path.join(self.tmp, "tmpdir")
        os.makedirs(tmpdir)
        d = subprocess.Popen([ENTRYPOINT, "driver", "true"], env=self.env(HVD_WAIT_TIMEOUT=60, TMPDIR=tmpdir),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(d)
        self.wait_line(d, "waiting up to 60 s")
        time.sleep(1.5)
        t0 = time.monotonic()
        rc, err = self.stop(d)
        self.assertEqual(rc, 143, err)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(os.listdir(tmpdir), [])

    def test_driver_waits_then_runs_its_command_with_its_status(self):
        self.write_hostfile([self.addr, self.addr2])
        dot = os.path.join(self.tmp, "home", ".ssh")
        # The command logs into both workers with the generated config and
        # known_hosts (strict checking), then exits 7.
        script = ("set -e; for h in {a} {b}; do ssh -F {d}/config -o BatchMode=yes -o StrictHostKeyChecking=yes "
                  "-o UserKnownHostsFile={d}/known_hosts -l root $h echo up-$h; done; exit 7").format(
                      a=self.addr, b=self.addr2, d=dot)
        d = subprocess.Popen([ENTRYPOINT, "driver"], env=self.env(HVD_WAIT_TIMEOUT=30, HVD_WAIT_LOG_INTERVAL=1,
                                                                   HVD_PROBE_TIMEOUT=1, HVD_DRIVER_COMMAND=script),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(d)
        time.sleep(2.5)
        self.assertIsNone(d.poll())
        self.wait_ready(self.start_worker(0))
        self.wait_ready(self.start_worker(1, HVD_SSHD_DIR=os.path.join(self.tmp, "sshd1")))
        out, err = d.communicate(timeout=30)
        self.assertEqual(d.returncode, 7, err)
        self.assertEqual(out.split(), [f"up-{self.addr}", f"up-{self.addr2}"])
        self.assertIn(f"waiting for {self.addr}:{PORT} (Connection refused)", err)
        self.assertIn("all 2 worker(s) answer", err)

    def test_driver_runs_hvdrun_over_the_generated_ssh_setup(self):
        if not os.access(HVDRUN, os.X_OK):
            self.fail(f"{HVDRUN} not built")
        self.wait_ready(self.start_worker(0))
        self.write_hostfile([self.addr])
        # hvdrun finds ~/.ssh/id_ecdsa itself; -p as the chart's NOTES give it
        # for a non-22 port; strict host key checking against known_hosts.
        d = self.driver(HVDRUN, "-np", "2", "-H", f"{self.addr}:2", "-p", str(PORT),
                        "--ssh-strict-host-key-checking", "sh", "-c", "echo rank=$HOROVOD_RANK",
                        HOME=os.path.join(self.tmp, "home"), HVD_WAIT_TIMEOUT=10)
        self.assertEqual(d.returncode, 0, d.stdout + d.stderr)
        self.assertIn("rank=0", d.stdout)
        self.assertIn("rank=1", d.stdout)

    def test_driver_without_command_stays_up_until_sigterm(self):
        self.write_hostfile([self.addr])
        self.wait_ready(self.start_worker(0))
        d = subprocess.Popen([ENTRYPOINT, "driver"], env=self.env(HVD_WAIT_TIMEOUT=10), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.procs.append(d)
        self.assertIn("driver ready", self.wait_line(d, "driver ready"))
        time.sleep(0.5)
        self.assertIsNone(d.poll())
        rc, err = self.stop(d)
        self.assertEqual(rc, 0, err)

    def wait_line(self, p, text, timeout=20):
        end = time.monotonic() + timeout
        seen = []
        while time.monotonic() < end:
            line = p.stderr.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                return line
        self.fail(f"no line with {text!r}:\n" + "".join(seen))

    def test_driver_keeps_a_foreign_ssh_config(self):
        dot = os.path.join(self.tmp, "home", ".ssh")
        os.makedirs(dot)
        with open(os.path.join(dot, "config"), "w") as f:
            f.write("Host *\n  User alice\n")
        with open(os.path.join(dot, "known_hosts"), "w") as f:
            f.write("other.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
        self.write_hostfile(["w-0.job", "w-1.job"])
        for _ in range(2):  # idempotent: our lines replaced, others kept
            d = self.driver("true", HVD_WAIT_TIMEOUT=0, HVD_WORKER_SERVICE="job", HVD_NAMESPACE="ns1")
            self.assertEqual(d.returncode, 0, d.stderr)
        self.assertIn("exists and was not written by hvd-entrypoint: left unchanged", d.stderr)
        with open(os.path.join(dot, "config")) as f:
            self.assertEqual(f.read(), "Host *\n  User alice\n")
        with open(os.path.join(dot, "known_hosts")) as f:
            names = [line.split()[0] for line in f]
        self.assertEqual(names, ["other.example", "[w-0.job]:2022", "[w-0.job.ns1.svc]:2022",
                                 "[w-0.job.ns1.svc.cluster.local]:2022", "[w-1.job]:2022", "[w-1.job.ns1.svc]:2022",
                                 "[w-1.job.ns1.svc.cluster.local]:2022", "[*.job]:2022", "[*.job.ns1.svc]:2022",
                                 "[*.job.ns1.svc.cluster.local]:2022"])
        # Without a foreign config, ours: Port and IdentityFile only.
        os.remove(os.path.join(dot, "config"))
        d = self.driver("true", HVD_WAIT_TIMEOUT=0, HVD_WORKER_SERVICE="job", HVD_NAMESPACE="ns1")
        with open(os.path.join(dot, "config")) as f:
            cfg = [line.strip() for line in f if not line.startswith("#")]
        self.assertEqual(cfg, ["Host *.job *.job.ns1.svc *.job.ns1.svc.cluster.local", f"Port {PORT}",
                               f"IdentityFile {dot}/id_ecdsa"])

    def test_chart_rendered_pods_run_through_the_entrypoint(self):
        """The worker and driver containers exactly as the Helm chart renders
        them (args, env, the chart-generated Secret and ConfigMap), with only
        the mount paths moved into the test directory: the worker serves the
        release host key, and the driver's generated known_hosts trusts it
        under the hostfile's StatefulSet names (strict checking)."""
        import base64
        import yaml
        from k8s_tools import find_tool, skip
        helm = find_tool("helm")
        if helm is None:
            skip("helm not found ($HVD_TOOLS_DIR, <repo>/.tools, PATH); run scripts/setup.sh", cleanup=[self.tmp])
        out = subprocess.run([helm, "template", "train", os.path.join(REPO, "conf", "kubernetes", "hvdrun"),
                              "--namespace", "ml", "--set", f"ssh.port={PORT}"], capture_output=True, text=True,
                             check=True, env=dict(os.environ, HOME=self.tmp)).stdout
        docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}
        for k, v in docs[("Secret", "train-hvdrun-ssh")]["data"].items():
            path = os.path.join(self.secret, k)
            with open(path, "wb") as f:
                f.write(base64.b64decode(v))
            os.chmod(path, 0o400)  # the chart's defaultMode
        generated = os.path.join(self.tmp, "generated")
        os.makedirs(generated)
        for k, v in docs[("ConfigMap", "train-hvdrun-generated")]["data"].items():
            with open(os.path.join(generated, k), "w") as f:
                f.write(v)

        def container_env(pod_spec, moved):
            c = pod_spec["containers"][0]
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            env = {}
            for e in c["env"]:
                if "valueFrom" in e:
                    self.assertEqual(e["valueFrom"], {"fieldRef": {"fieldPath": "metadata.namespace"}})
                    env[e["name"]] = "ml"
                else:
                    env[e["name"]] = e["value"]
            # Every path variable points into a mounted volume; move it.
            for name, value in list(env.items()):
                if value.startswith("/"):
                    vol = [v for v, m in mounts.items() if value == m or value.startswith(m + "/")]
                    self.assertEqual(len(vol), 1, f"{name}={value} is in no mounted volume {mounts}")
                    env[name] = moved[vol[0]] + value[len(mounts[vol[0]]):]
                    self.assertTrue(vol[0] in ("sshd",) or os.path.exists(env[name]), f"{name}={value}")
            return c["args"], env

        moved = {"ssh-secret": self.secret, "generated": generated, "sshd": os.path.join(self.tmp, "sshd")}
        sts = docs[("StatefulSet", "train-hvdrun")]["spec"]["template"]["spec"]
        args, wenv = container_env(sts, moved)
        self.assertEqual(args, ["worker"])
        self.assertEqual(wenv["HVD_SSH_PORT"], str(PORT))
        w = subprocess.Popen(["ip", "netns", "exec", self.hosts.namespaces[0], "env", "-i",
                              *[f"{k}={v}" for k, v in {**wenv, "PATH": os.environ["PATH"]}.items()], ENTRYPOINT,
                              *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        self.procs.append(w)
        ready = self.wait_ready(w)
        self.assertIn(f"from {self.secret}/host-privatekey", ready)

        dep = docs[("Deployment", "train-hvdrun-driver")]["spec"]["template"]["spec"]
        args, denv = container_env(dep, moved)
        self.assertEqual(args, ["driver"])
        home = os.path.join(self.tmp, "home")
        names = ["train-hvdrun-0.train-hvdrun", "train-hvdrun-1.train-hvdrun"]
        cmd = " && ".join(
            f"ssh -F {home}/.ssh/config -p {PORT} -o BatchMode=yes -o StrictHostKeyChecking=yes "
            f"-i {home}/.ssh/id_ecdsa -o UserKnownHostsFile={home}/.ssh/known_hosts -o HostKeyAlias='[{alias}]:{PORT}' "
            f"-l root {self.addr} echo via-{alias}"
            for alias in names + ["train-hvdrun-1.train-hvdrun.ml.svc.cluster.local"])
        # The hostfile's names do not resolve here: no waiting, the command
        # connects to the worker's address and checks its key against the
        # known_hosts entries of those names (HostKeyAlias, which ssh uses
        # verbatim, without the [name]:port form: so the alias spells it).
        # ssh reads the passwd home's ~/.ssh, not $HOME's: files named here.
        d = subprocess.run(["env", "-i", *[f"{k}={v}" for k, v in {
            **denv, "PATH": os.environ["PATH"], "HOME": home, "HVD_WAIT_TIMEOUT": "0"}.items()],
            ENTRYPOINT, *args, "bash", "-c", cmd], capture_output=True, text=True, timeout=60,
            stdin=subprocess.DEVNULL)
        self.assertEqual(d.returncode, 0, d.stderr)
        self.assertEqual(d.stdout.split(), [f"via-{n}" for n in names + [
            "train-hvdrun-1.train-hvdrun.ml.svc.cluster.local"]])
        with open(os.path.join(home, ".ssh", "config")) as f:
            cfg = f.read()
        self.assertIn("Host *.train-hvdrun *.train-hvdrun.ml.svc *.train-hvdrun.ml.svc.cluster.local", cfg)
        self.assertIn(f"Port {PORT}", cfg)
        self.assertNotIn("StrictHostKeyChecking", cfg)
        # An unknown name is refused under strict checking: nothing is trusted blindly.
        r = self.ssh("true", key=os.path.join(home, ".ssh", "id_ecdsa"), host=self.addr,
                     known_hosts=os.path.join(home, ".ssh", "known_hosts"))
        self.assertEqual(r.returncode, 255)
        self.assertIn("No ECDSA host key is known", r.stderr)

    def test_replaced_pod_keeps_the_release_host_key(self):
        """hvdrun over two entrypoint "pods" (entrypoint_pods.py) with strict
        host key checking; a pod replaced by a new one (fresh sshd directory)
        is still accepted because the host key is the release's. Without it
        (per-pod keys) hvdrun records the first key and refuses the new
        pod's: the failure the release host key exists to avoid."""
        from entrypoint_pods import EntrypointPods
        port = 2023
        job = [HVDRUN, "-np", "4", "--hostfile", None, "-p", str(port), "sh", "-c",
               "echo rank=$HOROVOD_RANK"]
        for release_key in (True, False):
            with EntrypointPods(self.hosts, port=port, base=self.tmp, host_key=release_key) as pods:
                home = pods.driver_home([f"{a} slots=2" for a in self.hosts.addrs])
                job[4] = pods.hostfile
                cmd = job[:5] + (["--ssh-strict-host-key-checking"] if release_key else []) + job[5:]
                env = dict(os.environ, HOME=home)
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(sorted(x.split(":", 1)[1] for x in r.stdout.splitlines()),
                                 [f"rank={i}" for i in range(4)])
                self.assertEqual(pods.stop_worker(1), 0)
                pods.start_worker(1, new_pod=True)
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
                if release_key:
                    self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                else:
                    self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
                    self.assertIn(f"{self.addr2}: REFUSED", r.stderr)

    def test_prepare_image_removes_baked_host_keys(self):
        root = os.path.join(self.tmp, "root")
        os.makedirs(os.path.join(root, "etc", "ssh"))
        for name in ("ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "ssh_host_rsa_key", "sshd_config"):
            open(os.path.join(root, "etc", "ssh", name), "w").close()
        r = subprocess.run([ENTRYPOINT, "prepare-image"], env=self.env(HVD_IMAGE_ROOT=root), capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(root, "etc", "ssh"))), ["sshd_config"])
        self.assertIn("removed 3 host key file(s)", r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(root, "run", "sshd")))


if __name__ == "__main__":
    unittest.main()
