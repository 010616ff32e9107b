"""Horovod's elastic integration scenarios (test/integration/elastic_common.py
upstream: hosts added and removed, one rank failing, every rank failing)
against hvdrun's elastic mode, with a trainer written in Horovod's style
(elastic_horovod_trainer.py) and a discovery script that follows the
trainer's epochs as Horovod's does. Horovod's tests patch its driver's
discovery period to 0.01 s and blacklist a host on its first failure; the
hvdrun equivalents are --discovery-interval 0.01 --blacklist-failures 1.

    elastic_horovod_e2e.py HVDRUN PYTHON PYTHONPATH

Each scenario checks the epochs rank 0 logged (start rank, size, host,
rendezvous count) and hvdrun's exit; the failing one must end within 20 s
(before: it waited out --elastic-timeout). Exits 77 without torch.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HVDRUN, PY, PYTHONPATH = sys.argv[1:4]
HERE = os.path.dirname(os.path.abspath(__file__))
TRAINER = os.path.join(HERE, "elastic_horovod_trainer.py")
failures = []

if subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode != 0:
    print("SKIP: no torch"), sys.exit(77)


def run(name, schedule, trainer_args, np=2, max_np=4, timeout=60):
    """schedule: [(epoch or None, [hosts])] -- the hosts discovery prints
    once rank 0 has logged `epoch` lines (None: every later epoch)."""
    d = tempfile.mkdtemp(prefix="hvd-e2e-")
    log = os.path.join(d, "log")
    script = ["#!/bin/bash", f"n=$(cat {log} 2>/dev/null | wc -l)"]
    for i, (epoch, hosts) in enumerate(schedule):
        body = "; ".join(f"echo {h}" for h in hosts)
        if epoch is None:
            script.append(f"{'else' if i else 'if true; then'} {body}")
        else:
            script.append(f"{'elif' if i else 'if'} [ \"$n\" = {epoch} ]; then {body}")
    script.append("fi")
    disc = os.path.join(d, "discover.sh")
    with open(disc, "w") as f:
        f.write("\n".join(script) + "\n")
    os.chmod(disc, 0o755)
    cmd = [HVDRUN, "-np", str(np), "--min-np", str(np), "--max-np", str(max_np), "--host-discovery-script", disc,
           "--discovery-interval", "0.01", "--blacklist-failures", "1",
           PY, TRAINER, "--logfile", log, *trainer_args]
    env = dict(os.environ, PYTHONPATH=PYTHONPATH)
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = None, (e.stdout or b"").decode() + (e.stderr or b"").decode()
    took = time.monotonic() - t0
    lines = [json.loads(x) for x in open(log)] if os.path.exists(log) else []
    shutil.rmtree(d, ignore_errors=True)  # nothing left behind in $TMPDIR
    return rc, lines, out, took


def expect(name, cond, what, out=""):
    if not cond:
        failures.append(name)
        print(f"FAIL {name}: {what}")
        if out:
            print("---- hvdrun output (tail) ----\n" + out[-6000:])


# 1. Hosts added and removed: localhost, then localhost + 127.0.0.1, then
#    127.0.0.1 alone. The third epoch's rank 0 is the worker started on
#    127.0.0.1 as rank 2 (HOROVOD_RANK), after three rendezvous.
rc, r, out, took = run("added_removed", [(0, ["localhost:2"]), (1, ["localhost:2", "127.0.0.1:2"]),
                                          (None, ["127.0.0.1:2"])], ["--hosts-change-after", "0", "1"])
got = [(x["start_rank"], x["size"], x["hostname"], x["rendezvous"]) for x in r]
expect("added_removed", rc == 0 and got == [(0, 2, "localhost", 1), (0, 4, "localhost", 2),
                                            (2, 2, "127.0.0.1", 3)], f"rc {rc}, epochs {got}", out)

# 2. One rank raises (start rank 0 at epoch 1): its host is blacklisted and
#    the two workers of 127.0.0.1 (start ranks 2, 3) train on, after one
#    re-formation; the others recover from the peer's exit.
rc, r, out, took = run("single_rank_failure", [(None, ["localhost:2", "127.0.0.1:2"])],
                       ["--exit-schedule", json.dumps({"[1, 0]": [0]})])
got = [(x["start_rank"], x["size"], x["rendezvous"]) for x in r]
expect("single_rank_failure", rc == 0 and got == [(0, 4, 1), (2, 2, 2), (2, 2, 2)], f"rc {rc}, epochs {got}", out)

# 3. Every rank raises at epoch 1: both hosts are blacklisted for good and
#    no worker is left -- the job fails at once with the first failure.
rc, r, out, took = run("all_ranks_failure", [(None, ["localhost:2", "127.0.0.1:2"])],
                       ["--exit-schedule", json.dumps({"[1, 0]": [0, 1, 2, 3]})], timeout=40)
expect("all_ranks_failure", rc == 1 and took < 20 and "every host discovery lists is blacklisted" in out,
       f"rc {rc} after {took:.1f} s", out)

leftover = subprocess.run(["pgrep", "-f", TRAINER], capture_output=True, text=True).stdout.split()
expect("no leftovers", not leftover, f"trainer processes left: {leftover}")
print("FAILED: " + ", ".join(failures) if failures else "OK: 3 Horovod elastic scenarios")
sys.exit(1 if failures else 0)
