#!/usr/bin/env python3
"""OCI Data Science (docs/platforms.md#oci-data-science): conf/oci's
docker-compose pair reproduced with two network-namespace hosts
(tests/integration/netns/netns_hosts.py) and a shared temporary directory
as the compose file's volume. Both runs start through conf/oci/entrypoint.sh
with exactly the compose file's environment: the WORKER's entrypoint starts
sshd on WORKER_PORT 12345 with the job's key, and the MAIN reaches it there.

    test_oci.py CASE      (HVDRUN, PYTHONPATH from the environment)

Cases (one CTest entry each):
  compose_pair    one job of 2 ranks forms (rank 0 on the MAIN, rank 1 on
                  the WORKER, allreduce sum 3); both runs exit 0;
  failing_rank    the entry script exits 3 on rank 1 (the WORKER's host):
                  the MAIN exits 3 and so does the WORKER (the job's status);
  job_over_unseen the WORKER is stopped (SIGSTOP) once registered; the MAIN's
                  job forms over its registration, fails (3) and ends, and
                  MAIN.json is gone before the WORKER looks again: continued,
                  the WORKER exits 3 at once, from the status that names its
                  run, not after START_TIMEOUT (the race of a job that fails
                  within one of the WORKER's 250 ms looks);
  no_main         a WORKER alone with START_TIMEOUT=2 exits 6 naming the
                  shared directory, and unregisters;
  main_killed     the MAIN is killed (-9) while the WORKER follows it: the
                  WORKER exits 6 with one line once the heartbeat is stale
                  (10 s), and unregisters.
Every case ends with no rank left in any namespace. Exits 77 without root /
ip netns or without torch for /usr/bin/python3.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
import netns_hosts  # noqa: E402
from netns_hosts import Failure, check  # noqa: E402

ENTRYPOINT = os.path.realpath(os.path.join(ROOT, "conf", "oci", "entrypoint.sh"))
TRAIN = os.path.realpath(os.path.join(HERE, "oci_train.py"))
PYTHON = "/usr/bin/python3"

# conf/oci/docker-compose.yaml's environment (the test's paths in place of /work and /code).
COMPOSE_ENV = {
    "OCI__WORKER_COUNT": "1",
    "OCI__ENTRY_SCRIPT_ARGS": "",
    "MIN_NP": "2",
    "MAX_NP": "2",
    "SLOTS": "1",
    "WORKER_PORT": "12345",
    "START_TIMEOUT": "600",
    "ENABLE_TIMELINE": "0",
    "HOROVOD_ARGS": "--verbose",
}


class Pair:
    """The shared volume, the job's key directory and the two runs."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.tmp = tempfile.mkdtemp(prefix="hvdoci-", dir=hosts.tmp)
        self.work = os.path.join(self.tmp, "work")
        self.ssh = os.path.join(self.tmp, "ssh")
        self.empty_root = os.path.join(self.tmp, "root")
        for d in (self.work, self.ssh, self.empty_root):
            os.makedirs(d, mode=0o700)
        shutil.copy(hosts.key, os.path.join(self.ssh, "id_ed25519"))
        shutil.copy(hosts.key + ".pub", os.path.join(self.ssh, "id_ed25519.pub"))
        shutil.copy(os.path.join(hosts.tmp, "host_key"), os.path.join(self.ssh, "ssh_host_ed25519_key"))
        self.procs = []

    def env(self, mode, **extra):
        env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "HVDRUN_REMOTE_AGENT")}
        env.update(COMPOSE_ENV)
        env.update({
            "OCI__MODE": mode,
            "OCI__WORK_DIR": self.work,
            "OCI__SYNC_DIR": os.path.join(self.work, "sync"),
            "OCI__ENTRY_SCRIPT": TRAIN,
            "OCI_SSH_DIR": self.ssh,
            "OCI_SSHD_DIR": os.path.join(self.tmp, f"sshd-{mode.lower()}"),
            "HVDRUN": os.environ["HVDRUN"],
            "HOME": self.hosts.home,
            "USER": "root",
            # python3 is /usr/bin/python3 (torch) on every host and in every rank.
            "PATH": "/usr/bin:/bin:/usr/sbin:/sbin",
        })
        env.update(extra)
        return env

    def start(self, i, mode, **extra):
        """conf/oci/entrypoint.sh in namespace i with an empty /root (as the
        test hosts' sshd has), as the container's entrypoint."""
        cmd = ["ip", "netns", "exec", self.hosts.namespaces[i], "unshare", "--mount", "sh", "-c",
               'mount --bind "$0" /root && exec "$1"', self.empty_root, ENTRYPOINT]
        p = subprocess.Popen(cmd, env=self.env(mode, **extra), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p

    def finish(self, p, timeout):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise Failure(f"{' '.join(p.args[-1:])} did not end within {timeout} s\n--- stdout\n{out[-3000:]}"
                          f"\n--- stderr\n{err[-5000:]}")
        return p.returncode, out, err

    def finish_pair(self, main, worker, timeout):
        """Both runs' (code, stdout, stderr), MAIN first; when either has not
        ended within `timeout`, both are killed and reported."""
        deadline = time.monotonic() + timeout
        results = []
        for p in (main, worker):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                results.append((p.returncode, out, err))
            except subprocess.TimeoutExpired:
                self.kill_all()
                report = []
                for name, q in (("MAIN", main), ("WORKER", worker)):
                    out, err = q.communicate()
                    report.append(f"{name} exit {q.returncode}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-6000:]}")
                raise Failure(f"the pair did not end within {timeout} s\n" + "\n".join(report))
        return results

    def registered(self):
        d = os.path.join(self.work, "Undefined", "hvdrun")
        return sorted(f for f in os.listdir(d) if f.startswith("WORKER_")) if os.path.isdir(d) else []

    def kill_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def ranks_left(hosts):
    """Processes besides sshd (and its sessions) left in the namespaces after
    the job: the WORKER's own entrypoint sshd is a daemon ("sshd: ..." too)."""
    return hosts.wait_no_leftovers(10)


def case_compose_pair(hosts, pair):
    main = pair.start(0, "MAIN")
    worker = pair.start(1, "WORKER")
    (mcode, mout, merr), (wcode, wout, werr) = pair.finish_pair(main, worker, 60)
    a, b = hosts.addrs
    details = (f"MAIN stdout:\n{mout[-3000:]}", f"MAIN stderr:\n{merr[-6000:]}", f"WORKER stderr:\n{werr[-3000:]}")
    check(mcode == 0, f"the MAIN exited {mcode}", *details)
    check(wcode == 0, f"the WORKER exited {wcode}, not the job's status 0", *details)
    lines = sorted(line.split("oci_train: ", 1)[1] for line in mout.splitlines() if "oci_train: rank" in line)
    check(lines == [f"rank 0 size 2 host {a} sum 3", f"rank 1 size 2 host {b} sum 3"],
          f"not one job of 2 ranks, rank 0 on the MAIN ({a}) and rank 1 on the WORKER ({b}): {lines}", *details)
    check(f"registered {b}:1" in werr and f"following the MAIN at {a}" in werr, "the WORKER's lines are missing",
          *details)
    check("hosts from oci" in merr, "the MAIN did not say where its hosts are from", *details)
    # HOROVOD_ARGS=--verbose took effect (debug lines).
    check("[debug]" in merr, "HOROVOD_ARGS=--verbose had no effect", *details)
    # The MAIN logged in to the sshd the WORKER's entrypoint started on
    # WORKER_PORT 12345, not to the test host's own sshd (ports 22, 2222).
    with open(os.path.join(pair.tmp, "sshd-worker", "sshd.log")) as f:
        entry_sshd = f.read()
    check("Accepted publickey" in entry_sshd, "the MAIN never logged in to the WORKER's sshd on 12345", entry_sshd,
          *details)
    check("Accepted publickey" not in hosts.sshd_log(1), "the MAIN used the host's port-22 sshd", *details)
    check(pair.registered() == [], f"the WORKER did not unregister: {pair.registered()}")


def case_failing_rank(hosts, pair):
    b = hosts.addrs[1]
    extra = {"OCI__ENTRY_SCRIPT_ARGS": f"--fail-on-host {b}"}
    main = pair.start(0, "MAIN", **extra)
    worker = pair.start(1, "WORKER", **extra)
    (mcode, mout, merr), (wcode, wout, werr) = pair.finish_pair(main, worker, 60)
    details = (f"MAIN stdout:\n{mout[-3000:]}", f"MAIN stderr:\n{merr[-6000:]}", f"WORKER stderr:\n{werr[-3000:]}")
    check("failing on purpose with 3" in mout, "rank 1 did not fail as asked", *details)
    check(mcode == 3, f"the MAIN exited {mcode}, not the failed rank's 3", *details)
    check(wcode == mcode, f"the WORKER exited {wcode}, not the job's status {mcode}", *details)
    check("the MAIN's job ended with status 3" in werr, "the WORKER did not name the job's status", *details)


def case_job_over_unseen(hosts, pair):
    b = hosts.addrs[1]
    extra = {"OCI__ENTRY_SCRIPT_ARGS": f"--fail-on-host {b}"}
    worker = pair.start(1, "WORKER", **extra)
    end = time.monotonic() + 20
    while time.monotonic() < end and not pair.registered() and worker.poll() is None:
        time.sleep(0.05)
    check(pair.registered() != [], "the WORKER never registered")
    with open(f"/proc/{worker.pid}/comm") as f:
        comm = f.read().strip()
    check(comm.startswith("hvdrun"), f"the WORKER's process is {comm}, not hvdrun (the entrypoint execs it)")
    os.kill(worker.pid, signal.SIGSTOP)
    try:
        main = pair.start(0, "MAIN", **extra)
        mcode, mout, merr = pair.finish(main, 60)
        details = (f"MAIN stdout:\n{mout[-3000:]}", f"MAIN stderr:\n{merr[-6000:]}")
        check(mcode == 3, f"the MAIN exited {mcode}, not the failed rank's 3", *details)
        check(not os.path.exists(os.path.join(pair.work, "Undefined", "hvdrun", "MAIN.json")),
              "MAIN.json is still there after the MAIN ended", *details)
    finally:
        os.kill(worker.pid, signal.SIGCONT)
    t0 = time.monotonic()
    wcode, wout, werr = pair.finish(worker, 20)
    took = time.monotonic() - t0
    check(wcode == 3, f"the WORKER exited {wcode}, not the job's status 3", werr)
    check("the MAIN's job ended with status 3" in werr, "the WORKER did not name the job's status", werr)
    check(took < 5, f"the WORKER took {took:.1f} s to see the status")
    check(pair.registered() == [], f"the WORKER did not unregister: {pair.registered()}")


def case_no_main(hosts, pair):
    t0 = time.monotonic()
    worker = pair.start(1, "WORKER", START_TIMEOUT="2")
    code, out, err = pair.finish(worker, 20)
    took = time.monotonic() - t0
    check(code == 6, f"a WORKER without a MAIN exited {code}, not 6", err)
    check("no MAIN appeared in" in err and "START_TIMEOUT 2 s" in err, "the one-line reason is missing", err)
    check(took < 10, f"it took {took:.1f} s for START_TIMEOUT 2")
    check(pair.registered() == [], f"the WORKER did not unregister: {pair.registered()}")


def case_main_killed(hosts, pair):
    # A long entry script; once the WORKER follows the MAIN, the MAIN is
    # killed (-9: no status written). The WORKER sees the heartbeat go stale.
    extra = {"OCI__ENTRY_SCRIPT": "/bin/sleep", "OCI__ENTRY_SCRIPT_ARGS": "60"}
    main = pair.start(0, "MAIN", **extra)
    worker = pair.start(1, "WORKER", **extra)
    d = os.path.join(pair.work, "Undefined", "hvdrun")
    end = time.monotonic() + 20
    while time.monotonic() < end and not (os.path.exists(os.path.join(d, "MAIN.json")) and pair.registered()):
        time.sleep(0.1)
    time.sleep(1.0)  # the WORKER looks every 250 ms
    main.kill()
    main.wait()
    t0 = time.monotonic()
    code, out, err = pair.finish(worker, 30)
    took = time.monotonic() - t0
    check(code == 6, f"the WORKER exited {code} after its MAIN was killed, not 6", err)
    check("following the MAIN at" in err, "the WORKER never followed the MAIN", err)
    lines = [line for line in err.splitlines() if "error" in line]
    check(len(lines) == 1 and "stopped refreshing its heartbeat" in lines[0], "not one line naming the heartbeat",
          err)
    check(took < 20, f"the WORKER took {took:.1f} s to notice (stale after 10 s)")
    check(pair.registered() == [], f"the WORKER did not unregister: {pair.registered()}")


CASES = {"compose_pair": case_compose_pair, "failing_rank": case_failing_rank,
         "job_over_unseen": case_job_over_unseen, "no_main": case_no_main,
         "main_killed": case_main_killed}


def main(argv):
    if len(argv) != 2 or argv[1] not in CASES:
        print(f"usage: {argv[0]} {'|'.join(CASES)}", file=sys.stderr)
        return 2
    netns_hosts.skip_unless_available()
    if subprocess.run([PYTHON, "-c", "import torch"], capture_output=True).returncode != 0:
        print(f"SKIPPED: {PYTHON} cannot import torch", flush=True)
        return 77
    t0 = time.monotonic()
    with netns_hosts.NetnsHosts(count=2) as hosts:
        pair = Pair(hosts)
        try:
            CASES[argv[1]](hosts, pair)
            left = ranks_left(hosts)
            check(not left, f"processes left in the namespaces: {left}")
        except Failure as e:
            print(f"FAILED: {argv[1]}: {e}", file=sys.stderr)
            hosts.print_sshd_logs()
            return 1
        finally:
            pair.kill_all()
    print(f"{argv[1]}: {time.monotonic() - t0:.1f} s including setup and teardown")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
