"""Process sets across elastic worlds (docs/python.md, "Process sets"):
`hvdrun --host-discovery-script` on localhost, scaled up from 1 to 2 slots.

    process_sets_elastic.py HVDRUN PYTHON PYTHONPATH     the test
    process_sets_elastic.py --worker                     one worker (hvdrun starts it)

Each worker calls init(process_sets=[ProcessSet([1])]) and, in every
world, adds the dynamic set [0] from a reset callback (as a Horovod user
re-adds dynamic sets). The static set does not fit the 1-rank world (its id
is None there and ops on it raise); in the 2-rank world it is registered
again as id 1 and the dynamic set gets id 2; an allreduce on each gives the
set's sum, different from the global one. Exits 77 (skip) without torch.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

LINE = re.compile(r"step (\d+) size (\d) rank (\d) sid (\S+) val (\S+) did (\S+) dval (\S+) g (\S+)")


def worker():
    import torch
    import horovod.torch as hvd

    static = hvd.ProcessSet([1])
    hvd.init(process_sets=[static])
    dyn = {}

    def readd():
        # Dynamic sets end with their world: add them again (all ranks).
        dyn["set"] = hvd.add_process_set([0]) if hvd.size() > 1 else None

    state = hvd.elastic.TorchState(step=0, at_two=0)
    state.register_reset_callbacks([readd])
    readd()

    @hvd.elastic.run
    def train(state):
        while state.at_two < 4 and state.step < 150:
            n, r = hvd.size(), hvd.rank()
            sid, val = static.process_set_id, None
            if sid is None:
                try:
                    hvd.allreduce(torch.ones(1), process_set=static, name="unfit")
                    raise SystemExit("an op on the unregistered static set did not raise")
                except ValueError as e:
                    assert "not registered" in str(e), e
            elif static.included():
                val = hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=static, name="s").item()
            d = dyn.get("set")
            did = d.process_set_id if d is not None else None
            dval = None
            if d is not None and d.included():
                dval = hvd.allreduce(torch.tensor([3.0]), op=hvd.Sum, process_set=d, name="d").item()
            g = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum, name="g").item()
            print(f"step {state.step} size {n} rank {r} sid {sid} val {val} did {did} dval {dval} g {g}", flush=True)
            state.step += 1
            state.at_two += 1 if n == 2 else 0
            time.sleep(0.1)
            state.commit()

    train(state)
    hvd.shutdown()


def main():
    hvdrun, py, pythonpath = sys.argv[1:4]
    if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"SKIP: {py} cannot import torch (install python3-torch)", flush=True)
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="hvd_psets_elastic_")
    hosts = os.path.join(tmp, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost:1\n")
    discover = os.path.join(tmp, "discover.sh")
    with open(discover, "w") as f:
        f.write(f"#!/bin/sh\ncat {hosts}\n")
    os.chmod(discover, 0o755)
    env = dict(os.environ, PYTHONPATH=pythonpath)
    env["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
    cmd = [hvdrun, "-np", "1", "--min-np", "1", "--max-np", "2", "--host-discovery-script", discover,
           py, os.path.abspath(__file__), "--worker", tmp]  # tmp in the command line: finds leftovers
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out = []
    reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    scaled = False
    deadline = time.monotonic() + 50
    failure = None
    try:
        while proc.poll() is None:
            if time.monotonic() > deadline:
                failure = "hvdrun did not finish within 50 s"
                break
            if not scaled and LINE.search("".join(list(out))):
                with open(hosts + ".new", "w") as f:
                    f.write("localhost:2\n")
                os.replace(hosts + ".new", hosts)
                scaled = True
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        reader.join(timeout=5)
        left = subprocess.run(["pgrep", "-f", tmp], capture_output=True, text=True).stdout.split()
        for pid in left:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
    output = "".join(out)
    lines = [m.groups() for m in LINE.finditer(output)]
    one = [ln for ln in lines if ln[1] == "1"]
    two = [ln for ln in lines if ln[1] == "2"]
    if failure is None and left:
        failure = f"processes left behind: {left}"
    if failure is None and proc.returncode != 0:
        failure = f"hvdrun exited {proc.returncode}"
    if failure is None and (not one or not two):
        failure = f"expected steps at size 1 and at size 2, got {len(one)} and {len(two)}"
    for step, size, rank, sid, val, did, dval, g in lines:
        if failure:
            break
        if size == "1":
            want = ("None", "None", "None", "None", "1.0")
        elif rank == "0":
            want = ("1", "None", "2", "3.0", "2.0")  # not in the static set; alone in the dynamic one
        else:
            want = ("1", "5.0", "2", "None", "2.0")
        if (sid, val, did, dval, g) != want:
            failure = (f"step {step} size {size} rank {rank}: sid {sid} val {val} did {did} dval {dval} g {g}, "
                       f"expected {want}")
    if failure:
        print(f"FAIL: {failure}\n---- hvdrun output ----\n{output}", flush=True)
        sys.exit(1)
    print(f"ok: {len(one)} steps at size 1, {len(two)} at size 2; static set re-registered as id 1, dynamic "
          f"set re-added as id 2", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker()
    else:
        main()
