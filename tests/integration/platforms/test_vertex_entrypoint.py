#!/usr/bin/env python3
"""conf/vertex/entrypoint.sh (conf/vertex/README.md) with a stand-in gsutil on
PATH that records its arguments and copies between this machine's paths and a
local directory standing for gs:// (nothing reaches the network), and the real
hvdrun on a CLUSTER_SPEC whose primary replica is this machine: stage in before
the job, output out after it on the leader only and only on success, no upload
on a reduction server or a worker, hvdrun's status passed through, and one line
when gsutil is missing.

Run one case:  HVDRUN=/path/to/hvdrun python3 test_vertex_entrypoint.py VertexEntrypoint.test_stage_in_and_out
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
HERE = os.path.dirname(os.path.abspath(__file__))
ENTRYPOINT = os.path.normpath(os.path.join(HERE, "..", "..", "..", "conf", "vertex", "entrypoint.sh"))
CLEARED = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "CLUSTER_SPEC", "TF_CONFIG", "LSB_",
           "STAGE_GCS_PATH", "STAGING_DIR", "OUTPUT_DIR", "GCS_OUTPUT_PATH", "CLOUDSDK_", "BOTO_")

# The stand-in: records "gsutil ARGS" and copies with gs://X mapped to $FAKE_GCS/X.
FAKE_GSUTIL = r"""#!/bin/sh
echo "gsutil $*" >> "$GSUTIL_LOG"
[ "$1" = "-m" ] && shift
[ "$1" = "cp" ] || { echo "stand-in gsutil: only cp" >&2; exit 64; }
shift
[ "$1" = "-r" ] && shift
map() { case "$1" in gs://*) echo "$FAKE_GCS/${1#gs://}";; *) echo "$1";; esac; }
src=$(map "$1"); dst=$(map "$2")
mkdir -p "$(dirname "$dst")"
exec cp -r "$src" "$dst"
"""

# A stand-in hvdrun for a worker machine: the real one answers the leader
# question (--dry-run), a real run is recorded and exits $FAKE_STATUS.
FAKE_HVDRUN = r"""#!/bin/sh
case " $* " in *" --dry-run"*) exec "$REAL_HVDRUN" "$@";; esac
echo "hvdrun $*" >> "$GSUTIL_LOG"
exit "${FAKE_STATUS:-0}"
"""


def write_exec(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


class VertexEntrypoint(unittest.TestCase):
    # How the entrypoint is started: directly (its #! line), or as a user may
    # type it, `sh conf/vertex/entrypoint.sh` (the test_sh_* cases).
    prefix = []

    def test_sh_stage_in_and_out(self):
        """`sh entrypoint.sh ...` (POSIX sh: dash on Debian) stages in and out as the direct run does."""
        self.prefix = ["sh"]
        self.test_stage_in_and_out()

    def test_sh_gsutil_missing_is_one_line(self):
        self.prefix = ["sh"]
        self.test_gsutil_missing_is_one_line()

    def test_sh_sigterm_reaches_hvdrun(self):
        self.prefix = ["sh"]
        self.test_sigterm_reaches_hvdrun()

    def test_sh_status_passes_through(self):
        self.prefix = ["sh"]
        self.test_no_upload_when_the_job_fails_and_its_status_passes_through()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hvd-vertex-entry-")
        self.bin = os.path.join(self.tmp, "bin")
        os.makedirs(self.bin)
        write_exec(os.path.join(self.bin, "gsutil"), FAKE_GSUTIL)
        self.log = os.path.join(self.tmp, "gsutil.log")
        self.gcs = os.path.join(self.tmp, "gcs")
        os.makedirs(os.path.join(self.gcs, "bucket", "data"))
        with open(os.path.join(self.gcs, "bucket", "data", "shard-0"), "w") as f:
            f.write("training data\n")
        self.staging = os.path.join(self.tmp, "input")
        self.output = os.path.join(self.tmp, "output")
        os.makedirs(self.output)
        self.me = socket.gethostname()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def spec(self, task_type, index=0):
        # A one-machine job (this machine is the primary replica) plus pools that never get ranks here.
        return json.dumps({"cluster": {"workerpool0": ["%s:2222" % self.me], "workerpool2": ["rs-0:2222"]},
                           "environment": "cloud", "task": {"type": task_type, "index": index}})

    def env(self, task_type="workerpool0", path=None, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(CLEARED)}
        env["HVDRUN_LOG_LEVEL"] = "info"  # the tests read hvdrun's platform line (docs/cli.md#messages)
        env.update(PATH=path or (self.bin + os.pathsep + env.get("PATH", "")), HVDRUN=HVDRUN, GSUTIL_LOG=self.log,
                   FAKE_GCS=self.gcs, CLUSTER_SPEC=self.spec(task_type), CUDA_VISIBLE_DEVICES="",
                   STAGING_DIR=self.staging, OUTPUT_DIR=self.output)
        env.update(extra)
        return env

    def run_entrypoint(self, args, env):
        return subprocess.run(self.prefix + [ENTRYPOINT] + args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log) as f:
            return f.read().splitlines()

    def test_stage_in_and_out(self):
        # The job reads the staged data and writes its output: both copies happen, in order, on the leader.
        job = 'cat "$STAGING_DIR/data/shard-0" > "$OUTPUT_DIR/result.$HOROVOD_RANK"'
        r = self.run_entrypoint(["-np", "1", "sh", "-c", job],
                                self.env(STAGE_GCS_PATH="gs://bucket/data", GCS_OUTPUT_PATH="gs://bucket/out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.calls(), ["gsutil -m cp -r gs://bucket/data %s" % self.staging,
                                        "gsutil -m cp -r %s gs://bucket/out" % self.output])
        with open(os.path.join(self.gcs, "bucket", "out", "result.0")) as f:
            self.assertEqual(f.read(), "training data\n")
        self.assertIn("hosts from vertex (detected;", r.stderr)

    def test_no_upload_when_the_job_fails_and_its_status_passes_through(self):
        r = self.run_entrypoint(["-np", "1", "sh", "-c", "exit 3"], self.env(GCS_OUTPUT_PATH="gs://bucket/out"))
        self.assertNotEqual(r.returncode, 0, r.stderr)
        expected = subprocess.run([HVDRUN, "-np", "1", "-H", "localhost:1", "sh", "-c", "exit 3"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode
        self.assertEqual(r.returncode, expected)  # hvdrun's own status
        self.assertEqual(self.calls(), [])
        self.assertFalse(os.path.exists(os.path.join(self.gcs, "bucket", "out")))
        # The exact status of hvdrun, whatever it is (a stand-in exiting 7).
        fake = os.path.join(self.tmp, "fake-hvdrun")
        write_exec(fake, FAKE_HVDRUN)
        r = self.run_entrypoint(["-np", "1", "true"], self.env(HVDRUN=fake, REAL_HVDRUN=HVDRUN, FAKE_STATUS="7",
                                                              GCS_OUTPUT_PATH="gs://bucket/out"))
        self.assertEqual(r.returncode, 7, r.stderr)
        self.assertEqual(self.calls(), ["hvdrun -np 1 true"])

    def test_no_upload_from_a_reduction_server_or_a_worker(self):
        # A reduction server: the real hvdrun gives it no ranks and exits 0; stage-in still happens.
        r = self.run_entrypoint(["-np", "1", "touch", os.path.join(self.tmp, "ran")],
                                self.env("workerpool2", STAGE_GCS_PATH="gs://bucket/data",
                                         GCS_OUTPUT_PATH="gs://bucket/out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("it gets no ranks of the hvdrun job", r.stderr)
        self.assertIn("not the leader", r.stderr)
        self.assertEqual(self.calls(), ["gsutil -m cp -r gs://bucket/data %s" % self.staging])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "ran")))
        # A worker (workerpool1 index 1) whose job succeeded: its hvdrun is a follower; no upload either.
        os.remove(self.log)
        spec = json.dumps({"cluster": {"workerpool0": ["primary-0:2222"], "workerpool1": ["w-0:2222", "%s:2222" % self.me]},
                           "task": {"type": "workerpool1", "index": 1}})
        fake = os.path.join(self.tmp, "fake-hvdrun")
        write_exec(fake, FAKE_HVDRUN)
        r = self.run_entrypoint(["-np", "3", "true"], self.env(HVDRUN=fake, REAL_HVDRUN=HVDRUN, CLUSTER_SPEC=spec,
                                                              GCS_OUTPUT_PATH="gs://bucket/out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.calls(), ["hvdrun -np 3 true"])
        self.assertIn("not the leader", r.stderr)

    def test_gsutil_missing_is_one_line(self):
        # A PATH with what the entrypoint and the job need, and no gsutil.
        path = os.path.join(self.tmp, "nogsutil")
        os.makedirs(path)
        for tool in ("bash", "env", "sh", "mkdir", "grep", "touch"):
            os.symlink(shutil.which(tool), os.path.join(path, tool))
        marker = os.path.join(self.tmp, "ran")
        for var in ("STAGE_GCS_PATH", "GCS_OUTPUT_PATH"):
            r = self.run_entrypoint(["-np", "1", "touch", marker], self.env(path=path, **{var: "gs://bucket/x"}))
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertEqual(r.stderr.splitlines(), [
                "hvd-vertex-entrypoint: error: %s is set (gs://bucket/x) but gsutil is not on PATH: install the "
                "Google Cloud SDK in the image or unset %s" % (var, var)])
            self.assertFalse(os.path.exists(marker))
        # Neither set: gsutil is not needed.
        r = self.run_entrypoint(["-np", "1", "touch", marker], self.env(path=path))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(marker))

    def test_sigterm_reaches_hvdrun(self):
        # Vertex stops a container with SIGTERM to its entrypoint: hvdrun gets it, and its status is the exit status.
        fake = os.path.join(self.tmp, "fake-hvdrun")
        write_exec(fake, "#!/bin/sh\ntrap 'echo TERM >> \"$GSUTIL_LOG\"; exit 143' TERM\n"
                         "echo started >> \"$GSUTIL_LOG\"\nwhile :; do sleep 0.05; done\n")
        p = subprocess.Popen(self.prefix + [ENTRYPOINT, "-np", "1", "true"], env=self.env(HVDRUN=fake), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            while self.calls() != ["started"] and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertEqual(self.calls(), ["started"])
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=20), 143)
            self.assertEqual(self.calls(), ["started", "TERM"])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            p.stderr.close()

    def test_stage_in_failure_stops_before_the_job(self):
        marker = os.path.join(self.tmp, "ran")
        r = self.run_entrypoint(["-np", "1", "touch", marker], self.env(STAGE_GCS_PATH="gs://bucket/missing"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("hvd-vertex-entrypoint: error: gsutil -m cp -r gs://bucket/missing %s exited" % self.staging,
                      r.stderr)
        self.assertFalse(os.path.exists(marker))

    def test_job_definition_example(self):
        # conf/vertex/job.yaml says what the README says: a one-replica primary pool and a worker pool running this
        # entrypoint with the same arguments, and a reduction-server pool (which gets no ranks).
        try:
            import yaml
        except ImportError:
            print("SKIPPED: no PyYAML to read conf/vertex/job.yaml", flush=True)
            sys.exit(77)
        with open(os.path.join(os.path.dirname(ENTRYPOINT), "job.yaml")) as f:
            pools = yaml.safe_load(f)["workerPoolSpecs"]
        self.assertEqual(len(pools), 3)
        self.assertEqual(pools[0]["replicaCount"], 1)
        self.assertEqual(pools[0]["containerSpec"], pools[1]["containerSpec"])
        self.assertEqual(pools[0]["machineSpec"], pools[1]["machineSpec"])
        self.assertEqual(pools[0]["containerSpec"]["command"], ["/usr/local/bin/hvd-vertex-entrypoint"])
        names = {e["name"] for e in pools[0]["containerSpec"]["env"]}
        self.assertEqual(names, {"STAGE_GCS_PATH", "STAGING_DIR", "OUTPUT_DIR", "GCS_OUTPUT_PATH"})
        self.assertIn("reductionserver", pools[2]["containerSpec"]["imageUri"])
        # -np fits the slots hvdrun will find: 3 machines x 4 GPUs.
        args = pools[0]["containerSpec"]["args"]
        self.assertEqual(int(args[args.index("-np") + 1]),
                         (pools[0]["replicaCount"] + pools[1]["replicaCount"]) * pools[0]["machineSpec"]["acceleratorCount"])


if __name__ == "__main__":
    unittest.main()
