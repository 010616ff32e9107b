#!/usr/bin/env python3
"""OCI Data Science on this machine alone (docs/platforms.md#oci-data-science):
the real hvdrun with the OCI variables, no second host. --dry-run of the
MAIN and the WORKER, which platform wins, one-line refusals of malformed
variables, a one-rank MAIN job that writes its status for the workers, the
no warning for ENABLE_TIMELINE=1 (the library writes it), and a WORKER's SIGTERM (143, unregistered).
Issue 29 (docs/design.md, "Security rules"): files another user plants in
the shared directory (a forged MAIN, links at temporary names, FIFOs,
heartbeats from the future) are ignored with one line and never block or
redirect a write; a directory every user can write without the sticky bit
is refused (exit 2). The cases with a second user need root (else SKIPPED,
77): they add a throwaway user and remove it at the end.
The two-host compose pair is test_oci.py (netns)."""
import json
import os
import pwd
import secrets
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

HVDRUN = os.environ["HVDRUN"]
PLATFORM_PREFIXES = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "OCI__", "JOB_")
OCI_NAMES = ("MIN_NP", "MAX_NP", "SLOTS", "START_TIMEOUT", "WORKER_PORT", "HOROVOD_ARGS", "ENABLE_TIMELINE")


def oci_env(work, mode="MAIN", **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(PLATFORM_PREFIXES) and k not in OCI_NAMES}
    env["HVDRUN_LOG_LEVEL"] = "info"  # the tests read the launcher's state lines (docs/cli.md#messages)
    env.update({"OCI__MODE": mode, "OCI__WORK_DIR": work, "MIN_NP": "2", "MAX_NP": "2", "SLOTS": "1",
                "WORKER_PORT": "12345", "HOROVOD_ARGS": "--verbose", "OCI__ENTRY_SCRIPT": "/code/train.py",
                "OCI__ENTRY_SCRIPT_ARGS": "--epochs 2"})
    env.update(extra)
    return env


def run(args, env, timeout=60):
    return subprocess.run([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                          env=env, timeout=timeout, text=True)


def error_lines(stderr):
    return [line for line in stderr.splitlines() if "error" in line]


def needs_root(test):
    """A case that adds a second local user: SKIPPED (77) when not root."""
    test.needs_root = True
    return test


class OtherUser:
    """A throwaway local user (the attacker); remove() deletes it."""

    def __init__(self):
        self.name = "hvdt" + secrets.token_hex(6)
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", self.name],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
        self.uid = pwd.getpwnam(self.name).pw_uid

    def python(self, code, *args):
        """Runs `code` as this user (python3 -c code args...), with a system
        python3 the user can reach (this one may be under /root)."""
        python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p)), None)
        if python is None:
            raise unittest.SkipTest("SKIPPED: no /usr/bin/python3 for the second user")
        subprocess.run(["runuser", "-u", self.name, "--", python, "-c", code] + list(args), check=True,
                       timeout=60, stdin=subprocess.DEVNULL)

    def remove(self):
        subprocess.run(["userdel", self.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        subprocess.run(["groupdel", self.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)


def release_fifo(path):
    """Opens the FIFO for writing and closes it: a reader blocked in open() reads end-of-file."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


class OciLocal(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="hvdoci-")
        self.work = self.tmp.name
        self.dir = os.path.join(self.work, "Undefined", "hvdrun")

    def tearDown(self):
        self.tmp.cleanup()

    def shared_dir(self, mode):
        """The per-job directory with `mode`; its parents let other users in."""
        os.makedirs(self.dir)
        for d in (self.work, os.path.dirname(self.dir)):
            os.chmod(d, 0o755)
        os.chmod(self.dir, mode)

    def other_user(self):
        user = OtherUser()
        self.addCleanup(user.remove)
        return user

    def popen(self, env):
        p = subprocess.Popen([HVDRUN], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)

        def stop():
            if p.poll() is None:
                for name in os.listdir(self.dir) if os.path.isdir(self.dir) else []:
                    if stat.S_ISFIFO(os.lstat(os.path.join(self.dir, name)).st_mode):
                        release_fifo(os.path.join(self.dir, name))
                p.kill()
                p.communicate()
        self.addCleanup(stop)
        return p

    def wait_registered(self, p):
        end = time.monotonic() + 20
        while time.monotonic() < end and p.poll() is None and not any(
                f.startswith("WORKER_") for f in os.listdir(self.dir)):
            time.sleep(0.05)
        self.assertIsNone(p.poll(), "the WORKER ended before it registered")

    # ---- files others may write (issue 29) ----

    @needs_root
    def test_forged_main_of_another_user_is_ignored(self):
        # Another user's MAIN.json and status: a WORKER used to follow that
        # MAIN and exit with the forged status (42).
        self.shared_dir(0o1777)
        attacker = self.other_user()
        attacker.python("import json, sys, time\n"
                        "d = sys.argv[1]\n"
                        "json.dump({'address': '198.18.250.9', 'run': 'forged', 'heartbeat': time.time() + 30},"
                        " open(d + '/MAIN.json', 'w'))\n"
                        "json.dump({'run': 'forged', 'status': 42}, open(d + '/MAIN_status.json', 'w'))\n", self.dir)
        env = oci_env(self.work, "WORKER", START_TIMEOUT="2", JOB_RUN_OCID="wrk1")
        r = run([], env, timeout=30)
        self.assertEqual(r.returncode, 6, r.stderr)
        forged = [line for line in r.stderr.splitlines() if "MAIN.json: owned by uid" in line]
        self.assertEqual(len(forged), 2, r.stderr)  # the warning, then the error line's reason
        self.assertIn(f"MAIN.json: owned by uid {attacker.uid}, not by this user (uid 0) or root: not trusted",
                      forged[0])
        self.assertIn("[warning]", forged[0])
        self.assertTrue(forged[1].startswith("hvdrun: error: no MAIN appeared in"), r.stderr)
        sticky = [line for line in r.stderr.splitlines() if "writable by every user" in line]
        self.assertEqual(len(sticky), 1, r.stderr)
        self.assertIn("sticky bit", sticky[0])
        self.assertNotIn("following the MAIN", r.stderr)

    @needs_root
    def test_links_planted_by_another_user_redirect_no_write(self):
        # The temporary names were .<name>.<pid>.<n>.tmp, opened without
        # O_EXCL|O_NOFOLLOW: a link planted there made root overwrite its target.
        self.shared_dir(0o1777)
        victim = os.path.join(self.work, "victim")
        with open(victim, "w") as f:
            f.write("precious\n")
        attacker = self.other_user()
        attacker.python("import os, sys\n"
                        "d, victim = sys.argv[1:]\n"
                        "last = int(open('/proc/sys/kernel/ns_last_pid').read())\n"
                        "for pid in range(last + 1, last + 4000):\n"
                        "    for name in ('WORKER_wrk1.json', 'MAIN.json', 'MAIN_status.json'):\n"
                        "        os.symlink(victim, f'{d}/.{name}.{pid}.0.tmp')\n", self.dir, victim)
        p = self.popen(oci_env(self.work, "WORKER", START_TIMEOUT="30", JOB_RUN_OCID="wrk1"))
        self.wait_registered(p)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=15)
        self.assertEqual(p.returncode, 143, err)
        with open(victim) as f:
            self.assertEqual(f.read(), "precious\n")
        self.assertFalse([f for f in os.listdir(self.dir) if f.endswith(".tmp") and not os.path.islink(
            os.path.join(self.dir, f))], "a temporary file was left")

    def test_world_writable_directory_without_sticky_bit_is_refused(self):
        self.shared_dir(0o777)
        expected = (f"hvdrun: error: the shared directory {self.dir} is writable by every user and has no sticky bit: "
                    "another user could replace its files; chmod 1777 or 0755 it")
        for mode, args in (("WORKER", []), ("MAIN", []), ("MAIN", ["--dry-run"])):
            r = run(args, oci_env(self.work, mode, START_TIMEOUT="1", MIN_NP="1", MAX_NP="1",
                                  OCI__ENTRY_SCRIPT="/bin/true", OCI__ENTRY_SCRIPT_ARGS=""), timeout=30)
            self.assertEqual(r.returncode, 2, (mode, args, r.stderr))
            self.assertEqual(error_lines(r.stderr), [expected], (mode, args))
        self.assertEqual(os.listdir(self.dir), [])

    def test_fifo_as_main_json_never_blocks_the_worker(self):
        # open() of a FIFO blocked the WORKER (signals too) until a writer came.
        self.shared_dir(0o755)
        os.mkfifo(os.path.join(self.dir, "MAIN.json"))
        p = self.popen(oci_env(self.work, "WORKER", START_TIMEOUT="30", JOB_RUN_OCID="wrk1"))
        self.wait_registered(p)
        time.sleep(0.5)
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.fail("SIGTERM did not end a WORKER with a FIFO as MAIN.json")
        self.assertEqual(p.returncode, 143, err)
        p = self.popen(oci_env(self.work, "WORKER", START_TIMEOUT="2", JOB_RUN_OCID="wrk1"))
        try:
            out, err = p.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.fail("a WORKER with a FIFO as MAIN.json waited past START_TIMEOUT")
        self.assertEqual(p.returncode, 6, err)
        self.assertEqual(len([line for line in err.splitlines() if "MAIN.json: a FIFO, not a regular file" in line]),
                         2, err)  # the warning and the error line

    def test_dry_run_ignores_special_and_future_entries(self):
        # A FIFO blocked the MAIN; a link to /dev/zero grew its memory without
        # bound; a heartbeat 10^9 s ahead kept a phantom host forever.
        self.shared_dir(0o755)
        os.mkfifo(os.path.join(self.dir, "WORKER_a.json"))
        os.symlink("/dev/zero", os.path.join(self.dir, "WORKER_b.json"))
        with open(os.path.join(self.dir, "WORKER_c.json"), "w") as f:
            json.dump({"address": "198.18.250.5", "slots": 1, "heartbeat": time.time() + 1e9}, f)
        try:
            r = run(["--dry-run"], oci_env(self.work), timeout=20)
        except subprocess.TimeoutExpired:
            release_fifo(os.path.join(self.dir, "WORKER_a.json"))
            self.fail("the MAIN's look at the directory blocked")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\nhosts: [^,\n]+:1\n")
        for name, why in (("WORKER_a.json", "a FIFO, not a regular file"),
                          ("WORKER_b.json", "a symbolic link, not a regular file"),
                          ("WORKER_c.json", "s in the future")):
            lines = [line for line in r.stderr.splitlines() if name in line]
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn(why, lines[0])

    def test_dry_run_main_and_worker(self):
        r = run(["--dry-run"], oci_env(self.work))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("platform: oci\n"), r.stdout)
        self.assertIn("(MAIN: runs the elastic job)", r.stdout)
        self.assertIn(f"  shared directory: {self.dir}\n", r.stdout)
        self.assertIn("np 2..2, start timeout 600 s, sshd port 12345", r.stdout)
        self.assertIn("  entry script: python3 /code/train.py --epochs 2\n", r.stdout)
        self.assertIn(f"# elastic job: hosts from the workers registered in {self.dir}", r.stdout)
        self.assertIn("slots: 1 (-np 2: not enough yet, the job would wait)", r.stdout)
        self.assertIn("hosts from oci (detected; --hosts-from none turns this off; MAIN)", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "MAIN.json")), "a dry run wrote the marker")
        r = run(["--dry-run"], oci_env(self.work, "WORKER"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("(WORKER: registers and serves its sshd)", r.stdout)
        self.assertIn(f" in {self.dir}\n", r.stdout)
        self.assertEqual(os.listdir(self.work), [], "a dry run registered")

    def test_dry_run_lists_registered_workers(self):
        # A fresh registration is a host; a stale one is ignored with one line.
        os.makedirs(self.dir)
        now = time.time()
        for name, address, beat in (("fresh", "198.18.250.3", now), ("old", "198.18.250.4", now - 60)):
            with open(os.path.join(self.dir, f"WORKER_{name}.json"), "w") as f:
                json.dump({"address": address, "slots": 1, "heartbeat": beat}, f)
        r = run(["--dry-run"], oci_env(self.work))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"\nhosts: [^,\n]+:1, 198\.18\.250\.3:1\n")
        self.assertIn("slots: 2 (-np 2)\n", r.stdout)
        stale = [line for line in r.stderr.splitlines() if "WORKER_old.json" in line]
        self.assertEqual(len(stale), 1, r.stderr)
        self.assertIn("stale", stale[0])
        r = run(["--dry-run=json"], oci_env(self.work))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["slots"], 2)

    def test_check_build_is_not_a_job(self):
        r = run(["--check-build"], oci_env(self.work))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("oci", r.stderr)
        self.assertEqual(os.listdir(self.work), [])

    def test_main_sigterm_writes_status(self):
        env = oci_env(self.work, MIN_NP="1", MAX_NP="1", HOROVOD_ARGS="", OCI__ENTRY_SCRIPT="/bin/sleep",
                      OCI__ENTRY_SCRIPT_ARGS="30")
        p = subprocess.Popen([HVDRUN], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 20
            marker = os.path.join(self.dir, "MAIN.json")
            while time.monotonic() < end and not os.path.exists(marker):
                time.sleep(0.05)
            time.sleep(0.5)  # the job's signal handling is set up
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 143, err)
        with open(os.path.join(self.dir, "MAIN_status.json")) as f:
            status = json.load(f)
        self.assertEqual(status["status"], 143)
        self.assertIn(f"(run {status['run']})", err)

    def test_entrypoint_refusals(self):
        # conf/oci/entrypoint.sh: a missing job key, a WORKER_PORT that is not a port: one line, exit 2.
        entry = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "conf", "oci",
                             "entrypoint.sh")
        keys = os.path.join(self.work, "ssh")
        os.makedirs(keys)
        env = oci_env(self.work, "WORKER", OCI_SSH_DIR=keys, HVDRUN=HVDRUN)
        r = subprocess.run([entry], env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stderr, f"oci-entrypoint: error: no job key at {keys}/id_ed25519 (OCI_SSH_DIR)\n")
        with open(os.path.join(keys, "id_ed25519"), "w") as f:
            f.write("key\n")
        for port in ("x", "0", "70000"):
            env["WORKER_PORT"] = port
            r = subprocess.run([entry], env=env, capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(f"WORKER_PORT='{port}' is not a port number", r.stderr)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)

    def test_precedence(self):
        # --hosts-from none, or -H under auto: horovodrun's behaviour; the OCI variables are not read.
        for args in (["--hosts-from", "none"], ["-H", "localhost:1"]):
            r = run(args + ["-np", "1", "--dry-run", "true"], oci_env(self.work, MIN_NP="x"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("platform: oci", r.stdout)
            self.assertIn("1 rank on 1 host", r.stdout)
        r = run(["--hosts-from", "oci", "-H", "localhost:1", "-np", "1", "true"], oci_env(self.work))
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), [
            "hvdrun: error: --hosts-from oci and -H/--hosts cannot be used together: give one source of hosts (or "
            "--hosts-from none)"])
        env = oci_env(self.work)
        del env["OCI__MODE"]
        r = run(["--hosts-from", "oci", "-np", "1", "true"], env)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(error_lines(r.stderr), [
            "hvdrun: error: --hosts-from oci: OCI__MODE is not set (not an OCI Data Science job run)"])
        # SLURM first in auto order: an OCI run inside a Slurm allocation is a Slurm job.
        r = run(["-np", "1", "--dry-run", "true"],
                oci_env(self.work, SLURM_JOB_ID="7", SLURM_JOB_NODELIST="localhost", SLURM_TASKS_PER_NODE="1"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("platform: slurm", r.stdout)

    def test_malformed_variables_one_line(self):
        cases = {
            "OCI__MODE": ("PS", "OCI__MODE='PS' is not MAIN or WORKER"),
            "MIN_NP": ("3", "MIN_NP=3 is greater than MAX_NP=2"),
            "WORKER_PORT": ("port", "WORKER_PORT='port' is not a whole number in [1, 65535]"),
            "HOROVOD_ARGS": ("--verbose python x.py", "HOROVOD_ARGS: 'python' is not an hvdrun flag"),
            "OCI__WORK_DIR": ("oci://b@n/p", "OCI__WORK_DIR='oci://b@n/p' is a URI"),
            "ENABLE_TIMELINE": ("2", "ENABLE_TIMELINE='2' is not 0 or 1"),
        }
        for name, (value, message) in cases.items():
            r = run([], oci_env(self.work, **{name: value}))
            self.assertEqual(r.returncode, 2, (name, r.stderr))
            lines = error_lines(r.stderr)
            self.assertEqual(len(lines), 1, r.stderr)
            self.assertIn(message, lines[0])

    def test_main_job_writes_status_and_no_timeline_warning(self):
        # A one-slot MAIN (MIN_NP=1): one rank here; the marker and the status
        # of its run are what the workers follow. ENABLE_TIMELINE=1: the
        # library writes the timeline (issue 20 item 4), so no warning.
        env = oci_env(self.work, MIN_NP="1", MAX_NP="1", ENABLE_TIMELINE="1", HOROVOD_ARGS="",
                      OCI__ENTRY_SCRIPT="/bin/sh", OCI__ENTRY_SCRIPT_ARGS="-c 'exit 4'",
                      OCI__SYNC_DIR=os.path.join(self.work, "sync"))
        r = run([], env)
        self.assertEqual(r.returncode, 4, r.stderr)
        timeline = [line for line in r.stderr.splitlines() if "timeline" in line and "warn" in line]
        self.assertEqual(timeline, [], r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "MAIN.json")), "the ended MAIN's marker is left")
        with open(os.path.join(self.dir, "MAIN_status.json")) as f:
            status = json.load(f)
        self.assertEqual(status["status"], 4)
        self.assertIn(f"(run {status['run']})", r.stderr)
        # A command on the command line wins over OCI__ENTRY_SCRIPT.
        r = run(["sh", "-c", "exit 0"], env)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_worker_sigterm_unregisters(self):
        # Also: a WORKER without OCI__ENTRY_SCRIPT needs none, and HOROVOD_ARGS' -p wins over WORKER_PORT.
        env = oci_env(self.work, "WORKER", HOROVOD_ARGS="-p 12346")
        del env["OCI__ENTRY_SCRIPT"], env["OCI__ENTRY_SCRIPT_ARGS"]
        p = subprocess.Popen([HVDRUN], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            end = time.monotonic() + 20
            while time.monotonic() < end and not (os.path.isdir(self.dir) and any(
                    f.startswith("WORKER_") for f in os.listdir(self.dir))):
                time.sleep(0.05)
            self.assertTrue(any(f.startswith("WORKER_") for f in os.listdir(self.dir)), "never registered")
            p.send_signal(signal.SIGTERM)
            out, err = p.communicate(timeout=10)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.assertEqual(p.returncode, 143, err)
        self.assertEqual([f for f in os.listdir(self.dir) if f.startswith("WORKER_")], [], err)
        self.assertIn("nothing listens on port 12346 here", err)
        self.assertEqual(sum("nothing listens" in line for line in err.splitlines()), 1, err)


if __name__ == "__main__":
    if os.geteuid() != 0 and any(getattr(getattr(OciLocal, a.split(".")[-1], None), "needs_root", False)
                                 for a in sys.argv[1:]):
        print("SKIPPED: needs root to add a second local user", flush=True)
        sys.exit(77)
    unittest.main()
