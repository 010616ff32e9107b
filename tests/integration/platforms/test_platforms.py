#!/usr/bin/env python3
"""Platform host sources against the real hvdrun (docs/platforms.md): each
case writes the files a platform gives a machine (a SageMaker base directory
named by SAGEMAKER_BASE_DIR) or sets its variables (Slurm, Vertex AI's
CLUSTER_SPEC / TF_CONFIG, LSF's LSB_*), runs hvdrun with
the same command line a user would, and checks what --dry-run shows, the
one-line refusals, and that a SageMaker job whose only host is this machine
runs to exit 0.

Run one case:  HVDRUN=/path/to/hvdrun python3 test_platforms.py Platforms.test_sagemaker_dry_run
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
PLATFORM_PREFIXES = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "CLUSTER_SPEC", "TF_CONFIG",
                     "LSB_", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "OCI__")


def clean_env(**extra):
    """This process's environment without any platform's variables (the
    machine running the suite may itself be inside an allocation), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES)}
    env["HVDRUN_LOG_LEVEL"] = "info"  # the tests read the platform lines (docs/cli.md#messages)
    env.update(extra)
    return env


def run(args, env, timeout=60):
    return subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env, timeout=timeout, text=True)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if line.strip()]


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-02],gpu-[7-8]", "SLURM_TASKS_PER_NODE": "2(x3),1",
         "SLURMD_NODENAME": "node01"}


def vertex_spec(task_type, index):
    """CLUSTER_SPEC as Vertex AI sets it: a primary replica, two workers, a
    reduction-server pool and an evaluator."""
    return json.dumps({"cluster": {"workerpool0": ["primary-0:2222"], "workerpool1": ["worker-0:2222", "worker-1:2222"],
                                   "workerpool2": ["rs-0:2222"], "workerpool3": ["eval-0:2222"]},
                       "environment": "cloud", "task": {"type": task_type, "index": index, "trial": ""},
                       "job": json.dumps({"python_module": "", "job_args": []})})


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
        # --NCCL_DEBUG=INFO is mapped as the SageMaker training toolkit maps it (-x NCCL_DEBUG=INFO); -verbose is not.
        self.assertIn("sagemaker's custom MPI option '-verbose' (sagemaker_mpi_custom_mpi_options) is ignored",
                      warnings[0])
        self.assertIn("sagemaker's custom MPI options give every worker -x NCCL_DEBUG=INFO", r.stderr)
        self.assertIn("NCCL_DEBUG=INFO", r.stdout)

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
        # What the SageMaker training toolkit gives mpirun: -x NCCL_DEBUG=INFO, then the rest as it is.
        self.assertTrue(line[0].endswith(" -x NCCL_DEBUG=INFO -verbose true"), line[0])
        self.assertNotIn("[warning]", r.stderr)

    def test_sagemaker_malformed_is_one_line(self):
        base = self.sagemaker_base("algo-1", ["algo-1"])
        path = os.path.join(base, "input", "config", "resourceconfig.json")
        with open(path, "w") as f:
            f.write('{"current_host": "algo-1", "hosts": []}')
        r = run(["-np", "1", "true"], clean_env(SAGEMAKER_BASE_DIR=base))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: %s: field 'hosts': the host list is empty" % path])

    def test_outside_text_is_one_escaped_line(self):
        # Issue 29 item 8 (docs/security.md, "Text from outside"): a host
        # name with an escape sequence or a newline, from -H, a hostfile,
        # Slurm's node list or SageMaker's JSON, and a 100,000-byte name:
        # exit 2, one line, no control byte on the terminal, bounded length.
        hostfile = os.path.join(self.tmp, "hosts")
        with open(hostfile, "w") as f:
            f.write("node1 slots=1\nnode\x1b]0;owned\x07 slots=1\n")
        base = self.sagemaker_base("algo-1", ["algo-1", "algo-2\n[0]<stdout>: forged"])
        cases = [
            (["-np", "1", "-H", "a\x1b[31mb:1", "--dry-run", "true"], clean_env(), "a\\x1b[31mb"),
            (["-np", "1", "-H", "n" * 100000 + ":1", "--dry-run", "true"], clean_env(), "100000 bytes long; at most 253"),
            (["-np", "1", "--hostfile", hostfile, "--dry-run", "true"], clean_env(), "node\\x1b]0;owned\\x07"),
            (["-np", "1", "--dry-run", "true"],
             clean_env(SLURM_JOB_ID="7", SLURM_JOB_NODELIST="node01,gpu\x1b[2J", SLURMD_NODENAME="node01"),
             "gpu\\x1b[2J"),
            (["-np", "1", "--dry-run", "true"], clean_env(SAGEMAKER_BASE_DIR=base), "algo-2\\n[0]<stdout>: forged"),
        ]
        for args, env, shown in cases:
            r = run(args, env)
            self.assertEqual(r.returncode, 2, (args[:2], r.stdout[-500:], r.stderr[-500:]))
            self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr[-2000:])
            self.assertTrue(r.stderr.startswith("hvdrun: error: "), r.stderr[:300])
            self.assertIn(shown, r.stderr)
            self.assertFalse(any(ord(c) < 0x20 and c != "\n" for c in r.stderr), repr(r.stderr[:300]))
            self.assertLess(len(r.stderr), 2000)

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

    def test_follower_waits_for_its_leader_and_dry_run_says_so(self):
        # In an srun step over the nodes, every node runs hvdrun.
        follower = dict(SLURM, SLURMD_NODENAME="gpu-7", SLURM_STEP_NUM_NODES="4")
        t0 = time.monotonic()
        r = run(["-np", "2", "--start-timeout", "1", "--log-level", "INFO", "true"], clean_env(**follower))
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertIn("[info] follower of the slurm job: waiting for the leader node01 (up to 1s)", r.stderr)
        self.assertEqual([line for line in error_lines(r.stderr) if line.startswith("hvdrun: error:")], [
            "hvdrun: error: this machine is a follower of the slurm job, and its leader node01 did not attach within "
            "--start-timeout 1s (is hvdrun running there with the same command line? docs/platforms.md#followers)"])
        r = run(["-np", "2", "--dry-run", "true"], clean_env(**follower))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  this host: gpu-7 (a follower: waits for the leader node01 to attach, then exits with the "
                      "job's status)\n", r.stdout)

    def test_node_without_a_leader_refuses_at_once(self):
        # Outside an srun step only the batch script's node runs hvdrun: on
        # another node nothing would ever attach, so one line and exit 6.
        t0 = time.monotonic()
        r = run(["-np", "2", "true"], clean_env(**dict(SLURM, SLURMD_NODENAME="gpu-7")))
        self.assertEqual(r.returncode, 6, r.stderr)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual([line for line in error_lines(r.stderr) if "[info]" not in line], [
            "hvdrun: error: this machine (gpu-7) is not the slurm job's leader, and no leader attaches to it: hvdrun "
            "runs on node01 only (not in an srun step over several nodes: SLURM_STEP_NUM_NODES is not set), so the "
            "other nodes have no follower to attach to"])

    def test_follower_stops_on_signals(self):
        follower = dict(SLURM, SLURMD_NODENAME="gpu-7", SLURM_STEP_NUM_NODES="4")
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            p = subprocess.Popen([HVDRUN, "-np", "2", "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL, env=clean_env(**follower), text=True)
            seen = ""
            while "waiting for the leader" not in seen:
                line = p.stderr.readline()
                self.assertTrue(line, "the follower exited early: " + seen)
                seen += line
            time.sleep(0.2)
            p.send_signal(sig)
            _, err = p.communicate(timeout=10)
            self.assertEqual(p.returncode, 128 + sig, seen + err)
            self.assertIn("follower of the slurm job stopped by %s" % signal.Signals(sig).name, err)

    def test_np_defaults_to_the_platform_slots(self):
        r = run(["--dry-run", "true"], clean_env(**SLURM))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("7 ranks on 4 hosts", r.stdout)
        self.assertIn("-np not given: 7 ranks, the slurm job's slots", r.stderr)
        r = run(["-np", "3", "--dry-run", "true"], clean_env(**SLURM))
        self.assertIn("3 ranks on 2 hosts", r.stdout)
        # Without a platform (or with --hosts-from none) -np stays required, as in horovodrun.
        for env in (clean_env(), clean_env(HVDRUN_HOSTS_FROM="none", **SLURM)):
            r = run(["true"], env)
            self.assertEqual(r.returncode, 2)
            self.assertEqual(error_lines(r.stderr),
                             ["hvdrun: error: -np/--num-proc is required (e.g. hvdrun -np 4 python train.py)"])

    def test_internal_follower_subcommands(self):
        # What the leader runs on follower hosts: not in --help; bounded and one line without a follower.
        r = run(["--help"], clean_env())
        self.assertNotIn("--follower-", r.stdout + r.stderr)
        t0 = time.monotonic()
        r = run(["--follower-status", "test:%d:none" % os.getpid(), "0", "0.3"], clean_env())
        self.assertEqual(r.returncode, 1)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
        self.assertIn("no hvdrun follower of test:", r.stderr)
        r = run(["--follower-attach", "test:%d:none" % os.getpid(), "0.3"], clean_env())
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stdout, "")
        r = run(["--follower-status", "k", "300"], clean_env())
        self.assertEqual(r.returncode, 2)

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
            "hvdrun: error: --hosts-from vertex: neither CLUSTER_SPEC nor a TF_CONFIG with a cluster is set (not inside "
            "a Vertex AI training job)"])

    def test_vertex_dry_run(self):
        # The primary replica of a job with two workers and a reduction-server pool, on a machine without GPUs
        # (CUDA_VISIBLE_DEVICES empty): one slot per host.
        env = clean_env(CLUSTER_SPEC=vertex_spec("workerpool0", 0), CUDA_VISIBLE_DEVICES="")
        r = run(["-np", "3", "--dry-run", "true"], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("platform: vertex\n", r.stdout)
        self.assertIn("  read from: CLUSTER_SPEC (task workerpool0 index 0), /proc/driver/nvidia/gpus (", r.stdout)
        self.assertIn(", CUDA_VISIBLE_DEVICES=\n", r.stdout)
        self.assertIn("  this host: primary-0 (the leader: launches the job)\n", r.stdout)
        self.assertIn("  leader: primary-0\n", r.stdout)
        self.assertIn("  hosts: primary-0:1, worker-0:1, worker-1:1\n", r.stdout)  # no reduction servers
        self.assertIn("3 ranks on 3 hosts", r.stdout)
        self.assertEqual(len([l for l in r.stderr.splitlines() if "hosts from vertex (detected;" in l]), 1, r.stderr)
        # --slots-per-host sets the slots; TF_CONFIG's names work the same.
        r = run(["-np", "6", "--slots-per-host", "2", "--dry-run", "true"], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  hosts: primary-0:2, worker-0:2, worker-1:2\n", r.stdout)
        self.assertIn("--slots-per-host 2 wins over vertex's slots per host", r.stderr)
        tf = json.dumps({"cluster": {"chief": ["c:2222"], "worker": ["w:2222"]}, "task": {"type": "worker", "index": 0},
                         "environment": "cloud"})
        r = run(["-np", "2", "--dry-run=json", "true"], clean_env(TF_CONFIG=tf, CUDA_VISIBLE_DEVICES=""))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)["platform"]
        self.assertEqual((doc["name"], doc["this_host"], doc["leader"], doc["unranked"]), ("vertex", "w", "c", False))
        self.assertEqual([h["name"] for h in doc["hosts"]], ["c", "w"])
        # Malformed: one line naming the variable and the field.
        r = run(["-np", "1", "true"], clean_env(CLUSTER_SPEC=vertex_spec("workerpool1", 5)))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: CLUSTER_SPEC: field 'task.index': 5 is out of range "
                                                 "(cluster.workerpool1 has 2 entries)"])
        r = run(["-np", "1", "true"], clean_env(CLUSTER_SPEC='{"cluster": '))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
        self.assertTrue(r.stderr.startswith("hvdrun: error: CLUSTER_SPEC: malformed JSON ("), r.stderr)

    def test_vertex_reduction_server_gets_no_ranks(self):
        # A reduction server (workerpool2) running the same command line: one line, exit 0, nothing started.
        marker = os.path.join(self.tmp, "ran")
        for pool, what in (("workerpool2", "Vertex reduction server (or parameter server)"),
                           ("workerpool3", "Vertex evaluator")):
            r = run(["-np", "3", "touch", marker], clean_env(CLUSTER_SPEC=vertex_spec(pool, 0)))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(error_lines(r.stderr), [l for l in error_lines(r.stderr) if "[warning]" in l])
            self.assertEqual(len(error_lines(r.stderr)), 1, r.stderr)
            self.assertIn("this machine is a %s (%s index 0): it gets no ranks of the hvdrun job" % (what, pool),
                          r.stderr)
            self.assertFalse(os.path.exists(marker))
        # Its dry run shows the platform only: it has no placement of its own (its -np is not checked against its
        # own slots, which say nothing of the ranked machines).
        r = run(["-np", "12", "--dry-run", "true"], clean_env(CLUSTER_SPEC=vertex_spec("workerpool2", 0)))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("  this host: rs-0 (this machine is a Vertex reduction server", r.stdout)
        self.assertNotIn("hvdrun dry run:", r.stdout)
        r = run(["-np", "12", "--dry-run=json", "true"], clean_env(CLUSTER_SPEC=vertex_spec("workerpool3", 0)))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(list(doc), ["platform"])
        self.assertEqual((doc["platform"]["unranked"], doc["platform"]["launches_here"], doc["platform"]["this_host"]),
                         (True, False, "eval-0"))

    def test_lsf_dry_run(self):
        me = socket.gethostname()
        # This machine runs the job script (the first entry); without GPUs it is horovodrun's launch node,
        # not one of the hosts.
        env = clean_env(LSB_JOBID="4711", LSB_MCPU_HOSTS="%s 1 cn01 4 cn02 4" % me, CUDA_VISIBLE_DEVICES="")
        r = run(["-np", "8", "--dry-run", "true"], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("platform: lsf\n", r.stdout)
        self.assertIn("  read from: LSB_JOBID=4711, LSB_MCPU_HOSTS=%s 1 cn01 4 cn02 4, host name %s, "
                      "/proc/driver/nvidia/gpus (" % (me, me), r.stdout)
        self.assertIn("  this host: - (not one of the hosts: launches the job from here)\n", r.stdout)
        self.assertIn("  leader: %s\n" % me, r.stdout)
        self.assertIn("  hosts: cn01:4, cn02:4\n", r.stdout)
        self.assertIn("8 ranks on 2 hosts", r.stdout)
        # Another machine's view: this machine second, the first entry leads.
        r = run(["-np", "2", "--dry-run=json", "true"], clean_env(LSB_JOBID="4711", LSB_MCPU_HOSTS="batch1 1 %s 2" % me))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)["platform"]
        self.assertEqual((doc["this_host"], doc["leader"], doc["launches_here"]), (me, "batch1", False))
        self.assertEqual([(h["name"], h["slots"]) for h in doc["hosts"]], [("batch1", 1), (me, 2)])
        # HVDRUN_HOSTNAME names this machine (here: the second compute host).
        r = run(["-np", "2", "--dry-run=json", "true"],
                clean_env(LSB_JOBID="4711", LSB_MCPU_HOSTS="batch1 1 cn01 4 cn02 4", HVDRUN_HOSTNAME="cn02"))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)["platform"]
        self.assertEqual((doc["this_host"], doc["leader"], doc["launches_here"]), ("cn02", "batch1", False))
        self.assertIn("HVDRUN_HOSTNAME=cn02", doc["evidence"])
        # Malformed: one line naming LSB_MCPU_HOSTS.
        r = run(["-np", "1", "true"], clean_env(LSB_JOBID="1", LSB_MCPU_HOSTS="cn01 four"))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), ["hvdrun: error: LSB_MCPU_HOSTS='cn01 four': the slot count 'four' of "
                                                 "host 'cn01' is not a whole number >= 1"])

    def test_sagemaker_job_on_this_machine(self):
        # A one-host SageMaker job whose host is this machine's name: hvdrun
        # counts its own host name as local (hosts/network.h), so both ranks
        # run here through local agents, bound to the description's interface.
        me = socket.gethostname()
        # The custom MPI options hvdrun understands reach the workers (the SageMaker toolkit's --NCCL_DEBUG, -x).
        base = self.sagemaker_base(me, [me], interface="lo",
                                   hyperparameters={"sagemaker_mpi_num_of_processes_per_host": 2,
                                                    "sagemaker_mpi_custom_mpi_options":
                                                        "--NCCL_DEBUG WARN -x FROM_SM=yes -verbose"})
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        script = 'echo "$HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_HOSTNAME $HOROVOD_GLOO_IFACE $SM_CURRENT_HOST ' \
                 '$NCCL_DEBUG $FROM_SM" > "%s/rank.$HOROVOD_RANK"' % out
        r = run(["-np", "2", "sh", "-c", script],
                clean_env(SAGEMAKER_BASE_DIR=base, SM_CURRENT_HOST=me), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hosts from sagemaker (detected;", r.stderr)
        self.assertIn("sagemaker's custom MPI option '-verbose' (sagemaker_mpi_custom_mpi_options) is ignored",
                      r.stderr)
        for rank in (0, 1):
            with open(os.path.join(out, "rank.%d" % rank)) as f:
                self.assertEqual(f.read().split(), [str(rank), "2", me, "lo", me, "WARN", "yes"])

    def test_lsf_job_on_this_machine(self):
        # A one-host LSF job on this machine (a one-host job keeps its only host whatever its GPUs).
        me = socket.gethostname()
        out = os.path.join(self.tmp, "out")
        os.makedirs(out)
        script = 'echo "$HOROVOD_RANK $HOROVOD_SIZE $HOROVOD_HOSTNAME" > "%s/rank.$HOROVOD_RANK"' % out
        r = run(["-np", "2", "sh", "-c", script], clean_env(LSB_JOBID="99", LSB_MCPU_HOSTS="%s 2" % me), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("hosts from lsf (detected;", r.stderr)
        for rank in (0, 1):
            with open(os.path.join(out, "rank.%d" % rank)) as f:
                self.assertEqual(f.read().split(), [str(rank), "2", me])


if __name__ == "__main__":
    unittest.main()
