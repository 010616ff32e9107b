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
import atexit
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


def run(args, env=None, timeout=60, launcher_level="info"):
    full_env = dict(os.environ)
    # These tests read the launcher's decision lines, below its default
    # level (docs/cli.md#messages); test_quiet_by_default reads the default.
    full_env.pop("HVDRUN_LOG_LEVEL", None)
    if launcher_level:
        full_env["HVDRUN_LOG_LEVEL"] = launcher_level
    full_env.update(env or {})
    p = subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       env=full_env, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def lines_with(text, part):
    return [line for line in text.splitlines() if part in line]


_EMPTY_PATH_DIR = []


def no_mpirun_env():
    """PATH without any mpirun (the worker commands below are absolute): one
    empty directory, removed when the test process exits."""
    if not _EMPTY_PATH_DIR:
        _EMPTY_PATH_DIR.append(tempfile.mkdtemp(prefix="hvd_nompi_"))
        atexit.register(shutil.rmtree, _EMPTY_PATH_DIR[0], True)
    return {"PATH": _EMPTY_PATH_DIR[0]}


class Flags(unittest.TestCase):
    def tempdir(self, prefix):
        d = tempfile.mkdtemp(prefix=prefix)
        self.addCleanup(shutil.rmtree, d, True)
        return d

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
        d = self.tempdir("hvd_elastic_")
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
        # [w1]: a worker that never joins an elastic world has no rank (docs/elastic.md#output)
        self.assertRegex(out, r"^%s\[w\d+\]<stdout>:elastic\n$" % ASCTIME)

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

    # ------------------------------------------- flags the library cannot honour
    def test_unsupported_tuning_flags_warn_once_each_and_the_job_runs(self):
        code, out, err = run(["-np", "2", "--autotune", "--autotune-log-file", "a.csv", "--timeline-filename", "t.json",
                              "--hierarchical-allreduce", "--hierarchical-allgather", "--torus-allreduce",
                              "--num-nccl-streams", "2", "/bin/sh", "-c",
                              "echo $HOROVOD_AUTOTUNE$HOROVOD_TORUS_ALLREDUCE$HOROVOD_HIERARCHICAL_ALLREDUCE"])
        self.assertEqual(code, 0, err)
        # Still exported, for unmodified Horovod workers.
        self.assertEqual(sorted(out.splitlines()), ["[0]<stdout>:111", "[1]<stdout>:111"])
        for flag, why in (("--torus-allreduce (params.torus_allreduce)", "no torus allreduce"),
                          ("--num-nccl-streams (library_options.num_nccl_streams)", "uses one stream")):
            line = self.assertOneLine(err, flag)
            self.assertIn("[warning]", line)
            self.assertIn(why, line)
            self.assertTrue(line.endswith("; ignored"), line)
        # The hierarchical flags, autotune and the timeline are honoured (docs/collective.md): no line.
        self.assertEqual(lines_with(err, "--hierarchical-"), [], err)
        self.assertEqual(lines_with(err, "--autotune"), [], err)
        self.assertEqual(lines_with(err, "--timeline"), [], err)
        self.assertEqual(len(lines_with(err, "no effect yet")), 2, err)

    def test_unsupported_config_keys_and_variables_warn_once(self):
        d = self.tempdir("hvd_cfg_")
        cfg = os.path.join(d, "c.yaml")
        with open(cfg, "w") as f:
            f.write("autotune:\n  enabled: true\nparams:\n  torus_allreduce: true\n")
        code, out, err = run(["-np", "1", "--config-file", cfg, "/bin/sh", "-c", "echo ran"],
                             env={"HOROVOD_TIMELINE": os.path.join(d, "t.json")})
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "[0]<stdout>:ran\n")
        # autotune.enabled acts (docs/collective.md, "Autotune"): no line.
        self.assertEqual(lines_with(err, "(autotune.enabled)"), [], err)
        self.assertIn("no torus allreduce", self.assertOneLine(err, "(params.torus_allreduce)"))
        self.assertEqual(lines_with(err, "HOROVOD_TIMELINE="), [], err)  # honoured: the library's rank 0 writes it
        self.assertEqual(len(lines_with(err, "no effect yet")), 1, err)

    def test_wired_tuning_flags_do_not_warn(self):
        code, out, err = run(["-np", "1", "--thread-affinity", str(max(os.sched_getaffinity(0))),
                              "--gloo-timeout-seconds", "20", "--log-without-timestamp", "--num-nccl-streams", "1",
                              "--no-autotune", "/bin/sh", "-c", "echo ran"])
        self.assertEqual(code, 0, err)
        self.assertEqual(lines_with(err, "[warning]"), [], err)

    # ------------------------------------------ settings the library acts on
    def worker(self):
        if not WORKER or not os.path.exists(WORKER):
            self.skipTest("COLLECTIVE_WORKER not built")
        return WORKER

    def test_thread_affinity_pins_the_background_thread(self):
        cpus = sorted(os.sched_getaffinity(0))
        core = cpus[-1]
        code, out, err = run(["-np", "1", "--thread-affinity", str(core), self.worker(), "settings"])
        self.assertEqual(code, 0, err)
        self.assertIn("[0]<stdout>:rank 0: background cpus %d\n" % core, out)
        if len(cpus) > 1:
            # Not pinned without it (so the check above can fail).
            code, out, err = run(["-np", "1", self.worker(), "settings"])
            self.assertEqual(code, 0, err)
            self.assertNotIn("background cpus %d\n" % core, out)
            # Horovod's format: one core id per local rank.
            code, out, err = run(["-np", "2", "-x", "HOROVOD_THREAD_AFFINITY=%d,%d" % (cpus[-1], cpus[0]),
                                  self.worker(), "settings"])
            self.assertEqual(code, 0, err)
            self.assertIn("[0]<stdout>:rank 0: background cpus %d\n" % cpus[-1], out)
            self.assertIn("[1]<stdout>:rank 1: background cpus %d\n" % cpus[0], out)

    def test_gloo_timeout_seconds_bounds_the_rendezvous(self):
        """Rank 1 calls init 4 s late: with --gloo-timeout-seconds 1 rank 0
        gives up after about a second; with the default it waits."""
        late = {"HVD_TEST_INIT_DELAY_MS": "4000"}
        code, out, err = run(["-np", "2", "--gloo-timeout-seconds", "1", self.worker(), "settings"], env=late)
        self.assertNotEqual(code, 0, err)
        self.assertRegex(err, r"could not rendezvous .* within 1000 ms")
        code, out, err = run(["-np", "2", self.worker(), "settings"], env=late)
        self.assertEqual(code, 0, err)
        self.assertIn("rank 0: settings ok", out)

    def test_verbose_shows_the_library_settings_once_from_rank_0(self):
        code, out, err = run(["-np", "2", "--verbose", "--fusion-threshold-mb", "1", "--cycle-time-ms", "2",
                              "--autotune", "--gloo-timeout-seconds", "12", self.worker(), "settings"])
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "settings: ")
        self.assertRegex(line, r"^\[0\]<stderr>:\[\d\d:\d\d:\d\d\.\d{3}\] \[hvd\[0\]\] \[info\] settings: ")
        for item in ("fusion_threshold=1048576 bytes", "cycle_time=2 ms", "cache_capacity=1024",
                     "rendezvous_timeout=12 s (HOROVOD_GLOO_TIMEOUT_SECONDS)", "thread_affinity=none",
                     "log_timestamps=on", "hierarchical_allreduce=off", "torus_allreduce=off",
                     "autotune=on (warmup 3 samples of 10 steps, at most 20 samples, log none)", "timeline=off",
                     "nccl_streams=1"):
            self.assertIn(item, line)
        code, out, err = run(["-np", "2", self.worker(), "settings"])
        self.assertEqual(code, 0, err)
        self.assertEqual(lines_with(err, "settings: "), [], err)

    def test_timeline_fifo_is_one_error_line_never_a_hang(self):
        """A FIFO as --timeline-filename blocked rank 0 in open() past
        --start-timeout with no line at all (issue 29 item 5): now one error
        line from rank 0, and the job runs without a timeline."""
        d = self.tempdir("hvd_tl_fifo_")
        fifo = os.path.join(d, "timeline.json")
        os.mkfifo(fifo)
        p = subprocess.Popen([HVDRUN, "-np", "2", "--start-timeout", "20", "--timeline-filename", fifo, self.worker(),
                              "settings"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a blocked open() return
            p.kill()
            p.communicate()
            self.fail("rank 0 blocked on a FIFO as the timeline file")
        out, err = out.decode(errors="replace"), err.decode(errors="replace")
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("[0]<stdout>:rank 0: settings ok", out)
        line = self.assertOneLine(err, "hvd timeline")
        self.assertIn("[error]", line)
        self.assertIn(f"'{fifo}' is a FIFO, not a regular file", line)
        self.assertIn("the job runs without a timeline", line)

    def test_log_without_timestamp_drops_the_time_from_library_lines(self):
        code, out, err = run(["-np", "1", "--verbose", "--log-without-timestamp", self.worker(), "settings"])
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "settings: ")
        self.assertRegex(line, r"^\[0\]<stderr>:\[hvd\[0\]\] \[info\] settings: .*log_timestamps=off")
        code, out, err = run(["-np", "1", "--verbose", "--log-with-timestamp", self.worker(), "settings"])
        self.assertEqual(code, 0, err)
        line = self.assertOneLine(err, "settings: ")
        self.assertRegex(line, r"^\[0\]<stderr>:\[\d\d:\d\d:\d\d\.\d{3}\] \[hvd\[0\]\] .*log_timestamps=on")


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:])
