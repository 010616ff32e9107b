#!/usr/bin/env python3
"""Silent peer loss across network-namespace hosts (issue 3: "when a peer
dies or its connection drops, every pending and later operation on every
survivor fails with a typed error ... never a hang").

A killed process closes its sockets, so its peers learn at once. A host that
crashes or loses its network sends nothing at all: only the transport's
silent-peer limit (HVD_TRANSPORT_PEER_TIMEOUT_MS, docs/collective.md) can
end the survivors' wait. This test makes that happen for real:

  * two namespace hosts with sshd (tests/integration/netns/netns_hosts.py),
    hvdrun in the root namespace, -np 2 -H a:1,b:1, collective_worker cut
    (allreduces in a loop);
  * once both ranks loop, host b's cable is pulled (its veth end on the
    bridge goes down); case peer_cut_idle (collective_worker cutidle) pulls
    it while rank 1's background thread is blocked and rank 0 waits with
    nothing in flight, so only keepalive probes can find the loss;
  * rank 0 on host a must fail with hvd::IoError within BOUND_S of the cut,
    hvdrun must exit non-zero, and no process may be left in any namespace
    (host b is checked while still cut off: its own rank notices the silent
    peer as well, sshd notices the dead client).

    test_collective_netns.py --hvdrun PATH --worker PATH peer_cut|peer_cut_idle|shm_two_hosts

Case shm_two_hosts runs the ops grid on -H a:2,b:2 instead: shared memory
inside each namespace host, TCP between them.

Without root or `ip netns` it prints "SKIPPED: needs root and ip netns" and
exits 77 (CTest SKIP_RETURN_CODE).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
import netns_hosts  # noqa: E402

BOUND_S = 5.0  # the library's default limit is 1.5 s; the issue asks for 2 s


class Failure(Exception):
    pass


def check(cond, what, *details):
    if not cond:
        raise Failure(what + "".join("\n--- " + str(d)[-4000:] for d in details))


class Job:
    """hvdrun in its own session; stdout+stderr lines collected by a thread."""

    def __init__(self, argv, env):
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            with self.lock:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def text(self):
        with self.lock:
            return "\n".join(self.lines)

    def wait_for(self, pattern, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if re.search(pattern, self.text()):
                return True
            if self.proc.poll() is not None:
                self.reader.join(2)
                return bool(re.search(pattern, self.text()))
            time.sleep(0.05)
        return False

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if self.proc.poll() is not None:
                self.reader.join(2)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.reader.join(2)


def case_peer_cut(hosts, args):
    """Cut mid-allreduce: the survivor usually has data in flight."""
    cut_host(hosts, args, "cut", r"rank 1: LOOPING", None)


def case_peer_cut_idle(hosts, args):
    """Cut while rank 1's background thread is blocked (in an output
    allocator) and rank 0 waits on a link with nothing in flight: only the
    keepalive probes can tell that the peer is gone."""
    cut_host(hosts, args, "cutidle", r"rank 1: STALLING", "probes unanswered")


def cut_host(hosts, args, mode, ready, want_in_error):
    a, b = hosts.addrs
    outer_b = f"hv{hosts.pid}1r"  # host b's veth end on the bridge: its "cable"
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("HVDRUN_REMOTE_AGENT", None)
    env.pop("HVD_TRANSPORT_PEER_TIMEOUT_MS", None)  # the library's default limit
    env.update(HOME=hosts.home, USER="root", HOROVOD_LOG_LEVEL="warning")
    # --ssh-keepalive 1: hvdrun gives up on the unreachable host's SSH
    # session after about 4 s instead of 20 (that is the launcher's limit,
    # not what this test measures).
    argv = [args.hvdrun, "-i", hosts.key, "--ssh-keepalive", "1", "-np", "2", "-H", f"{a}:1,{b}:1",
            args.worker, mode]
    job = Job(argv, env)
    try:
        check(job.wait_for(r"rank 0: LOOPING", 40) and job.wait_for(ready, 10),
              f"the job did not reach '{ready}' on both hosts", job.text())
        time.sleep(0.3)
        subprocess.run(["ip", "link", "set", outer_b, "down"], check=True)
        cut = time.monotonic()
        cut_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        failed = job.wait_for(r"rank 0: FAILED_AT", BOUND_S + 5)
        code = job.wait(40)
        exited_after = time.monotonic() - cut
        out = job.text()
        check(failed, f"rank 0 did not fail within {BOUND_S + 5:.0f} s of the cut", out)
        m = re.search(r"rank 0: FAILED_AT (\d+) iter (\d+) IoError: (.*)", out)
        check(m, "rank 0 did not report an hvd::IoError", out)
        delay = (int(m.group(1)) - cut_ns) / 1e9
        check(delay < BOUND_S, f"rank 0 failed {delay:.2f} s after the cut (bound {BOUND_S} s)", out)
        check("stopped answering" in m.group(3) and "rank 1" in m.group(3),
              "the error does not name the silent peer", m.group(3))
        check(want_in_error is None or want_in_error in m.group(3),
              f"the failure was not found by '{want_in_error}'", m.group(3))
        check(code is not None, "hvdrun did not exit within 40 s of the cut", out)
        check(code != 0, "hvdrun exited 0 although a host was lost", out)
        check("barrier after failure succeeded" not in out, "a later operation succeeded after the failure", out)
        # host b is still cut off: its rank must end by itself (it saw a
        # silent peer too) and sshd drops the dead client's session
        left_b = hosts.wait_no_leftovers(15)
        check(not left_b, "processes left in the namespaces while host b is cut off", left_b)
        print(f"{mode}: rank 0 failed {delay:.2f} s after the cut (iteration {m.group(2)}): {m.group(3)}")
        print(f"{mode}: hvdrun exited {code} {exited_after:.1f} s after the cut")
    finally:
        subprocess.run(["ip", "link", "set", outer_b, "up"], check=False)
        job.kill()
    left = hosts.wait_no_leftovers(5)
    check(not left, "processes left in the namespaces", left)


def case_shm_two_hosts(hosts, args):
    """-H a:2,b:2: shared memory inside each host, TCP between them (issue
    18). Every op of the worker's grid must pass on 4 ranks, and --verbose
    must show one data-path line per host from its lowest rank."""
    a, b = hosts.addrs
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("HVDRUN_REMOTE_AGENT", None)
    env.pop("HVD_TRANSPORT", None)
    env.pop("HOROVOD_LOG_LEVEL", None)
    env.update(HOME=hosts.home, USER="root")
    argv = [args.hvdrun, "-i", hosts.key, "--verbose", "-np", "4", "-H", f"{a}:2,{b}:2", args.worker, "ops"]
    job = Job(argv, env)
    try:
        code = job.wait(90)
        out = job.text()
        check(code == 0, f"hvdrun exited {code}", out)
        for r in range(4):
            check(re.search(rf"rank {r}: ops ok", out), f"rank {r} did not finish the ops grid", out)
        lines = [l for l in out.splitlines() if "data path:" in l]
        check(len(lines) == 2, "expected one data-path line per host", lines)
        for first, group in ((0, "0,1"), (2, "2,3")):
            want = f"rank {first}: data path: shared memory between the ranks [{group}] of this host"
            check(any(want in l and "TCP to the 2 other rank(s)" in l for l in lines), f"no line '{want}'", lines)
        print("shm_two_hosts: " + " | ".join(l.split("] ", 2)[-1] for l in lines))
    finally:
        job.kill()
    left = hosts.wait_no_leftovers(5)
    check(not left, "processes left in the namespaces", left)


CASES = {"peer_cut": case_peer_cut, "peer_cut_idle": case_peer_cut_idle, "shm_two_hosts": case_shm_two_hosts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hvdrun", required=True)
    ap.add_argument("--worker", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    args = ap.parse_args()
    netns_hosts.skip_unless_available()
    t0 = time.monotonic()
    with netns_hosts.NetnsHosts(count=2) as hosts:
        try:
            CASES[args.case](hosts, args)
        except Failure as e:
            print(f"FAILED: {args.case}: {e}", file=sys.stderr)
            hosts.print_sshd_logs(2000)
            return 1
    print(f"{args.case}: ok, {time.monotonic() - t0:.1f} s including setup and teardown")
    return 0


if __name__ == "__main__":
    sys.exit(main())
