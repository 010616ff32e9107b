#!/usr/bin/env python3
"""Cross-host tests of hvdrun's SSH spawning, against real sshd's in network
namespaces (netns_hosts.py). One CTest test per case:

    test_netns.py --hvdrun PATH [--driver PATH] CASE

Each case creates its own hosts and always tears them down. Without root or
`ip netns` every case prints "SKIPPED: needs root and ip netns" and exits 77
(CTest SKIP_RETURN_CODE).
"""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402
from netns_hosts import Failure, check, hvdrun_env as env_for  # noqa: E402,F401

ARGS = None


def agent_path():
    """hvdrun-agent beside the hvdrun under test (the spawners look there)."""
    return os.path.join(os.path.dirname(os.path.abspath(ARGS.hvdrun)), "hvdrun-agent")


def hvdrun_argv(hosts, *args, key=None):
    if key == "":  # no -i: ssh-agent / default keys
        return [ARGS.hvdrun, *args]
    return [ARGS.hvdrun, "-i", key or hosts.key, *args]


def run_hvdrun(hosts, args, timeout=30, key=None, env=None):
    t0 = time.monotonic()
    p = subprocess.run(hvdrun_argv(hosts, *args, key=key), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, env=env or env_for(hosts), stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t0


def start_hvdrun(hosts, args, key=None):
    return subprocess.Popen(hvdrun_argv(hosts, *args, key=key), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env_for(hosts), stdin=subprocess.DEVNULL)


def wait_workers(hosts, pattern, per_ns, timeout=15):
    """Waits until each namespace runs `per_ns` processes whose cmdline matches."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        counts = [sum(1 for _, c in hosts.processes(i) if re.search(pattern, c)) for i in range(hosts.count)]
        if all(c >= per_ns for c in counts):
            return counts
        time.sleep(0.1)
    raise Failure(f"workers matching {pattern!r} did not start in every namespace: "
                  f"{[hosts.processes(i) for i in range(hosts.count)]}")


def assert_no_leftovers(hosts, timeout, context):
    left = hosts.wait_no_leftovers(timeout)
    check(not left, f"{context}: processes left in the namespaces after {timeout} s", left)


def start_agent(hosts, name):
    """A real ssh-agent on a socket in the test's directory, once it
    listens: (process, socket path). The caller kills it."""
    sock = os.path.join(hosts.tmp, name)
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 5
    while not os.path.exists(sock):
        if time.monotonic() >= end:
            agent.kill()
            agent.wait()
            check(False, "ssh-agent did not start")
        time.sleep(0.05)
    return agent, sock


# ---------------------------------------------------------------------------
# cases

def case_two_hosts(hosts):
    """2 hosts x 2 slots: ranks, hosts, prefixes, env transport, accept-new."""
    a, b = hosts.addrs
    marker = "hvdmark" + secrets.token_hex(8)
    worker = (
        "import os, glob\n"
        "m = os.environ.get('HVDTEST_MARKER', '')\n"
        "seen = 0\n"
        "for f in glob.glob('/proc/[0-9]*/cmdline'):\n"
        "    try:\n"
        "        seen += m.encode() in open(f, 'rb').read()\n"
        "    except OSError:\n"
        "        pass\n"
        "addr = [l.split()[3] for l in os.popen('ip -o -4 addr show dev eth0')][0]\n"
        "print('rank=%s size=%s local=%s host=%s addr=%s marker=%s cmdline_hits=%d' % (\n"
        "    os.environ['HOROVOD_RANK'], os.environ['HOROVOD_SIZE'], os.environ['HOROVOD_LOCAL_RANK'],\n"
        "    os.environ['HOROVOD_HOSTNAME'], addr, m == os.environ.get('HVDTEST_EXPECT'), seen))\n"
        "import sys; sys.stderr.write('err-from-%s\\n' % os.environ['HOROVOD_RANK'])\n")
    p, took = run_hvdrun(hosts, ["--verbose", "-np", "4", "-H", f"{a}:2,{b}:2", "python3", "-c", worker],
                         env=env_for(hosts, HVDTEST_MARKER=marker, HVDTEST_EXPECT=marker))
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    lines = [l for l in p.stdout.splitlines() if "rank=" in l]
    check(len(lines) == 4, "expected 4 rank lines", p.stdout, p.stderr)
    for rank in range(4):
        host = a if rank < 2 else b
        want = re.compile(rf"^\[{rank}\]<stdout>:rank={rank} size=4 local={rank % 2} host={re.escape(host)} "
                          rf"addr={re.escape(host)}/24 marker=True cmdline_hits=0$")
        check(any(want.match(l) for l in lines), f"rank {rank}: no line matching {want.pattern}", p.stdout)
        check(f"[{rank}]<stderr>:err-from-{rank}" in p.stderr, f"rank {rank}: stderr line missing", p.stderr)
    check(marker not in p.stderr, "the environment value leaked into hvdrun's log", p.stderr)
    # accept-new: both host keys recorded.
    with open(hosts.known_hosts) as f:
        known = f.read()
    host_key = " ".join(hosts.host_pub_key().split()[:2])
    for h in (a, b):
        check(f"{h} {host_key}" in known, f"{h} not recorded in known_hosts", known)
    # A second run uses the recorded keys (no new lines).
    p2, _ = run_hvdrun(hosts, ["-np", "2", "-H", f"{a}:1,{b}:1", "true"])
    check(p2.returncode == 0, f"second run exited {p2.returncode}", p2.stderr)
    with open(hosts.known_hosts) as f:
        check(f.read() == known, "known_hosts changed on the second run")
    assert_no_leftovers(hosts, 5, "after a successful job")
    print(f"two_hosts: ok ({took:.1f} s)")


def case_failure_teardown(hosts):
    """One remote rank exits 3: hvdrun exits 3 quickly and nothing is left."""
    a, b = hosts.addrs
    cmd = 'if [ "$HOROVOD_RANK" = 3 ]; then sleep 1; echo bye >&2; exit 3; fi; exec sleep 60'
    p, took = run_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", "sh", "-c", cmd], timeout=40)
    check(p.returncode == 3, f"hvdrun exited {p.returncode}, want 3", p.stdout, p.stderr)
    check(took < 15, f"hvdrun took {took:.1f} s to tear down")
    check("rank 3" in p.stderr, "the failed rank is not named", p.stderr)
    assert_no_leftovers(hosts, 5, "after a rank failed")
    print(f"failure_teardown: ok ({took:.1f} s)")


def _interrupt(hosts, sig, want_code):
    a, b = hosts.addrs
    proc = start_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", "sleep", "61"])
    try:
        wait_workers(hosts, r"^sleep 61", 2)
        # One agent per host starts both of its workers.
        for i in range(hosts.count):
            cmds = [cmd for _, cmd in hosts.processes(i)]
            agents = [c for c in cmds if os.path.basename(c.split()[0]) == "hvdrun-agent"]
            check(len(agents) == 1 and sum(c.startswith("sleep 61") for c in cmds) == 2,
                  f"namespace {i}: want one hvdrun-agent and two workers", cmds)
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if want_code is not None:
        check(proc.returncode == want_code, f"hvdrun exited {proc.returncode}, want {want_code}", err)
    assert_no_leftovers(hosts, 6, f"after signal {sig}")
    return took


def case_ctrl_c(hosts):
    took = _interrupt(hosts, signal.SIGINT, 130)
    print(f"ctrl_c: ok ({took:.1f} s)")


def case_term_hup(hosts):
    """SIGTERM and SIGHUP to hvdrun reach every remote worker: exit 143 / 129,
    nothing left on either host."""
    took_term = _interrupt(hosts, signal.SIGTERM, 143)
    took_hup = _interrupt(hosts, signal.SIGHUP, 129)
    check(took_term < 5 and took_hup < 5, f"teardown took {took_term:.1f} s (TERM) / {took_hup:.1f} s (HUP)")
    print(f"term_hup: ok (TERM {took_term:.1f} s, HUP {took_hup:.1f} s)")


def case_env_over_ssh(hosts):
    """The environment edge cases horovodrun breaks on, across SSH: dotted
    names, multi-line and quote-laden values, ~600 KiB of variables, exported
    shell functions (dropped), -x; and one SSH connection per host carries all
    of that host's workers."""
    a, b = hosts.addrs
    extra = {"HVD_BIG_%03d" % i: ("v%03d" % i) * 512 for i in range(300)}
    extra.update({
        "HVD.DOTTED.NAME": "dots ok",
        "HVD_MULTI": "line one\nline two\n  'quoted' \"and\" $dollar `tick`",
        "BASH_FUNC_hvdfn%%": "() {  echo leaked\n}",
        "HVD_X_FWD": "forwarded",
    })
    probe = ("import os, json; e = os.environ; print(json.dumps({"
             "'dotted': e.get('HVD.DOTTED.NAME'), 'multi': e.get('HVD_MULTI'),"
             "'func': [k for k in e if k.startswith('BASH_FUNC_')],"
             "'big': sum(1 for k, v in e.items() if k.startswith('HVD_BIG_') and v == ('v' + k[-3:]) * 512),"
             "'x_set': e.get('HVD_X_SET'), 'x_fwd': e.get('HVD_X_FWD')}))")
    before = [hosts.sshd_log(i).count("Accepted publickey") for i in range(2)]
    p, took = run_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", "-x", "HVD_X_SET=set by -x", "-x", "HVD_X_FWD",
                                 "python3", "-c", probe], env=env_for(hosts, **extra))
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    for rank in range(4):
        line = [l for l in p.stdout.splitlines() if l.startswith(f"[{rank}]<stdout>:")]
        check(len(line) == 1, f"rank {rank}: want one output line", p.stdout)
        got = json.loads(line[0].split(":", 1)[1])
        check(got["dotted"] == "dots ok", f"rank {rank}: dotted name", got)
        check(got["multi"] == extra["HVD_MULTI"], f"rank {rank}: multi-line value", got)
        check(got["func"] == [], f"rank {rank}: exported shell functions must be dropped", got)
        check(got["big"] == 300, f"rank {rank}: {got['big']} of 300 large variables arrived intact")
        check(got["x_set"] == "set by -x" and got["x_fwd"] == "forwarded", f"rank {rank}: -x", got)
    after = [hosts.sshd_log(i).count("Accepted publickey") for i in range(2)]
    for i in range(2):
        check(after[i] - before[i] == 1, f"host {hosts.addrs[i]}: {after[i] - before[i]} SSH logins for 2 workers, "
              "want 1 connection per host", hosts.sshd_log(i)[-2000:])
    assert_no_leftovers(hosts, 5, "after the job")
    print(f"env_over_ssh: ok ({took:.1f} s)")


def case_sigkill(hosts):
    """hvdrun killed with SIGKILL: the TCP connections drop, sshd closes the
    channels, each host's one agent sees EOF and kills both of its workers."""
    _interrupt(hosts, signal.SIGKILL, None)
    print("sigkill: ok")


def case_agent_killed(hosts):
    """kill -9 of one host's agent over SSH (as the out-of-memory killer
    would): hvdrun names that host, stops the other one, and nothing is left
    on either -- not even what the workers started in their process groups
    (the agent's guard kills those)."""
    a, b = hosts.addrs
    proc = start_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", "sh", "-c", "sleep 62 & wait"])
    try:
        wait_workers(hosts, r"^sleep 62", 2)
        guards = [c for _, c in hosts.processes(1) if c.startswith("hvdrun-agent-guard")]
        check(len(guards) == 1, "namespace 1: want one agent guard", hosts.processes(1))
        agents = [p for p, c in hosts.processes(1) if os.path.basename(c.split()[0]) == "hvdrun-agent"]
        check(len(agents) == 1, "namespace 1: want one hvdrun-agent", hosts.processes(1))
        os.kill(agents[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(proc.returncode == 3, f"hvdrun exited {proc.returncode}, want 3", err)
    check(f"the hvdrun agent on {b} " in err, f"the error does not name host {b}", err)
    assert_no_leftovers(hosts, 6, "after kill -9 of an agent")
    print("agent_killed: ok")


def case_unreachable(hosts):
    a = hosts.addrs[0]
    bad = hosts.unreachable
    p, took = run_hvdrun(hosts, ["-np", "2", "-H", f"{a}:1,{bad}:1", "--start-timeout", "3", "true"], timeout=20)
    check(p.returncode == 3, f"hvdrun exited {p.returncode}, want 3", p.stderr)
    check(took < 6.5, f"took {took:.1f} s with --start-timeout 3")
    lines = [l for l in p.stderr.splitlines() if bad in l and "error" in l]
    check(lines, f"no error line naming {bad}", p.stderr)
    check(re.search(r"timed out|no route to host|unreachable", lines[0]), "cause missing", lines[0])
    assert_no_leftovers(hosts, 5, "after a failed launch")
    print(f"unreachable: ok ({took:.1f} s): {lines[0]}")


def case_refused(hosts):
    """A host whose port 22 is closed: 'connection refused', fast."""
    a = hosts.addrs[0]
    p, took = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "-p", "1", "true"], timeout=20)
    check(p.returncode == 3, f"hvdrun exited {p.returncode}, want 3", p.stderr)
    lines = [l for l in p.stderr.splitlines() if "connection refused" in l]
    check(lines and a in lines[0] and f"({a}:1)" in lines[0], "no 'connection refused' line naming host and port",
          p.stderr)
    check(took < 3, f"took {took:.1f} s")
    print(f"refused: ok ({took:.1f} s): {lines[0]}")


def case_wrong_key(hosts):
    a = hosts.addrs[0]
    p, took = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], key=hosts.wrong_key, timeout=20)
    check(p.returncode == 3, f"hvdrun exited {p.returncode}, want 3", p.stderr)
    lines = [l for l in p.stderr.splitlines() if "authentication failed" in l]
    check(lines, "no 'authentication failed' line", p.stderr)
    check(a in lines[0] and "root" in lines[0] and "id_wrong" in lines[0], "message lacks host/user/key", lines[0])
    check(len([l for l in p.stderr.splitlines() if "error" in l.lower()]) <= 2, "more than one error line", p.stderr)
    print(f"wrong_key: ok ({took:.1f} s): {lines[0]}")


def case_missing_key(hosts):
    a = hosts.addrs[0]
    # A usage error before anything starts (docs/cli.md), as it is for local hosts.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], key=hosts.key + ".nope", timeout=20)
    check(p.returncode == 2, f"hvdrun exited {p.returncode}, want 2", p.stderr)
    want = f"hvdrun: error: -i/--ssh-identity-file '{hosts.key}.nope': No such file or directory\n"
    check(p.stderr == want, "no clear message", p.stderr)
    print("missing_key: ok")


def case_strict_host_key(hosts):
    a = hosts.addrs[0]
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "--ssh-strict-host-key-checking", "true"], timeout=20)
    check(p.returncode == 3, f"strict, unknown host: exited {p.returncode}, want 3", p.stderr)
    check("not in" in p.stderr and hosts.known_hosts in p.stderr, "unclear refusal", p.stderr)
    check(not os.path.exists(hosts.known_hosts) or a not in open(hosts.known_hosts).read(),
          "strict mode recorded the key")
    # Once known (recorded by a non-strict run), strict mode accepts it.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], timeout=20)
    check(p.returncode == 0, f"accept-new run exited {p.returncode}", p.stderr)
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "--ssh-strict-host-key-checking", "true"], timeout=20)
    check(p.returncode == 0, f"strict, known host: exited {p.returncode}", p.stderr)
    # Hashed entries (HashKnownHosts) are understood too.
    subprocess.run(["ssh-keygen", "-q", "-H", "-f", hosts.known_hosts], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    with open(hosts.known_hosts) as f:
        hashed = f.read()
    check(hashed.startswith("|1|") and a not in hashed, "ssh-keygen -H did not hash the file", hashed)
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "--ssh-strict-host-key-checking", "true"], timeout=20)
    check(p.returncode == 0, f"strict, hashed entry: exited {p.returncode}", p.stderr)
    print("strict_host_key: ok")


def case_custom_port(hosts):
    """-p 2222: connects there and records the key as [host]:2222, as OpenSSH does."""
    a = hosts.addrs[0]
    p, _ = run_hvdrun(hosts, ["-p", "2222", "-np", "1", "-H", f"{a}:1", "echo", "port-ok"], timeout=20)
    check(p.returncode == 0 and "port-ok" in p.stdout, f"exited {p.returncode}", p.stderr)
    with open(hosts.known_hosts) as f:
        known = f.read()
    check(known.startswith(f"[{a}]:2222 ssh-ed25519 "), "not recorded as [host]:2222", known)
    # The port-22 identity of the same host is a different known_hosts name: strict refuses it.
    p, _ = run_hvdrun(hosts, ["--ssh-strict-host-key-checking", "-np", "1", "-H", f"{a}:1", "true"], timeout=20)
    check(p.returncode == 3, f"strict on port 22 exited {p.returncode}", p.stderr)
    p, _ = run_hvdrun(hosts, ["--ssh-strict-host-key-checking", "-p", "2222", "-np", "1", "-H", f"{a}:1", "true"],
                      timeout=20)
    check(p.returncode == 0, f"strict on port 2222 exited {p.returncode}", p.stderr)
    print("custom_port: ok")


def case_host_key_mismatch(hosts):
    """A recorded key that differs is refused, naming file and line; the file is untouched."""
    a = hosts.addrs[0]
    os.makedirs(os.path.dirname(hosts.known_hosts), exist_ok=True)
    other = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(hosts.tmp, "other")],
                           check=True)
    del other
    with open(os.path.join(hosts.tmp, "other.pub")) as f:
        other_key = " ".join(f.read().split()[:2])
    content = f"# a comment\n@cert-authority *.example ssh-ed25519 AAAA\n{a} {other_key}\n"
    with open(hosts.known_hosts, "w") as f:
        f.write(content)
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], timeout=20)
    check(p.returncode == 3, f"exited {p.returncode}, want 3", p.stderr)
    check(f"{hosts.known_hosts}:3" in p.stderr, "file:line of the old key not named", p.stderr)
    with open(hosts.known_hosts) as f:
        check(f.read() == content, "known_hosts was modified")
    print("host_key_mismatch: ok")


def case_lost_connection(hosts):
    """The link to a host goes down mid-job: its workers are reported lost
    within ~3 keepalive intervals (driver uses 1 s) and, on the host, sshd's
    ClientAlive check closes the session so the agent kills the worker."""
    check(ARGS.driver, "--driver is required for this case")
    a = hosts.addrs[0]
    proc = subprocess.Popen([ARGS.driver, "--host", a, "--identity", hosts.key, "--keepalive", "1",
                             "--ranks", "2", "--timeout", "10", "--agent", agent_path(), "--", "sleep", "62"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(hosts))
    try:
        wait_workers_ns0 = time.monotonic() + 15
        while sum(1 for _, c in hosts.processes(0) if c.startswith("sleep 62")) < 2:
            check(time.monotonic() < wait_workers_ns0, "workers did not start", proc.poll())
            time.sleep(0.1)
        t0 = time.monotonic()
        subprocess.run(["ip", "netns", "exec", hosts.namespaces[0], "ip", "link", "set", "eth0", "down"], check=True)
        out, err = proc.communicate(timeout=20)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    exits = [l for l in out.splitlines() if l.startswith("exit ")]
    check(len(exits) == 2, "want exactly one exit per rank", out, err)
    for l in exits:
        check("status=255" in l and f"SSH connection to {a} lost" in l, "not reported as lost", l)
    check(took < 8, f"loss noticed after {took:.1f} s")
    assert_no_leftovers(hosts, 8, "after the connection was lost")
    print(f"lost_connection: ok ({took:.1f} s): {exits[0]}")


def case_driver_signals(hosts):
    """Spawner-level: output, per-rank exit codes and signal forwarding via control bytes."""
    check(ARGS.driver, "--driver is required for this case")
    a = hosts.addrs[0]
    # Every rank sets its trap before it prints, and the driver signals only
    # after all three lines arrived (plus 0.5 s for rank 0 to exit): a
    # loaded host cannot make TERM beat the trap.
    script = ('trap "echo got-term-$HOROVOD_RANK; exit 7" TERM; echo "out-$HOROVOD_RANK"; '
              'if [ "$HOROVOD_RANK" = 0 ]; then exit 5; fi; sleep 30 & wait')
    p = subprocess.run([ARGS.driver, "--host", a, "--identity", hosts.key, "--ranks", "3", "--timeout", "10",
                        "--agent", agent_path(), "--signal-after-lines", "3", "--signal-after-ms", "500",
                        "--signal", "TERM", "--", "sh", "-c",
                        script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_for(hosts),
                       timeout=30)
    check(p.returncode == 0, f"driver exited {p.returncode}", p.stdout, p.stderr)
    for r in range(3):
        check(f"out {r} stdout out-{r}" in p.stdout, f"rank {r} output missing", p.stdout)
    check("exit 0 status=5 signal=0" in p.stdout, "rank 0 status", p.stdout)
    for r in (1, 2):
        check(f"exit {r} status=7 signal=0" in p.stdout, f"rank {r} did not exit 7 after TERM", p.stdout, p.stderr)
    check(len([l for l in p.stdout.splitlines() if l.startswith("exit ")]) == 3, "exactly one exit per rank",
          p.stdout)
    assert_no_leftovers(hosts, 5, "after the driver")
    print("driver_signals: ok")


def case_output_volume(hosts):
    """4 remote ranks print 20,000 lines each: nothing lost, no broken lines."""
    a, b = hosts.addrs
    n = 20000
    cmd = f'seq -f "$HOROVOD_RANK-%g-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" {n}'
    p, took = run_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", "sh", "-c", cmd], timeout=40)
    check(p.returncode == 0, f"exited {p.returncode}", p.stderr[-2000:])
    lines = p.stdout.splitlines()
    for rank in range(4):
        got = [l for l in lines if l.startswith(f"[{rank}]<stdout>:")]
        check(len(got) == n, f"rank {rank}: {len(got)} lines, want {n}")
        want = [f"[{rank}]<stdout>:{rank}-{i}-" + "x" * 48 for i in range(1, n + 1)]
        check(got == want, f"rank {rank}: lines differ or are out of order")
    check(len(lines) == 4 * n, f"{len(lines)} stdout lines, want {4 * n}")
    print(f"output_volume: ok ({took:.1f} s for {4 * n} lines)")


def case_agent_and_default_keys(hosts):
    """Without -i: ssh-agent first ($SSH_AUTH_SOCK, or ~/.ssh/config's
    IdentityAgent; `IdentityAgent none`: no agent), then ~/.ssh/id_ed25519."""
    a = hosts.addrs[0]
    agent, sock = start_agent(hosts, "agent.sock")
    try:
        subprocess.run(["ssh-add", "-q", hosts.key], env=dict(os.environ, SSH_AUTH_SOCK=sock), check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "via-agent"], key="",
                          env=env_for(hosts, SSH_AUTH_SOCK=sock))
        check(p.returncode == 0 and "via-agent" in p.stdout, f"agent auth: exited {p.returncode}", p.stderr)
        # ~/.ssh/config IdentityAgent: that socket without $SSH_AUTH_SOCK;
        # `none` keeps a working $SSH_AUTH_SOCK from being asked.
        cfg = os.path.join(hosts.home, ".ssh", "config")
        os.makedirs(os.path.dirname(cfg), mode=0o700, exist_ok=True)
        try:
            with open(cfg, "w") as f:
                f.write(f"Host {a}\n    IdentityAgent {sock}\n")
            p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "via-identity-agent"], key="")
            check(p.returncode == 0 and "via-identity-agent" in p.stdout,
                  f"IdentityAgent: exited {p.returncode}", p.stderr)
            with open(cfg, "w") as f:
                f.write(f"Host {a}\n    IdentityAgent none\n")
            p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], key="",
                              env=env_for(hosts, SSH_AUTH_SOCK=sock))
            check(p.returncode == 3 and "authentication failed" in p.stderr and "tried no keys" in p.stderr,
                  f"IdentityAgent none: exited {p.returncode}", p.stderr)
        finally:
            os.unlink(cfg)
    finally:
        agent.kill()
        agent.wait()
    # No agent, no keys: a clear message.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], key="")
    check(p.returncode == 3 and "authentication failed" in p.stderr and "no keys" in p.stderr,
          f"no keys: exited {p.returncode}", p.stderr)
    # Default key file.
    shutil.copy(hosts.key, os.path.join(hosts.home, ".ssh", "id_ed25519"))
    os.chmod(os.path.join(hosts.home, ".ssh", "id_ed25519"), 0o600)
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "via-default"], key="")
    check(p.returncode == 0 and "via-default" in p.stdout, f"default key: exited {p.returncode}", p.stderr)
    # A dead agent socket falls through to the default keys.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "fallback"], key="",
                      env=env_for(hosts, SSH_AUTH_SOCK=sock))
    check(p.returncode == 0 and "fallback" in p.stdout, f"dead agent: exited {p.returncode}", p.stderr)
    print("agent_and_default_keys: ok")


def case_agent_identity_order(hosts):
    """OpenSSH's key order: an IdentityFile's key that ssh-agent holds is
    used through the agent (its file is passphrase-protected), before the
    agent's other keys (the sshd allows 3 tries: 6 other keys come first in
    the agent), with or without IdentitiesOnly, and with -i. Real OpenSSH
    is run against the same setup for comparison."""
    a = hosts.addrs[0]
    hosts.restart_sshd(0, extra="MaxAuthTries 3\n")
    ssh_dir = os.path.join(hosts.home, ".ssh")
    os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
    agent, sock = start_agent(hosts, "agent2.sock")
    try:
        agent_env = dict(os.environ, SSH_AUTH_SOCK=sock)
        # Six keys the server does not know, loaded first; then the right
        # one, whose file is then locked with a passphrase and loses its .pub.
        for n in range(6):
            other = os.path.join(hosts.tmp, f"other{n}")
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other], check=True)
            subprocess.run(["ssh-add", "-q", other], env=agent_env, check=True, stderr=subprocess.DEVNULL)
        key = os.path.join(ssh_dir, "cluster")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
        with open(key + ".pub") as f, open(os.path.join(hosts.tmp, "authorized_keys"), "a") as out:
            out.write(f.read())
        subprocess.run(["ssh-add", "-q", key], env=agent_env, check=True, stderr=subprocess.DEVNULL)
        subprocess.run(["ssh-keygen", "-q", "-p", "-P", "", "-N", "a long passphrase", "-f", key], check=True,
                       stdout=subprocess.DEVNULL)
        os.unlink(key + ".pub")
        cfg = os.path.join(ssh_dir, "config")
        run_env = env_for(hosts, SSH_AUTH_SOCK=sock)

        def openssh(config=cfg):
            return subprocess.run(["ssh", "-F", config, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                                   "-o", f"UserKnownHostsFile={hosts.known_hosts}", a, "true"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30, env=run_env,
                                  stdin=subprocess.DEVNULL)

        for only in ("", "    IdentitiesOnly yes\n"):
            with open(cfg, "w") as f:
                f.write(f"Host {a}\n    IdentityFile {key}\n{only}")
            o = openssh()
            check(o.returncode == 0, f"OpenSSH itself failed ({only.strip() or 'IdentityFile'})", o.stderr)
            p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "in"], key="", env=run_env)
            check(p.returncode == 0 and "in" in p.stdout,
                  f"IdentityFile in the agent{' + ' + only.strip() if only else ''}: exited {p.returncode}", p.stderr)
        # The public key alone names the identity (a hardware token's or
        # 1Password's agent: no private key file at all).
        token = os.path.join(hosts.tmp, "token.pub")
        with open(token, "w") as f:
            f.write(subprocess.run(["ssh-keygen", "-y", "-P", "a long passphrase", "-f", key], check=True,
                                   stdout=subprocess.PIPE, text=True).stdout)
        with open(cfg, "w") as f:
            f.write(f"Host {a}\n    IdentityFile {token}\n    IdentitiesOnly yes\n")
        o = openssh()
        check(o.returncode == 0, "OpenSSH itself failed (IdentityFile KEY.pub)", o.stderr)
        p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "in"], key="", env=run_env)
        check(p.returncode == 0, f"IdentityFile KEY.pub + IdentitiesOnly: exited {p.returncode}", p.stderr)
        # -i names the locked file: the agent's copy is used.
        os.unlink(cfg)
        p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "echo", "in"], key=key, env=run_env)
        check(p.returncode == 0, f"-i with the key in the agent: exited {p.returncode}", p.stderr)
        # No IdentityFile: the agent's keys in its order; the server hangs
        # up after 3 (OpenSSH fails the same way). One line that says why.
        o = openssh("/dev/null")
        check(o.returncode != 0 and "Too many authentication failures" in o.stderr,
              "OpenSSH was expected to fail on MaxAuthTries", o.stderr)
        p, _ = run_hvdrun(hosts, ["-np", "1", "-H", f"{a}:1", "true"], key="", env=run_env)
        errs = [l for l in p.stderr.splitlines() if "error" in l]
        check(p.returncode == 3 and len(errs) == 1 and "authentication failed" in errs[0] and
              "MaxAuthTries" in errs[0] and "IdentitiesOnly yes" in errs[0], f"many keys: exited {p.returncode}",
              p.stderr)
    finally:
        agent.kill()
        agent.wait()
    print(f"agent_identity_order: ok; with the agent's keys alone: {errs[0]}")


def case_collective_allreduce(hosts):
    """Issue 3: a 2-host x 2-slot job of the collective test program. Ranks
    rendezvous through hvdrun's store (reached over the test subnet) and run
    every collective across the namespaces."""
    check(ARGS.worker, "--worker is required for this case")
    a, b = hosts.addrs
    p, took = run_hvdrun(hosts, ["-np", "4", "-H", f"{a}:2,{b}:2", ARGS.worker, "ops"], timeout=60)
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    for rank in range(4):
        check(f"[{rank}]<stdout>:rank {rank}: ops ok" in p.stdout, f"rank {rank} did not pass", p.stdout, p.stderr)
    assert_no_leftovers(hosts, 5, "after the collective job")
    print(f"collective_allreduce: ok ({took:.1f} s)")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    def set_args(args):
        global ARGS
        ARGS = args

    def add_arguments(ap):
        ap.add_argument("--worker", help="collective_worker binary (case collective_allreduce)")

    return netns_hosts.run_cases_main(CASES, set_args, add_arguments)


if __name__ == "__main__":
    sys.exit(main())
