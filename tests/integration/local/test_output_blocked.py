#!/usr/bin/env python3
"""hvdrun's own stdout blocked (issue 21, item 5).

`hvdrun ... | sleep 12`: a pipe nobody reads. Worker output must never stall
supervision or teardown: a rank that fails is acted on at once, hvdrun exits
on time with the failing rank's code, the output it could not deliver is
dropped and counted in one warning on stderr, and nothing is left behind.

Run: HVDRUN=build/apps/hvdrun/hvdrun python3 test_output_blocked.py OutputBlocked.test_blocked_stdout_does_not_stall_supervision
"""
import os
import re
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

# Rank 0 floods stdout; rank 1 fails after 1 s.
FLOOD = ('if [ "$HOROVOD_RANK" = 1 ]; then sleep 1; echo rank-one-fails >&2; exit 3; fi; '
         'i=0; while :; do echo "flood line $i ........................................................"; '
         'i=$((i+1)); done')


class OutputBlocked(unittest.TestCase):
    def setUp(self):
        self.token = uuid.uuid4().hex
        self.env = dict(os.environ, HVD_TEST_TOKEN=self.token)

    def tearDown(self):
        for pid in processes_with_token(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def test_blocked_stdout_does_not_stall_supervision(self):
        # stdout: a pipe this test never reads until hvdrun has exited.
        r, w = os.pipe()
        with tempfile.TemporaryFile() as err:
            t0 = time.monotonic()
            p = subprocess.Popen([HVDRUN, "-np", "2", "--kill-grace-ms", "1000", "sh", "-c", FLOOD],
                                 stdin=subprocess.DEVNULL, stdout=w, stderr=err, env=self.env)
            os.close(w)
            try:
                rc = p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - t0
            if rc is None:  # the bug: unblock it so that it can end
                os.set_blocking(r, False)
                deadline = time.monotonic() + 20
                while p.poll() is None and time.monotonic() < deadline:
                    try:
                        os.read(r, 1 << 20)
                    except BlockingIOError:
                        time.sleep(0.01)
                if p.poll() is None:
                    p.kill()
                p.wait()
            os.close(r)
            err.seek(0)
            stderr = err.read().decode(errors="replace")
        self.assertIsNotNone(rc, "hvdrun still running 15 s after a rank failed while its stdout was blocked:\n" +
                             stderr[-3000:])
        self.assertEqual(rc, 3, stderr[-3000:])
        # 1 s until the failure, 1 s of grace for rank 0, at most 1 s for the
        # blocked stream at exit; the rest is slack for a loaded CI machine.
        self.assertLess(took, 8.0, stderr[-3000:])
        self.assertIn("exited with code 3", stderr)
        self.assertRegex(stderr, r"hvdrun's stdout was not being read: \d+ lines? \(\d+ bytes\) of worker output "
                                 r"were dropped")
        self.assertEqual(len(re.findall(r"was not being read", stderr)), 1, stderr[-3000:])
        left = processes_with_token(self.token)
        for _ in range(50):
            if not left:
                break
            time.sleep(0.1)
            left = processes_with_token(self.token)
        self.assertEqual(left, [], "processes left behind")


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
