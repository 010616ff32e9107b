#!/usr/bin/env python3
"""Fault regression tests (issue 21): hostile connections against the real
hvdrun and its workers, loopback only, bounded in count and time.

  * store_flood: 2,000 idle connections to hvdrun's rendezvous store (the
    attacker reopens every one the store closes), plus a stream of requests
    without the job secret, while the workers start: the job must start and
    finish, init must stay within --start-timeout, and the log must not be
    flooded (one line per rejected request before the fix).
  * store_flood_ulimit: the same crowd against an hvdrun limited to 1,024
    descriptors (ulimit -n 1024), which ran out of descriptors before the
    fix ("accept failed: Too many open files").
  * listener_idle: a dozen (here 16) idle connections to rank 0's collective
    listener while rank 1 is still on its way: handshakes ran one at a time
    (5 s each) and the job failed before the fix.
  * worker_fds_static / worker_fds_elastic: what a worker inherits. The
    worker lists /proc/self/fd first thing (fdlist.py, which then execs the
    real worker). It must hold exactly 0, 1, 2, which the agent wires
    deliberately: stdin is /dev/null, stdout and stderr are pipes to the
    agent (it forwards them to hvdrun). Nothing else: not hvdrun's store
    listener, not the store connections of other workers (elastic: checked
    after a worker was killed and restarted too).

Figures measured on the 2-core CI machine are in docs/store.md and
docs/collective.md.

Run one case: HVDRUN=... WORKER=... TRAINER=... python3 test_fault.py Fault.test_store_flood
"""
import os
import re
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_with_token, read_lines_timed, token_processes  # noqa: E402

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
WORKER = os.environ.get("WORKER", "collective_worker")
TRAINER = os.environ.get("TRAINER", "elastic_trainer")
HERE = os.path.dirname(os.path.abspath(__file__))
FDLIST = os.path.join(HERE, "fdlist.py")
PYTHON = sys.executable

STORE_RE = re.compile(r"rendezvous store listening on ([0-9.]+):(\d+)")


class Crowd:
    """Holds `count` idle TCP connections to (host, port) from a thread;
    each one the server closes is replaced at once. With `bad_requests`, one
    connection in ten sends a request without the job secret instead of
    idling, then is replaced too (a stream of unauthenticated requests)."""

    def __init__(self, host, port, count, bad_requests=False):
        self.addr = (host, port)
        self.count = count
        self.bad_requests = bad_requests
        self.sel = selectors.DefaultSelector()
        self.stop_flag = threading.Event()
        self.opened = 0
        self.replaced = 0
        self.peak = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join(10)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()

    def _open(self, i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.connect_ex(self.addr)
        except OSError:
            s.close()
            return
        bad = self.bad_requests and i % 10 == 0
        self.sel.register(s, selectors.EVENT_READ | (selectors.EVENT_WRITE if bad else 0), bad)
        self.opened += 1

    def _run(self):
        for i in range(self.count):
            if self.stop_flag.is_set():
                return
            self._open(i)
        i = self.count
        while not self.stop_flag.is_set():
            self.peak = max(self.peak, len(self.sel.get_map()))
            for key, events in self.sel.select(timeout=0.1):
                s = key.fileobj
                if events & selectors.EVENT_WRITE and key.data:
                    try:
                        s.send(b"GET /global/rank_0 HTTP/1.1\r\nHost: x\r\n\r\n")
                    except OSError:
                        pass
                    self.sel.modify(s, selectors.EVENT_READ, key.data)
                    continue
                try:
                    data = s.recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if data:
                    continue  # an answer (401); the close follows
                self.sel.unregister(s)
                s.close()
                self.replaced += 1
                i += 1
                self._open(i)


class Job:
    """hvdrun with stdout/stderr collected by threads (with arrival times)."""

    def __init__(self, args, env=None, preexec_fn=None):
        self.token = uuid.uuid4().hex
        e = dict(os.environ, HVD_TEST_TOKEN=self.token)
        e.update(env or {})
        self.started = time.monotonic()
        self.proc = subprocess.Popen([HVDRUN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, env=e, start_new_session=True, preexec_fn=preexec_fn)
        self.out, self.err, self.cv, self.readers = read_lines_timed(self.proc)


    def wait_for(self, pattern, stream="err", timeout=15):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for _, line in (self.err if stream == "err" else self.out):
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None and not any(t.is_alive() for t in self.readers):
                    raise AssertionError("timed out waiting for /%s/\n%s" % (pattern, self.text()))
                self.cv.wait(min(left, 0.1))

    def finish(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("hvdrun still running after %s s\n%s" % (timeout, self.text()))
        took = time.monotonic() - self.started
        for t in self.readers:
            t.join(5)
        self.proc.stdout.close()
        self.proc.stderr.close()
        return self.proc.returncode, took

    def text(self):
        with self.cv:
            return ("stdout:\n" + "\n".join(l for _, l in self.out)[-3000:] + "\nstderr:\n" +
                    "\n".join(l for _, l in self.err)[-5000:])

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def worker_pid(token, env_needle):
    """A worker process (not its agent, not hvdrun) whose environment holds `env_needle`."""
    for pid, env, cmd in token_processes(token):
        if env_needle.encode() in env and os.path.basename(cmd[0]) not in (b"hvdrun", b"hvdrun-agent"):
            return pid
    return None


def listening_ports(pid):
    """TCP ports `pid` listens on (its sockets matched against /proc/net/tcp)."""
    inodes = set()
    try:
        for fd in os.listdir("/proc/%d/fd" % pid):
            try:
                target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        return []
    ports = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                        ports.append(int(fields[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


O_CLOEXEC = 0o2000000


def fds_without_cloexec(pid, skip=(0, 1, 2)):
    """Descriptors of `pid` (beyond `skip`) a child it execs would inherit:
    /proc/PID/fdinfo/N's flags lack O_CLOEXEC."""
    found = []
    try:
        names = os.listdir("/proc/%d/fdinfo" % pid)
    except OSError:
        return found
    for name in names:
        if int(name) in skip:
            continue
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, name)) as f:
                flags = next(int(l.split()[1], 8) for l in f if l.startswith("flags:"))
            target = os.readlink("/proc/%d/fd/%s" % (pid, name))
        except (OSError, StopIteration):
            continue  # closed meanwhile
        if not flags & O_CLOEXEC:
            found.append("%s -> %s" % (name, target))
    return found


def ulimit_nofile(n):
    def apply():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


def crowd_size(wanted):
    """The crowd lives in this process: raise our descriptor limit for it
    (the soft limit up to the hard one) and scale the crowd down, visibly,
    where the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = wanted + 300
    if soft != resource.RLIM_INFINITY and soft < want:
        if hard != resource.RLIM_INFINITY and hard < want:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (want, want))  # root may raise the hard limit
                hard = want
            except (ValueError, OSError):
                pass
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = new
    n = wanted if soft == resource.RLIM_INFINITY else min(wanted, soft - 300)
    if n < 1100:
        # Fewer connections than hvdrun's 1,024 descriptors would not test
        # anything; CTest reads 77 as skipped.
        print("SKIPPED: RLIMIT_NOFILE hard limit %s leaves room for only %d connections, not %d" % (hard, n, wanted))
        sys.stdout.flush()
        os._exit(77)
    if n < wanted:
        print("NOTE: RLIMIT_NOFILE hard limit %s: a crowd of %d instead of %d" % (hard, n, wanted))
    return n


class Fault(unittest.TestCase):
    START_TIMEOUT = 15
    # Longest the workers of a store flood wait for the crowd to be in place
    # before hvd::init.
    CROWD_WAIT = 10

    def tearDown(self):
        left = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            left = processes_with_token(self._token) if hasattr(self, "_token") else []
            if not left:
                break
            time.sleep(0.1)
        for pid, _, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        self.assertEqual([p for p, _, _ in left], [], "processes left behind")

    def store_flood(self, connections, preexec_fn=None, bad_requests=False):
        connections = crowd_size(connections)
        # The workers rendezvous only once the crowd is in place (a file the
        # test creates; at most CROWD_WAIT s): a fixed delay lost the race
        # on a loaded machine, the job ending before the crowd was there.
        go = tempfile.mktemp(prefix="hvd-flood-go-")
        self.addCleanup(lambda: os.path.exists(go) and os.unlink(go))
        worker = "i=0; while [ ! -e %s ] && [ $i -lt %d ]; do sleep 0.05; i=$((i+1)); done; exec %s ops" % (
            go, int(self.CROWD_WAIT / 0.05), WORKER)
        job = Job(["-np", "2", "--start-timeout", str(self.START_TIMEOUT), "sh", "-c", worker], preexec_fn=preexec_fn)
        self._token = job.token
        try:
            m = job.wait_for(STORE_RE.pattern)
            host, port = m.group(1), int(m.group(2))
            with Crowd(host, port, connections, bad_requests) as crowd:
                deadline = time.monotonic() + self.CROWD_WAIT
                while crowd.peak < connections * 9 // 10 and time.monotonic() < deadline:
                    time.sleep(0.02)
                in_place = time.monotonic() - job.started
                open(go, "w").close()
                t_go = time.monotonic()
                rc, _ = job.finish(timeout=self.CROWD_WAIT + self.START_TIMEOUT + 20)
                took = time.monotonic() - t_go
                peak, replaced = crowd.peak, crowd.replaced
            text = job.text()
            print("store flood: %d connections held (peak %d, %d replaced after the store closed them; in place "
                  "%.1f s after the start), job finished %.1f s after the workers went, exit %d" %
                  (connections, peak, replaced, in_place, took, rc))
            self.assertEqual(rc, 0, text)
            self.assertGreaterEqual(peak, connections * 9 // 10, "the crowd was not in place\n" + text)
            # init within --start-timeout: the job (which inits once the
            # crowd is in place, then runs a few collectives) ends well before.
            self.assertLess(took, self.START_TIMEOUT, text)
            self.assertNotIn("Too many open files", text)
            outs = [l for _, l in job.out]
            self.assertEqual(sum("ops ok" in l for l in outs), 2, text)
            return job
        finally:
            job.kill()

    def test_store_flood(self):
        job = self.store_flood(2000, bad_requests=True)
        # One warning per rejected request flooded the log before the fix.
        errs = [l for _, l in job.err]
        rejected = [l for l in errs if "rejected" in l and "/global/rank_0" in l]
        self.assertLessEqual(len(rejected), 1, "\n".join(errs[-20:]))
        self.assertLess(len(errs), 60, "\n".join(errs[-40:]))

    def test_store_flood_ulimit(self):
        self.store_flood(2000, preexec_fn=ulimit_nofile(1024))

    def test_listener_idle(self):
        # Rank 1 waits 3 s before hvd::init; meanwhile rank 0 listens for it
        # and gets 16 idle connections first.
        delay_ms = 3000
        job = Job(["-np", "2", "--start-timeout", str(self.START_TIMEOUT), WORKER, "settings"],
                  env={"HVD_TEST_INIT_DELAY_MS": str(delay_ms)})
        self._token = job.token
        idle = []
        try:
            ports, deadline = [], time.monotonic() + 10
            while not ports and time.monotonic() < deadline:
                pid = worker_pid(job.token, "HOROVOD_RANK=0")
                ports = listening_ports(pid) if pid else []
                time.sleep(0.02)
            self.assertTrue(ports, "rank 0's listener not found\n" + job.text())
            t_found = time.monotonic() - job.started
            for _ in range(16):
                s = socket.create_connection(("127.0.0.1", ports[0]), timeout=5)
                idle.append(s)
            rc, took = job.finish(timeout=self.START_TIMEOUT + 20)
            text = job.text()
            print("listener: %d idle connections held from %.1f s, job finished in %.1f s, exit %d" %
                  (len(idle), t_found, took, rc))
            self.assertEqual(rc, 0, text)
            self.assertLess(took, delay_ms / 1000.0 + 5, text)
            self.assertNotIn("refused our handshake", text)
        finally:
            for s in idle:
                s.close()
            job.kill()

    def check_fd_listings(self, listing_dir, at_least):
        files = sorted(os.listdir(listing_dir))
        self.assertGreaterEqual(len(files), at_least, files)
        for name in files:
            with open(os.path.join(listing_dir, name)) as f:
                entries = dict(line.rstrip("\n").split(" ", 1) for line in f if line.strip())
            # What the agent passes on purpose: stdin /dev/null, stdout and
            # stderr pipes to the agent. Nothing else.
            self.assertEqual(sorted(entries, key=int), ["0", "1", "2"], "%s: %s" % (name, entries))
            self.assertEqual(entries["0"], "/dev/null", entries)
            self.assertTrue(entries["1"].startswith("pipe:"), entries)
            self.assertTrue(entries["2"].startswith("pipe:"), entries)

    def check_cloexec(self, job):
        """hvdrun's own descriptors and its agents' (beyond their 0, 1, 2)
        are all close-on-exec: no child can inherit them, whoever forks."""
        leaks = {"hvdrun": fds_without_cloexec(job.proc.pid, skip=(0, 1, 2))}
        for pid, env, cmd in token_processes(job.token):
            if os.path.basename(cmd[0]) == b"hvdrun-agent":
                leaks["agent %d" % pid] = fds_without_cloexec(pid)
        self.assertEqual({k: v for k, v in leaks.items() if v}, {}, job.text())

    def test_worker_fds_static(self):
        with tempfile.TemporaryDirectory(prefix="hvd-fault-") as d:
            # The workers stay a moment after their collectives, so that
            # hvdrun's and the agents' descriptors can be looked at.
            job = Job(["-np", "3", PYTHON, FDLIST, d, "/bin/sh", "-c", WORKER + " ops && sleep 1"])
            self._token = job.token
            try:
                job.wait_for(r"ops ok", stream="out", timeout=30)
                self.check_cloexec(job)
                rc, took = job.finish(timeout=60)
                self.assertEqual(rc, 0, job.text())
                self.check_fd_listings(d, 3)
            finally:
                job.kill()

    def test_worker_fds_elastic(self):
        with tempfile.TemporaryDirectory(prefix="hvd-fault-") as d:
            job = Job(["-H", "localhost:2", "-np", "2", "--min-np", "1", PYTHON, FDLIST, d, TRAINER],
                      env={"HVD_TRAINER_STEPS": "80", "HVD_TRAINER_STEP_MS": "20"})
            self._token = job.token
            try:
                job.wait_for(r"step 3 size 2", stream="out", timeout=30)
                pid = worker_pid(job.token, "HVDRUN_WORKER_ID=w2")
                self.assertIsNotNone(pid, job.text())
                os.kill(pid, signal.SIGKILL)
                # The replacement (w3) lists its descriptors, then trains.
                job.wait_for(r"\[\d+\]<stdout>:step \d+ size 2", stream="out", timeout=5)
                deadline = time.monotonic() + 20
                while len(os.listdir(d)) < 3 and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.check_cloexec(job)
                rc, took = job.finish(timeout=60)
                self.assertEqual(rc, 0, job.text())
                self.check_fd_listings(d, 3)
            finally:
                job.kill()


if __name__ == "__main__":
    unittest.main()
