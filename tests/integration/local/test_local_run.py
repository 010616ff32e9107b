#!/usr/bin/env python3
"""Black-box tests of the real hvdrun binary on localhost (cf. ninja's
misc/output_test.py): rank environment, output prefixing, teardown on
failure, signals, no orphans, exit codes.

Run one case:  HVDRUN=/path/to/hvdrun python3 test_local_run.py LocalRun.test_sigint
Each case is its own CTest entry (tests/integration/local/CMakeLists.txt).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_with_token, token_processes  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")


class Job:
    """One hvdrun run with a unique token in its (and so its workers') environment."""

    def __init__(self, args, grace_ms=None, extra_env=None):
        self.token = uuid.uuid4().hex
        env = dict(os.environ)
        env["HVD_TEST_TOKEN"] = self.token
        if extra_env:
            env.update(extra_env)
        self.proc = subprocess.Popen([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def wait_for_stdout_lines(self, n, timeout=10):
        """Reads stdout until n lines arrived; returns them."""
        lines = []
        deadline = time.monotonic() + timeout
        while len(lines) < n and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            lines.append(line.decode())
        return lines

    def finish(self, timeout=30):
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def leftovers(self, within=5.0):
        deadline = time.monotonic() + within
        while True:
            left = processes_with_token(self.token, exclude=(self.proc.pid,) if self.proc.returncode is None else ())
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)


def run(args, timeout=30, **kw):
    job = Job(args, **kw)
    try:
        return job.finish(timeout)
    finally:
        if job.proc.poll() is None:
            job.proc.kill()


def sh(script):
    return ["sh", "-c", script]


class LocalRun(unittest.TestCase):
    def assertNoLeftovers(self, job):
        left = job.leftovers()
        self.assertEqual(left, [], "processes left behind: %s" % left)

    # ----------------------------------------------------------- environment
    def check_rank_env(self, np, hosts):
        code, out, err = run(["-np", str(np), "-H", hosts] + sh(
            'echo "R=$HOROVOD_RANK S=$HOROVOD_SIZE LR=$HOROVOD_LOCAL_RANK LS=$HOROVOD_LOCAL_SIZE '
            'CR=$HOROVOD_CROSS_RANK CS=$HOROVOD_CROSS_SIZE H=$HOROVOD_HOSTNAME '
            'STORE=${HOROVOD_GLOO_RENDEZVOUS_ADDR:+set} SECRET=${HVDRUN_SECRET:+set} PWD=$PWD"'))
        self.assertEqual(code, 0, err)
        seen = {}
        for line in out.splitlines():
            m = re.fullmatch(r"\[(\d+)\]<stdout>:R=(\d+) (.*)", line)
            self.assertIsNotNone(m, line)
            self.assertEqual(m.group(1), m.group(2), "prefix rank differs from HOROVOD_RANK")
            seen[int(m.group(1))] = m.group(3)
        self.assertEqual(sorted(seen), list(range(np)))
        return seen

    def test_rank_env_np2(self):
        seen = self.check_rank_env(2, "localhost:2")
        cwd = os.getcwd()
        for r in range(2):
            self.assertEqual(seen[r], "S=2 LR=%d LS=2 CR=0 CS=1 H=localhost STORE=set SECRET=set PWD=%s" % (r, cwd))

    def test_rank_env_np4_two_local_hosts(self):
        seen = self.check_rank_env(4, "localhost:2,127.0.0.1:2")
        for r in range(4):
            host = "localhost" if r < 2 else "127.0.0.1"
            self.assertTrue(seen[r].startswith("S=4 LR=%d LS=2 CR=%d CS=2 H=%s " % (r % 2, r // 2, host)), seen[r])

    # ---------------------------------------------------------------- output
    def test_environment_forwarding_edge_cases(self):
        """What breaks horovodrun's forwarding: dotted names, multi-line
        values, exported shell functions, an environment larger than a
        command line may be, and -x."""
        big = {"HVD_BIG_%03d" % i: ("v%03d" % i) * 512 for i in range(300)}  # ~600 KiB
        extra = dict(big)
        extra.update({
            "HVD.DOTTED.NAME": "dots ok",
            "HVD_MULTI": "line one\nline two\n  'quoted' \"and\" $dollar",
            "BASH_FUNC_hvdfn%%": "() {  echo leaked\n}",
        })
        probe = ("import os, json; e = os.environ; print(json.dumps({"
                 "'dotted': e.get('HVD.DOTTED.NAME'), 'multi': e.get('HVD_MULTI'),"
                 "'func': [k for k in e if k.startswith('BASH_FUNC_')],"
                 "'big': sum(1 for k, v in e.items() if k.startswith('HVD_BIG_') and v == (k[-3:].join(['v', '']) * 512)),"
                 "'x_set': e.get('HVD_X_SET'), 'x_fwd': e.get('HVD_X_FWD')}))")
        extra["HVD_X_FWD"] = "forwarded"
        code, out, err = run(["-np", "2", "-H", "localhost:2", "-x", "HVD_X_SET=set by -x", "-x", "HVD_X_FWD",
                              sys.executable, "-c", probe], extra_env=extra)
        self.assertEqual(code, 0, err)
        import json
        for rank in range(2):
            line = [l for l in out.splitlines() if l.startswith("[%d]<stdout>:" % rank)]
            self.assertEqual(len(line), 1, out)
            got = json.loads(line[0].split(":", 1)[1])
            self.assertEqual(got["dotted"], "dots ok")
            self.assertEqual(got["multi"], extra["HVD_MULTI"])
            self.assertEqual(got["func"], [], "exported shell functions must be dropped")
            self.assertEqual(got["big"], 300, "every large variable arrives intact")
            self.assertEqual(got["x_set"], "set by -x")
            self.assertEqual(got["x_fwd"], "forwarded")

    def test_output_two_ranks_10000_lines(self):
        n = 10000
        code, out, err = run(["-np", "2", "-H", "localhost:2"] + sh(
            'seq 1 %d | sed "s/^/rank$HOROVOD_RANK-line-/; s/$/-padding-padding-padding/"' % n))
        self.assertEqual(code, 0, err)
        lines = out.split("\n")
        self.assertEqual(lines[-1], "")
        nxt = {0: 1, 1: 1}
        for line in lines[:-1]:
            m = re.fullmatch(r"\[(\d)\]<stdout>:rank(\d)-line-(\d+)-padding-padding-padding", line)
            self.assertIsNotNone(m, "broken line: %r" % line[:200])
            r = int(m.group(1))
            self.assertEqual(r, int(m.group(2)))
            self.assertEqual(int(m.group(3)), nxt[r], "line lost or reordered for rank %d" % r)
            nxt[r] += 1
        self.assertEqual(nxt, {0: n + 1, 1: n + 1})

    def test_last_line_without_newline_and_stderr(self):
        code, out, err = run(["-np", "1", "-H", "localhost:1"] + sh("echo to-err >&2; printf 'no newline'"))
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "[0]<stdout>:no newline\n")
        self.assertIn("[0]<stderr>:to-err\n", err)

    def test_prefix_output_with_timestamp(self):
        code, out, err = run(["-np", "1", "-H", "localhost:1", "--prefix-output-with-timestamp", "echo", "hello"])
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}\[0\]<stdout>:hello\n$")

    def test_output_filename_writes_rank_files(self):
        d = tempfile.mkdtemp(prefix="hvd_outdir_")
        try:
            target = os.path.join(d, "logs")
            code, out, err = run(["-np", "2", "-H", "localhost:2", "--output-filename", target] +
                                 sh('echo "out $HOROVOD_RANK"; echo "err $HOROVOD_RANK" >&2'))
            self.assertEqual(code, 0, err)
            for r in range(2):
                with open(os.path.join(target, "rank.%d" % r, "stdout")) as f:
                    self.assertEqual(f.read(), "out %d\n" % r)
                with open(os.path.join(target, "rank.%d" % r, "stderr")) as f:
                    self.assertEqual(f.read(), "err %d\n" % r)
            self.assertIn("[1]<stdout>:out 1\n", out)  # still printed too
        finally:
            shutil.rmtree(d)

    def test_output_filename_on_a_full_disk(self):
        # A full file system under --output-filename (a 64 KiB tmpfs): the
        # job goes on and ends 0, every line still reaches the terminal, and
        # hvdrun says once per file which one it stopped writing, and why.
        if os.geteuid() != 0:
            self.skipTest("needs root to mount a small tmpfs")
        d = tempfile.mkdtemp(prefix="hvd_fulldisk_")
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", d]).returncode != 0:
            os.rmdir(d)
            self.skipTest("cannot mount a tmpfs here")
        try:
            target = os.path.join(d, "logs")
            code, out, err = run(["-np", "2", "-H", "localhost:2", "--output-filename", target] +
                                 sh('seq 1 30000; echo "done $HOROVOD_RANK" >&2'), timeout=60)
            self.assertEqual(code, 0, err)
            for r in range(2):
                self.assertEqual(out.count("[%d]<stdout>:" % r), 30000)
                self.assertIn("[%d]<stderr>:done %d\n" % (r, r), err)
            lines = [ln for ln in err.splitlines() if "stopped writing it" in ln]
            full = [ln for ln in lines if "No space left on device" in ln]
            self.assertEqual(len(lines), len(full), lines)
            for r in range(2):
                mine = [ln for ln in full if "rank %d: cannot write %s/rank.%d/std" % (r, target, r) in ln]
                self.assertTrue(1 <= len(mine) <= 2, lines)  # stdout, and stderr once it is full too
                self.assertEqual(len(mine), len(set(mine)), lines)  # each file named once
        finally:
            subprocess.run(["umount", d])
            os.rmdir(d)

    def test_closed_stdout_does_not_kill_the_job(self):
        # `hvdrun ... | head -1`: the reader goes away; the job still ends normally.
        job = Job(["-np", "2", "-H", "localhost:2"] + sh("seq 1 200000; exit 0"))
        job.proc.stdout.readline()
        job.proc.stdout.close()
        err = job.proc.stderr.read().decode()
        job.proc.wait(timeout=30)
        self.assertEqual(job.proc.returncode, 0, err)

    # ----------------------------------------------------------- supervision
    def test_failure_tears_down_others_and_propagates_code(self):
        job = Job(["-np", "3", "-H", "localhost:3"] + sh(
            'if [ "$HOROVOD_RANK" = 1 ]; then sleep 0.3; echo "boom: bad shape" >&2; exit 7; fi; exec sleep 60'))
        t0 = time.monotonic()
        code, out, err = job.finish(timeout=30)
        self.assertEqual(code, 7, err)
        self.assertLess(time.monotonic() - t0, 5.0, "teardown was slow")
        self.assertIn("rank 1 on localhost: exited with code 7", err)
        self.assertIn("[1] boom: bad shape", err)
        self.assertNoLeftovers(job)

    def test_events_file_records_start_exits_and_end(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        events = os.path.join(d, "events.jsonl")
        code, out, err = run(["-np", "3", "-H", "localhost:3", "--events-file", events] + sh(
            'if [ "$HOROVOD_RANK" = 2 ]; then exit 3; fi; sleep 0.2'))
        self.assertEqual(code, 3, err)
        with open(events) as f:
            ev = [json.loads(line) for line in f]
        kinds = [e["event"] for e in ev]
        self.assertEqual(kinds[0], "job_start")
        self.assertEqual(kinds[-1], "job_end")
        self.assertEqual(ev[-1]["code"], 3)
        self.assertEqual([w["rank"] for w in ev[0]["workers"]], [0, 1, 2])
        self.assertEqual(ev[0]["mode"], "static")
        started = [e for e in ev if e["event"] == "workers_started"]
        self.assertEqual(started[0]["ranks"], [0, 1, 2])
        exits = {e["rank"]: e for e in ev if e["event"] == "worker_exit"}
        self.assertEqual(sorted(exits), [0, 1, 2])
        self.assertEqual(exits[2]["status"], 3)
        self.assertEqual(exits[2]["description"], "exited with code 3")
        self.assertEqual(exits[0]["status"], 128 + signal.SIGTERM)  # torn down
        shutil.rmtree(d)

    def test_events_file_unwritable_is_a_usage_error(self):
        code, out, err = run(["-np", "1", "--events-file", "/nonexistent/dir/ev.jsonl", "true"])
        self.assertEqual(code, 2, err)
        self.assertIn("hvdrun: error: cannot open --events-file '/nonexistent/dir/ev.jsonl': No such file or directory",
                      err)

    def test_killed_worker_status_is_128_plus_signal(self):
        code, out, err = run(["-np", "2", "-H", "localhost:2"] + sh(
            'if [ "$HOROVOD_RANK" = 0 ]; then kill -SEGV $$; fi; exec sleep 60'))
        self.assertEqual(code, 128 + signal.SIGSEGV, err)
        self.assertIn("killed by SIGSEGV", err)

    def test_command_not_found(self):
        code, out, err = run(["-np", "2", "-H", "localhost:2", "hvd-no-such-command-xyz", "arg"])
        self.assertEqual(code, 127, err)
        self.assertIn("hvdrun: hvd-no-such-command-xyz: command not found", err)

    def test_store_refuses_unauthenticated_requests_unless_insecure_store(self):
        # A worker plays an unmodified Horovod worker: a plain HTTP PUT and GET
        # to the job's store, without the secret.
        probe = ("import os, urllib.request, urllib.error\n"
                 "base = 'http://%s:%s/probe/' % (os.environ['HOROVOD_GLOO_RENDEZVOUS_ADDR'],"
                 " os.environ['HOROVOD_GLOO_RENDEZVOUS_PORT'])\n"
                 "def status(method, key, data=None):\n"
                 "    req = urllib.request.Request(base + key, data=data, method=method)\n"
                 "    try:\n"
                 "        return urllib.request.urlopen(req, timeout=5).status\n"
                 "    except urllib.error.HTTPError as e:\n"
                 "        return e.code\n"
                 "r = os.environ['HOROVOD_RANK']\n"
                 "print('missing', status('GET', 'nokey' + r))\n"
                 "print('put', status('PUT', 'k' + r, b'v'))\n"
                 "print('get', status('GET', 'k' + r))\n")
        code, out, err = run(["-np", "1", "-H", "localhost:1", sys.executable, "-c", probe])
        self.assertEqual(code, 0, err)
        self.assertIn("[0]<stdout>:missing 401", out)
        self.assertIn("[0]<stdout>:put 401", out)
        self.assertIn("[0]<stdout>:get 401", out)
        code, out, err = run(["--insecure-store", "-np", "1", "-H", "localhost:1", sys.executable, "-c", probe])
        self.assertEqual(code, 0, err)
        self.assertIn("[0]<stdout>:missing 404", out)  # Horovod's store: 404 until the key exists
        self.assertIn("[0]<stdout>:put 200", out)
        self.assertIn("[0]<stdout>:get 200", out)

    def test_unresolvable_host_is_a_launch_failure(self):
        # Run in a fresh network namespace (no interfaces up, no route), so
        # the failed look-up sends nothing anywhere: a DNS query would have
        # no route. Needs root (unshare --net).
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            self.skipTest("SKIPPED: needs root and unshare(1) to isolate the name look-up")
        cases = [["-np", "1", "-H", "nosuchhost.invalid:1"], ["-np", "2", "-H", "localhost:1,nosuchhost.invalid:1"]]
        if shutil.which("mpirun"):
            cases.append(["--mpi", "-np", "1", "-H", "nosuchhost.invalid:1"])
        for args in cases:
            t0 = time.monotonic()
            p = subprocess.run(["unshare", "--net", HVDRUN] + args + ["true"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
            self.assertEqual(p.returncode, 3, p.stderr)
            lines = p.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, p.stderr)
            self.assertIn("hvdrun: error: nosuchhost.invalid: cannot resolve host name", lines[0])
            self.assertNotIn("internal error", p.stderr)
            self.assertLess(time.monotonic() - t0, 10)

    def check_signal(self, sig, expected):
        job = Job(["-np", "2", "-H", "localhost:2"] + sh("echo ready; exec sleep 60"))
        ready = job.wait_for_stdout_lines(2)
        self.assertEqual(len(ready), 2, "workers did not start")
        t0 = time.monotonic()
        job.proc.send_signal(sig)
        code, out, err = job.finish(timeout=20)
        self.assertEqual(code, expected, err)
        self.assertLess(time.monotonic() - t0, 3.0)
        self.assertNoLeftovers(job)

    def test_sigint_exits_130(self):
        self.check_signal(signal.SIGINT, 130)

    def test_sigterm_exits_143(self):
        self.check_signal(signal.SIGTERM, 143)

    def test_sighup_exits_129(self):
        self.check_signal(signal.SIGHUP, 129)

    def test_second_sigint_kills_at_once(self):
        job = Job(["-np", "2", "-H", "localhost:2"] + sh("trap '' INT; echo ready; while :; do sleep 0.05; done"))
        self.assertEqual(len(job.wait_for_stdout_lines(2)), 2)
        t0 = time.monotonic()
        job.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        self.assertIsNone(job.proc.poll(), "workers ignoring SIGINT must keep hvdrun waiting")
        job.proc.send_signal(signal.SIGINT)
        code, out, err = job.finish(timeout=20)
        self.assertEqual(code, 130, err)
        self.assertLess(time.monotonic() - t0, 2.5, "the second SIGINT did not escalate")
        self.assertNoLeftovers(job)

    def test_sigkill_to_hvdrun_leaves_no_workers(self):
        job = Job(["-np", "4", "-H", "localhost:4"] + sh("echo ready; sleep 60 & wait"))
        self.assertEqual(len(job.wait_for_stdout_lines(4)), 4)
        # A shell prints "ready" before it forks its sleep: wait for all four.
        deadline = time.monotonic() + 10
        procs = token_processes(job.token, exclude=(job.proc.pid,))
        while len(procs) < 10 and time.monotonic() < deadline:
            time.sleep(0.02)
            procs = token_processes(job.token, exclude=(job.proc.pid,))
        # One agent for the host's four workers (issue 28), and its guard:
        # 1 + 1 + 4 shells + 4 sleeps.
        agents = [pid for pid, _, cmd in procs if os.path.basename(cmd[0]) == b"hvdrun-agent"]
        self.assertEqual(len(agents), 1, procs)
        guards = [pid for pid, _, cmd in procs if cmd[0] == b"hvdrun-agent-guard"]
        self.assertEqual(len(guards), 1, procs)
        self.assertEqual(len(procs), 10, procs)
        job.proc.kill()
        job.finish(timeout=10)
        self.assertNoLeftovers(job)

    def test_killed_agent_is_named_by_its_host(self):
        # Two local host names, one agent each: the agent of 127.0.0.1 dies
        # (kill -9, as the out-of-memory killer would). hvdrun names that
        # host -- not "localhost" -- stops the other one and leaves nothing.
        job = Job(["-np", "2", "-H", "localhost:1,127.0.0.1:1"] + sh("echo ready; sleep 60 & wait"))
        self.assertEqual(len(job.wait_for_stdout_lines(2)), 2)
        victim = None
        deadline = time.monotonic() + 10
        while victim is None and time.monotonic() < deadline:
            for pid, env, cmd in token_processes(job.token, exclude=(job.proc.pid,)):
                if os.path.basename(cmd[0]) != b"hvdrun-agent":
                    continue
                # The agent's worker (its child) is rank 1, on 127.0.0.1.
                for child in os.listdir("/proc"):
                    try:
                        with open("/proc/%s/stat" % child) as f:
                            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                        with open("/proc/%s/environ" % child, "rb") as f:
                            if ppid == pid and b"HOROVOD_RANK=1" in f.read().split(b"\0"):
                                victim = pid
                    except (OSError, ValueError, IndexError):
                        continue
            time.sleep(0.02)
        self.assertIsNotNone(victim, "no agent with rank 1's worker")
        os.kill(victim, signal.SIGKILL)
        code, out, err = job.finish(timeout=20)
        self.assertNotEqual(code, 0, err)
        self.assertIn("the hvdrun agent on 127.0.0.1 was killed by SIGKILL", err)
        self.assertNotIn("agent on localhost", err)
        self.assertNoLeftovers(job)

    # ---------------------------------------------------------------- usage
    def check_usage_error(self, args):
        code, out, err = run(args + ["true"])
        self.assertEqual(code, 2, err)
        lines = [l for l in err.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, "expected one line, got: %r" % err)
        self.assertTrue(lines[0].startswith("hvdrun"), lines[0])

    def test_usage_bad_host_slots(self):
        self.check_usage_error(["-np", "1", "-H", "h:abc"])

    def test_usage_np_exceeds_slots(self):
        self.check_usage_error(["-np", "5", "-H", "localhost:2"])

    def test_usage_missing_hostfile(self):
        self.check_usage_error(["-np", "1", "--hostfile", "/nonexistent/hvd_hosts"])

    # ----------------------------------------------------------- start speed
    def test_startup_is_fast(self):
        best = None
        for _ in range(5):
            t0 = time.monotonic()
            code, _, err = run(["-np", "2", "-H", "localhost:2", "true"])
            self.assertEqual(code, 0, err)
            took = time.monotonic() - t0
            best = took if best is None else min(best, took)
        # Typically ~15 ms; horovodrun takes ~2.3 s. Generous for loaded CI.
        self.assertLess(best, 0.5)


if __name__ == "__main__":
    unittest.main(verbosity=2)
