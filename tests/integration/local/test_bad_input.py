#!/usr/bin/env python3
"""Bad input found by the fault audit (issue 21): one actionable line, exit 2,
at once, nothing started.

- `-np 99999999` without -H (localhost:np) used to plan that many workers and
  grow by gigabytes; it is refused before planning.
- a directory given as --hostfile used to read as "no hosts in hostfile".

Run: HVDRUN=build/apps/hvdrun/hvdrun python3 test_bad_input.py BadInput.test_absurd_np_is_refused_at_once
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")


class BadInput(unittest.TestCase):
    def run_hvdrun(self, args, timeout=20):
        t0 = time.monotonic()
        p = subprocess.run([HVDRUN] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), \
            time.monotonic() - t0

    def test_absurd_np_is_refused_at_once(self):
        for args in (["-np", "99999999", "true"], ["-np", "65537", "true"],
                     ["-np", "99999999", "--min-np", "1", "--host-discovery-script", "/bin/true", "true"]):
            rc, out, err, took = self.run_hvdrun(args, timeout=5)
            self.assertEqual(rc, 2, err)
            self.assertEqual(err.count("\n"), 1, err)
            self.assertIn("hvdrun: error: -np %s is more than hvdrun runs: at most 65536 ranks" % args[1], err)
            self.assertEqual(out, "")
            self.assertLess(took, 3.0)
        # The maximum itself is a valid -np (shown by --dry-run on enough slots).
        rc, out, err, _ = self.run_hvdrun(["-np", "65536", "-H", "localhost:1", "true"])
        self.assertEqual(rc, 2, err)
        self.assertIn("-np 65536 but only 1 slot on 1 host", err)

    def test_directory_as_hostfile_is_named(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err, _ = self.run_hvdrun(["-np", "1", "--hostfile", d, "true"])
        self.assertEqual(rc, 2, err)
        self.assertEqual(err, "hvdrun: error: hostfile '%s' is a directory, not a file of host[:slots] lines\n" % d)

    def test_dry_run_names_a_host_the_ssh_config_cannot_reach(self):
        """--dry-run resolves each remote host as a launch would (nothing is
        connected): a host ~/.ssh/config makes unreachable fails it with
        launch's line and exit 3, after the report."""
        with tempfile.TemporaryDirectory() as home:
            os.makedirs(os.path.join(home, ".ssh"))
            with open(os.path.join(home, ".ssh", "config"), "w") as f:
                f.write("Host far\n    HostName 198.18.7.7\n    User trainer\n    Port 2022\nHost broken\n    Port x\n")
            env = dict(os.environ, HOME=home)
            env.pop("SSH_AUTH_SOCK", None)
            t0 = time.monotonic()
            p = subprocess.run([HVDRUN, "--dry-run", "-np", "3", "-H", "localhost:1,far:1,broken:1", "true"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=20)
            took = time.monotonic() - t0
        self.assertEqual(p.returncode, 3, p.stderr)
        line = "broken: %s/.ssh/config:6: Port 'x' is not a port number (1-65535)" % home
        self.assertEqual(p.stderr, "hvdrun: error: %s\n" % line)
        self.assertIn("  localhost: this machine\n", p.stdout)
        self.assertIn("  far: ssh trainer@198.18.7.7 port 2022\n", p.stdout)
        self.assertIn("  broken: cannot be reached: %s\n" % line[len("broken: "):], p.stdout)
        self.assertLess(took, 10.0)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    sys.exit(0 if result.wasSuccessful() else 1)
