#!/usr/bin/env python3
"""What a newcomer types, run exactly (issue 33): each case is a command line
from the README, a guide or the issue, run through the real `horovodrun`
entry point in a clean environment, and checks what the user sees.

Run one case:  HOROVODRUN=... python3 test_newcomer.py Newcomer.test_...
Each case is its own CTest entry (tests/integration/local/CMakeLists.txt).
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

HOROVODRUN = os.environ.get("HOROVODRUN", "horovodrun")
BINDIR = os.path.dirname(os.path.abspath(HOROVODRUN))


def user_env(**extra):
    """A user's shell: no hvdrun or Horovod variables set, the build's
    horovodrun first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_", "HVD_"))}
    env["PATH"] = BINDIR + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    env.update(extra)
    return env


class Newcomer(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hvd_newcomer_")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def line(self, command, env=None, timeout=60):
        """`command` as typed at a shell prompt, in a scratch directory."""
        return subprocess.run(shlex.split(command), cwd=self.dir, env=env or user_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)

    def hvdrun_lines(self, stderr):
        return [l for l in stderr.splitlines() if "[hvdrun]" in l or l.startswith(("hvdrun:", "horovodrun:"))]

    # --- item 2: the launcher is as quiet as horovodrun on success
    def test_quiet_on_success_and_log_level_governs_the_launcher(self):
        for command in ("horovodrun -np 2 -H localhost:2 echo hi",
                        "horovodrun -np 2 --log-level WARNING echo hi"):
            p = self.line(command)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(self.hvdrun_lines(p.stderr), [], command)
            self.assertEqual(sorted(p.stdout.splitlines()), ["[0]<stdout>:hi", "[1]<stdout>:hi"])
        # --log-level INFO (or HOROVOD_LOG_LEVEL) shows the launcher's lines again ...
        p = self.line("horovodrun -np 2 --log-level INFO echo hi")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(any("[info] all 2 workers exited successfully" in l for l in p.stderr.splitlines()), p.stderr)
        p = self.line("horovodrun -np 2 echo hi", env=user_env(HOROVOD_LOG_LEVEL="INFO"))
        self.assertTrue(any("[info] started 2 workers on localhost" in l for l in p.stderr.splitlines()), p.stderr)
        # ... and --verbose everything, debug included.
        p = self.line("horovodrun -np 2 --verbose echo hi")
        self.assertIn("[hvdrun] [debug]", p.stderr)
        # A failure is still reported, in one line, whatever the level.
        p = self.line("horovodrun -np 2 --log-level ERROR sh -c 'exit 3'")
        self.assertEqual(p.returncode, 3)
        errors = [l for l in self.hvdrun_lines(p.stderr) if "[error]" in l]
        self.assertEqual(len(errors), 1, p.stderr)
        self.assertRegex(errors[0], r"rank \d on localhost: exited with code 3")

    def test_bad_hvdrun_log_level_is_named_once(self):
        p = self.line("horovodrun -np 1 true", env=user_env(HVDRUN_LOG_LEVEL="loud"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(self.hvdrun_lines(p.stderr)), 1, p.stderr)
        self.assertIn("HVDRUN_LOG_LEVEL='loud' is not a log level", p.stderr)

    # --- item 8: typos get a suggestion, in the name the user typed
    def test_typo_gets_the_closest_flag_and_the_program_typed(self):
        p = self.line("horovodrun -np 2 --timline-filename t.json python train.py")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.splitlines(), [
            "hvdrun: error: --timline-filename is not an option; did you mean --timeline-filename? "
            "(see horovodrun --help)"])
        p = self.line("hvdrun -np 2 --log-levle INFO true")
        self.assertEqual(p.returncode, 2)
        self.assertIn("did you mean --log-level? (see hvdrun --help)", p.stderr)
        p = self.line("horovodrun -np 2 --no-such-thing true")
        self.assertEqual(p.stderr.splitlines(), ["hvdrun: error: --no-such-thing is not an option (see horovodrun --help)"])
        # -v2 is -v (--version) with a value it does not take: named as typed.
        p = self.line("horovodrun -v2 -np 2 true")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.splitlines(), ["hvdrun: error: -v2: -v (--version) takes no value (see horovodrun --help)"])
        # A value attached to a short flag that takes one is still fine.
        p = self.line("horovodrun -np 1 -Hlocalhost:1 true")
        self.assertEqual(p.returncode, 0, p.stderr)

    # --- item 3: -cb asks the interpreter that will run the workers
    def test_check_build_asks_the_worker_interpreter(self):
        # `python3` on PATH is the interpreter this suite runs with (torch there).
        bindir = os.path.join(self.dir, "bin")
        os.mkdir(bindir)
        os.symlink(sys.executable, os.path.join(bindir, "python3"))
        path = os.pathsep.join([BINDIR, bindir, "/usr/bin", "/bin"])
        p = self.line("horovodrun -cb", env=user_env(PATH=path))
        self.assertEqual(p.returncode, 0, p.stderr)
        torch_line = [l for l in p.stdout.splitlines() if "PyTorch" in l]
        self.assertEqual(len(torch_line), 1, p.stdout)
        built = os.path.isdir(os.environ.get("PYPATH", "").split(os.pathsep)[-1] or "/nonexistent")
        # Without PYTHONPATH the worker interpreter cannot import horovod.torch: no tick.
        if built:
            self.assertIn("[ ] PyTorch (built, but python3 cannot import horovod.torch: ModuleNotFoundError", torch_line[0])
        else:
            self.assertEqual(torch_line[0], "    [ ] PyTorch")
        if not built:
            return
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch is not importable here")
        # The README's PYTHONPATH line: ticked, naming where it came from.
        p = self.line("horovodrun -cb", env=user_env(PATH=path, PYTHONPATH=os.environ["PYPATH"]))
        self.assertRegex(p.stdout, r"    \[X\] PyTorch \(python3 imports horovod.torch from .*/horovod/torch/__init__.py\)")
        # No interpreter at all: said so, not ticked.
        p = self.line("horovodrun -cb", env=user_env(PATH=BINDIR))
        self.assertIn("neither python3 nor python is on PATH", p.stdout)

    # --- item 7: config files warn only where a setting is not honoured
    def test_config_files_warn_only_where_a_setting_is_not_honoured(self):
        # horovodrun's config layout as Horovod's own example config uses it,
        # logging.hide_timestamp included.
        with open(os.path.join(self.dir, "config.yaml"), "w") as f:
            f.write("controller: gloo\n"
                    "params:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 10\n  cache_capacity: 2048\n"
                    "  hierarchical_allreduce: true\n  hierarchical_allgather: true\n"
                    "autotune:\n  enabled: true\n  log_file: autotune_log.txt\n  warmup_samples: 5\n"
                    "  steps_per_sample: 20\n  bayes_opt_max_samples: 50\n  gaussian_process_noise: 0.9\n"
                    "timeline:\n  filename: timeline.json\n  mark_cycles: true\n"
                    "stall_check:\n  enabled: true\n  warning_time_seconds: 120\n  shutdown_time_seconds: 240\n"
                    "library_options:\n  mpi_threads_disable: true\n  num_nccl_streams: 2\n  thread_affinity: 1\n"
                    "  gloo_timeout_seconds: 60\n"
                    "logging:\n  level: WARNING\n  hide_timestamp: true\n")
        p = self.line("horovodrun -np 2 -H localhost:2 --config-file config.yaml echo hi")
        self.assertEqual(p.returncode, 0, p.stderr)
        warnings = [l for l in self.hvdrun_lines(p.stderr) if "[warning]" in l]
        # Only what really has no effect: no Gaussian process in the autotuner,
        # one NCCL stream. hide_timestamp is honoured: no time on hvdrun's lines.
        self.assertEqual(len(warnings), 2, p.stderr)
        self.assertIn("--autotune-gaussian-process-noise", warnings[0] + warnings[1])
        self.assertIn("--num-nccl-streams", warnings[0] + warnings[1])
        self.assertTrue(all(l.startswith("[hvdrun] [warning]") for l in warnings), warnings)
        # The shipped example: not one line.
        example = os.path.join(os.environ["HVD_SOURCE_DIR"], "conf", "hvdrun.example.yaml")
        p = self.line(f"horovodrun -np 2 -H localhost:2 --config-file {example} echo hi")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.hvdrun_lines(p.stderr), [])
        # A misspelt key: named, with the key meant.
        with open(os.path.join(self.dir, "typo.yaml"), "w") as f:
            f.write("params:\n  fusion_treshold_mb: 32\n")
        p = self.line("horovodrun -np 1 --config-file typo.yaml true")
        self.assertIn("unknown key 'fusion_treshold_mb' in 'params' (ignored; did you mean fusion_threshold_mb?)",
                      p.stderr)

    # --- items 5 and 6: under mpirun, count ranks and let mpirun check slots
    @unittest.skipUnless(shutil.which("mpirun"), "no mpirun installed")
    def test_mpirun_mode_counts_ranks_and_passes_oversubscribe(self):
        root = " --allow-run-as-root" if os.geteuid() == 0 else ""
        p = self.line(f'horovodrun -np 3 -H localhost:2 --mpi-args="--oversubscribe{root}" --log-level INFO hostname')
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(re.findall(r"\[\d+,\d\]<stdout>:", p.stdout)), 3, p.stdout)
        self.assertIn("started mpirun (3 ranks on 1 host)", p.stderr)
        self.assertIn("mpirun (3 ranks on 1 host) exited successfully", p.stderr)
        self.assertNotIn("1 worker", p.stderr)
        # Without --oversubscribe mpirun, not hvdrun, refuses (as under horovodrun).
        p = self.line(f'horovodrun -np 3 -H localhost:2 --mpi-args="--tag-output{root}" hostname')
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("-np 3 but only 2 slots", p.stderr)
        self.assertIn("mpirun: exited with code", p.stderr)
        # hvdrun's own launch keeps its one-line refusal.
        p = self.line("horovodrun --gloo -np 3 -H localhost:2 hostname")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.splitlines(), ["hvdrun: error: -np 3 but only 2 slots on 1 host (localhost:2)"])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + sys.argv[1:])
