"""The timeline through the real hvdrun (issue 20 item 4; docs/collective.md,
"Timeline"): --timeline-filename / --timeline-mark-cycles on 2 ranks,
hvd.start_timeline / stop_timeline at run time, and a kill -9 of a rank
(the writing rank 0, and rank 1) mid-run: the file still loads as JSON.
Environment: HVDRUN (the binary) and HVD_PYTHONPATH (the built package)."""
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


def trace_pids(trace):
    """Tensor name -> pid, leaving out the binding's own init-time ops
    (hvdcomm.topology.*, recorded like any other)."""
    return {e["args"]["name"]: e["pid"] for e in trace
            if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] > 0
            and not e["args"]["name"].startswith("hvdcomm.")}


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
        self.assertEqual(set(pids), {"grad.w", "grad.b", "bc"}, pids)
        for name in ("grad.w", "grad.b"):
            bs = begins(t, pids[name])
            self.assertEqual(bs.count("NEGOTIATE_ALLREDUCE"), 5, bs)
            self.assertEqual(bs.count("ALLREDUCE"), 10, bs)  # the operation and its collective activity
            self.assertEqual(bs.count("QUEUE"), 5, bs)
            # rank 0 records both ranks' readiness at each negotiation
            self.assertEqual(sorted(ticks(t, pids[name])), ["0"] * 5 + ["1"] * 5)
        self.assertEqual(begins(t, pids["bc"])[0], "NEGOTIATE_BROADCAST")
        self.assertIn("BROADCAST", begins(t, pids["bc"]))
        fused = [n for n in begins(t, pids["grad.w"]) if n.startswith("MEMCPY_")]
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
        for name in ("grad.w", "grad.b", "bc"):
            self.assertEqual(sorted(ticks(t, pids[name])), sorted(["0", "1", "2"] * (1 if name == "bc" else 3)))
        self.assertFalse([e for e in t if e.get("ph") == "i"], "no cycle marks were asked for")

    def test_start_and_stop_at_run_time(self):
        self.run_ok(self.hvdrun([], "startstop", self.dir))
        a, b = self.load("a.json"), self.load("b.json")
        self.assertEqual(set(trace_pids(a)), {"during"})
        self.assertFalse([e for e in a if e.get("ph") == "i"], "no cycle marks were asked for")
        self.assertEqual(set(trace_pids(b)), {"again"})
        self.assertEqual(begins(b, trace_pids(b)["again"]).count("NEGOTIATE_ALLREDUCE"), 3)
        self.assertTrue([e for e in b if e.get("ph") == "i" and e["name"] == "CYCLE_START"])

    def kill_mid_run(self, victim):
        p = subprocess.Popen(self.hvdrun(["--timeline-filename", "t.json"], "forever", self.dir), env=self.env,
                             cwd=self.dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
        try:
            path = os.path.join(self.dir, "t.json")
            deadline = time.monotonic() + 30
            events = 0
            while time.monotonic() < deadline:
                pidfiles = [os.path.join(self.dir, f"rank.{r}.pid") for r in (0, 1)]
                if all(os.path.exists(f) for f in pidfiles) and os.path.exists(path):
                    with open(path) as f:
                        events = len(json.load(f))  # valid at every read, mid-run too
                    if events > 200:
                        break
                self.assertIsNone(p.poll(), "the job ended early")
                time.sleep(0.05)
            self.assertGreater(events, 200, "the timeline did not grow")
            with open(os.path.join(self.dir, f"rank.{victim}.pid")) as f:
                os.kill(int(f.read()), signal.SIGKILL)
            out, _ = p.communicate(timeout=40)
            self.assertNotEqual(p.returncode, 0, out)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        t = self.load("t.json")
        self.assertGreaterEqual(len(t), events)
        self.assertTrue(set(trace_pids(t)) <= {f"loop.{i}" for i in range(4)} and trace_pids(t))

    def test_kill_9_of_the_writing_rank_leaves_valid_json(self):
        self.kill_mid_run(0)

    def test_kill_9_of_another_rank_leaves_valid_json(self):
        self.kill_mid_run(1)


if __name__ == "__main__":
    unittest.main()
