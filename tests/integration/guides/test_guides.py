#!/usr/bin/env python3
"""The horovodrun lines of common guides, run verbatim through the
`horovodrun` entry point; only the training program is ours (a tiny
horovod.torch script, or the bundled elastic trainer). Each guide line is
one test; a line that works with horovodrun must work here, or fail with one
clear line.

    HOROVODRUN=... TRAINER=... PYPATH=... python3 test_guides.py Guides.test_laptop
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HOROVODRUN = os.environ.get("HOROVODRUN", "horovodrun")
TRAINER = os.environ.get("TRAINER", "elastic_trainer")
PYPATH = os.environ.get("PYPATH", "")

# A horovod.torch script as guides write them: init, an allreduce, rank 0 reports.
TRAIN_PY = textwrap.dedent("""\
    import os, sys
    import torch
    import horovod.torch as hvd
    hvd.init()
    t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print("rank %d of %d local %d sum %g" % (hvd.rank(), hvd.size(), hvd.local_rank(), t.item()), flush=True)
    """)


def pids_with_token(token):
    """Trainer processes whose environment carries HVD_TEST_TOKEN=<token>."""
    needle = ("HVD_TEST_TOKEN=" + token).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv0 = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if needle in env and os.path.basename(argv0) == os.path.basename(TRAINER):
            found.append(int(name))
    return found


def have_torch():
    return subprocess.run([sys.executable, "-c", "import torch"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


class Guides(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="hvd-guides-")
        self.env = dict(os.environ)
        self.env["PYTHONPATH"] = PYPATH + (":" + self.env["PYTHONPATH"] if self.env.get("PYTHONPATH") else "")
        with open(os.path.join(self.dir, "train.py"), "w") as f:
            f.write(TRAIN_PY)
        # `python`/`python3` in a guide's line are the interpreter running
        # this test (the one CMake found, with torch), whatever PATH says.
        self.bin = os.path.join(self.dir, "bin")
        os.mkdir(self.bin)
        for name in ("python", "python3"):
            os.symlink(sys.executable, os.path.join(self.bin, name))
        self.env["PATH"] = self.bin + ":" + os.path.dirname(HOROVODRUN) + ":" + self.env.get("PATH", "")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def needs_torch(self):
        if not have_torch():
            self.skipTest("python3 cannot import torch")

    def run_line(self, line, timeout=120, env=None):
        """Runs a guide's command line (a shell line starting with horovodrun)."""
        e = dict(self.env)
        e.update(env or {})
        p = subprocess.run(["/bin/sh", "-c", line], cwd=self.dir, env=e, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
        return p

    def check_ok(self, p):
        self.assertEqual(p.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (p.stdout[-3000:], p.stderr[-3000:]))

    def sums(self, out, n):
        found = re.findall(r"rank (\d+) of (\d+) local \d+ sum ([0-9.]+)", out)
        self.assertEqual(sorted(int(r) for r, _, _ in found), list(range(n)), out)
        for _, size, total in found:
            self.assertEqual(int(size), n)
            self.assertEqual(float(total), n * (n + 1) / 2)

    def script(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + text)
        os.chmod(path, 0o755)
        return path

    # --- horovod.ai "Running Horovod": the laptop line
    def test_laptop(self):
        self.needs_torch()
        p = self.run_line("horovodrun -np 2 -H localhost:2 python3 train.py")
        self.check_ok(p)
        self.sums(p.stdout, 2)

    # --- the Kubernetes chart's static line (hostfile, -n, bash -c)
    def test_hostfile_bash_c(self):
        self.needs_torch()
        with open(os.path.join(self.dir, "hostfile"), "w") as f:
            f.write("localhost slots=4\n")
        p = self.run_line("horovodrun -n 4 --hostfile hostfile bash -c 'python3 train.py'")
        self.check_ok(p)
        self.sums(p.stdout, 4)

    # --- the chart's static line with its --mpi-args and no --mpi: mpirun
    # starts the workers when one is installed (docs/mpi.md), else hvdrun
    # applies the output flags and warns once about the rest.
    def test_hostfile_mpi_args(self):
        self.needs_torch()
        with open(os.path.join(self.dir, "hostfile"), "w") as f:
            f.write("localhost slots=4\n")
        p = self.run_line('horovodrun -n 4 --hostfile hostfile --mpi-args "--mca orte_keep_fqdn_hostnames t '
                          '--allow-run-as-root --display-map --tag-output --timestamp-output" '
                          "bash -c 'python3 train.py'")
        self.check_ok(p)
        self.sums(p.stdout, 4)
        if shutil.which("mpirun"):
            # mpirun ran the ranks: its own --tag-output tag ([jobid,rank]),
            # and hvdrun said nothing of its own (quiet as horovodrun).
            self.assertRegex(p.stdout, r"\[\d+,[0-3]\]<stdout>:")
            self.assertNotIn("[hvdrun]", p.stderr)

    # --- the chart's elastic line: a discovery script, fixed size 4
    def test_elastic_discovery_script(self):
        self.script("discoverHosts.sh", "echo localhost:4\n")
        p = self.run_line("horovodrun -np 4 --min-np 4 --max-np 4 --host-discovery-script ./discoverHosts.sh "
                          "bash -c '%s'" % TRAINER, env={"HVD_TRAINER_STEPS": "10", "HVD_TRAINER_STEP_MS": "5"})
        self.check_ok(p)
        self.assertEqual(len(re.findall(r"final checksum", p.stdout)), 4, p.stdout[-2000:])

    # --- "Elastic Horovod": fault tolerance on fixed hosts, a worker killed
    def test_fixed_hosts_fault_tolerance(self):
        token = "guides-%d-%d" % (os.getpid(), time.monotonic_ns())
        proc = subprocess.Popen(["/bin/sh", "-c", "exec horovodrun -np 2 --min-np 1 -H localhost:2 %s" % TRAINER],
                                cwd=self.dir, env=dict(self.env, HVD_TRAINER_STEPS="150", HVD_TRAINER_STEP_MS="20",
                                                       HVD_TEST_TOKEN=token),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            # Wait until both workers train, then kill the second one.
            deadline = time.monotonic() + 30
            pids = []
            while time.monotonic() < deadline and len(pids) < 2:
                pids = pids_with_token(token)
                time.sleep(0.1)
            self.assertEqual(len(pids), 2, "two trainers did not start")
            time.sleep(0.5)
            os.kill(max(pids), signal.SIGKILL)
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.assertEqual(proc.returncode, 0, "stdout:\n%s\nstderr:\n%s" % (out[-2000:], err[-3000:]))
        finals = set(re.findall(r"final checksum (\w+)", out))
        self.assertEqual(len(finals), 1, out[-2000:])
        self.assertIn("restarting the slot", err)  # the one warning of the recovery (quiet otherwise)

    # --- --config-file as the docs show it
    def test_config_file(self):
        self.needs_torch()
        with open(os.path.join(self.dir, "config.yaml"), "w") as f:
            f.write("params:\n  fusion_threshold_mb: 32\n  cycle_time_ms: 10\n  cache_capacity: 2048\n"
                    "stall_check:\n  enabled: true\n  warning_time_seconds: 60\n")
        p = self.run_line("horovodrun -np 2 -H localhost:2 --config-file config.yaml python3 train.py")
        self.check_ok(p)
        self.sums(p.stdout, 2)

    # --- --output-filename: per-rank logs
    def test_output_filename(self):
        self.needs_torch()
        p = self.run_line("horovodrun -np 2 -H localhost:2 --output-filename logs python3 train.py")
        self.check_ok(p)
        for rank in (0, 1):
            path = os.path.join(self.dir, "logs", "rank.%d" % rank, "stdout")
            with open(path) as f:
                self.assertIn("rank %d of 2" % rank, f.read())

    # --- --timeline-filename: rank 0 writes the timeline (issue 20 item 4),
    # in its working directory; hvdrun warns only if docs/cli.md says so.
    def test_timeline_filename(self):
        self.needs_torch()
        p = self.run_line("horovodrun -np 2 -H localhost:2 --timeline-filename timeline.json python3 train.py")
        self.check_ok(p)
        self.sums(p.stdout, 2)
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "cli.md")) as f:
            table = f.read()
        # The row of the "Every horovodrun flag" table (it has an example column).
        row = [line for line in table.splitlines() if line.startswith("| `--timeline-filename FILE` | `--timeline")]
        self.assertEqual(len(row), 1)
        warnings = [line for line in p.stderr.splitlines() if "warning" in line and "--timeline-filename" in line]
        if "warns and ignores" in row[0]:
            self.assertEqual(len(warnings), 1, p.stderr)
        else:
            self.assertEqual(warnings, [], p.stderr)
            with open(os.path.join(self.dir, "timeline.json")) as f:
                trace = json.load(f)
            self.assertTrue(any(e.get("name") == "NEGOTIATE_ALLREDUCE" for e in trace), trace[:20])


if __name__ == "__main__":
    unittest.main()
