#!/usr/bin/env python3
"""hvdrun's built-in pod discovery against a hostile API server (issue 29,
item 6): FakeApiServer.misbehave() and a listener that never speaks TLS.

* one deadline for the whole pod list: a body dripped one byte every 0.5 s,
  a body that never comes and a TLS handshake that never finishes all end
  within --discovery-timeout (exit 3, one line), not after 2x or never;
* a size bound: a 40 MiB pod list is one error line (exit 3) at the 32 MiB
  limit, quickly and without hvdrun's memory following the server's bytes;
* a watch that answers 200, sends one valid event and then garbage backs off
  exponentially (the valid event does not reset the back-off) and logs the
  cause once, with the server's bytes escaped and cut.

Needs openssl (the fake server's certificates): without it every case
prints SKIPPED and exits 77.
"""
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_apiserver import FakeApiServer  # noqa: E402
from test_builtin_discovery import HVDRUN, SELECTOR, Job, clean_env  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_with_token  # noqa: E402


class StalledTlsListener:
    """Accepts TCP connections on 127.0.0.1 and never says a word: the TLS
    handshake never finishes."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.conns = []
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)

    def close(self):
        self.stopping = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        for c in self.conns:
            c.close()


class HostileApiServer(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hvd-k8s-hostile-")
        self.home = os.path.join(self.dir, "home")
        os.makedirs(self.home)
        self.api = FakeApiServer(os.path.join(self.dir, "api")).start()
        labels = {"app": "hvd", "role": "worker"}
        self.api.add_pod("w-0", labels=labels, ip="127.0.0.2", ready=True)
        self.api.add_pod("w-1", labels=labels, ip="127.0.0.3", ready=True)
        self.job = None
        self.listener = None

    def tearDown(self):
        if self.job:
            self.job.kill()
        if self.listener:
            self.listener.close()
        self.api.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self, url=None):
        path = self.api.write_kubeconfig(os.path.join(self.dir, "kubeconfig"))
        if url:
            with open(path) as f:
                text = f.read().replace(self.api.url, url)
            with open(path, "w") as f:
                f.write(text)
        return clean_env(self.home, {"KUBECONFIG": path})

    def dry_run(self, env, timeout_s):
        t0 = time.monotonic()
        p = subprocess.run([HVDRUN, "-np", "1", "--kubernetes-selector", SELECTOR, "--discovery-timeout",
                            str(timeout_s), "--dry-run", "true"], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        return p, time.monotonic() - t0

    def assert_one_error(self, p, pattern):
        self.assertEqual(p.returncode, 3, p.stderr)
        errors = [l for l in p.stderr.splitlines() if l.startswith("hvdrun: error:")]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertRegex(errors[0], pattern)

    def test_pod_list_has_one_deadline_drip_silence_and_stalled_tls(self):
        # Before: the drip never ended (each read restarted the deadline) and
        # a body that stays silent after late headers (1.5 s) got a fresh
        # timeout of its own (3.5 s in all).
        for mode in ("drip", "silent"):
            self.api.misbehave(list_mode=mode)
            p, took = self.dry_run(self.env(), 2)
            self.assert_one_error(p, r"the Kubernetes API server at https://127\.0\.0\.1:\d+ did not complete the "
                                     r"request within 2 s \(--discovery-timeout\): it stalled while reading the body")
            self.assertLess(took, 3.0, "%s: %.2f s for a 2 s --discovery-timeout" % (mode, took))
        self.api.misbehave()
        self.listener = StalledTlsListener()
        p, took = self.dry_run(self.env("https://127.0.0.1:%d" % self.listener.port), 2)
        self.assert_one_error(p, r"did not complete the request within 2 s \(--discovery-timeout\): it stalled "
                                 r"during the TLS handshake")
        self.assertLess(took, 3.0, "stalled TLS handshake: %.2f s for a 2 s --discovery-timeout" % took)

    def test_oversized_pod_list_is_one_line(self):
        # Before: any list up to 256 MiB was read and parsed whole (this
        # 40 MiB one was accepted).
        self.api.misbehave(list_mode="huge")
        p, took = self.dry_run(self.env(), 20)
        self.assert_one_error(p, r"the pod list from the Kubernetes API server at https://127\.0\.0\.1:\d+ is larger "
                                 r"than 32 MiB \(hvdrun's limit\): narrow --kubernetes-selector")
        self.assertLess(took, 10.0)
        rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        self.assertLess(rss_mib, 150, "hvdrun's peak RSS was %.0f MiB" % rss_mib)

    def test_garbage_watch_backs_off_and_logs_once(self):
        j = Job(["-np", "2", "--min-np", "1", "--max-np", "3", "--kubernetes-selector", SELECTOR,
                 "--discovery-interval", "1", "--start-timeout", "20"], self.env())
        self.job = j
        j.step_at(2, timeout=30)
        self.api.misbehave(watch_mode="garbage")
        watches = lambda: len(self.api.requests_for(lambda r: "watch" in r["query"]))  # noqa: E731
        before = watches()
        t0 = time.monotonic()
        self.api.drop_watches()
        time.sleep(6.5)
        made = watches() - before
        # Back-off 0.1, 0.2, 0.4, 0.8, 1.6, 3.2 s: at most 7 in 6.5 s (before:
        # the valid event reset it every time, ~6 a second).
        self.assertLessEqual(made, 7, "%d watches in 6.5 s" % made)
        self.assertGreaterEqual(made, 3, "%d watches in 6.5 s" % made)
        err = j.text("err")
        self.assertNotIn("\x1b", err)  # the server's bytes are escaped
        self.assertNotIn("\x07", err)
        mentions = [l for l in err.splitlines() if "not an event" in l]
        self.assertEqual(len(mentions), 1, "\n".join(mentions[:5]))
        self.assertIn(r"\x1b[31mnot an event\x07\x00 xxx", mentions[0])
        self.assertIn("(320 bytes)", mentions[0])  # cut, and says how long it was
        self.assertLess(len(mentions[0]), 600)
        self.assertIsNone(j.proc.poll())
        # The server behaves again: the watch is back within the back-off bound.
        self.api.misbehave()
        time.sleep(0.2)
        t1 = time.monotonic()
        self.api.terminate("w-1")
        t_left, line = j.err_line(r"reason: .*host 127\.0\.0\.3 no longer listed by discovery", after=t1, timeout=15)
        self.assertLess(t_left - t1, 8.0, line)
        del t0
        self.assertEqual(j.stop(), 130)
        self.job = None
        self.assertEqual(processes_with_token(j.token), [])


if __name__ == "__main__":
    if shutil.which("openssl") is None:
        print("SKIPPED: openssl not found (the fake API server makes its certificates with it)")
        sys.exit(77)
    unittest.main()
