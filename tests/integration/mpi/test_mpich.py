#!/usr/bin/env python3
"""`hvdrun --mpi` with a real MPICH (Hydra's mpiexec, Debian's `mpich`
package), where the golden files only check the command line: the ranks
form the job through hvdrun's store from MPICH's PMI_* variables, a failing
rank's code is hvdrun's, Ctrl-C leaves nothing, `--output-filename` gets
every rank's stdout and stderr, and a directory that cannot be made is one
line, exit 2, at once (Open MPI's mpirun hangs on it; the same check for Open
MPI is here too). Plain MPICH mpiexec without hvdrun forms the job with
HVD_MASTER_ADDR/PORT/SECRET, and without them names the way out: the MPI
bootstrap plug-in is Open MPI's (Debian's default MPI).

Open MPI stays the `mpirun` of the machine (its alternatives priority is
higher); each case puts an `mpirun` that execs /usr/bin/mpiexec.hydra first
on PATH (a symlink would not do: Hydra finds hydra_pmi_proxy beside the path
it was started as). Without /usr/bin/mpiexec.hydra every case is skipped
(exit 77); scripts/setup.sh installs `mpich`.

Run one case: HVDRUN=... HVD_MPI_PROBE=... python3 test_mpich.py Mpich.test_hvdrun_np4
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import kill_token_processes, wait_token_processes_gone  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_mpi import MpiRun  # noqa: E402  (its Ctrl-C check, shared)

HVDRUN = os.path.abspath(os.environ.get("HVDRUN", "hvdrun"))
PROBE = os.environ.get("HVD_MPI_PROBE", "mpi_store_probe")
ALLREDUCE = os.environ.get("HVD_MPI_ALLREDUCE", "mpi_allreduce_probe")
HYDRA = "/usr/bin/mpiexec.hydra"
SKIP = 77


def untag(text):
    # Hydra's -l prefixes each line with "[rank] ".
    return re.sub(r"^\[\d+\] ", "", text, flags=re.M)


@unittest.skipUnless(os.access(HYDRA, os.X_OK), f"no MPICH ({HYDRA}); scripts/setup.sh installs mpich")
class Mpich(unittest.TestCase):
    def setUp(self):
        self.token = uuid.uuid4().hex
        self.tmp = tempfile.mkdtemp(prefix="hvd-mpich-")
        bindir = os.path.join(self.tmp, "bin")
        os.makedirs(bindir)
        with open(os.path.join(bindir, "mpirun"), "w") as f:
            f.write(f"#!/bin/sh\nexec {HYDRA} \"$@\"\n")
        os.chmod(os.path.join(bindir, "mpirun"), 0o755)
        env = dict(os.environ)
        for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HVDRUN_SECRET",
                     "HVD_MASTER_ADDR", "HVD_MASTER_PORT", "HVD_MASTER_SECRET"):
            env.pop(name, None)
        env["HVD_TEST_TOKEN"] = self.token
        self.ompi_env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                             OMPI_MCA_btl_vader_single_copy_mechanism="none")
        env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
        self.env = env

    def tearDown(self):
        kill_token_processes(self.token)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def run_cmd(self, argv, env=None, timeout=45):
        t0 = time.monotonic()
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env or self.env,
                           timeout=timeout)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    def hvdrun(self, np, *args):
        return [HVDRUN, "--mpi", "-np", str(np), "-H", f"localhost:{np}", *args]

    def assert_nothing_left(self):
        self.assertEqual(wait_token_processes_gone(self.token), [], "processes left behind")

    def check_probe(self, rc, out, err, np, mode):
        self.assertEqual(rc, 0, f"stdout:\n{out}\nstderr:\n{err}")
        out = untag(out)
        for r in range(np):
            self.assertIn(f"rank {r} roundtrip ok", out, err)
            self.assertIn(f"rank {r} size {np} local {r}/{np} cross 0/1 mode {mode}", out, err)

    def test_hvdrun_np4(self):
        rc, out, err, _ = self.run_cmd(self.hvdrun(4, PROBE))
        self.check_probe(rc, out, err, 4, "hvdrun")
        self.assert_nothing_left()

    def test_hvdrun_allreduce_np4(self):
        rc, out, err, _ = self.run_cmd(self.hvdrun(4, ALLREDUCE))
        self.assertEqual(rc, 0, f"stdout:\n{out}\nstderr:\n{err}")
        out = untag(out)
        for r in range(4):
            self.assertIn(f"rank {r} of 4: allreduce ok", out)
            self.assertIn(f"rank {r} of 4: local {r}/4 cross 0/1", out)
        self.assert_nothing_left()

    def test_hvdrun_failing_rank_code(self):
        rc, out, err, _ = self.run_cmd(self.hvdrun(2, PROBE, "--fail-rank", "1", "--code", "5"))
        self.assertEqual(rc, 5, f"stdout:\n{out}\nstderr:\n{err}")
        self.assertIn("[hvdrun] [error] mpirun: exited with code 5", err)
        self.assert_nothing_left()

    def launcher_argv(self, kind, np, probe_args=()):
        """test_mpi.MpiRun's shape, for its shared checks."""
        return self.hvdrun(np, PROBE, *probe_args)

    def test_hvdrun_sigint_leaves_nothing(self):
        MpiRun.sigint_leaves_nothing(self, "hvdrun")

    def test_hvdrun_dry_run_names_hydra(self):
        rc, out, err, _ = self.run_cmd(self.hvdrun(2, "--dry-run", "--output-filename", "/tmp/x",
                                                   "--prefix-output-with-timestamp", PROBE))
        self.assertEqual(rc, 0, err)
        # What MPICH's mpirun cannot do is named, not dropped silently.
        self.assertIn("[warning] --prefix-output-with-timestamp: MPICH's mpirun has no option to timestamp lines", err)
        first = out.splitlines()[0]
        self.assertRegex(first, r"^# MPICH \(HYDRA \d+\.\d+(\.\d+)?\), 2 ranks$")
        self.assertIn("-outfile-pattern /tmp/x/rank.%r/stdout -errfile-pattern /tmp/x/rank.%r/stderr", out)

    def test_hvdrun_output_filename(self):
        out_dir = os.path.join(self.tmp, "logs", "job1")  # two levels that do not exist yet
        script = "echo out-$PMI_RANK; echo err-$PMI_RANK >&2"
        rc, out, err, _ = self.run_cmd(self.hvdrun(3, "--output-filename", out_dir, "sh", "-c", script))
        self.assertEqual(rc, 0, f"stdout:\n{out}\nstderr:\n{err}")
        for r in range(3):
            with open(os.path.join(out_dir, f"rank.{r}", "stdout")) as f:
                self.assertEqual(f.read(), f"[{r}] out-{r}\n")
            with open(os.path.join(out_dir, f"rank.{r}", "stderr")) as f:
                self.assertEqual(f.read(), f"[{r}] err-{r}\n")
        self.assert_nothing_left()

    def test_output_filename_that_cannot_be_made(self):
        # MPICH: Hydra aborts on the first line a rank writes; Open MPI 4.1:
        # mpirun hangs for ever. hvdrun makes the directory first.
        for name, env in (("MPICH", self.env), ("Open MPI", self.ompi_env)):
            rc, out, err, took = self.run_cmd(self.hvdrun(2, "--output-filename", "/proc/no/such", "echo", "x"),
                                              env=env, timeout=20)
            self.assertEqual(rc, 2, f"{name}: {err}")
            self.assertEqual(err, "hvdrun: error: --output-filename: cannot create output directory '/proc/no': "
                                  "No such file or directory\n", name)
            self.assertLess(took, 5, name)
        self.assert_nothing_left()

    def test_plain_mpiexec_master_addr(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(self.env, HVD_MASTER_ADDR="127.0.0.1", HVD_MASTER_PORT=str(port),
                   HVD_MASTER_SECRET=uuid.uuid4().hex)
        rc, out, err, _ = self.run_cmd([HYDRA, "-np", "3", PROBE], env=env)
        self.check_probe(rc, out, err, 3, "HVD_MASTER_ADDR")
        self.assert_nothing_left()

    def test_plain_mpiexec_plugin(self):
        # The plug-in built against MPICH (libmpich-dev): rank 0's store
        # address and secret go out through MPI_Bcast; a second init reuses it.
        rc, out, err, _ = self.run_cmd([HYDRA, "-np", "3", PROBE, "--rounds", "2"])
        self.check_probe(rc, out, err, 3, "MPI")
        self.assertEqual(out.count("roundtrip ok"), 6, out)
        rc, out, err, _ = self.run_cmd([HYDRA, "-np", "4", ALLREDUCE])
        self.assertEqual(rc, 0, f"stdout:\n{out}\nstderr:\n{err}")
        for r in range(4):
            self.assertIn(f"rank {r} of 4: allreduce ok", out)
        self.assert_nothing_left()

    def test_plain_mpiexec_wrong_plugin_names_the_way_out(self):
        # The default plug-in is Open MPI's: under MPICH its MPI_Init sees a
        # world of one. Each rank says so, naming the ways out.
        plugin = os.environ.get("HVD_MPI_OMPI_PLUGIN")
        self.assertTrue(plugin and os.path.exists(plugin), plugin)
        env = dict(self.env, HVD_MPI_BOOTSTRAP_LIB=plugin)
        # Own TMPDIR: both ranks' Open MPI singletons make their session
        # directory there at once (Open MPI can lose that race: "mkdir ...
        # File exists", and that rank's MPI_Init fails before our check).
        env["TMPDIR"] = self.tmp
        rc, out, err, took = self.run_cmd([HYDRA, "-np", "2", PROBE], env=env, timeout=30)
        self.assertNotEqual(rc, 0)
        lines = [l for l in err.splitlines() if "MPI_COMM_WORLD says rank" in l]
        self.assertGreaterEqual(len(lines), 1, err)
        self.assertLessEqual(len(lines), 2, err)
        for line in lines:
            self.assertTrue(line.startswith("probe: error: "), line)
            self.assertIn("MPI_COMM_WORLD says rank 0 of 1 but PMI_* (MPICH/Intel MPI) says rank", line)
            self.assertIn(f"the MPI bootstrap plug-in ({plugin}) uses another MPI library than the one that started "
                          "this job; start the job with hvdrun --mpi, or set HVD_MASTER_ADDR, HVD_MASTER_PORT and "
                          "HVD_MASTER_SECRET, or point HVD_MPI_BOOTSTRAP_LIB at a plug-in built against this MPI",
                          line)
        self.assertLess(took, 20)
        self.assert_nothing_left()

if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped and result.testsRun == len(result.skipped):
        sys.exit(SKIP)
    sys.exit(0)
