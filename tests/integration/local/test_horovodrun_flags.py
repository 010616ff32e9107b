#!/usr/bin/env python3
"""Black-box tests of horovodrun flags that used to be accepted and then
silently dropped (issue 19): --mpi-args without --mpi, --binding-args, and
the tuning flags the collective library does or does not act on. Each flag
must either have its effect (checked here through the real binary and, for
library settings, a real worker) or print exactly one line saying why not,
and the job must still run.

Run one case:  HVDRUN=... COLLECTIVE_WORKER=... python3 test_horovodrun_flags.py Flags.test_...
Each case is its own CTest entry (tests/integration/local/CMakeLists.txt).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
WORKER = os.environ.get("COLLECTIVE_WORKER", "")

# What a guide passes to horovodrun on an MPI install (issue 19).
GUIDE_MPI_ARGS = "--mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map --tag-output --timestamp-output"
ASCTIME = r"[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}"


def run(args, env=None, timeout=60):
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       env=full_env, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def lines_with(text, part):
    return [line for line in text.splitlines() if part in line]


def no_mpirun_env():
    """PATH without any mpirun (the worker commands below are absolute)."""
    d = tempfile.mkdtemp(prefix="hvd_nompi_")
    return {"PATH": d}


class Flags(unittest.TestCase):
    def assertOneLine(self, text, part):
        found = lines_with(text, part)
        self.assertEqual(len(found), 1, "expected exactly one line with %r in:\n%s" % (part, text))
        return found[0]

    # ------------------------------------------------------------- --mpi-args
    def test_mpi_args_without_mpirun_applies_output_flags(self):
        """The guide's --mpi-args on a machine without mpirun: hvdrun prints
        the placement (--display-map), timestamps lines (--timestamp-output),
        tags them as always (--tag-output), and names the rest in one warning."""
        code, out, err = run(["-np", "2", "-H", "localhost:2", "--mpi-args", GUIDE_MPI_ARGS,
                              "/bin/sh", "-c", "echo hello"], env=no_mpirun_env())
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "--mpi-args")
        self.assertIn("[warning]", line)
        self.assertIn("no mpirun on PATH", line)
        self.assertIn("ignored: --mca orte_keep_fqdn_hostnames t", line)
        out_lines = out.splitlines()
        # The placement table comes first, before any worker line.
        self.assertRegex(out_lines[0], r"^rank\s+host\s+local_rank\s+local_size\s+cross_rank\s+cross_size$")
        self.assertRegex(out_lines[1], r"^\s+0\s+localhost\s+0\s+2\s+0\s+1$")
        self.assertRegex(out_lines[2], r"^\s+1\s+localhost\s+1\s+2\s+0\s+1$")
        worker = sorted(out_lines[3:])
        self.assertEqual(len(worker), 2, out)
        for r, text in enumerate(worker):
            self.assertRegex(text, r"^%s\[%d\]<stdout>:hello$" % (ASCTIME, r))

    def test_mpi_args_output_flags_are_off_without_asking(self):
        """The same job without --mpi-args: no table, no timestamps (so the
        test above can fail)."""
        code, out, err = run(["-np", "2", "-H", "localhost:2", "/bin/sh", "-c", "echo hello"], env=no_mpirun_env())
        self.assertEqual(code, 0, err)
        self.assertEqual(sorted(out.splitlines()), ["[0]<stdout>:hello", "[1]<stdout>:hello"])
        self.assertEqual(lines_with(err, "--mpi-args"), [])

    def test_mpi_args_with_gloo_are_not_passed(self):
        code, out, err = run(["-np", "1", "--gloo", "--mpi-args", "--timestamp-output -x FOO=1",
                              "/bin/sh", "-c", "echo \"foo=${FOO:-unset}\""])
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "--mpi-args")
        self.assertIn("the Gloo controller is chosen (--gloo)", line)
        self.assertIn("ignored: -x FOO=1", line)
        self.assertRegex(out, r"^%s\[0\]<stdout>:foo=unset\n$" % ASCTIME)

    def test_mpi_args_in_elastic_mode_warn_once(self):
        d = tempfile.mkdtemp(prefix="hvd_elastic_")
        script = os.path.join(d, "discover.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho localhost:1\n")
        os.chmod(script, 0o755)
        code, out, err = run(["-np", "1", "--host-discovery-script", script, "--mpi-args", GUIDE_MPI_ARGS,
                              "/bin/sh", "-c", "echo elastic"])
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "--mpi-args")
        self.assertIn("elastic jobs start their workers through hvdrun", line)
        self.assertIn("ignored: --display-map --mca orte_keep_fqdn_hostnames t", line)
        self.assertRegex(out, r"^%s\[\d+\]<stdout>:elastic\n$" % ASCTIME)

    @unittest.skipUnless(shutil.which("mpirun"), "no mpirun installed")
    def test_mpi_args_select_mpirun_when_installed(self):
        code, out, err = run(["-np", "2", "-H", "localhost:2", "--mpi-args", GUIDE_MPI_ARGS, "--dry-run",
                              "python3", "train.py"])
        self.assertEqual(code, 0, err)
        self.assertOneLine(err, "--mpi-args given and")
        cmd = [line for line in out.splitlines() if line.startswith("mpirun ")]
        self.assertEqual(len(cmd), 1, out)
        self.assertIn(" --mca orte_keep_fqdn_hostnames t --allow-run-as-root --display-map --tag-output "
                      "--timestamp-output python3 train.py", cmd[0])
        # And a real run: mpirun's own job map and labels.
        code, out, err = run(["-np", "2", "-H", "localhost:2", "--mpi-args", "--display-map", "echo", "hi"])
        self.assertEqual(code, 0, err)
        self.assertIn("JOB MAP", out)
        self.assertEqual(len(re.findall(r"\[\d+,[01]\]<stdout>:hi", out)), 2, out)

    # ---------------------------------------------------------- --binding-args
    def test_binding_args_without_mpirun_warn_once(self):
        code, out, err = run(["-np", "1", "--binding-args", "-bind-to core", "/bin/sh", "-c", "echo ok"],
                             env=no_mpirun_env())
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "--binding-args")
        self.assertIn("ignored", line)
        self.assertEqual(out, "[0]<stdout>:ok\n")

    @unittest.skipUnless(shutil.which("mpirun"), "no mpirun installed")
    def test_binding_args_reach_mpirun(self):
        code, out, err = run(["--mpi", "-np", "1", "--binding-args", "-bind-to core -map-by core", "--dry-run",
                              "true"])
        self.assertEqual(code, 0, err)
        self.assertIn(" -bind-to core -map-by core -mca pml ob1 ", out)
        self.assertNotIn("-bind-to none", out)
        self.assertEqual(lines_with(err, "--binding-args"), [])
        # The binding takes effect: mpirun reports rank 0 bound to a core
        # (with the default -bind-to none it reports nothing).
        code, out, err = run(["--mpi", "-np", "1", "--binding-args", "-bind-to core -map-by core --report-bindings",
                              "true"])
        self.assertEqual(code, 0, err)
        self.assertRegex(out + err, r"MCW rank 0 bound to")
        code, out, err = run(["--mpi", "-np", "1", "--mpi-args", "--report-bindings", "true"])
        self.assertEqual(code, 0, err)
        self.assertNotIn("MCW rank 0 bound to", out + err)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:])
