#!/usr/bin/env python3
"""End-to-end tests of elastic mode on localhost: the real hvdrun, a
discovery script that reads a hosts file the test edits, and the bundled
deterministic C++ trainer (apps/examples/elastic_trainer.cpp), which commits
every step and prints "step K size N rank R version V checksum X" and at the
end "final checksum X steps K". Its result does not depend on the world
size, so every faulty run must end with the checksum of a fault-free one.

Run one case:
  HVDRUN=... TRAINER=... python3 test_elastic.py Elastic.test_scale_up
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
from procs import processes_with_token, read_lines_timed  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
TRAINER = os.environ.get("TRAINER", "elastic_trainer")

# The prefix is the rank in the current world; the trainer names its worker.
STEP_RE = re.compile(r"\[(\d+)\]<stdout>:step (\d+) size (\d+) rank (\d+) version (\d+) checksum (\S+) worker w(\d+)")
FINAL_RE = re.compile(r"\[(\d+)\]<stdout>:final checksum (\S+) steps (\d+)")


def worker_pid(token, worker_id):
    """The trainer process (not its agent) of worker `worker_id`."""
    needle = ("HVDRUN_WORKER_ID=" + worker_id).encode()
    for pid in processes_with_token(token):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and os.path.basename(cmd[0]) != b"hvdrun-agent":
            return pid
    return None


# futex(2), what a thread blocked on a condition variable sits in.
FUTEX_SYSCALL = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine)


def wait_in_collective(pid, timeout=10):
    """Waits until the main thread of `pid` is blocked in futex(2). The
    trainer run with HVD_TRAINER_STEP_MS=0 waits on a futex only for a
    collective to complete (its allreduces and the one inside commit()), so
    a kill right after lands mid-allreduce. Returns False if that was never
    seen, None when this platform cannot tell."""
    if FUTEX_SYSCALL is None:
        return None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/syscall" % pid) as f:
                fields = f.read().split()
        except OSError:
            return None
        if fields and fields[0] == str(FUTEX_SYSCALL):
            return True
        time.sleep(0.001)
    return False


_reference = {}


def reference_checksum(steps):
    """The trainer's result without hvdrun (a job of size 1, no faults)."""
    if steps not in _reference:
        env = dict(os.environ, HVD_TRAINER_STEPS=str(steps), HVD_TRAINER_STEP_MS="0")
        for k in list(env):
            if k.startswith("HOROVOD_") or k.startswith("HVDRUN_"):
                del env[k]
        out = subprocess.run([TRAINER], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60,
                             check=True).stdout.decode()
        m = re.search(r"final checksum (\S+) steps (\d+)", out)
        assert m, out
        _reference[steps] = m.group(1)
    return _reference[steps]


class ElasticJob:
    """hvdrun in elastic mode with `cat <hosts file>` as discovery script.
    stdout/stderr are collected by threads, with arrival times."""

    def __init__(self, hosts, args=(), steps=40, step_ms=50, extra_env=None, script=None, command=None,
                 drop_env=(), fixed_hosts=None):
        self.dir = tempfile.mkdtemp(prefix="hvd-elastic-")
        self.hosts_file = os.path.join(self.dir, "hosts")
        self.set_hosts(hosts)
        self.token = uuid.uuid4().hex
        env = dict(os.environ, HVD_TEST_TOKEN=self.token, HVD_TRAINER_STEPS=str(steps),
                   HVD_TRAINER_STEP_MS=str(step_ms))
        if extra_env:
            env.update(extra_env)
        for k in drop_env:
            env.pop(k, None)
        script = script or "cat %s" % self.hosts_file
        # fixed_hosts: horovodrun's fault-tolerant mode on a fixed -H list
        # (--min-np in args, no discovery script).
        hosts_args = ["-H", fixed_hosts] if fixed_hosts else \
            ["--host-discovery-script", script, "--discovery-interval", "0.2"]
        cmd = [HVDRUN] + hosts_args + list(args) + (command or [TRAINER])
        self.started = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.out, self.err, self.cv, self.readers = read_lines_timed(self.proc)


    def set_hosts(self, text):
        tmp = self.hosts_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.hosts_file)

    def steps(self):
        with self.cv:
            lines = list(self.out)
        res = []
        for t, line in lines:
            m = STEP_RE.search(line)
            if m:
                res.append(dict(t=t, worker=int(m.group(7)), step=int(m.group(2)), size=int(m.group(3)),
                                rank=int(m.group(4)), version=int(m.group(5)), prefix=int(m.group(1))))
        return res

    def wait_for(self, pred, timeout=30, what="condition"):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                r = pred()
                if r:
                    return r
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not any(t.is_alive() for t in self.readers):
                    raise AssertionError("timed out waiting for %s\nstdout:\n%s\nstderr:\n%s" %
                                         (what, self.text(self.out)[-4000:], self.text(self.err)[-4000:]))
                self.cv.wait(min(left, 0.1))

    def wait_for_step(self, size, min_step=0, timeout=30):
        def pred():
            for s in self.steps():
                if s["size"] == size and s["step"] >= min_step:
                    return s
            return None
        return self.wait_for(pred, timeout, "a step at size %d" % size)

    @staticmethod
    def text(lines):
        return "\n".join(l for _, l in lines)

    def finish(self, timeout=60):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise
        for t in self.readers:
            t.join(5)
        return self.proc.returncode, self.text(self.out), self.text(self.err)

    def final_checksums(self, out):
        return [m.group(2) for m in FINAL_RE.finditer(out)]

    def leftovers(self, within=5.0):
        deadline = time.monotonic() + within
        while True:
            left = processes_with_token(self.token)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.05)

    def kill(self):
        """The end of every job: hvdrun's group SIGKILLed if still running,
        the job's directory (hosts file, script) removed."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def read_events(path):
    """The objects of an --events-file, in order."""
    with open(path) as f:
        return [json.loads(line) for line in f]


class Elastic(unittest.TestCase):
    def setUp(self):
        self.jobs = []

    def tearDown(self):
        for j in self.jobs:
            j.kill()
            for pid in processes_with_token(j.token):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def job(self, *a, **kw):
        j = ElasticJob(*a, **kw)
        self.jobs.append(j)
        return j

    def events_path(self):
        """A path for --events-file in a directory removed after the test."""
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        return os.path.join(d, "events.jsonl")

    def assert_success(self, j, steps, code_out_err):
        code, out, err = code_out_err
        self.assertEqual(code, 0, "stdout:\n%s\nstderr:\n%s" % (out[-3000:], err[-3000:]))
        finals = j.final_checksums(out)
        self.assertTrue(finals, out[-2000:])
        self.assertEqual(set(finals), {reference_checksum(steps)}, out[-2000:])
        self.assertEqual(j.leftovers(), [])

    def test_fixed_size(self):
        j = self.job("localhost:2\n", ["-np", "2"], steps=20, step_ms=10)
        res = j.finish()
        self.assert_success(j, 20, res)
        self.assertEqual({s["size"] for s in j.steps()}, {2})
        self.assertEqual(len(j.final_checksums(res[1])), 2)

    def test_fixed_hosts_kill9_restarts_slot(self):
        # horovodrun's fault tolerance without a discovery script: -H and
        # --min-np. A killed worker is replaced on its slot and the job ends
        # with the checksum of an undisturbed run.
        steps = 120
        j = self.job("", ["-np", "2", "--min-np", "1"], steps=steps, step_ms=20, fixed_hosts="localhost:2")
        j.wait_for_step(2, 3)
        pid = worker_pid(j.token, "w2")
        self.assertIsNotNone(pid)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        j.wait_for(lambda: [s for s in j.steps() if s["t"] > killed_at and s["size"] == 2 and s["worker"] >= 3], 20,
                   "the restarted worker training at size 2")
        res = j.finish()
        self.assert_success(j, steps, res)
        self.assertIn("elastic job on fixed hosts localhost:2", res[2])
        # Lines are prefixed with the rank, not the worker's serial: the
        # restarted worker (w3 or later) prints as [0] or [1], as users grep.
        late = [s for s in j.steps() if s["worker"] >= 3]
        self.assertTrue(late)
        self.assertEqual([s for s in late if s["prefix"] != s["rank"]], [])
        self.assertFalse(re.search(r"^\[[3-9]\]<stdout>:step", j.text(j.out), re.M), "a serial used as a prefix")

    def test_scale_up_1_2_3(self):
        j = self.job("localhost:1\n", ["-np", "1", "--max-np", "3"], steps=60, step_ms=40)
        j.wait_for_step(1, 3)
        j.set_hosts("localhost:2\n")
        j.wait_for_step(2)
        j.set_hosts("localhost:3\n")
        s3 = j.wait_for_step(3)
        res = j.finish()
        self.assert_success(j, 60, res)
        sizes = [s["size"] for s in j.steps() if s["rank"] == 0]
        self.assertEqual(sorted(set(sizes)), [1, 2, 3])
        # rank 0 stays worker 1 (the original) through both scale-ups
        self.assertEqual({s["worker"] for s in j.steps() if s["rank"] == 0}, {1})
        self.assertIn("joined", res[2])
        self.assertGreater(s3["step"], 3)

    def test_scale_down_3_2(self):
        # Horovod's scale-down: the worker of the dropped slot drains. It
        # trains on with the others to the next commit, where every member
        # raises HostsUpdatedInterrupt; the survivors go on with their live
        # state (no abort, no rollback) and it leaves (WorkerRemovedError:
        # the trainer exits 0). hvdrun never signals it.
        j = self.job("localhost:3\n", ["-np", "3", "--min-np", "2", "--verbose"], steps=50, step_ms=40)
        j.wait_for_step(3, 3)
        j.set_hosts("localhost:2\n")
        j.wait_for_step(2)
        res = j.finish()
        self.assert_success(j, 50, res)
        self.assertRegex(res[2], r"left: w3 \(localhost slot 2\) \(draining\)")
        self.assertIn("w3 on localhost slot 2 left the job (drained)", res[2])
        self.assertNotIn("restoring commit", res[2])
        self.assertNotIn("lost its communicator", res[2])
        self.assertNotIn("stopping w3", res[2])
        # w3 trained at size 3 up to the commit where the others went to size 2.
        w3 = [s for s in j.steps() if s["worker"] == 3]
        first2 = min(s["step"] for s in j.steps() if s["size"] == 2)
        self.assertEqual(max(s["step"] for s in w3), first2 - 1)

    def test_scale_down_drains_to_the_next_rare_commit(self):
        # Commits every 20 steps: the dropped worker trains on at size 3
        # until the next commit (not just one step), leaves exactly there,
        # and the survivors continue from the step after it -- no step
        # trained twice, the undisturbed checksum.
        every = 20
        j = self.job("localhost:3\n", ["-np", "3", "--min-np", "2", "--verbose"], steps=100, step_ms=20,
                     extra_env={"HVD_TRAINER_COMMIT_EVERY": str(every)})
        j.wait_for(lambda: [s for s in j.steps() if s["size"] == 3 and s["step"] >= every and s["step"] % every == 3],
                   30, "three steps past a commit at size 3")
        dropped_at = time.monotonic()
        j.set_hosts("localhost:2\n")
        j.wait_for_step(2)
        res = j.finish()
        self.assert_success(j, 100, res)
        self.assertIn("w3 on localhost slot 2 left the job (drained)", res[2])
        self.assertNotIn("restoring commit", res[2])
        w3_last = max(s["step"] for s in j.steps() if s["worker"] == 3)
        first2 = min(s["step"] for s in j.steps() if s["size"] == 2)
        self.assertEqual(w3_last % every, 0, "w3 left at step %d, not at a commit" % w3_last)
        self.assertEqual(first2, w3_last + 1)
        # It trained on after the host was dropped, at size 3.
        self.assertTrue([s for s in j.steps() if s["worker"] == 3 and s["t"] > dropped_at], "w3 stopped at once")
        for worker in (1, 2):
            mine = [s["step"] for s in j.steps() if s["worker"] == worker]
            self.assertEqual(mine, sorted(set(mine)), "worker %d trained a step twice" % worker)

    def test_every_trained_host_replaced_at_once_keeps_the_progress(self):
        # Discovery swaps localhost for 127.0.0.1 in one step (a node pool
        # replaced): no worker that stays has trained. w1 keeps training as
        # a member until the newcomers synced in a world with it (they take its
        # state), then drains; training goes on from where it was instead of
        # starting over from the newcomers' initial state.
        steps = 300
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1"], steps=steps, step_ms=10)
        before = j.wait_for(lambda: [s for s in j.steps() if s["step"] >= 60], 30, "step 60")
        j.set_hosts("127.0.0.1:2\n")
        res = j.finish()
        self.assert_success(j, steps, res)
        self.assertIn("w1 on localhost slot 0 keeps training although host localhost no longer listed", res[2])
        self.assertIn("w1 on localhost slot 0 handed the job's state over to the workers that stay", res[2])
        self.assertRegex(res[2], r"w1 on localhost slot 0 left the job \(drained\)")
        ss = j.steps()
        newcomers = [s for s in ss if s["worker"] >= 3]
        self.assertTrue(newcomers)
        # Their first world is w1's (the handover), and it starts at most one
        # step below what w1 and w2 had reached before it.
        first = min(s["version"] for s in newcomers)
        self.assertIn(1, {s["worker"] for s in ss if s["version"] == first})
        reached = max(s["step"] for s in ss if s["worker"] in (1, 2) and s["version"] < first)
        self.assertGreaterEqual(reached, before[0]["step"])
        self.assertGreaterEqual(min(s["step"] for s in newcomers), reached - 1, "the newcomers started over")
        # The last steps are the newcomers' alone.
        self.assertEqual({s["worker"] for s in ss if s["step"] == steps}, {3, 4})

    def test_last_staying_holder_killed_while_others_drain_keeps_the_progress(self):
        # 127.0.0.1 is dropped (w2 drains, training on to the next commit,
        # 20 steps away), then w1 -- the one trained worker that stays -- is
        # killed before that commit. w2's world fails; it goes back to its
        # last commit and, instead of leaving, waits: hvdrun calls it back as
        # a member, w1's restarted slot syncs from it, and training goes on
        # from that commit instead of starting over.
        every = 20
        steps = 200
        j = self.job("localhost:1\n127.0.0.1:1\n", ["-np", "2", "--min-np", "1", "--verbose"], steps=steps,
                     step_ms=50, extra_env={"HVD_TRAINER_COMMIT_EVERY": str(every)})
        j.wait_for(lambda: [s for s in j.steps() if s["size"] == 2 and s["step"] >= every and s["step"] % every == 2],
                   30, "two steps past a commit at size 2")
        j.set_hosts("localhost:1\n")
        j.wait_for(lambda: "(draining)" in j.text(j.err), 20, "w2 to drain")
        pid = worker_pid(j.token, "w1")
        self.assertIsNotNone(pid)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        res = j.finish(timeout=90)
        self.assert_success(j, steps, res)
        self.assertIn("w2 on 127.0.0.1 slot 0 is called back from draining", res[2])
        self.assertIn("w2 on 127.0.0.1 slot 0 handed the job's state over to the workers that stay", res[2])
        ss = j.steps()
        committed = max(s["step"] for s in ss if s["t"] < killed_at and s["step"] % every == 0)
        later = [s for s in ss if s["worker"] >= 3]
        self.assertTrue(later, "w1's slot was not restarted")
        self.assertGreater(min(s["step"] for s in later), committed, "the newcomers started over")
        # w2 trained again after the kill, from its last commit.
        self.assertGreater(min(s["step"] for s in ss if s["worker"] == 2 and s["t"] > killed_at), committed)
        self.assertEqual({s["worker"] for s in ss if s["step"] == steps}, {max(s["worker"] for s in later)})

    def test_newcomer_that_never_synced_does_not_count_as_holding_the_state(self):
        # A newcomer (w3 on 127.0.0.1) is admitted; its world forms (the
        # arrival barrier completes) and the members start State::sync, which
        # the trainer slows down (HVD_TRAINER_SYNC_MS). While w3 has joined but
        # not synced, localhost -- where every trained worker runs -- is
        # dropped, and w2 is killed, so that world fails before w3 received the
        # state. w3 must not count as holding the trained state: w1 stays as
        # the keeper, w3 syncs from it, and training goes on after the last
        # commit instead of starting over from step 1.
        every = 20
        steps = 160
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1", "--verbose"], steps=steps, step_ms=50,
                     extra_env={"HVD_TRAINER_COMMIT_EVERY": str(every), "HVD_TRAINER_SYNC_MS": "3000"})
        j.wait_for(lambda: [s for s in j.steps() if s["step"] >= every + 2], 40, "two steps past the first commit")
        j.set_hosts("localhost:2\n127.0.0.1:1\n")
        j.wait_for(lambda: "w3 syncing in world 2" in j.text(j.err), 30, "the newcomer w3 to start its sync")
        committed = max(s["step"] for s in j.steps() if s["step"] % every == 0)
        j.set_hosts("127.0.0.1:1\n")
        j.wait_for(lambda: re.search(r"world 3\b", j.text(j.err)), 10, "the world without localhost")
        pid = worker_pid(j.token, "w2")
        self.assertIsNotNone(pid)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        res = j.finish(timeout=120)
        self.assert_success(j, steps, res)
        self.assertIn("w1 on localhost slot 0 keeps training although", res[2])
        ss = j.steps()
        later = [s for s in ss if s["worker"] == 3 and s["t"] > killed_at]
        self.assertTrue(later, "w3 never trained")
        self.assertGreater(min(s["step"] for s in later), committed, "w3 started over:\n" + res[2][-3000:])

    def test_scale_down_without_drain(self):
        # --elastic-drain-timeout 0: the dropped worker is stopped at once
        # (SIGTERM) and the survivors go back to their last commit.
        j = self.job("localhost:3\n", ["-np", "3", "--min-np", "2", "--verbose", "--elastic-drain-timeout", "0"],
                     steps=50, step_ms=40)
        j.wait_for_step(3, 3)
        j.set_hosts("localhost:2\n")
        j.wait_for_step(2)
        res = j.finish()
        self.assert_success(j, 50, res)
        self.assertRegex(res[2], r"left: w3 \(localhost slot 2\);")
        # --verbose: a line when the removed worker is stopped, one when it has
        stopping = re.search(r"stopping (w\d+) \(SIGTERM, then SIGKILL after \d+ ms\)", res[2])
        self.assertIsNotNone(stopping, res[2])
        self.assertIn(f"{stopping.group(1)} stopped (", res[2])
        self.assertNotIn("(drained)", res[2])

    def test_scale_down_below_min_np_holds_without_rollback(self):
        # -np 2 --min-np 2 loses a slot: no world of 1 may train, so hvdrun
        # publishes a world that holds. The dropped worker drains and leaves
        # at the commit; the survivor waits with its live state (no
        # rollback, as in Horovod's rendezvous) and goes on when the slot is
        # back, in a world of 2 with a new worker.
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "2", "--verbose"], steps=60, step_ms=30)
        j.wait_for_step(2, 3)
        j.set_hosts("localhost:1\n")
        j.wait_for(lambda: "left the job (drained)" in j.text(j.err), 20, "the dropped worker to leave")
        j.set_hosts("localhost:2\n")
        res = j.finish(timeout=60)
        self.assert_success(j, 60, res)
        self.assertIn("world 2 holds: size 2 -> 1, below --min-np 2; left: w2 (localhost slot 1) (draining)", res[2])
        self.assertNotIn("restoring commit", res[2])
        self.assertNotIn("lost its communicator", res[2])
        self.assertEqual({s["size"] for s in j.steps()}, {2})
        self.assertTrue([s for s in j.steps() if s["worker"] == 3], "the new worker never trained")

    def test_drain_timeout_stops_a_worker_that_does_not_commit(self):
        # Steps of 2.5 s, drain timeout 1 s: the dropped worker cannot reach
        # a commit in time. hvdrun stops it and tells the others
        # (elastic/drain-failed/w3), who go back to their last commit; the
        # result is still the undisturbed run's.
        events = self.events_path()
        j = self.job("localhost:3\n", ["-np", "3", "--min-np", "2", "--verbose", "--elastic-drain-timeout", "1",
                                        "--events-file", events], steps=5, step_ms=2500)
        j.wait_for_step(3, 1)
        j.set_hosts("localhost:2\n")
        res = j.finish(timeout=60)
        self.assert_success(j, 5, res)
        self.assertIn("w3 on localhost slot 2 did not leave within --elastic-drain-timeout 1 s", res[2])
        self.assertIn("restoring commit", res[2])
        self.assertNotIn("(drained)", res[2])
        ev = read_events(events)
        worlds = [e["world"] for e in ev if e["event"] == "world"]
        self.assertEqual(worlds[1]["draining"], ["w3"])
        failed = [e for e in ev if e["event"] == "drain_failed"]
        self.assertEqual([e["worker"] for e in failed], ["w3"])
        self.assertIn("stopped by hvdrun while draining", failed[0]["message"])

    def test_rapid_resizes_never_stall(self):
        # Discovery toggles 2 <-> 1 slots every 0.5 s: worlds are published
        # while the previous one is still forming (a newcomer stopped before
        # it connected). No formation may wait out the start timeout (30 s,
        # "did not form"), hvdrun's descriptors stay flat, and the result is
        # the undisturbed run's.
        steps = 600
        events = self.events_path()
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1", "--max-np", "2", "--events-file", events],
                     steps=steps, step_ms=15)
        j.wait_for_step(2, 3)
        fds_before = len(os.listdir("/proc/%d/fd" % j.proc.pid))
        started = time.monotonic()
        for i in range(24):
            j.set_hosts("localhost:1\n" if i % 2 == 0 else "localhost:2\n")
            time.sleep(0.5)
            if j.proc.poll() is not None:
                break
        fds_after = len(os.listdir("/proc/%d/fd" % j.proc.pid)) if j.proc.poll() is None else fds_before
        res = j.finish(timeout=80)
        self.assert_success(j, steps, res)
        self.assertNotIn("did not form", res[2])
        self.assertGreater(len({s["version"] for s in j.steps()}), 6, "the toggles re-formed the job")
        self.assertLessEqual(fds_after, fds_before + 2, "hvdrun's descriptors grew with re-formations")
        self.assertLess(time.monotonic() - started, 70)
        # The store does not grow with re-formations: hvdrun erases the keys
        # of worlds no live worker uses (and of departed workers).
        ev = read_events(events)
        worlds = [e["world"]["version"] for e in ev if e["event"] == "world"]
        pruned = [e for e in ev if e["event"] == "store_pruned"]
        print("store after each pruning:", [(e["worlds_below"], e["keys"]) for e in pruned])
        self.assertGreater(len(pruned), 4, pruned)
        self.assertGreaterEqual(pruned[-1]["worlds_below"], max(worlds) - 2, (worlds, pruned[-1]))
        self.assertLessEqual(max(e["keys"] for e in pruned[len(pruned) // 2:]), max(e["keys"] for e in pruned[:3]) + 5,
                             "the store grew with re-formations")

    def test_kill9_mid_allreduce_restarts_slot(self):
        # An 8 MiB allreduce on top of the model's each step
        # (HVD_TRAINER_BALLAST_KB, its values unused) keeps the workers
        # inside collectives most of the time, and the kill waits until w2's
        # main thread is blocked in one. The step sleep is short, not 0: the
        # survivor trains alone at size 1 (no collective cost) until the
        # restarted slot joins, and must not finish all steps before that.
        events = self.events_path()
        steps = 300
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1", "--events-file", events], steps=steps,
                     step_ms=10, extra_env={"HVD_TRAINER_BALLAST_KB": "8192"})
        before = j.wait_for_step(2, 5)
        pid = worker_pid(j.token, "w2")
        self.assertIsNotNone(pid)
        self.assertNotEqual(wait_in_collective(pid), False, "w2 was never seen blocked in a collective")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        # the failed worker leaves the world at once; the restarted slot
        # joins (often before the survivor has re-formed at size 1, in which
        # case the survivor goes straight to the world of 2)
        j.wait_for(lambda: "size 2 -> 1" in j.text(j.err), 10, "a world without w2")
        j.wait_for(lambda: [s for s in j.steps() if s["t"] > killed_at and s["size"] == 2 and s["worker"] >= 3], 20,
                   "the restarted worker training at size 2")
        res = j.finish()
        # the same final checksum as a fault-free run, on both workers
        self.assert_success(j, steps, res)
        self.assertEqual(len(j.final_checksums(res[1])), 2)
        # the survivor's collective failed (PeerFailureError) rather than a
        # change being announced: it went back to its last commit
        self.assertRegex(res[2], r"\[0\]<stderr>:.*restoring commit \d+ and re-forming")  # w1, rank 0
        # training resumed from the last commit: no step after the kill is
        # earlier than the last step committed before it
        after = [s["step"] for s in j.steps() if s["t"] > killed_at]
        self.assertGreaterEqual(min(after), before["step"])
        # --events-file tells the same story in JSON
        ev = read_events(events)
        kinds = [e["event"] for e in ev]
        self.assertEqual((kinds[0], kinds[-1], ev[-1]["code"]), ("job_start", "job_end", 0))
        w2_exit = [e for e in ev if e["event"] == "worker_exit" and e["worker"] == "w2"]
        self.assertEqual(w2_exit[0]["status"], 137, w2_exit)
        worlds = [e["world"] for e in ev if e["event"] == "world"]
        self.assertEqual([w["version"] for w in worlds], list(range(1, len(worlds) + 1)))
        self.assertEqual([m["id"] for m in worlds[1]["members"]], ["w1"])
        self.assertIn("w3", [m["id"] for m in worlds[-1]["members"]])
        self.assertLess(kinds.index("worker_exit"), kinds.index("world", kinds.index("worker_exit")))
        self.assertIn({"event": "worker_start", "worker": "w3", "host": "localhost", "slot": 1},
                      [{k: v for k, v in e.items() if k != "time"} for e in ev])

    def test_kill9_between_rare_commits_redoes_the_steps_since_the_commit(self):
        # A loop that commits every 20 steps (HVD_TRAINER_COMMIT_EVERY): a
        # kill -9 between two commits sends the survivor back to the last
        # one, so it trains those steps again -- more than the one step the
        # other tests' every-step commits leave to redo -- and still ends
        # with the undisturbed checksum.
        steps, every = 200, 20
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1"], steps=steps, step_ms=20,
                     extra_env={"HVD_TRAINER_COMMIT_EVERY": str(every)})
        # Between two commits, 15 steps (300 ms) before the next one.
        j.wait_for(lambda: [s for s in j.steps() if s["worker"] == 1 and s["step"] >= every and s["step"] % every == 5],
                   30, "worker 1 five steps past a commit")
        pid = worker_pid(j.token, "w2")
        self.assertIsNotNone(pid)
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        j.wait_for(lambda: [s for s in j.steps() if s["t"] > killed_at and s["worker"] == 1 and s["size"] == 1] or
                   [s for s in j.steps() if s["t"] > killed_at and s["worker"] >= 3], 20, "the survivor re-formed")
        res = j.finish()
        self.assert_success(j, steps, res)
        w1 = [s for s in j.steps() if s["worker"] == 1]
        before = [s["step"] for s in w1 if s["t"] <= killed_at]
        after = [s for s in w1 if s["t"] > killed_at]
        last_before = max(before)
        # The first step after the restore is the one after the last commit.
        resumed = next(s["step"] for s in after if s["version"] > 1)
        self.assertEqual((resumed - 1) % every, 0, "resumed at %d, not just after a commit" % resumed)
        self.assertLess(resumed, last_before, "the survivor redid nothing: resumed at %d, had reached %d"
                        % (resumed, last_before))
        self.assertGreaterEqual(resumed, last_before - every, (resumed, last_before))
        self.assertRegex(res[2], r"\[0\]<stderr>:.*restoring commit \d+ and re-forming")

    def test_newcomer_admitted_after_last_commit_job_succeeds(self):
        # The end-of-job race: worker 1 has committed its last step and is
        # still saving (HVD_TRAINER_END_MS) when discovery offers a second
        # slot. The newcomer is admitted in world 2, which can never form:
        # worker 1 is done. Worker 1 exits 0; hvdrun must stop the newcomer
        # and succeed, not wait the 30 s finishing grace and exit 5.
        j = self.job("localhost:1\n", ["-np", "1", "--max-np", "2"], steps=20, step_ms=10,
                     extra_env={"HVD_TRAINER_END_MS": "5000"})
        j.wait_for(lambda: FINAL_RE.search(j.text(j.out)), 30, "worker 1's final line")
        j.set_hosts("localhost:2\n")
        j.wait_for(lambda: "world 2: size 1 -> 2, joined w2" in j.text(j.err), 4.5,
                   "world 2 admitting w2 before worker 1 exits")
        res = j.finish(60)
        self.assert_success(j, 20, res)
        self.assertIn("stopping w2 (localhost slot 1): admitted to world 2, which never formed", res[2])
        self.assertNotIn("did not exit within", res[2])
        self.assertLess(time.monotonic() - j.started, 25)

    def test_hosts_appear_later_and_loopback_store_ignores_remote(self):
        # nothing listed at first (pods not up yet): the job waits; then this
        # host appears, so workers reach the store on 127.0.0.1; a remote
        # host listed after that is ignored with one warning (its workers
        # could not reach a loopback store) and never contacted.
        j = self.job("", ["-np", "2"], steps=60, step_ms=20)
        time.sleep(0.6)
        self.assertEqual(j.steps(), [])
        j.set_hosts("localhost:2\n")
        j.wait_for_step(2, 3)
        j.set_hosts("localhost:2\n198.18.7.7:1\n")
        j.wait_for(lambda: "ignoring discovered host 198.18.7.7" in j.text(j.err), 10, "the warning")
        res = j.finish()
        self.assert_success(j, 60, res)
        err = res[2]
        self.assertIn("workers reach the store on 127.0.0.1", err)
        self.assertEqual(err.count("ignoring discovered host 198.18.7.7"), 1, err)
        self.assertNotIn("198.18.7.7: ", err.replace("ignoring discovered host 198.18.7.7: ", ""))
        self.assertEqual({s["size"] for s in j.steps()}, {2})

    def test_discovery_fails_on_first_run(self):
        start = time.monotonic()
        j = self.job("", ["-np", "1"], script="echo no cluster here >&2; exit 3")
        code, out, err = j.finish(20)
        self.assertEqual(code, 3, err)
        self.assertIn("exited with code 3", err)
        self.assertIn("no cluster here", err)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(j.leftovers(), [])

    def test_flaky_discovery_keeps_hosts(self):
        # odd runs fail, even runs print garbage, the first run is good
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        counter = os.path.join(d, "n")
        script = os.path.join(d, "disc.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); echo $((n+1)) > %s\n"
                    "if [ $n -eq 0 ]; then echo localhost:2; exit 0; fi\n"
                    "if [ $((n %% 2)) -eq 1 ]; then echo broken >&2; exit 1; fi\n"
                    "echo 'local host:x'\n" % (counter, counter))
        os.chmod(script, 0o755)
        j = self.job("", ["-np", "2"], steps=30, step_ms=40, script=script)
        res = j.finish()
        self.assert_success(j, 30, res)
        self.assertEqual({s["size"] for s in j.steps()}, {2})
        err = res[2]
        self.assertIn("broken", err)
        self.assertIn("malformed", err)
        # each distinct reason is logged once, not every second
        self.assertLessEqual(err.count("broken"), 2, err)

    def test_hanging_discovery_is_killed(self):
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        counter = os.path.join(d, "n")
        script = os.path.join(d, "disc.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nn=$(cat %s 2>/dev/null || echo 0); echo $((n+1)) > %s\n"
                    "if [ $n -eq 0 ]; then echo localhost:1; exit 0; fi\n"
                    "sleep 300 & sleep 300\n" % (counter, counter))
        os.chmod(script, 0o755)
        j = self.job("", ["-np", "1", "--discovery-timeout", "1"], steps=40, step_ms=50, script=script)
        res = j.finish()
        self.assert_success(j, 40, res)
        self.assertIn("timed out", res[2])

    def test_sigint_stops_everything(self):
        j = self.job("localhost:2\n", ["-np", "2"], steps=1000, step_ms=50)
        j.wait_for_step(2, 2)
        os.kill(j.proc.pid, signal.SIGINT)
        code, out, err = j.finish(20)
        self.assertEqual(code, 130, err)
        self.assertEqual(j.leftovers(), [])

    def test_reset_limit(self):
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "1", "--reset-limit", "1"], steps=1000, step_ms=40)
        j.wait_for_step(2, 2)
        os.kill(worker_pid(j.token, "w2"), signal.SIGKILL)
        code, out, err = j.finish(30)
        self.assertEqual(code, 5, err)
        self.assertIn("--reset-limit 1", err)
        self.assertEqual(j.leftovers(), [])

    def test_below_min_np_times_out(self):
        # never starts: discovery offers 1 slot, -np needs 2
        start = time.monotonic()
        j = self.job("localhost:1\n", ["-np", "2", "--min-np", "2", "--elastic-timeout", "2"], steps=10)
        code, out, err = j.finish(30)
        self.assertEqual(code, 5, err)
        self.assertIn("hvdrun: error: discovery offered only 1 usable slots in 2 s; -np needs 2 (--elastic-timeout)",
                      err)
        self.assertEqual(j.steps(), [])
        self.assertGreaterEqual(time.monotonic() - start, 2)
        self.assertLess(time.monotonic() - start, 15)
        self.assertEqual(j.leftovers(), [])

    def test_running_job_below_min_np_times_out(self):
        # a running job of 2 loses a slot (discovery now offers 1): no world
        # of 1 is published (--min-np 2); after --elastic-timeout it ends
        j = self.job("localhost:2\n", ["-np", "2", "--min-np", "2", "--elastic-timeout", "2"], steps=100000,
                     step_ms=20)
        j.wait_for_step(2, 3)
        removed_at = time.monotonic()
        j.set_hosts("localhost:1\n")
        code, out, err = j.finish(30)
        elapsed = time.monotonic() - removed_at
        self.assertEqual(code, 5, err)
        self.assertRegex(err, r"hvdrun: error: only 1 usable worker for 2 s, fewer than --min-np 2 "
                              r"\(--elastic-timeout\)")
        self.assertNotRegex(err, r"world \d+: size 2 -> 1")  # no world of 1 trains
        self.assertRegex(err, r"world 2 holds: size 2 -> 1, below --min-np 2")  # w2 drained, w1 waited
        self.assertEqual({s["size"] for s in j.steps()}, {2})
        self.assertGreaterEqual(elapsed, 2)
        self.assertLess(elapsed, 15)
        self.assertEqual(j.leftovers(), [])

    def test_elastic_timeout_must_be_positive(self):
        # horovodrun takes any integer; 0 would give up at once, and the
        # library refuses HOROVOD_ELASTIC_TIMEOUT=0, so hvdrun refuses it
        for args, env, message in (
                (["--elastic-timeout", "0"], None, "--elastic-timeout must be at least 1, not 0"),
                ([], {"HOROVOD_ELASTIC_TIMEOUT": "0"}, "HOROVOD_ELASTIC_TIMEOUT='0' is not a positive number")):
            j = self.job("localhost:1\n", ["-np", "1"] + args, extra_env=env)
            code, out, err = j.finish(20)
            self.assertEqual(code, 2, err)
            self.assertIn(message, err)
            self.assertEqual(j.steps(), [])
            self.assertEqual(j.leftovers(), [])

    def test_dry_run_runs_the_script_once_and_shows_the_hosts(self):
        # --dry-run of an elastic job: one discovery run, printed; nothing starts
        j = self.job("localhost:2\n127.0.0.1:1\n", ["-np", "2", "--dry-run"])
        code, out, err = j.finish(20)
        self.assertEqual(code, 0, err)
        self.assertIn("# elastic job: hosts from host discovery script", out)
        self.assertIn("hosts: localhost:2, 127.0.0.1:1", out)
        self.assertIn("slots: 3 (-np 2)", out)
        self.assertEqual(j.steps(), [])
        self.assertEqual(j.leftovers(), [])
        # a failing first run is the launch failure it would be at start
        j = self.job("localhost:2\n", ["-np", "2", "--dry-run=json"], script="false")
        code, out, err = j.finish(20)
        self.assertEqual(code, 3, err)
        self.assertIn("exit", err)

    def test_missing_command_fails_fast(self):
        start = time.monotonic()
        j = self.job("localhost:1\n", ["-np", "1"], command=["/nonexistent/trainer"])
        code, out, err = j.finish(30)
        self.assertEqual(code, 127, err)
        self.assertLess(time.monotonic() - start, 10)
        self.assertEqual(j.leftovers(), [])


if __name__ == "__main__":
    unittest.main()
