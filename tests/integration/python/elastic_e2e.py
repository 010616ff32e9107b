"""End-to-end elastic test of examples/python/elastic_mnist.py under
`hvdrun --host-discovery-script` on localhost.

    elastic_e2e.py HVDRUN PYTHON PYTHONPATH {kill|scaleup|scaledown|recall|unsynced}

kill:    hosts file "localhost:2", -np 2; once rank 1 has committed a few
         times, kill -9 it (pid from its printed line). The survivor must go
         on from its last commit, the slot come back (size 2 again, new pid).
scaleup: hosts file "localhost:1", -np 1; after a few commits rewrite it to
         "localhost:2": a new worker must join and train at size 2.
scaledown: hosts file "localhost:2", -np 2; after a few commits rewrite it
         to "localhost:1": one worker drains (trains on to the next commit,
         then leaves), the other trains on at size 1 from that commit, with no
         rollback and no error or warning line.
recall:  hosts file "localhost:1" and "127.0.0.1:1", -np 2, --verbose; after a
         few commits drop 127.0.0.1 (its worker drains to the next commit)
         and, once hvdrun logged the drain, kill -9 the worker on localhost
         (the one trained worker that stays). The drainer goes back to its
         last commit and waits; hvdrun calls it back, the restarted slot
         syncs from it: the new process's first step follows what was
         committed (nobody starts over), and the drainer hands over and
         leaves.
unsynced: hosts file "localhost:2", -np 2, --verbose, the trainer pausing 3 s
         before each sync of a world of 2 or more (--sync-sleep); after a few
         commits 127.0.0.1:1 is added, and once its newcomer is pausing in
         its first sync (its world formed), localhost is dropped and the
         worker of rank 1 is killed, so that world fails before the newcomer
         synced. The newcomer must not count as holding the state: rank 0
         keeps it ("keeps training although"), the newcomer syncs from it
         and trains on from the committed step, and rank 0 hands over.

All modes: hvdrun exits 0; every process prints consecutive commit steps (it
never goes back before its own last commit and never skips one); the
survivor's steps cover the whole run; the final checksum equals a
fault-free size-1 run of the same trainer (float64, size-invariant
training: equal up to rounding); nothing is left running.
Exits 77 (skip) when PYTHON lacks torch or HVDRUN has no elastic mode.
"""
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HVDRUN, PY, PYTHONPATH, MODE = sys.argv[1:5]
if MODE not in ("kill", "scaleup", "scaledown", "recall", "unsynced"):
    sys.exit(f"usage: elastic_e2e.py HVDRUN PYTHON PYTHONPATH kill|scaleup|scaledown|recall|unsynced (not '{MODE}')")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "python", "elastic_mnist.py")
SAMPLES, GLOBAL_BATCH, COMMIT_EVERY, EPOCHS = 192, 32, 2, 4
if MODE == "unsynced":  # sizes 1, 2 and 3 must divide the global batch
    GLOBAL_BATCH, EPOCHS = 48, 8
TOTAL_STEPS = EPOCHS * SAMPLES // GLOBAL_BATCH
TRAIN_ARGS = ["--double", "--epochs", str(EPOCHS), "--samples", str(SAMPLES), "--global-batch", str(GLOBAL_BATCH),
              "--commit-every", str(COMMIT_EVERY)]
LINE = re.compile(r"epoch (\d+) batch (\d+) size (\d+) rank (\d+) pid (\d+)")
FINAL = re.compile(r"final step (\d+) checksum (\S+)")
START = time.monotonic()
DEADLINE = START + (80 if MODE == "unsynced" else 50)


def skip(why):
    print(f"SKIP: {why}", flush=True)
    sys.exit(77)


def fail(why, output=""):
    print(f"FAIL: {why}", flush=True)
    if output:
        print("---- hvdrun output ----\n" + output, flush=True)
    sys.exit(1)


if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
    skip(f"{PY} cannot import torch (install python3-torch)")
env = dict(os.environ, PYTHONPATH=PYTHONPATH)
tmp = tempfile.mkdtemp(prefix="hvd_py_elastic_")
atexit.register(shutil.rmtree, tmp, True)
probe_script = os.path.join(tmp, "probe.sh")
with open(probe_script, "w") as f:
    f.write("#!/bin/sh\necho localhost:1\n")
os.chmod(probe_script, 0o755)
try:
    probe = subprocess.run([HVDRUN, "--host-discovery-script", probe_script, "-np", "1", "true"],
                           capture_output=True, text=True, timeout=20)
except subprocess.TimeoutExpired:
    fail("hvdrun's elastic mode did not run `true` on one slot within 20 s")
if "not supported" in probe.stderr + probe.stdout:
    skip("hvdrun has no elastic mode yet (--host-discovery-script not supported)")
if probe.returncode != 0:
    fail(f"elastic hvdrun could not run `true` (exit {probe.returncode})", probe.stdout + probe.stderr)
marker = os.path.join(tmp, "pycache")  # in every worker's command line: finds leftovers with pgrep -f

# Reference: the same training, fault-free, in one process (runs beside the job).
ref = subprocess.Popen([PY, EXAMPLE] + TRAIN_ARGS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
atexit.register(lambda: ref.poll() is None and ref.kill())

hosts = os.path.join(tmp, "hosts")
with open(hosts, "w") as f:
    f.write({"scaleup": "localhost:1\n", "recall": "localhost:1\n127.0.0.1:1\n"}.get(MODE, "localhost:2\n"))
discover = os.path.join(tmp, "discover.sh")
with open(discover, "w") as f:
    f.write(f"#!/bin/sh\ncat {hosts}\n")
os.chmod(discover, 0o755)

np_start = 1 if MODE == "scaleup" else 2
cmd = [HVDRUN, "-np", str(np_start), "--min-np", "1", "--max-np", "3" if MODE == "unsynced" else "2",
       "--host-discovery-script", discover] + \
    (["--verbose", "--discovery-interval", "0.2"] if MODE in ("recall", "unsynced") else []) + [
       PY, "-X", f"pycache_prefix={marker}", EXAMPLE] + TRAIN_ARGS + ["--step-sleep", "0.3"] + \
    (["--sync-sleep", "3"] if MODE == "unsynced" else [])
t_job = time.monotonic()
proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                        start_new_session=True)
out = []  # output lines, appended by the reader thread
reader = threading.Thread(target=lambda: out.extend(iter(proc.stdout.readline, "")), daemon=True)
reader.start()
acted_at = None  # number of commit lines printed when the kill / hosts change happened
victim = None
dropped = False  # recall: 127.0.0.1 dropped, waiting for hvdrun's drain line
killed_at_step = None  # recall: the highest step printed before the kill
added = False  # unsynced: 127.0.0.1 added, waiting for its newcomer's sync


def rewrite_hosts(text):
    with open(hosts + ".new", "w") as f:
        f.write(text)
    os.replace(hosts + ".new", hosts)


def commit_lines():
    return [tuple(int(x) for x in mm.groups()) for mm in LINE.finditer("".join(list(out)))]


try:
    while proc.poll() is None:
        if time.monotonic() > DEADLINE:
            fail("hvdrun did not finish within the time limit", "".join(out))
        lines = commit_lines()
        if acted_at is None:
            if MODE == "kill":
                r1 = [ln for ln in lines if ln[3] == 1 and ln[2] == 2]
                if len(r1) >= 2:
                    victim = r1[-1][4]
                    acted_at = len(lines)
                    os.kill(victim, signal.SIGKILL)
            elif MODE == "scaleup":
                if len([ln for ln in lines if ln[2] == 1]) >= 1:
                    acted_at = len(lines)
                    rewrite_hosts("localhost:2\n")
            elif MODE == "recall":
                if not dropped and len([ln for ln in lines if ln[3] == 1]) >= 2:
                    rewrite_hosts("localhost:1\n")
                    dropped = True
                elif dropped and "(draining)" in "".join(list(out)):
                    victim = [ln for ln in lines if ln[3] == 0 and ln[2] == 2][-1][4]
                    killed_at_step = max(ln[1] for ln in lines)
                    acted_at = len(lines)
                    os.kill(victim, signal.SIGKILL)
            elif MODE == "unsynced":
                if not added and len([ln for ln in lines if ln[3] == 1]) >= 2:
                    rewrite_hosts("localhost:2\n127.0.0.1:1\n")
                    added = True
                elif added and "elastic_mnist: w3 syncing in world" in "".join(list(out)):
                    rewrite_hosts("127.0.0.1:1\n")
                    text = "".join(list(out))
                    while not re.search(r"world \d+: size 3 -> 2", text) and time.monotonic() < DEADLINE:
                        time.sleep(0.02)
                        text = "".join(list(out))
                    victim = [ln for ln in lines if ln[3] == 1 and ln[2] == 2][-1][4]
                    killed_at_step = max(ln[1] for ln in lines)
                    acted_at = len(lines)
                    os.kill(victim, signal.SIGKILL)
            elif len([ln for ln in lines if ln[3] == 1]) >= 2:
                acted_at = len(lines)
                rewrite_hosts("localhost:1\n")
        time.sleep(0.05)
    reader.join(timeout=5)
finally:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    for pid in left:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass

output = "".join(out)
lines = [tuple(int(x) for x in mm.groups()) for mm in LINE.finditer(output)]
if left:
    fail(f"processes left behind: {left}", output)
if proc.returncode != 0:
    fail(f"hvdrun exited {proc.returncode}", output)
if acted_at is None:
    fail("the job ended before the fault / scale-up could be injected", output)

# Every process prints consecutive commit steps: never back before its last commit, never a gap.
by_pid = {}
for _, batch, _, _, pid in lines:
    by_pid.setdefault(pid, []).append(batch)
for pid, steps in by_pid.items():
    for a, b in zip(steps, steps[1:]):
        if b != a + COMMIT_EVERY:
            fail(f"pid {pid} printed step {a} then {b} (went back or skipped a commit)", output)
survivors = [pid for pid in by_pid if pid != victim and by_pid[pid][0] == COMMIT_EVERY]
if not survivors:
    fail("no process trained from the first commit", output)
if MODE not in ("recall", "unsynced") and not any(by_pid[pid][-1] == TOTAL_STEPS for pid in survivors):
    fail(f"no process trained from the first commit to the last ({TOTAL_STEPS})", output)
after = lines[acted_at:]


def check_took_the_state(new, who):
    """The processes `new` synced the committed state: their first step
    follows what was committed before the kill (at most one commit interval
    redone) instead of starting over at the first commit, and they trained
    to the last step."""
    first_new = min(by_pid[pid][0] for pid in new)
    if first_new <= COMMIT_EVERY or first_new < killed_at_step:
        fail(f"{who} started at step {first_new}: the job's state (step {killed_at_step} printed before the kill) "
             f"was lost", output)
    if not any(by_pid[pid][-1] == TOTAL_STEPS for pid in new):
        fail(f"{who} did not train to the last step ({TOTAL_STEPS})", output)


if MODE == "recall":
    if "is called back from draining" not in output:
        fail("hvdrun did not call the draining worker back", output)
    drainer = survivors[0]
    new = [pid for pid in by_pid if pid not in (victim, drainer)]
    if not new:
        fail("the killed worker's slot was not restarted", output)
    check_took_the_state(new, "the restarted slot")
    if not re.search(r"elastic_mnist: leaving: .*removed from the job", output):
        fail("the called-back worker did not hand over and leave", output)
elif MODE == "unsynced":
    if not re.search(r"w1 on localhost slot 0 keeps training although host localhost no longer listed", output):
        fail("rank 0 was not kept: the newcomer that never synced was taken for a holder", output)
    if "w1 on localhost slot 0 handed the job's state over" not in output:
        fail("the keeper did not hand over once the newcomer synced", output)
    new = [pid for pid in by_pid if pid not in (victim, *survivors)]
    if not new:
        fail("the newcomer never trained", output)
    check_took_the_state(new, "the newcomer")
elif MODE == "scaledown":
    first1 = next((i for i, ln in enumerate(after) if ln[2] == 1), None)
    if first1 is None:
        fail("nobody trained at size 1 after the scale-down", output)
    if any(ln[2] == 2 for ln in after[first1:]):
        fail("back at size 2 after the scale-down", output)
    # Horovod's scale-down: the dropped worker drains -- it trains on with
    # the survivor to the next commit, where both raise
    # HostsUpdatedInterrupt; the survivor goes on with its live state (no
    # rollback, no abort) and the dropped worker leaves with
    # WorkerRemovedError, which the example catches. No error or warning.
    if "restoring the last commit" in output or "lost its communicator" in output:
        fail("the scale-down rolled the survivor back (a drained worker must not abort the world)", output)
    if not re.search(r"elastic_mnist: leaving: .*removed from the job in world \d+: host localhost now offers 1 slot",
                     output):
        fail("the dropped worker did not leave at a commit with WorkerRemovedError", output)
    reset_at = [int(x) for x in re.findall(r"reset: rank 0 size 1 step (\d+)", output)]
    gone = [pid for pid in by_pid if by_pid[pid][-1] != TOTAL_STEPS]
    if not reset_at or not gone or by_pid[gone[0]][-1] != reset_at[0]:
        fail("the survivor did not go on from the commit where the dropped worker left", output)
    if re.search(r"\] \[(error|warning)\] ", output):
        fail("a planned scale-down logged an error or a warning", output)
else:
    newcomers = [ln for ln in after if ln[2] == 2 and ln[4] not in (victim, *survivors)]
    if not newcomers:
        fail(f"no new worker trained at size 2 after the {MODE}", output)
if MODE == "kill" and victim in {ln[4] for ln in after[1:]}:
    fail("the killed worker printed after the kill", output)

try:
    ref_out = ref.communicate(timeout=max(1.0, DEADLINE - time.monotonic()))[0]
except subprocess.TimeoutExpired:
    ref.kill()
    fail("the fault-free reference run did not finish in time")
m = FINAL.search(ref_out)
if ref.returncode != 0 or not m:
    fail(f"reference run failed (exit {ref.returncode})", ref_out)
ref_steps, ref_sum = int(m.group(1)), float(m.group(2))
if ref_steps != TOTAL_STEPS:
    fail(f"reference ran {ref_steps} steps, expected {TOTAL_STEPS}")

m = FINAL.search(output)
if not m:
    fail("no final checksum line", output)
steps, checksum = int(m.group(1)), float(m.group(2))
if steps != TOTAL_STEPS or abs(checksum - ref_sum) > 1e-9 * max(1.0, abs(ref_sum)):
    fail(f"final step {steps} checksum {checksum!r} differs from fault-free {ref_steps} {ref_sum!r}", output)
if os.environ.get("HVD_TEST_VERBOSE"):
    print(output, flush=True)
sizes = sorted({ln[2] for ln in lines})
print(f"elastic_e2e {MODE}: ok ({len(lines)} commit lines, sizes {sizes}, {len(by_pid)} processes, "
      f"checksum {checksum!r} == {ref_sum!r}; job {time.monotonic() - t_job:.1f} s, "
      f"total {time.monotonic() - START:.1f} s)", flush=True)
