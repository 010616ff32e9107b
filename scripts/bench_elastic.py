#!/usr/bin/env python3
"""Elastic-mode recovery benchmarks (issue 5 targets), printed as tables.

    python3 scripts/bench_elastic.py [--build build] [--repeat 5] [--big 64]
                                     [--commit-every 20] [--handover N] [--soak CYCLES]
                                     [--soak-python CYCLES] [--python]

Runs real hvdrun elastic jobs on this host with the bundled
apps/examples/elastic_trainer (1024-parameter model, one int64 allreduce
and a commit per step, HVD_TRAINER_STEP_MS sleep after each step) and
measures, from the moment of the event, when workers print steps again:

  kill9    one of 2 workers (host still listed) gets SIGKILL:
             resume = the survivor's first step in a newer world
             back2  = both workers stepping at size 2 in a newer world
  newhost  discovery starts printing a second host (127.0.0.1 beside
           localhost, so no SSH is involved):
             train  = the new worker's first step, measured from the moment
                      hvdrun logged the discovery run that listed the host
  scaledown  the hosts file drops the second slot of localhost:2, with
           the dropped worker draining (the default) and with
           --elastic-drain-timeout 0 (stopped at once, the survivor rolls
           back):
             size1  = the survivor's first step at size 1, measured from the
                      moment hvdrun logged the discovery run without the slot
           (the trainer commits every step, so the rollback costs no step
           here; with rarer commits it redoes up to one commit interval)
  rare commits  (--commit-every N, default 20; 0 skips) the scale-down
           cases again with HVD_TRAINER_COMMIT_EVERY=N, the slot dropped
           between two commits: size1 as above, and the steps the survivor
           trained twice (a rollback redoes up to N-1; a drain none)
  handover (--handover N) the keeper's handover: localhost:2 replaced by
           127.0.0.1:2 in one step (ms from the discovery run to a
           newcomer's first step and to the newcomers alone, steps trained
           again); and a drainer called back: 127.0.0.1 dropped, then w1
           killed before w2's commit (50 ms steps, a commit every
           --commit-every steps): ms from the kill to w2's and to the
           restarted slot's first step, steps trained again (those since
           the last commit; all of them had the newcomers started over)
  soak     (--soak CYCLES) one job shrunk 2 -> 1 and grown back CYCLES
           times: hvdrun's RSS, threads and descriptors, and the store's
           key count (its store_pruned events); the surviving worker w1's
           RSS, threads, descriptors and memory mappings; at five points
           (--soak-python CYCLES: the same with elastic_mnist.py)
  python   (--python) the same kill -9 with examples/python/elastic_mnist.py
           (PyTorch, commit every step): resume = the survivor's first step
           at size 1, back2 = a new process stepping at size 2
  big      --big workers on one host, one gets SIGKILL:
             reform = every survivor stepping in a newer world
             full   = all --big workers stepping at full size again

Times are the arrival of hvdrun's output lines in this script (stdout is
line-buffered by the trainer and relayed by hvdrun), so they include the
relay, and up to one HVD_TRAINER_STEP_MS of sleep. Every job is stopped
with SIGINT afterwards and no process is left behind.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

PY_STEP_RE = re.compile(r"^\[(\d+)\]<stdout>:epoch \d+ batch (\d+) size (\d+) rank (\d+) pid (\d+)")
# The prefix is the rank in the current world; the trainer names its worker
# (HVDRUN_WORKER_ID) at the end of the line: steps are keyed by worker serial.
STEP_RE = re.compile(r"^\[\d+\]<stdout>:step (\d+) size (\d+) rank (\d+) version (\d+) checksum \S+ worker w(\d+)")


class Job:
    def __init__(self, hvdrun, trainer, hosts, args, step_ms, interval, step_re=None, env_extra=None):
        self.dir = tempfile.mkdtemp(prefix="hvd-bench-elastic-")
        self.hosts = os.path.join(self.dir, "hosts")
        self.set_hosts(hosts)
        self.token = uuid.uuid4().hex
        env = dict(os.environ, HVD_TEST_TOKEN=self.token, HVD_TRAINER_STEPS="100000000",
                   HVD_TRAINER_STEP_MS=str(step_ms))
        env.update(env_extra or {})
        trainer = trainer if isinstance(trainer, list) else [trainer]
        cmd = [hvdrun, "--host-discovery-script", "cat " + self.hosts, "--discovery-interval", str(interval)] + \
            args + trainer
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     env=env, text=True, bufsize=1, start_new_session=True)
        self.step_re = step_re or STEP_RE
        self.steps = []  # (t, worker serial, step, size, rank, version) or, PyTorch: (t, prefix, batch, size, rank, pid)
        self.err = []  # (t, line)
        self.cv = threading.Condition()
        for stream, fn in ((self.proc.stdout, self._out), (self.proc.stderr, self._err)):
            threading.Thread(target=self._read, args=(stream, fn), daemon=True).start()

    def set_hosts(self, text):
        tmp = self.hosts + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.hosts)

    def _read(self, stream, fn):
        for line in stream:
            t = time.monotonic()
            with self.cv:
                fn(t, line.rstrip("\n"))
                self.cv.notify_all()

    def _out(self, t, line):
        m = self.step_re.match(line)
        if m:
            g = [int(x) for x in m.groups()]
            if self.step_re is STEP_RE:  # (worker serial, step, size, rank, version)
                g = [g[4]] + g[:4]
            self.steps.append((t,) + tuple(g))

    def _err(self, t, line):
        self.err.append((t, line))

    def wait(self, pred, timeout, what):
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                r = pred()
                if r:
                    return r
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    tail = "\n".join(l for _, l in self.err[-15:])
                    raise RuntimeError("timed out waiting for %s\n%s" % (what, tail))
                self.cv.wait(min(left, 0.05))

    def version(self):
        return max((s[5] for s in self.steps), default=0)

    def worker_pid(self, worker_id):
        token = ("HVD_TEST_TOKEN=" + self.token).encode()
        wid = ("HVDRUN_WORKER_ID=" + worker_id).encode()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/environ" % name, "rb") as f:
                    env = f.read().split(b"\0")
                with open("/proc/%s/cmdline" % name, "rb") as f:
                    cmd = f.read().split(b"\0")
            except OSError:
                continue
            if token in env and wid in env and os.path.basename(cmd[0]) != b"hvdrun-agent":
                return int(name)
        return None

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)  # the discovery file's directory


def first_after(job, t0, v0, cond):
    """Arrival time of the first step line after t0 in a world newer than v0 matching cond."""
    for s in job.steps:
        if s[0] > t0 and s[5] > v0 and cond(s):
            return s[0]
    return None


def bench_kill9(a, step_ms):
    j = Job(a.hvdrun, a.trainer, "localhost:2\n", ["-np", "2", "--min-np", "1"], step_ms, 1.0)
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 20}) == 2, 30, "2 workers at step 20")
        pid = j.worker_pid("w2")
        with j.cv:
            v0 = j.version()
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        resume = j.wait(lambda: first_after(j, t0, v0, lambda s: s[1] == 1), 10, "the survivor to resume")
        back = j.wait(lambda: (lambda x, y: max(x, y) if x and y else None)(
            first_after(j, t0, v0, lambda s: s[1] == 1 and s[3] == 2),
            first_after(j, t0, v0, lambda s: s[1] >= 3 and s[3] == 2)), 10, "2 workers again")
        return resume - t0, back - t0
    finally:
        j.stop()


def bench_newhost(a, step_ms):
    # --log-level info: hvdrun logs its discovery runs (quiet by default).
    j = Job(a.hvdrun, a.trainer, "localhost:1\n", ["-np", "1", "--min-np", "1", "--log-level", "info"], step_ms, 1.0)
    try:
        j.wait(lambda: any(s[2] >= 10 for s in j.steps), 30, "step 10")
        with j.cv:
            v0 = j.version()
            n_err = len(j.err)
        t_write = time.monotonic()
        j.set_hosts("localhost:1\n127.0.0.1:1\n")
        t_disc = j.wait(lambda: next((t for t, l in j.err[n_err:] if "discovery: " in l and "127.0.0.1" in l), None),
                        10, "the discovery run listing 127.0.0.1")
        t_train = j.wait(lambda: first_after(j, t_write, v0, lambda s: s[1] == 2), 10, "the new worker to train")
        return t_train - t_disc, t_train - t_write
    finally:
        j.stop()


def bench_scaledown(a, step_ms, drain, commit_every=1):
    """Returns (seconds from the discovery run to the survivor's first step
    at size 1, steps the survivor trained twice)."""
    args = ["-np", "2", "--min-np", "1", "--log-level", "info"] + ([] if drain else ["--elastic-drain-timeout", "0"])
    j = Job(a.hvdrun, a.trainer, "localhost:2\n", args, step_ms, 0.2,
            env_extra={"HVD_TRAINER_COMMIT_EVERY": str(commit_every)})
    try:
        # Off a commit boundary, so that a rollback has something to redo.
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 20 + commit_every // 2}) == 2, 30, "2 workers at step 20+")
        with j.cv:
            v0 = j.version()
            n_err = len(j.err)
        j.set_hosts("localhost:1\n")
        t_disc = j.wait(lambda: next((t for t, l in j.err[n_err:] if "discovery: localhost:1 " in l), None), 10,
                        "the discovery run without the slot")
        t1 = j.wait(lambda: first_after(j, t_disc, v0, lambda s: s[1] == 1 and s[3] == 1), 30, "the survivor at size 1")
        if drain and not any("(draining)" in l for _, l in j.err[n_err:]):
            raise RuntimeError("bench_elastic: the dropped worker did not drain")
        with j.cv:
            mine = [x for x in j.steps if x[1] == 1]
        first1 = next(x[2] for x in mine if x[0] >= t1 and x[3] == 1)
        last2 = max(x[2] for x in mine if x[0] < t1)
        return t1 - t_disc, max(0, last2 - first1 + 1)
    finally:
        j.stop()


def bench_swap(a, step_ms):
    """Discovery replaces localhost:2 by 127.0.0.1:2 in one step (every host
    holding the trained state dropped at once; the keeper hands over).
    Returns (s from the discovery run to a newcomer's first step, s to the
    newcomers' first step alone, steps the newcomers trained again)."""
    j = Job(a.hvdrun, a.trainer, "localhost:2\n", ["-np", "2", "--min-np", "1", "--log-level", "info"], step_ms, 0.2)
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 20}) == 2, 30, "2 workers at step 20")
        with j.cv:
            n_err = len(j.err)
        j.set_hosts("127.0.0.1:2\n")
        t_disc = j.wait(lambda: next((t for t, l in j.err[n_err:] if "discovery: 127.0.0.1:2 " in l), None), 10,
                        "the discovery run with the new host")
        t_new = j.wait(lambda: next((s[0] for s in j.steps if s[0] > t_disc and s[1] >= 3), None), 30,
                       "a newcomer's first step")
        t_alone = j.wait(lambda: next((s[0] for s in j.steps if s[0] > t_disc and s[1] >= 3 and s[3] == 2), None), 30,
                         "the newcomers alone")
        with j.cv:
            reached = max(s[2] for s in j.steps if s[1] <= 2 and s[0] < t_new)
            first_new = min(s[2] for s in j.steps if s[1] >= 3)
        return t_new - t_disc, t_alone - t_disc, max(0, reached - first_new + 1)
    finally:
        j.stop()


def bench_recall(a, commit_every):
    """127.0.0.1 is dropped (w2 drains to a commit up to commit_every steps
    away), then w1, the one trained worker that stays, gets SIGKILL before
    that commit. Returns (called back?, s from the kill to the called-back
    drainer's first step, s to the restarted slot's first step, steps
    trained again: the ones since the last commit, or everything if the
    newcomers started over)."""
    step_ms = 50  # a drain window of about a second: the kill lands in it
    j = Job(a.hvdrun, a.trainer, "localhost:1\n127.0.0.1:1\n", ["-np", "2", "--min-np", "1", "--log-level", "info"],
            step_ms, 0.2, env_extra={"HVD_TRAINER_COMMIT_EVERY": str(commit_every)})
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= commit_every + 2 and s[2] % commit_every == 2}) == 2,
               30, "2 workers just past a commit")
        with j.cv:
            n_err = len(j.err)
        j.set_hosts("localhost:1\n")
        j.wait(lambda: any("(draining)" in l for _, l in j.err[n_err:]), 10, "w2 to drain")
        os.kill(j.worker_pid("w1"), signal.SIGKILL)
        t0 = time.monotonic()
        t_new = j.wait(lambda: next((s[0] for s in j.steps if s[0] > t0 and s[1] >= 3), None), 30,
                       "the restarted slot's first step")
        with j.cv:
            recalled = any("is called back from draining" in l for _, l in j.err[n_err:])
            t_back = next((s[0] for s in j.steps if s[0] > t0 and s[1] == 2), None)
            reached = max(s[2] for s in j.steps if s[0] < t0)
            first_after = min(s[2] for s in j.steps if s[0] > t0)
        return recalled, (t_back - t0) if t_back else None, t_new - t0, max(0, reached - first_after + 1)
    finally:
        j.stop()


def proc_stats(pid):
    """A process's resident memory (KiB), threads, open descriptors and
    memory mappings (shared-memory rings are memfd mappings)."""
    with open("/proc/%d/status" % pid) as f:
        status = f.read()
    rss = int(status.split("VmRSS:")[1].split()[0])
    with open("/proc/%d/maps" % pid) as f:
        maps = sum(1 for _ in f)
    return rss, len(os.listdir("/proc/%d/task" % pid)), len(os.listdir("/proc/%d/fd" % pid)), maps


def bench_soak(a, cycles, step_ms, python=False):
    """One job shrunk 2 -> 1 and grown back `cycles` times; hvdrun's RSS,
    threads, descriptors and store keys (its store_pruned events), and the
    same for the worker that survives every cycle (w1, re-formed twice per
    cycle), at five points. Returns table rows."""
    events = tempfile.mktemp(prefix="hvd-bench-soak-", suffix=".jsonl")
    args = ["-np", "2", "--min-np", "1", "--events-file", events]
    if python:  # elastic_mnist.py: (t, prefix, batch, size, rank, pid) per commit
        cmd = ["env", "PYTHONPATH=" + os.path.join(a.build, "python"), "/usr/bin/python3", a.mnist, "--epochs",
               "1000000", "--commit-every", "1", "--step-sleep", "%g" % (step_ms / 1000.0)]
        j = Job(a.hvdrun, cmd, "localhost:2\n", args, 0, 0.1, PY_STEP_RE)
    else:
        j = Job(a.hvdrun, a.trainer, "localhost:2\n", args, step_ms, 0.1)
    rows = []
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 10}) == 2, 60, "2 workers at step 10")
        w1 = j.worker_pid("w1")
        checkpoints = sorted({0, cycles // 4, cycles // 2, 3 * cycles // 4, cycles})
        t_start = time.monotonic()
        for c in range(cycles + 1):
            if c in checkpoints:
                time.sleep(0.3)  # the last store_pruned event is written
                rss, threads, fds, _ = proc_stats(j.proc.pid)
                w_rss, w_threads, w_fds, w_maps = proc_stats(w1)
                keys = None
                with open(events) as f:
                    for line in f:
                        if '"store_pruned"' in line:
                            keys = json.loads(line)["keys"]
                world = "-"
                with open(events) as f:
                    for line in f:
                        if '"event":"world"' in line.replace(" ", ""):
                            world = str(json.loads(line)["world"]["version"])
                rows.append([str(c), world, str(rss), str(threads), str(fds),
                             "-" if keys is None else str(keys), str(w_rss), str(w_threads), str(w_fds), str(w_maps),
                             "%.0f" % (time.monotonic() - t_start)])
            if c == cycles:
                break
            for hosts, size in (("localhost:1\n", 1), ("localhost:2\n", 2)):
                with j.cv:
                    v0 = j.version()
                t0 = time.monotonic()
                j.set_hosts(hosts)
                if python:  # size 1: any line at size 1; size 2: the new process's
                    j.wait(lambda: [x for x in j.steps if x[0] > t0 and x[3] == size and (size == 1 or x[5] != w1)],
                           60, "size %d again (cycle %d)" % (size, c))
                else:
                    j.wait(lambda: [x for x in j.steps if x[0] > t0 and x[5] > v0 and x[3] == size
                                    and (size == 1 or x[1] != 1)], 60, "size %d again (cycle %d)" % (size, c))
    finally:
        j.stop()
        if os.path.exists(events):
            os.unlink(events)
    return rows


def bench_python_kill9(a):
    cmd = ["env", "PYTHONPATH=" + os.path.join(a.build, "python"), "/usr/bin/python3", a.mnist, "--epochs", "1000",
           "--commit-every", "1", "--step-sleep", "0.005"]
    j = Job(a.hvdrun, cmd, "localhost:2\n", ["-np", "2", "--min-np", "1"], 0, 1.0, PY_STEP_RE)
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 20}) == 2, 60, "2 workers at step 20")
        pid = j.worker_pid("w2")
        old_pids = {s[5] for s in j.steps}
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        resume = j.wait(lambda: next((s[0] for s in j.steps if s[0] > t0 and s[3] == 1), None), 10,
                        "the survivor at size 1")
        back = j.wait(lambda: next((s[0] for s in j.steps if s[0] > t0 and s[5] not in old_pids and s[3] == 2),
                                   None), 30, "a new process at size 2")
        return resume - t0, back - t0
    finally:
        j.stop()


def bench_big(a, n, step_ms):
    j = Job(a.hvdrun, a.trainer, "localhost:%d\n" % n, ["-np", str(n), "--min-np", "1"], step_ms, 1.0)
    try:
        j.wait(lambda: len({s[1] for s in j.steps if s[2] >= 5}) == n, 120, "%d workers at step 5" % n)
        victim = "w%d" % (n // 2)
        pid = j.worker_pid(victim)
        with j.cv:
            v0 = j.version()
        survivors = set(range(1, n + 1)) - {n // 2}
        t0 = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        def reform():
            firsts = {}
            for s in j.steps:
                if s[0] > t0 and s[5] > v0 and s[1] in survivors and s[1] not in firsts:
                    firsts[s[1]] = s[0]
            return max(firsts.values()) if len(firsts) == len(survivors) else None

        def full():
            firsts = {}
            for s in j.steps:
                if s[0] > t0 and s[5] > v0 and s[3] == n and s[1] not in firsts:
                    firsts[s[1]] = s[0]
            return max(firsts.values()) if len(firsts) == n else None

        t_reform = j.wait(reform, 30, "survivors to re-form")
        t_full = j.wait(full, 30, "%d workers again" % n)
        return t_reform - t0, t_full - t0
    finally:
        j.stop()


def table(title, header, rows):
    print("\n" + title)
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


def stats_row(name, xs, target):
    ms = [x * 1000 for x in xs]
    return [name, "%.0f" % statistics.median(ms), "%.0f" % min(ms), "%.0f" % max(ms), target]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(here, "..", "build"))
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--big", type=int, default=64, help="workers on one host for the big case (0: skip)")
    p.add_argument("--step-ms", type=int, default=5, help="sleep after each training step (ms)")
    p.add_argument("--python", action="store_true", help="also run the PyTorch kill -9 case (elastic_mnist.py)")
    p.add_argument("--commit-every", type=int, default=20,
                   help="the scale-down cases again with a commit every this many steps (0: skip)")
    p.add_argument("--handover", type=int, default=0, metavar="N",
                   help="also run the keeper's handover (every trained host replaced) and a drainer called back "
                        "(the last holder killed while another worker drains) N times each")
    p.add_argument("--soak", type=int, default=0, metavar="CYCLES",
                   help="also shrink 2 -> 1 and grow back CYCLES times in one job, showing hvdrun's memory")
    p.add_argument("--soak-python", type=int, default=0, metavar="CYCLES",
                   help="the same soak with examples/python/elastic_mnist.py (PyTorch) as the worker")
    a = p.parse_args()
    a.hvdrun = os.path.join(a.build, "apps", "hvdrun", "hvdrun")
    a.trainer = os.path.join(a.build, "apps", "examples", "elastic_trainer")
    a.mnist = os.path.join(here, "..", "examples", "python", "elastic_mnist.py")
    for f in (a.hvdrun, a.trainer):
        if not os.access(f, os.X_OK):
            sys.exit("bench_elastic: %s not built (cmake --build %s)" % (f, a.build))
    print("bench_elastic: %d cores, %d repeats, step sleep %d ms" % (os.cpu_count(), a.repeat, a.step_ms))
    resume, back, disc, write = [], [], [], []
    down = {True: [], False: []}
    rare = {True: [], False: []}
    for _ in range(a.repeat):
        for drain in (True, False):
            down[drain].append(bench_scaledown(a, a.step_ms, drain)[0])
            if a.commit_every > 1:
                rare[drain].append(bench_scaledown(a, a.step_ms, drain, a.commit_every))
        r, b = bench_kill9(a, a.step_ms)
        resume.append(r)
        back.append(b)
        d, w = bench_newhost(a, a.step_ms)
        disc.append(d)
        write.append(w)
    if a.repeat > 0:
        rows = [stats_row("kill -9 of 1 of 2: survivor resumes", resume, "< 100"),
                stats_row("kill -9 of 1 of 2: back at 2 workers", back, "< 1000"),
                stats_row("new host: training after its discovery run", disc, "< 1500"),
                stats_row("new host: training after the hosts file changed (1 s interval)", write, "-"),
                stats_row("scale-down 2 -> 1, drained: survivor at size 1 after the discovery run", down[True], "-"),
                stats_row("scale-down 2 -> 1, --elastic-drain-timeout 0: survivor at size 1", down[False], "-")]
        if a.python:
            presume, pback = [], []
            for _ in range(a.repeat):
                r, b = bench_python_kill9(a)
                presume.append(r)
                pback.append(b)
            rows.append(stats_row("PyTorch kill -9 of 1 of 2: survivor at size 1", presume, "< 100"))
            rows.append(stats_row("PyTorch kill -9 of 1 of 2: new process training at size 2", pback, "< 1000"))
        if a.big:
            reform, full = [], []
            for _ in range(max(1, a.repeat // 2)):
                r, f = bench_big(a, a.big, max(a.step_ms, 20))
                reform.append(r)
                full.append(f)
            rows.append(stats_row("%d workers, kill -9 of one: survivors re-formed" % a.big, reform, "-"))
            rows.append(stats_row("%d workers, kill -9 of one: all %d training again" % (a.big, a.big), full, "< 2000"))
        table("elastic recovery (ms, from the event to the first step line)",
              ["case", "median", "min", "max", "target"], rows)
    if a.commit_every > 1 and a.repeat > 0:
        rows = []
        for drain, name in ((True, "drained (default)"), (False, "--elastic-drain-timeout 0 (rollback)")):
            ts = [t * 1000 for t, _ in rare[drain]]
            redo = [r for _, r in rare[drain]]
            rows.append([name, "%.0f" % statistics.median(ts), "%.0f" % min(ts), "%.0f" % max(ts),
                         "%g" % statistics.median(redo), "%d" % max(redo)])
        table("scale-down 2 -> 1 with a commit every %d steps (%d ms sleep per step): ms from the discovery run to the "
              "survivor's first step at size 1, and steps the survivor trained twice" % (a.commit_every, a.step_ms),
              ["case", "median ms", "min", "max", "steps redone (median)", "max"], rows)
    if a.handover:
        swap = [bench_swap(a, a.step_ms) for _ in range(a.handover)]
        every = a.commit_every if a.commit_every > 1 else 20
        recall = [bench_recall(a, every) for _ in range(a.handover)]
        ms = lambda xs: "%.0f (%.0f-%.0f)" % (statistics.median(xs) * 1000, min(xs) * 1000, max(xs) * 1000)
        back = [r[1] for r in recall if r[1] is not None]
        table("state handover (ms: median (min-max); steps trained again: median, max)",
              ["case", "runs", "first step after", "newcomers alone / restarted slot", "steps again", "max"],
              [["every trained host replaced at once (keeper), %d ms steps, commit every step" % a.step_ms,
                "%d" % len(swap), "newcomer: " + ms([x[0] for x in swap]), ms([x[1] for x in swap]),
                "%g" % statistics.median([x[2] for x in swap]), "%d" % max(x[2] for x in swap)],
               ["last holder killed while w2 drains (called back in %d of %d), 50 ms steps, commit every %d"
                % (sum(1 for r in recall if r[0]), len(recall), every), "%d" % len(recall),
                ("w2: " + ms(back)) if back else "-", ms([r[2] for r in recall]),
                "%g" % statistics.median([r[3] for r in recall]), "%d" % max(r[3] for r in recall)]])
    if a.soak:
        table("soak: one job shrunk 2 -> 1 and grown back %d times (hvdrun's process)" % a.soak,
              ["cycles", "world", "hvdrun RSS KiB", "threads", "fds", "store keys", "w1 RSS KiB", "w1 threads",
               "w1 fds", "w1 maps", "s"], bench_soak(a, a.soak, a.step_ms))
    if a.soak_python:
        table("soak, PyTorch worker (elastic_mnist.py, commit every step): shrunk 2 -> 1 and grown back %d times"
              % a.soak_python,
              ["cycles", "world", "hvdrun RSS KiB", "threads", "fds", "store keys", "w1 RSS KiB", "w1 threads",
               "w1 fds", "w1 maps", "s"], bench_soak(a, a.soak_python, a.step_ms, python=True))


if __name__ == "__main__":
    main()
