#!/usr/bin/env python3
"""Runs Horovod's elastic integration scenarios (test/integration/
elastic_common.py upstream, 8 tests) against hvdrun, with Horovod's own
training script test/integration/data/elastic_torch_main.py, unmodified,
taken from a Horovod checkout (not part of this repository):

    scripts/horovod_elastic_scenarios.py --horovod <clone of horovod/horovod> [--build build] [NAME ...]

Horovod's tests call its Python launcher in-process and patch its driver
(discovery every 0.01 s, a host blacklisted on its first failure); here the
same command lines run through the real `horovodrun` entry point with the
hvdrun equivalents, --discovery-interval 0.01 --blacklist-failures 1, and
--elastic-timeout 1 where Horovod patches ELASTIC_TIMEOUT_SECS to 1. The
discovery script and the expectations are those of elastic_common.py
(re-stated here; Horovod's expected RuntimeError is a non-zero exit). Prints
PASS/FAIL per scenario; exit 1 if any failed. docs/python.md has the results.
"""
import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--horovod", required=True, help="a clone of github.com/horovod/horovod")
ap.add_argument("--build", default="build")
ap.add_argument("--python", default="/usr/bin/python3")
ap.add_argument("--timeout", type=float, default=90)
ap.add_argument("names", nargs="*")
A = ap.parse_args()
BUILD = os.path.abspath(A.build)
HVDRUN = os.path.join(BUILD, "apps/hvdrun/horovodrun")
WORK = tempfile.mkdtemp(prefix="hvd-elastic-scenarios-")
atexit.register(shutil.rmtree, WORK, True)  # nothing left behind in $TMPDIR
SCRIPT = os.path.join(WORK, "elastic_torch_main.py")
with open(SCRIPT, "w") as f:
    f.write(subprocess.run(["git", "-C", A.horovod, "show", "HEAD:test/integration/data/elastic_torch_main.py"],
                           check=True, capture_output=True, text=True).stdout)


def discovery_script(path, logfile, schedule):
    lines = ["#!/bin/bash", "epoch=0", f"if [ -f {logfile} ]; then",
             f"    epoch=$(< {logfile} wc -l | tr -d '[:space:]')", "fi"]
    for i, (epoch, hosts) in enumerate(schedule):
        echo = [f'echo "{h}"' for h in hosts]
        last = i == len(schedule) - 1
        if i == 0 and last:
            lines += echo
        elif i == 0:
            lines += [f'if [ "$epoch" == "{epoch}" ]; then'] + echo
        elif not last:
            lines += [f'elif [ "$epoch" == "{epoch}" ]; then'] + echo
        else:
            lines += ["else"] + echo + ["fi"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o755)


def run(discovery_schedule=None, exit_schedule=None, exit_mode="exception", num_proc=2, min_num_proc=2,
        max_num_proc=4, hosts=None, reset_limit=None, cooldown_range=None, epoch_wait=None, epochs=None,
        elastic_timeout=None):
    d = tempfile.mkdtemp(dir=WORK)
    logfile, disc = os.path.join(d, "log"), os.path.join(d, "discover.sh")
    discovery_script(disc, logfile, discovery_schedule or [(None, hosts.split(","))])
    cmd = [HVDRUN, "-np", str(num_proc), "--min-num-proc", str(min_num_proc), "--log-level", "DEBUG",
           "--discovery-interval", "0.01", "--blacklist-failures", "1"]
    if elastic_timeout:
        cmd += ["--elastic-timeout", str(elastic_timeout)]
    cmd += ["-H", hosts] if hosts else ["--host-discovery-script", disc, "--max-num-proc", str(max_num_proc)]
    if reset_limit is not None:
        cmd += ["--reset-limit", str(reset_limit)]
    if cooldown_range is not None:
        cmd += ["--blacklist-cooldown-range", str(cooldown_range[0]), str(cooldown_range[1])]
    cmd += [A.python, SCRIPT, "--logfile", logfile]
    if discovery_schedule:
        cmd += ["--discovery-schedule", json.dumps(discovery_schedule)]
    if epoch_wait:
        cmd += ["--epoch-wait", json.dumps(epoch_wait)]
    if epochs:
        cmd += ["--epochs", json.dumps(epochs)]
    if exit_schedule:
        cmd += ["--exit-schedule", json.dumps(exit_schedule), "--exit-mode", exit_mode]
    env = dict(os.environ, PYTHONPATH=f"{BUILD}/python:{BUILD}/python/compat")
    with open(os.path.join(d, "output"), "w") as out:
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            p.wait(timeout=A.timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(2)
            p.wait()
            raise AssertionError(f"still running after {A.timeout:.0f} s (output: {out.name})")
    results = [json.loads(x) for x in open(logfile)] if os.path.exists(logfile) else []
    return p.returncode, results, os.path.join(d, "output")


def eq(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: {got!r}, expected {want!r}")


def failed(rc, log, what=""):
    if rc == 0:
        raise AssertionError(f"exit 0, expected a failure (output: {log})")
    tail = [x for x in open(log).read().splitlines() if x.startswith("hvdrun: error:")]
    if what and not any(what in x for x in tail):
        raise AssertionError(f"no error line containing {what!r} (output: {log})")
    return tail[-1] if tail else f"exit {rc}"


def test_hosts_added_and_removed():
    for slots, np_, lo, hi in [(2, 2, 2, 4), (1, 1, 1, 2)]:
        rc, r, log = run([(0, [f"localhost:{slots}"]), (1, [f"localhost:{slots}", f"127.0.0.1:{slots}"]),
                          (None, [f"127.0.0.1:{slots}"])], num_proc=np_, min_num_proc=lo, max_num_proc=hi)
        eq(rc, 0, "exit")
        eq([(x["start_rank"], x["size"], x["hostname"]) for x in r],
           [(0, slots, "localhost"), (0, 2 * slots, "localhost"), (slots, slots, "127.0.0.1")], "epochs")
        eq(r[2]["rendezvous"], 3, "rendezvous of the last epoch")


def single_failure(**kw):
    for mode in ["exception", "kill"]:
        rc, r, log = run(exit_schedule={str((1, 0)): [0]}, exit_mode=mode, **kw)
        eq(rc, 0, f"exit ({mode})")
        eq([(x["start_rank"], x["size"], x["rendezvous"]) for x in r], [(0, 4, 1), (2, 2, 2), (2, 2, 2)],
           f"epochs ({mode})")


def test_single_rank_failure():
    single_failure(discovery_schedule=[(None, ["localhost:2", "127.0.0.1:2"])])


def test_fault_tolerance_without_scaling():
    single_failure(hosts="localhost:2,127.0.0.1:2")


def test_all_ranks_failure():
    rc, r, log = run([(None, ["localhost:2", "127.0.0.1:2"])], exit_schedule={str((1, 0)): [0, 1, 2, 3]})
    return failed(rc, log)


def test_all_hosts_blacklisted():
    rc, r, log = run([(None, ["localhost:2", "127.0.0.1:2"])], exit_schedule={str((1, 0)): [0, 2]})
    return failed(rc, log)


def test_min_hosts_timeout():
    rc, r, log = run([(None, ["localhost:2", "127.0.0.1:2"])], exit_schedule={str((1, 0)): [0]}, num_proc=4,
                     min_num_proc=4, elastic_timeout=1)
    return failed(rc, log)


def test_reset_limit():
    sched = [(0, ["localhost:2"]), (1, ["localhost:2", "127.0.0.1:2"]), (None, ["127.0.0.1:2"])]
    rc, r, log = run(sched, reset_limit=1, elastic_timeout=1)
    line = failed(rc, log, "--reset-limit 1")
    rc, r, log = run(sched, reset_limit=2, elastic_timeout=1)
    eq(rc, 0, "exit with --reset-limit 2")
    eq(len(r), 3, "epochs with --reset-limit 2")
    return line


def test_resurrecting_blacklisted_hosts_exponential_backoff():
    rc, r, log = run(discovery_schedule=[(None, ["localhost:2", "127.0.0.1:2"])],
                     exit_schedule={str((1, 0)): [3], str((3, 0)): [3]}, epoch_wait=0.25, epochs=5,
                     cooldown_range=[1, 2])
    eq(rc, 0, "exit")
    eq(len(r), 5, "epochs")
    got = [(x["start_rank"], x["size"], x["rendezvous"]) for x in r]
    eq([got[i] for i in (0, 1, 2, 4)], [(0, 4, 1), (0, 2, 2), (0, 2, 2), (0, 2, 2)], "epochs 0, 1, 2, 4")


failures = 0
for name, fn in [(k, v) for k, v in globals().items() if k.startswith("test_")]:
    if A.names and name[5:] not in A.names and name not in A.names:
        continue
    t0 = time.monotonic()
    try:
        note = fn()
        print(f"PASS {name} ({time.monotonic() - t0:.1f} s){': ' + note if note else ''}", flush=True)
    except AssertionError as e:
        failures += 1
        print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {e}", flush=True)
sys.exit(1 if failures else 0)
