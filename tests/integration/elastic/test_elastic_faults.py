#!/usr/bin/env python3
"""Elastic-mode faults from the audit of issue 21, with the real hvdrun:

- kill -9 of hvdrun while a discovery run hangs: the script and its children
  must die with hvdrun, not live on under PID 1 (item 6);
- Ctrl-C while a discovery run hangs (a later run, or the very first one):
  hvdrun stops at once, not after --discovery-timeout (item 9);
- a first discovery run that lists no host: the store never listens on
  0.0.0.0, and workers get the address it does listen on (item 10).

The workers are plain `sleep`s (they never call hvd::init(), which these
cases do not need). Run one case:
  HVDRUN=build/apps/hvdrun/hvdrun python3 test_elastic_faults.py ElasticFaults.test_sigint_during_hung_discovery
"""
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_with_token  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")


def listening_sockets(pid):
    """[(address, port)] of the IPv4/IPv6 TCP sockets `pid` listens on."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m:
            inodes.add(m.group(1))
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True)):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            local, state, inode = cols[1], cols[3], cols[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            addr_hex, port_hex = local.split(":")
            if v6:
                addr = "::" if int(addr_hex, 16) == 0 else addr_hex
            else:
                addr = ".".join(str(b) for b in reversed(bytes.fromhex(addr_hex)))
            out.append((addr, int(port_hex, 16)))
    return out


class ElasticFaults(unittest.TestCase):
    def setUp(self):
        self.token = uuid.uuid4().hex
        self.env = dict(os.environ, HVD_TEST_TOKEN=self.token)
        self.dir = tempfile.mkdtemp(prefix="hvd-elastic-faults-")
        self.proc = None

    def tearDown(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in processes_with_token(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for f in (getattr(self, "stdout", None), getattr(self, "stderr", None)):
            if f:
                f.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def script(self, body):
        """A discovery script; $N is its run number (1, 2, ...); it touches
        `hung` just before it hangs."""
        path = os.path.join(self.dir, "discover.sh")
        counter = os.path.join(self.dir, "runs")
        with open(path, "w") as f:
            f.write("#!/bin/sh\nN=$(( $(cat %s 2>/dev/null || echo 0) + 1 )); echo $N > %s\n"
                    "HUNG=%s\n%s" % (counter, counter, os.path.join(self.dir, "hung"), body))
        os.chmod(path, 0o755)
        return path

    def start(self, script, command, extra=()):
        self.stderr = open(os.path.join(self.dir, "stderr"), "w+b")
        self.stdout = open(os.path.join(self.dir, "stdout"), "w+b")
        argv = [HVDRUN, "-np", "1", "--host-discovery-script", script, "--discovery-interval", "0.1",
                "--discovery-timeout", "60", "--kill-grace-ms", "500"] + list(extra) + command
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.stdout, stderr=self.stderr,
                                     env=self.env, start_new_session=True)
        self.started = time.monotonic()

    def err(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def out(self):
        self.stdout.seek(0)
        return self.stdout.read().decode(errors="replace")

    def wait_until(self, pred, what, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = pred()
            if r:
                return r
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.fail("timed out waiting for %s (hvdrun rc %s)\n%s" % (what, self.proc.poll(), self.err()[-3000:]))

    def wait_hung(self):
        hung = os.path.join(self.dir, "hung")
        self.wait_until(lambda: os.path.exists(hung), "the discovery run to hang")
        # Both sleeps of the hanging run are up.
        def hung_sleeps():
            n = 0
            for pid in processes_with_token(self.token):
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        n += f.read() == b"sleep\x00300\x00"
                except OSError:
                    pass
            return n >= 2
        self.wait_until(hung_sleeps, "the hanging run's children")

    def assert_nothing_left(self, within=3.0):
        deadline = time.monotonic() + within
        left = processes_with_token(self.token)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = processes_with_token(self.token)
        self.assertEqual(left, [], "left behind %.0f s after hvdrun ended" % within)

    def stop_with_sigint(self, bound):
        t0 = time.monotonic()
        os.kill(self.proc.pid, signal.SIGINT)
        try:
            rc = self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.fail("hvdrun still running 15 s after SIGINT (--discovery-timeout is 60 s)\n" + self.err()[-3000:])
        took = time.monotonic() - t0
        self.assertEqual(rc, 130, self.err()[-3000:])
        self.assertLess(took, bound, self.err()[-3000:])
        return took

    # Later runs hang; the first lists this host. Its worker only sleeps.
    HANG_LATER = 'if [ $N -eq 1 ]; then echo localhost:1; exit 0; fi\ntouch "$HUNG"; sleep 300 & sleep 300\n'

    def test_sigkill_during_hung_discovery_leaves_nothing(self):
        self.start(self.script(self.HANG_LATER), ["sleep", "60"])
        self.wait_hung()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.assert_nothing_left()

    def test_sigint_during_hung_discovery(self):
        self.start(self.script(self.HANG_LATER), ["sleep", "60"])
        self.wait_hung()
        # The worker gets SIGTERM at once; a hung run must not hold hvdrun.
        self.stop_with_sigint(bound=4.0)
        self.assert_nothing_left()

    def test_sigint_during_hung_first_discovery(self):
        self.start(self.script('touch "$HUNG"; sleep 300 & sleep 300\n'), ["sleep", "60"])
        self.wait_hung()
        self.stop_with_sigint(bound=3.0)
        self.assertIn("received Interrupt", self.err())
        self.assert_nothing_left()

    def test_store_never_on_all_interfaces_when_first_discovery_is_empty(self):
        # Runs 1-5 list no host (pods not up yet), then this host.
        script = self.script('if [ $N -gt 5 ]; then echo localhost:1; fi\n')
        command = ["sh", "-c", 'echo "store=$HOROVOD_GLOO_RENDEZVOUS_ADDR:$HOROVOD_GLOO_RENDEZVOUS_PORT"; '
                               'exec sleep 60']
        self.start(script, command)
        # Before any host: the store listens, on loopback only.
        early = self.wait_until(lambda: listening_sockets(self.proc.pid), "the store to listen")
        self.assertEqual([a for a, _ in early], ["127.0.0.1"], early)
        m = self.wait_until(lambda: re.search(r"store=(\S+):(\d+)", self.out()), "the worker's store address")
        addr, port = m.group(1), int(m.group(2))
        self.assertEqual(addr, "127.0.0.1", self.err()[-3000:])
        late = listening_sockets(self.proc.pid)
        self.assertIn(("127.0.0.1", port), late)
        self.assertNotIn("0.0.0.0", [a for a, _ in late], late)
        self.assertNotIn("::", [a for a, _ in late], late)
        self.stop_with_sigint(bound=5.0)
        self.assert_nothing_left()


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
