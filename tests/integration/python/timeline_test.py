"""The timeline through the real hvdrun (issue 20 item 4; docs/collective.md,
"Timeline"): --timeline-filename / --timeline-mark-cycles on 2 ranks,
hvd.start_timeline / stop_timeline at run time, and a kill -9 of a rank
(the writing rank 0, and rank 1) mid-run: the file still loads as JSON, the
writer process (hvd-timeline) ends with rank 0, and the job ends; 40 kills of
a size-1 rank recording as fast as it can, each file loading as JSON.
Environment: HVDRUN (the binary) and HVD_PYTHONPATH (the built package)."""
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HVDRUN = os.environ.get("HVDRUN", "hvdrun")
PYTHONPATH = os.environ.get("HVD_PYTHONPATH", "")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timeline_worker.py")


PR_SET_CHILD_SUBREAPER = 36


def load_while_written(path):
    """json.load of a file that is being written. The reader makes several
    read() calls, and a write between two of them can show it the old end
    followed by the new bytes; such a torn read does not repeat, a broken
    file does."""
    for attempt in range(3):
        try:
            with open(path) as f:
                return json.load(f)
        except ValueError:
            if attempt == 2:
                raise
            time.sleep(0.003)


def writer_processes(parent):
    """Pids of the processes named hvd-timeline whose parent is `parent`."""
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        if comm == "hvd-timeline" and int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
            out.append(int(d))
    return out


def trace_pids(trace):
    """Tensor name -> pid, leaving out the binding's own init-time ops
    (allgather.hvdcomm.topology.*, recorded like any other)."""
    return {e["args"]["name"]: e["pid"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] > 0
            and not e["args"]["name"].split(".", 1)[-1].startswith("hvdcomm.")}


def begins(trace, pid):
    return [e["name"] for e in trace if e.get("ph") == "B" and e["pid"] == pid]


def ticks(trace, pid):
    return [e["name"] for e in trace if e.get("ph") == "X" and e["pid"] == pid]


class Timeline(unittest.TestCase):
    def setUp(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            print("SKIPPED: this python cannot import torch")
            sys.exit(77)
        self.tmp = tempfile.TemporaryDirectory(prefix="hvd-timeline-")
        self.dir = self.tmp.name
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "HVDRUN_"))}
        self.env["PYTHONPATH"] = PYTHONPATH

    def tearDown(self):
        self.tmp.cleanup()

    def hvdrun(self, flags, *args, np=2):
        return [HVDRUN, "-np", str(np), "-H", f"localhost:{np}"] + flags + [sys.executable, WORKER] + list(args)

    def run_ok(self, argv):
        p = subprocess.run(argv, env=self.env, cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout)
        self.assertNotIn("timeline", "\n".join(ln for ln in p.stdout.splitlines() if "warn" in ln), p.stdout)
        return p.stdout

    def load(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return json.load(f)

    def test_flags_tensor_names_activities_and_cycle_marks(self):
        self.run_ok(self.hvdrun(["--timeline-filename", "t.json", "--timeline-mark-cycles"], "steps", "5"))
        t = self.load("t.json")  # relative to rank 0's working directory
        pids = trace_pids(t)
        self.assertEqual(set(pids), {"allreduce.grad.w", "allreduce.grad.b", "broadcast.bc"}, pids)
        for name in ("allreduce.grad.w", "allreduce.grad.b"):
            bs = begins(t, pids[name])
            self.assertEqual(bs.count("NEGOTIATE_ALLREDUCE"), 5, bs)
            self.assertEqual(bs.count("ALLREDUCE"), 10, bs)  # the operation and its collective activity
            self.assertEqual(bs.count("QUEUE"), 5, bs)
            # rank 0 records both ranks' readiness at each negotiation
            self.assertEqual(sorted(ticks(t, pids[name])), ["0"] * 5 + ["1"] * 5)
        self.assertEqual(begins(t, pids["broadcast.bc"])[0], "NEGOTIATE_BROADCAST")
        self.assertIn("BROADCAST", begins(t, pids["broadcast.bc"]))
        fused = [n for n in begins(t, pids["allreduce.grad.w"]) if n.startswith("MEMCPY_")]
        self.assertEqual(fused.count("MEMCPY_IN_FUSION_BUFFER"), fused.count("MEMCPY_OUT_FUSION_BUFFER"))
        # every begin has its end, per tensor
        for pid in pids.values():
            self.assertEqual(sum(e.get("ph") == "B" for e in t if e["pid"] == pid),
                             sum(e.get("ph") == "E" for e in t if e["pid"] == pid))
        marks = [e for e in t if e.get("ph") == "i" and e["name"] == "CYCLE_START"]
        self.assertGreaterEqual(len(marks), 5)
        # only rank 0 writes: no other file appeared
        self.assertEqual(sorted(os.listdir(self.dir)), ["t.json"])

    def test_three_ranks_each_rank_ticks_once_per_negotiation(self):
        self.run_ok(self.hvdrun(["--timeline-filename", "t3.json"], "steps", "3", np=3))
        t = self.load("t3.json")
        pids = trace_pids(t)
        for name in ("allreduce.grad.w", "allreduce.grad.b", "broadcast.bc"):
            want = ["0", "1", "2"] * (1 if name == "broadcast.bc" else 3)
            self.assertEqual(sorted(ticks(t, pids[name])), sorted(want))
        self.assertFalse([e for e in t if e.get("ph") == "i"], "no cycle marks were asked for")

    def test_start_and_stop_at_run_time(self):
        self.run_ok(self.hvdrun([], "startstop", self.dir))
        a, b = self.load("a.json"), self.load("b.json")
        self.assertEqual(set(trace_pids(a)), {"allreduce.during"})
        self.assertFalse([e for e in a if e.get("ph") == "i"], "no cycle marks were asked for")
        self.assertEqual(set(trace_pids(b)), {"allreduce.again"})
        self.assertEqual(begins(b, trace_pids(b)["allreduce.again"]).count("NEGOTIATE_ALLREDUCE"), 3)
        self.assertTrue([e for e in b if e.get("ph") == "i" and e["name"] == "CYCLE_START"])

    def kill_mid_run(self, victim):
        # A subreaper: rank 0's writer process, orphaned by the kill, becomes
        # this process's child, to be waited for and reaped here.
        libc = ctypes.CDLL(None, use_errno=True)
        self.assertEqual(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0)
        self.addCleanup(libc.prctl, PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        p = subprocess.Popen(self.hvdrun(["--timeline-filename", "t.json"], "forever", self.dir), env=self.env,
                             cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        writers = []
        try:
            path = os.path.join(self.dir, "t.json")
            deadline = time.monotonic() + 30
            events = 0
            while time.monotonic() < deadline:
                pidfiles = [os.path.join(self.dir, f"rank.{r}.pid") for r in (0, 1)]
                if all(os.path.exists(f) for f in pidfiles) and os.path.exists(path):
                    events = len(load_while_written(path))  # valid at every read, mid-run too
                    if events > 200:
                        break
                self.assertIsNone(p.poll(), "the job ended early")
                time.sleep(0.05)
            self.assertGreater(events, 200, "the timeline did not grow")
            with open(os.path.join(self.dir, "rank.0.pid")) as f:
                rank0 = int(f.read())
            writers = writer_processes(rank0)
            self.assertEqual(len(writers), 1, "rank 0 has one timeline writer process")
            with open(os.path.join(self.dir, f"rank.{victim}.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
            killed = time.monotonic()
            if victim == 0:
                # It ends with rank 0 (its socket's end), within 1 s. It is
                # rank 0's child until rank 0 is gone, this process's then.
                while True:
                    try:
                        if os.waitpid(writers[0], os.WNOHANG)[0] == writers[0]:
                            break
                    except ChildProcessError:
                        pass
                    self.assertLess(time.monotonic() - killed, 1.0, "the writer process outlived rank 0")
                    time.sleep(0.005)
                writers = []
            out, _ = p.communicate(timeout=40)
            # The other rank sees the death and the job ends as before (the
            # writer process holds none of rank 0's sockets or pipes).
            self.assertLess(time.monotonic() - killed, 10, out)
            self.assertNotEqual(p.returncode, 0, out)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            for w in writers:
                try:
                    os.kill(w, signal.SIGKILL)
                    os.waitpid(w, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
        t = self.load("t.json")
        self.assertGreaterEqual(len(t), events)
        names = set(trace_pids(t))
        self.assertTrue(names and names <= {f"allreduce.loop.{i}" for i in range(4)}, names)

    def test_kill_9_of_the_writing_rank_leaves_valid_json(self):
        self.kill_mid_run(0)

    def test_kill_9_of_another_rank_leaves_valid_json(self):
        self.kill_mid_run(1)

    def test_kill_9_of_a_rank_recording_flat_out_40_times(self):
        """A size-1 rank (no hvdrun: fast to restart) forked from a process
        that imported torch, recording small named allreduces with cycle
        marks as fast as it can, SIGKILLed at a random moment, 40 times:
        every file loads as JSON, and its writer process exits within 1 s
        (timeline_worker.py kill_loop)."""
        p = subprocess.run([sys.executable, WORKER, "killloop", self.dir, "40", str(os.getpid())], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=80)
        self.assertEqual(p.returncode, 0, p.stderr)
        results = [json.loads(ln) for ln in p.stdout.splitlines()]
        self.assertEqual(len(results), 40, p.stdout + p.stderr)
        for r in results:
            self.assertNotIn("error", r, r)
            self.assertNotIn("orphan", r, r)
            self.assertEqual(len(r["writers"]), 1, r)
            self.assertLess(r["writer_gone_ms"], 1000, r)
            self.assertGreater(r["events"], 1000, r)
        self.assertEqual(os.listdir(self.dir), [])


if __name__ == "__main__":
    unittest.main()
