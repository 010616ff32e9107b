#!/usr/bin/env python3
"""Platform host sources against the real hvdrun (docs/platforms.md): each
case writes the files a platform gives a machine (a SageMaker base directory
named by SAGEMAKER_BASE_DIR) or sets its variables (Slurm), runs hvdrun with
the same command line a user would, and checks what --dry-run shows, the
one-line refusals, and that a SageMaker job whose only host is this machine
runs to exit 0.

Run one case:  HVDRUN=/path/to/hvdrun python3 test_platforms.py Platforms.test_sagemaker_dry_run
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
PLATFORM_PREFIXES = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "OCI__")


def clean_env(**extra):
    """This process's environment without any platform's variables (the
    machine running the suite may itself be inside an allocation), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES)}
    env.update(extra)
    return env


def run(args, env, timeout=60):
    return subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env, timeout=timeout, text=True)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.strip()]


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-02],gpu-[7-8]", "SLURM_TASKS_PER_NODE": "2(x3),1",
         "SLURMD_NODENAME": "node01"}


class Platforms(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hvd-platforms-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def sagemaker_base(self, current, hosts, interface="lo", hyperparameters=None):
        base = os.path.join(self.tmp, "ml")
        os.makedirs(os.path.join(base, "input", "config"), exist_ok=True)
        with open(os.path.join(base, "input", "config", "resourceconfig.json"), "w") as f:
            json.dump({"current_host": current, "hosts": hosts, "network_interface_name": interface}, f)
        if hyperparameters is not None:
            with open(os.path.join(base, "input", "config", "hyperparameters.json"), "w") as f:
                # SageMaker writes every value JSON-encoded.
                json.dump({k: json.dumps(v) for k, v in hyperparameters.items()}, f)
        return base

    def test_sagemaker_dry_run(self):
        base = self.sagemaker_base("algo-1", ["algo-2", "algo-1"], hyperparameters={
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_mpi_custom_mpi_options": "-verbose --NCCL_DEBUG=INFO"})
        r = run(["-np", "4", "--dry-run", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(r.returncode, 0, r.stderr)
        config = os.path.join(base, "input", "config")
        self.assertIn("platform: sagemaker\n", r.stdout)
        self.assertIn("  read from: %s/resourceconfig.json, %s/hyperparameters.json\n" % (config, config), r.stdout)
        self.assertIn("  this host: algo-1 (the leader: launches the job)\n", r.stdout)
        self.assertIn("  leader: algo-1\n", r.stdout)
        self.assertIn("  hosts: algo-1:2, algo-2:2\n", r.stdout)
        self.assertIn("  interface: lo\n", r.stdout)
        self.assertIn("4 ranks on 2 hosts (algo-1:2, algo-2:2)", r.stdout)
        self.assertRegex(r.stdout, r"\n +3 +algo-2 +1 +2 +1 +2\n")
        self.assertIn("HOROVOD_GLOO_IFACE=lo", r.stdout)  # network_interface_name binds like --network-interface
        # One info line saying where the hosts came from; one warning naming the ignored mpirun options.
        self.assertEqual(len([l for l in r.stderr.splitlines() if "hosts from sagemaker (detected;" in l]), 1,
                         r.stderr)
        warnings = [l for l in r.stderr.splitlines() if "[warning]" in l]
        self.assertEqual(len(warnings), 1, r.stderr)
        self.assertIn("'-verbose --NCCL_DEBUG=INFO' (sagemaker_mpi_custom_mpi_options) are ignored", warnings[0])

        j = run(["-np", "4", "--dry-run=json", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(j.returncode, 0, j.stderr)
        doc = json.loads(j.stdout)
        self.assertEqual(doc["platform"]["name"], "sagemaker")
        self.assertEqual(doc["platform"]["leader"], "algo-1")
        self.assertEqual([h["name"] for h in doc["platform"]["hosts"]], ["algo-1", "algo-2"])

        # -np above the platform's slots: one line, exit 2.
        r = run(["-np", "5", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: -np 5 but the sagemaker job offers only 4 slots "
                                                 "(algo-1:2, algo-2:2; from %s/resourceconfig.json, "
                                                 "%s/hyperparameters.json)" % (config, config)])

    def test_sagemaker_custom_mpi_options_through_mpi(self):
        # The SageMaker guide's scenario: processes_per_host 2 and custom_mpi_options, started with --mpi.
        if shutil.which("mpirun") is None:
            print("SKIPPED: no mpirun on PATH", flush=True)
            sys.exit(77)
        base = self.sagemaker_base("algo-1", ["algo-1", "algo-2"], hyperparameters={
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_mpi_custom_mpi_options": "-verbose --NCCL_DEBUG=INFO"})
        r = run(["--mpi", "-np", "4", "--dry-run", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("platform: sagemaker\n", r.stdout)
        line = [l for l in r.stdout.splitlines() if l.startswith("mpirun ")]
        self.assertEqual(len(line), 1, r.stdout)
        self.assertIn(" -np 4 -H algo-1:2,algo-2:2 ", line[0])
        self.assertTrue(line[0].endswith(" -verbose --NCCL_DEBUG=INFO true"), line[0])
        self.assertNotIn("[warning]", r.stderr)

    def test_sagemaker_malformed_is_one_line(self):
        base = self.sagemaker_base("algo-1", ["algo-1"])
        path = os.path.join(base, "input", "config", "resourceconfig.json")
        with open(path, "w") as f:
            f.write('{"current_host": "algo-1", "hosts": []}')
        r = run(["-np", "1", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: %s: field 'hosts': the host list is empty" % path])

    def test_slurm_dry_run(self):
        r = run(["-np", "7", "--dry-run", "true"], clean_env(**SLURM))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("platform: slurm\n", r.stdout)
        self.assertIn("  read from: SLURM_JOB_ID=4242, SLURM_JOB_NODELIST=node[01-02],gpu-[7-8], "
                      "SLURM_TASKS_PER_NODE=2(x3),1, SLURMD_NODENAME=node01\n", r.stdout)
        self.assertIn("  this host: node01 (the leader: launches the job)\n", r.stdout)
        self.assertIn("  hosts: node01:2, node02:2, gpu-7:2, gpu-8:1\n", r.stdout)
        self.assertIn("7 ranks on 4 hosts", r.stdout)
        self.assertRegex(r.stdout, r"\n +6 +gpu-8 +0 +1 +3 +4\n")

        r = run(["-np", "8", "true"], clean_env(**SLURM))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
        self.assertIn("-np 8 but the slurm job offers only 7 slots", r.stderr)

        bad = dict(SLURM, SLURM_JOB_NODELIST="node[01-02")
        r = run(["-np", "1", "true"], clean_env(**bad))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: SLURM_JOB_NODELIST: 'node[01-02': '[' without ']'"])

    def test_follower_is_refused_and_dry_run_says_so(self):
        follower = dict(SLURM, SLURMD_NODENAME="gpu-7")
        r = run(["-np", "2", "true"], clean_env(**follower))
        self.assertEqual(r.returncode, 6)
        self.assertEqual(error_lines(r.stderr), [
            "hvdrun: error: this machine (gpu-7) is a follower of the slurm job, whose leader is node01: followers "
            "are not implemented yet; run hvdrun on node01 only, with sshd serving it on the other hosts "
            "(docs/platforms.md#followers)"])
        r = run(["-np", "2", "--dry-run", "true"], clean_env(**follower))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  this host: gpu-7 (a follower", r.stdout)

    def test_explicit_flags_and_none_win(self):
        # -H names the hosts: the allocation is not used, and nothing says it is.
        r = run(["-np", "1", "-H", "localhost:1", "--dry-run", "true"], clean_env(**SLURM))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("platform:", r.stdout)
        self.assertIn("1 rank on 1 host (localhost:1)", r.stdout)
        for args, env in ((["--hosts-from", "none"], SLURM), ([], dict(SLURM, HVDRUN_HOSTS_FROM="none"))):
            r = run(["-np", "2"] + args + ["--dry-run", "true"], clean_env(**env))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("platform:", r.stdout)
            self.assertIn("2 ranks on 1 host (localhost:2)", r.stdout)
            self.assertNotIn("hosts from", r.stderr)
        # A named platform beside -H, or absent: one line each.
        r = run(["-np", "1", "--hosts-from", "slurm", "-H", "localhost:1", "true"], clean_env(**SLURM))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
        r = run(["-np", "1", "--hosts-from", "sagemaker", "true"], clean_env())
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
        self.assertIn("--hosts-from sagemaker: no <base>/input/config/resourceconfig.json", r.stderr)
        r = run(["-np", "1", "--hosts-from", "vertex", "true"], clean_env())
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), [
            "hvdrun: error: --hosts-from: platform 'vertex' is not implemented yet (expected auto, none, sagemaker, "
            "slurm, oci; see docs/platforms.md)"])

    def test_sagemaker_job_on_this_machine(self):
        # A one-host SageMaker job whose host is this machine's name: hvdrun
        # counts its own host name as local (hosts/network.h), so both ranks
        # run here through local agents, bound to the description's interface.
        me = socket.gethostname()
        base = self.sagemaker_base(me, [me], interface="lo",
                                   hyperparameters={"sagemaker_mpi_num_of_processes_per_host": 2})
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        script = 'echo "$HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_HOSTNAME $HOROVOD_GLOO_IFACE $SM_CURRENT_HOST" ' \
                 '> "%s/rank.$HOROVOD_RANK"' % out
        r = run(["-np", "2", "sh", "-c", script],
                clean_env(SAGEMAKER_BASE_DIR=base, SM_CURRENT_HOST=me), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hosts from sagemaker (detected;", r.stderr)
        for rank in (0, 1):
            with open(os.path.join(out, "rank.%d" % rank)) as f:
                self.assertEqual(f.read().split(), [str(rank), "2", me, "lo", me])


if __name__ == "__main__":
    unittest.main()
