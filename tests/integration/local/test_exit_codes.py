#!/usr/bin/env python3
"""One black-box test per exit code in docs/exit-codes.md, against the real
hvdrun binary on localhost. test_every_documented_code_is_tested reads the
table, so a code added to the docs without a test here fails the suite.

Run one case:  HVDRUN=/path/to/hvdrun python3 test_exit_codes.py ExitCodes.test_code_2
"""
import os
import shutil
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "exit-codes.md")
# The one code no input can produce (it marks a bug in hvdrun): its mapping is
# tested in tests/unit/launcher/job/test_exit_codes.cpp.
UNIT_TESTED = {"70": "tests/unit/launcher/job/test_exit_codes.cpp"}


def run(args, timeout=60, **kw):
    return subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, timeout=timeout, text=True, **kw)


def documented_codes():
    """The first column of the table: '0', '2', ..., '129 / 130 / 143', 'other'."""
    codes = []
    with open(DOC) as f:
        for line in f:
            m = re.match(r"^\|\s*([0-9][0-9 /]*|other)\s*\|", line)
            if m:
                codes.extend(c.strip() for c in m.group(1).split("/"))
    return codes


class ExitCodes(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hvd-exit-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def script(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + text)
        os.chmod(path, stat.S_IRWXU)
        return path

    def check(self, result, code, stderr_has=None):
        self.assertEqual(result.returncode, code, "stdout:\n%s\nstderr:\n%s" % (result.stdout, result.stderr))
        if stderr_has:
            self.assertIn(stderr_has, result.stderr)

    def test_every_documented_code_is_tested(self):
        codes = documented_codes()
        self.assertIn("0", codes)
        for code in codes:
            name = "test_code_" + code
            if code in UNIT_TESTED:
                path = os.path.join(os.path.dirname(DOC), "..", UNIT_TESTED[code])
                with open(path) as f:
                    self.assertIn("== " + code, f.read(), "%s must test exit code %s" % (path, code))
                continue
            self.assertTrue(hasattr(self, name), "docs/exit-codes.md lists %s but %s has no %s" %
                            (code, os.path.basename(__file__), name))

    def test_code_0(self):
        self.check(run(["-np", "2", "true"]), 0)
        self.check(run(["--version"]), 0)
        self.check(run(["-np", "2", "--dry-run", "true"]), 0)

    def test_code_2(self):
        r = run(["-np", "2", "-H", "localhost:abc", "true"])
        self.check(r, 2, "hvdrun: error:")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.check(run(["-np", "3", "-H", "localhost:2", "true"]), 2)
        self.check(run(["--no-such-flag", "-np", "1", "true"]), 2)

    def test_code_3(self):
        # The discovery script fails on its first run: nothing can start.
        failing = self.script("discover.sh", "echo 'no pods yet' >&2; exit 2\n")
        r = run(["-np", "1", "--host-discovery-script", failing, "true"])
        self.check(r, 3, "exited with code 2: no pods yet")

    def test_code_4(self):
        self.check(run(["--jsrun", "-np", "1", "true"]), 4, "not supported")

    def test_code_5(self):
        # Elastic: -np 2 but discovery only ever offers one slot.
        one_slot = self.script("discover.sh", "echo localhost:1\n")
        t0 = time.monotonic()
        r = run(["-np", "2", "--min-np", "2", "--host-discovery-script", one_slot, "--elastic-timeout", "1",
                 "true"])
        self.check(r, 5)
        self.assertLess(time.monotonic() - t0, 30)

    def test_code_6(self):
        # A follower of a platform job whose leader never attaches
        # (docs/platforms.md#followers): one error line after --start-timeout.
        # (In an srun step over both nodes: outside one nothing would attach.)
        env = dict(os.environ, SLURM_JOB_ID="1", SLURM_JOB_NODELIST="n[1-2]", SLURMD_NODENAME="n2",
                   SLURM_STEP_NUM_NODES="2")
        env.pop("HVDRUN_HOSTS_FROM", None)
        r = run(["-np", "1", "--start-timeout", "1", "true"], env=env)
        self.check(r, 6, "this machine is a follower of the slurm job, and its leader n1 did not attach within "
                         "--start-timeout 1s")
        errors = [line for line in r.stderr.splitlines() if line.startswith("hvdrun: error:")]
        self.assertEqual(len(errors), 1, r.stderr)

    def test_code_127(self):
        self.check(run(["-np", "1", "no-such-program-hvd"]), 127, "command not found")

    def signalled(self, sig):
        proc = subprocess.Popen([HVDRUN, "-np", "2", "sh", "-c", "echo up; exec sleep 30"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True)
        try:
            for _ in range(2):  # both ranks are up
                self.assertTrue(proc.stdout.readline())
            proc.send_signal(sig)
            return proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def test_code_129(self):
        self.assertEqual(self.signalled(signal.SIGHUP), 129)

    def test_code_130(self):
        self.assertEqual(self.signalled(signal.SIGINT), 130)

    def test_code_143(self):
        self.assertEqual(self.signalled(signal.SIGTERM), 143)

    def test_code_other(self):
        # The first failing worker's status: its exit code, or 128+N for signal N.
        self.check(run(["-np", "2", "sh", "-c", "exit 7"]), 7)
        self.check(run(["-np", "1", "sh", "-c", "kill -KILL $$"]), 137)


if __name__ == "__main__":
    unittest.main()
