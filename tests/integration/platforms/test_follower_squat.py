#!/usr/bin/env python3
"""Another local user against a platform job's follower socket (issue 29
item 4; docs/platforms.md#followers). Abstract Unix socket names are open to
every user of the machine, and Slurm job ids are public, so a second user
can bind a follower's name first or connect to it over and over:

* the follower, finding its name taken by another uid, exits 6 with one
  line naming that uid (not "another hvdrun already follows");
* the leader's side (hvdrun --follower-attach / --follower-status) checks
  the listener's credentials (SO_PEERCRED) and refuses an impostor, naming
  its uid: the impostor never receives the attach or the job's status;
* 300 connections of a stranger to a real follower are one log line and a
  count, not 300 lines (--verbose).

The second user is created here (useradd, a unique throwaway name; its processes run under setpriv) and
removed afterwards, also when a case fails. Needs root, else SKIPPED (77).

Run one case:  HVDRUN=/path/to/hvdrun python3 test_follower_squat.py FollowerSquat.test_impostor_gets_no_status
"""
import os
import pwd
import shutil
import signal
import subprocess
import sys
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
# An interpreter the other user may run (this one may live under /root).
PYTHON = shutil.which("python3", path="/usr/bin:/bin:/usr/local/bin") or sys.executable
USER = "hvdsq%d" % os.getpid()
PLATFORM_PREFIXES = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "CLUSTER_SPEC", "TF_CONFIG",
                     "LSB_", "OCI__")

# Binds the abstract name argv[1], then plays a follower: greets every
# connection with argv[2] and prints what each one sends ("GOT <repr>").
SQUATTER = r"""
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\0" + sys.argv[1])
s.listen(16)
print("READY", flush=True)
while True:
    c, _ = s.accept()
    c.settimeout(2)
    data = b""
    try:
        c.sendall(sys.argv[2].encode() + b"\n")
        while True:
            chunk = c.recv(256)
            if not chunk:
                break
            data += chunk
            if data.count(b"\n") >= 1:
                c.sendall(b"ok\n")
                break
    except OSError:
        pass
    print("GOT %r" % data, flush=True)
    c.close()
"""

# Connects argv[2] times to the abstract name argv[1]; each connection
# waits until the follower closes it.
KNOCKER = r"""
import socket, sys
n = 0
for _ in range(int(sys.argv[2])):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.settimeout(5)
    try:
        c.connect("\0" + sys.argv[1])
        c.recv(64)
        n += 1
    except OSError:
        pass
    c.close()
print(n, flush=True)
"""


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES)}
    env.update(extra)
    return env


def as_user(args, **kw):
    """PYTHON args as the throwaway user; setpriv execs it (the Popen is the
    process itself, so killing it leaves nothing behind)."""
    pw = pwd.getpwnam(USER)
    return subprocess.Popen(["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid, "--clear-groups", "--",
                             PYTHON] + args, **kw)


class FollowerSquat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        try:
            cls.uid = pwd.getpwnam(USER).pw_uid
        except BaseException:
            subprocess.run(["userdel", USER])
            raise

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["userdel", USER], check=True)

    def setUp(self):
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                if f:
                    f.close()

    def squat(self, name, greeting):
        p = as_user(["-c", SQUATTER, name, greeting], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        self.assertEqual(p.stdout.readline().strip(), "READY")
        return p

    def squatter_saw(self, p):
        p.kill()
        p.wait()
        return p.stdout.read()

    def run_hvdrun(self, args, env, timeout=30):
        return subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, env=env, timeout=timeout, text=True)

    def test_follower_names_the_uid_holding_its_name(self):
        job = "sq%d" % os.getpid()
        self.squat("hvdrun-follower:slurm:%s:gpu-7" % job, "x")
        env = clean_env(SLURM_JOB_ID=job, SLURM_JOB_NODELIST="node01,gpu-7", SLURM_TASKS_PER_NODE="1(x2)",
                        SLURMD_NODENAME="gpu-7", SLURM_STEP_NUM_NODES="2")
        r = self.run_hvdrun(["-np", "2", "--start-timeout", "2", "true"], env)
        self.assertEqual(r.returncode, 6, r.stderr)
        errors = [line for line in r.stderr.splitlines() if line.startswith("hvdrun: error:")]
        self.assertEqual(len(errors), 1, r.stderr)
        self.assertIn("is held by uid %d (%s)" % (self.uid, USER), errors[0])
        self.assertNotIn("another hvdrun already follows", r.stderr)

    def test_impostor_gets_no_status(self):
        key = "test:%d:impostor" % os.getpid()
        squatter = self.squat("hvdrun-follower:" + key, "hvdrun-follower 1 " + key)
        r = self.run_hvdrun(["--follower-status", key, "0", "2"], clean_env())
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("held by uid %d (%s)" % (self.uid, USER), r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        r = self.run_hvdrun(["--follower-attach", key, "2"], clean_env())
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertNotIn("attached", r.stdout)
        self.assertIn("held by uid %d" % self.uid, r.stderr)
        saw = self.squatter_saw(squatter)
        self.assertNotIn("status", saw)
        self.assertNotIn("attach", saw)

    def test_refusals_are_counted_not_logged_each(self):
        job = "rl%d" % os.getpid()
        env = clean_env(SLURM_JOB_ID=job, SLURM_JOB_NODELIST="node01,gpu-7", SLURM_TASKS_PER_NODE="1(x2)",
                        SLURMD_NODENAME="gpu-7", SLURM_STEP_NUM_NODES="2")
        follower = subprocess.Popen([HVDRUN, "--verbose", "-np", "2", "--start-timeout", "60", "true"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True)
        self.procs.append(follower)
        seen = ""
        while "waiting for the leader" not in seen:
            line = follower.stderr.readline()
            self.assertTrue(line, "the follower exited early: " + seen)
            seen += line
        knocker = as_user(["-c", KNOCKER, "hvdrun-follower:slurm:%s:gpu-7" % job, "300"], stdout=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True)
        self.procs.append(knocker)
        out, _ = knocker.communicate(timeout=60)
        self.assertEqual(out.strip(), "300", "each connection answered (closed)")
        follower.send_signal(signal.SIGTERM)
        _, err = follower.communicate(timeout=30)
        self.assertEqual(follower.returncode, 128 + signal.SIGTERM, err)
        log = seen + err
        refused = [line for line in log.splitlines() if "refused" in line]
        self.assertEqual(len(refused), 2, log[-3000:])  # the first one, then the count
        self.assertIn("refused a connection from uid %d (%s)" % (self.uid, USER), refused[0])
        self.assertIn("299 more (300 in all)", refused[1])


if __name__ == "__main__":
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"):
        print("SKIPPED: needs root with useradd and setpriv to play a second local user", flush=True)
        sys.exit(77)
    unittest.main()
