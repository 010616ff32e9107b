#!/usr/bin/env python3
"""ssh_config ProxyJump and ProxyCommand against real sshd's in network
namespaces (netns_hosts.py), three hosts: a is the jump host (bastion),
b and c the workers. One CTest test per case:

    test_ssh_proxy.py --hvdrun PATH CASE

Topology: each worker's sshd also listens on an address of its own in
198.19.X.0/24, held on its loopback device and answered for on its eth0
only to its own address (arp_ignore=1). The jump host routes to those
addresses through the workers' 198.18.X addresses; this machine's route to
198.19.X.0/24 goes onto the test bridge, where nothing answers for them, so
a direct connection can never reach a worker's 198.19 address (and no packet
leaves the test network). The workers reach hvdrun's store on the bridge.

Cases:
  proxy_jump        HostName 198.19.X.b with ProxyJump jumphost: the job runs
                    on both workers; each worker's sshd saw the jump host's
                    address connect; `ProxyJump none` in an earlier block
                    beats a later ProxyJump (direct: fails); Ctrl-C stops
                    every worker on every host (no leftovers).
  proxy_jump_elastic
                    elastic mode over aliases behind the jump host: a job on
                    both; a long one drops worker-c when the discovery
                    script stops listing it, worker-b goes on; Ctrl-C.
  proxy_jump_shared eight hosts behind a jump host with MaxStartups 1: one
                    login to it, a channel per host; a host it cannot reach
                    (SYN dropped) fails alone, the others go through a
                    second session after 2 s.
  proxy_jump_chain  ProxyJump a,b to reach c (b reaches c, a does not): c's
                    sshd saw b connect, b's saw a; user@host:port forms.
  proxy_jump_errors the jump host refusing the port, a worker address the jump
                    host cannot reach, a ProxyJump loop (Host * matching its
                    jump host): one line each, exit 3; no route from here to a
                    proxied host: one line naming --network-interface, exit 2;
                    a strict host-key refusal's hint scans from the jump host.
  proxy_jump_volume_and_loss
                    80,000 lines through the jump host, all in order; the
                    jump host's sshd sessions killed mid-job: the loss names
                    the jump host, exit 3, nothing left behind.
  proxy_command     ProxyCommand `ssh -W %h:%p` through the jump host (real
                    OpenSSH as the proxy): the job runs; the proxy processes
                    are gone after the job; a failing command (exit 7, its
                    stderr shown) and a hanging one (--start-timeout 2, then
                    killed): one line each, exit 3.

Without root or `ip netns` every case prints "SKIPPED: needs root and ip
netns" and exits 77.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402
from netns_hosts import Failure, check, hvdrun_env as env_for, run  # noqa: E402

ARGS = None
WORKER = "import os; print('on', [l.split()[3] for l in os.popen('ip -o -4 addr show dev lo')][1])"


def run_hvdrun(hosts, args, timeout=60, env=None):
    t0 = time.monotonic()
    p = subprocess.run([ARGS.hvdrun, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env or env_for(hosts), stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t0


def error_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("hvdrun: error")]


def inner(hosts, i):
    """Host i's address behind the jump host."""
    return f"198.19.{hosts.subnet.split('.')[2]}.{3 + i}"


def ns_run(hosts, i, *cmd):
    run("ip", "netns", "exec", hosts.namespaces[i], *cmd)


def setup_topology(hosts, chain=False):
    """See the module text. chain=True: host b, not a, routes to c's inner
    address (a reaches b's only)."""
    x = hosts.subnet.split(".")[2]
    for i in (1, 2):
        ns_run(hosts, i, "sysctl", "-q", "-w", "net.ipv4.conf.all.arp_ignore=1")
        ns_run(hosts, i, "ip", "addr", "add", f"{inner(hosts, i)}/32", "dev", "lo")
        hosts.restart_sshd(i, extra=f"ListenAddress {inner(hosts, i)}:22\n")
    ns_run(hosts, 0, "ip", "route", "add", f"{inner(hosts, 1)}/32", "via", hosts.addrs[1])
    router = 1 if chain else 0
    ns_run(hosts, router, "ip", "route", "add", f"{inner(hosts, 2)}/32", "via", hosts.addrs[2])
    # This machine: onto the bridge (deleted with it), where nobody answers.
    run("ip", "route", "add", f"198.19.{x}.0/24", "dev", hosts.bridge)


def install_key(hosts):
    d = os.path.join(hosts.home, ".ssh")
    os.makedirs(d, mode=0o700, exist_ok=True)
    dst = os.path.join(d, "cluster_key")
    shutil.copy(hosts.key, dst)
    os.chmod(dst, 0o600)
    return dst


def write_config(hosts, text):
    path = os.path.join(hosts.home, ".ssh", "config")
    with open(path, "w") as f:
        f.write(text)
    return path


def connections_from(hosts, i, addr):
    """How many logins host i's sshd accepted from `addr` (the harness's
    own port probes connect too, but never log in)."""
    return len(re.findall(rf"Accepted publickey for root from {re.escape(addr)} port \d+", hosts.sshd_log(i)))


def local_proxies(marker):
    """This machine's processes whose command line holds `marker`."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            cmd = netns_hosts.proc_cmdline(int(pid))
            if marker in cmd:
                out.append((int(pid), cmd))
    return out


def start_sleepers(hosts, args, seconds):
    """hvdrun ARGS sleep SECONDS in the background, once both workers'
    `sleep` runs (20 s at most; killed and a Failure otherwise)."""
    proc = subprocess.Popen([ARGS.hvdrun, *args, "sleep", seconds], env=env_for(hosts), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    running = lambda: len([1 for _, _, c in hosts.leftovers() if c == f"sleep {seconds}"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and running() < 2:
        time.sleep(0.1)
    if running() != 2:
        proc.kill()
        proc.communicate()
        check(False, "the workers did not start", hosts.leftovers())
    return proc


def common_config(hosts, key):
    return ("Host *\n"
            f"    IdentityFile {key}\n"
            "    User root\n"
            "    StrictHostKeyChecking accept-new\n")


def workers_behind(hosts, jump):
    """Aliases worker-b and worker-c for the workers' inner addresses,
    both reached through ProxyJump `jump`."""
    return ("Host worker-b\n"
            f"    HostName {inner(hosts, 1)}\n"
            "Host worker-c\n"
            f"    HostName {inner(hosts, 2)}\n"
            "Host worker-*\n"
            f"    ProxyJump {jump}\n")


# ---------------------------------------------------------------------------
# cases

def case_proxy_jump(hosts):
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    write_config(hosts, (
        "Host direct-b\n"
        "    ProxyJump none\n"
        f"    HostName {inner(hosts, 1)}\n"
        "Host worker-b direct-b\n"
        f"    HostName {inner(hosts, 1)}\n"
        "    ProxyJump jumphost\n"
        "Host worker-c\n"
        f"    HostName {inner(hosts, 2)}\n"
        "    ProxyJump jumphost\n"
        "Host jumphost\n"
        f"    HostName {a}\n") + common_config(hosts, key))
    p, took = run_hvdrun(hosts, ["-np", "2", "-H", "worker-b:1,worker-c:1", "python3", "-c", WORKER])
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    check(f"[0]<stdout>:on {inner(hosts, 1)}/32" in p.stdout and f"[1]<stdout>:on {inner(hosts, 2)}/32" in p.stdout,
          "the ranks did not run on the workers behind the jump host", p.stdout, p.stderr)
    added = [l for l in p.stderr.splitlines() if "permanently added" in l]
    check(len(added) == 3 and len(p.stderr.splitlines()) == 3 and
          any("[warning] jumphost: permanently added" in l for l in added),
          "want one line per host key recorded (the jump host's too), nothing else", p.stderr)
    p1, _ = run_hvdrun(hosts, ["-np", "2", "-H", "worker-b:1,worker-c:1", "true"])
    check(p1.returncode == 0 and p1.stderr == "", "a second job through ProxyJump is not quiet", p1.stderr)
    # --dry-run says how each host is reached -- the route the jobs above
    # took -- and connects to nothing.
    logins = [connections_from(hosts, i, a) for i in (1, 2)]
    jump_logins = len(re.findall("Accepted publickey", hosts.sshd_log(0)))
    pd, _ = run_hvdrun(hosts, ["--dry-run", "-np", "3", "-H", "worker-b:1,worker-c:1,direct-b:1", "true"])
    check(pd.returncode == 0 and pd.stderr == "", f"dry run: exited {pd.returncode}", pd.stderr)
    reached = pd.stdout[pd.stdout.find("how each host would be reached"):]
    cfg = "~/.ssh/config"  # hvdrun runs with HOME=hosts.home
    for name, i in (("worker-b", 1), ("worker-c", 2)):
        want = (f"  {name}: ssh root@{inner(hosts, i)} port 22\n"
                f"    through ProxyJump ({cfg}:")
        check(want in reached, f"dry run: want {want!r}", reached)
    check(reached.count(f"      jumphost: ssh root@{a} port 22\n") == 2, "dry run: the jump host's address", reached)
    check(f"  direct-b: ssh root@{inner(hosts, 1)} port 22\n    keys:" in reached,
          "dry run: ProxyJump none is a direct connection", reached)
    check("keys: IdentityFile ~/.ssh/cluster_key" in reached, "dry run: the configured key", reached)
    check([connections_from(hosts, i, a) for i in (1, 2)] == logins and
          len(re.findall("Accepted publickey", hosts.sshd_log(0))) == jump_logins,
          "the dry run connected to a host", hosts.sshd_log(0))
    for i in (1, 2):
        check(connections_from(hosts, i, a) >= 1, f"host {i}'s sshd saw no connection from the jump host {a}",
              hosts.sshd_log(i))
        check(connections_from(hosts, i, hosts.gateway) == 0, f"host {i} was connected to directly",
              hosts.sshd_log(i))
    check(f"[{inner(hosts, 1)}]" not in open(hosts.known_hosts).read() and
          f"{inner(hosts, 1)} ssh-ed25519" in open(hosts.known_hosts).read(),
          "the worker's key was not recorded under its HostName", open(hosts.known_hosts).read())
    # `ProxyJump none` in the first matching block wins: a direct attempt,
    # which cannot reach the worker's inner address.
    p2, took2 = run_hvdrun(hosts, ["-np", "1", "-H", "direct-b:1", "--start-timeout", "4", "true"])
    check(p2.returncode == 3, f"ProxyJump none: exited {p2.returncode}, want 3", p2.stderr)
    errs = error_lines(p2.stderr)
    check(len(errs) == 1 and f"({inner(hosts, 1)}:22)" in errs[0], "ProxyJump none: want one direct-connection error",
          p2.stderr)
    # Ctrl-C while the workers run: every worker stops, on every host; no
    # relay is left.
    proc = start_sleepers(hosts, ["-np", "2", "-H", "worker-b:1,worker-c:1"], "300")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    stop = time.monotonic() - t0
    check(proc.returncode == 130, f"Ctrl-C: exited {proc.returncode}, want 130", err)
    left = hosts.wait_no_leftovers(5)
    check(not left, "processes left on the hosts after Ctrl-C", left)
    print(f"proxy_jump: ok (job {took:.1f} s, direct attempt {took2:.1f} s, Ctrl-C stopped in {stop:.1f} s)")


def case_proxy_jump_elastic(hosts):
    """Elastic mode through the jump host: a discovery script lists the
    aliases behind it; the job forms on both and ends; then the script
    drops one: the other goes on alone (a new world), no leftovers."""
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    write_config(hosts, workers_behind(hosts, a) + common_config(hosts, key))
    listing = os.path.join(hosts.tmp, "hosts.txt")
    with open(listing, "w") as f:
        f.write("worker-b:1\nworker-c:1\n")
    script = os.path.join(hosts.tmp, "discover.sh")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\ncat {listing}\n")
    os.chmod(script, 0o755)
    p, took = run_hvdrun(hosts, ["-np", "2", "--min-np", "1", "--max-np", "2", "--host-discovery-script", script,
                                 "python3", "-c", WORKER])
    check(p.returncode == 0, f"elastic: exited {p.returncode}", p.stdout, p.stderr)
    check(f"on {inner(hosts, 1)}/32" in p.stdout and f"on {inner(hosts, 2)}/32" in p.stdout,
          "elastic: the ranks did not run on both workers behind the jump host", p.stdout, p.stderr)
    # A long job; worker-c leaves the listing: hvdrun drops it and goes on.
    proc = start_sleepers(hosts, ["--verbose", "-np", "2", "--min-np", "1", "--max-np", "2",
                                  "--host-discovery-script", script], "302")
    try:
        with open(listing, "w") as f:
            f.write("worker-b:1\n")
        on_c = lambda: [1 for ns, _, c in hosts.leftovers() if c == "sleep 302" and ns == hosts.namespaces[2]]
        gone = not netns_hosts.wait_until_empty(on_c, 20)
        alive = [1 for ns, _, c in hosts.leftovers() if c == "sleep 302" and ns == hosts.namespaces[1]]
        check(gone and alive, "elastic: worker-c was not dropped while worker-b went on", hosts.leftovers())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(proc.returncode == 130, f"elastic: Ctrl-C exited {proc.returncode}, want 130", err)
    check(not hosts.wait_no_leftovers(5), "elastic: processes left on the hosts", hosts.leftovers())
    print(f"proxy_jump_elastic: ok ({took:.1f} s)")


def case_proxy_jump_shared(hosts):
    """Eight hosts (aliases of the two workers) behind a jump host whose
    sshd takes one unauthenticated connection at a time (MaxStartups 1):
    one login to the jump host, a channel per host. A host the jump host
    cannot reach (its SYN is dropped) holds its session's one channel open;
    the others go on through a second session: only the dead host fails."""
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    hosts.restart_sshd(0, max_startups="1")
    x = hosts.subnet.split(".")[2]
    dead = f"198.19.{x}.99"
    # Host 1 does not forward: what the jump host sends it for `dead` is dropped, unanswered.
    ns_run(hosts, 0, "ip", "route", "add", f"{dead}/32", "via", hosts.addrs[1])
    aliases = [f"worker-{w}{n}" for w in "bc" for n in range(1, 5)]
    write_config(hosts, "".join(f"Host worker-b{n}\n    HostName {inner(hosts, 1)}\n"
                                f"Host worker-c{n}\n    HostName {inner(hosts, 2)}\n" for n in range(1, 5)) +
                 f"Host dead-x\n    HostName {dead}\n"
                 "Host worker-* dead-x\n    ProxyJump jumphost\n"
                 f"Host jumphost\n    HostName {a}\n" + common_config(hosts, key))
    logins = lambda: (connections_from(hosts, 0, hosts.gateway), connections_from(hosts, 1, a),
                      connections_from(hosts, 2, a))
    before = logins()
    p, took = run_hvdrun(hosts, ["-np", "8", "-H", ",".join(f"{h}:1" for h in aliases), "python3", "-c", WORKER])
    check(p.returncode == 0, f"8 hosts: exited {p.returncode}", p.stdout, p.stderr)
    for i in (1, 2):
        n = sum(1 for l in p.stdout.splitlines() if l.endswith(f"on {inner(hosts, i)}/32"))
        check(n == 4, f"{n} ranks ran on worker {i}, want 4", p.stdout)
    after = logins()
    # One; a second only when a channel open took over 2 s (a loaded machine).
    check(after[0] - before[0] in (1, 2), f"{after[0] - before[0]} logins to the jump host for 8 hosts, want 1",
          hosts.sshd_log(0))
    check(after[1] - before[1] == 4 and after[2] - before[2] == 4,
          f"logins from the jump host to the workers: {after[1] - before[1]}, {after[2] - before[2]}, want 4 each")

    # The dead host: one line naming it, at --start-timeout; the others
    # reached their sshd. Whether its open is the one ahead of theirs in the
    # shared session depends on which host's thread logs in first: when it
    # is (two logins to the jump host: the others moved to a second
    # session), they must not wait behind it. Up to four jobs, until that
    # order came up once; every job must hold the rest.
    stuck_seen, runs, took2 = False, 0, 0.0
    while not stuck_seen and runs < 4:
        runs += 1
        before = logins()
        p, took2 = run_hvdrun(hosts, ["-np", "3", "-H", "dead-x:1,worker-b1:1,worker-c1:1", "--start-timeout", "8",
                                      "true"])
        errs = error_lines(p.stderr)
        check(p.returncode == 3 and len(errs) == 1 and "dead-x" in errs[0] and f"{dead}:22" in errs[0] and
              "timed out" in errs[0], f"dead host: exited {p.returncode}, want 3 and one line naming it", p.stderr)
        check(took2 < 16, f"the dead host's job took {took2:.1f} s (--start-timeout 8)")
        after = logins()
        check(after[1] - before[1] == 1 and after[2] - before[2] == 1,
              "the hosts beside the dead one were held back", p.stderr, hosts.sshd_log(1), hosts.sshd_log(2))
        check(after[0] - before[0] in (1, 2), f"{after[0] - before[0]} logins to the jump host, want 1 or 2",
              hosts.sshd_log(0))
        stuck_seen = after[0] - before[0] == 2
        check(not hosts.wait_no_leftovers(5), "processes left on the hosts", hosts.leftovers())
    print(f"proxy_jump_shared: the dead host's open {'held the first session' if stuck_seen else 'came last'} "
          f"(job {runs} of at most 4)")
    print(f"proxy_jump_shared: ok (8 hosts {took:.1f} s, dead host {took2:.1f} s)")


def case_proxy_jump_chain(hosts):
    setup_topology(hosts, chain=True)
    key = install_key(hosts)
    a, b = hosts.addrs[0], hosts.addrs[1]
    write_config(hosts, (
        "Host worker-c\n"
        f"    HostName {inner(hosts, 2)}\n"
        f"    ProxyJump root@jump-a,ssh://root@{b}:2222\n"
        "Host jump-a\n"
        f"    HostName {a}\n"
        "    ProxyJump none\n") + common_config(hosts, key))
    p, took = run_hvdrun(hosts, ["-np", "1", "-H", "worker-c:1", "python3", "-c", WORKER])
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    check(f"[0]<stdout>:on {inner(hosts, 2)}/32" in p.stdout, "the rank did not run on c", p.stdout, p.stderr)
    check(connections_from(hosts, 2, b) >= 1 and connections_from(hosts, 2, a) == 0,
          "c's sshd should have seen b (the last hop) connect, not a", hosts.sshd_log(2))
    check(re.search(rf"Connection from {re.escape(a)} port \d+ on {re.escape(b)} port 2222", hosts.sshd_log(1)),
          "b's sshd should have seen a connect on port 2222", hosts.sshd_log(1))
    check(f"[{b}]:2222 ssh-ed25519" in open(hosts.known_hosts).read(), "the second hop's key was not recorded",
          open(hosts.known_hosts).read())
    print(f"proxy_jump_chain: ok ({took:.1f} s)")


def case_proxy_jump_errors(hosts):
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    x = hosts.subnet.split(".")[2]
    unrouted = f"198.19.{x}.200"
    write_config(hosts, (
        "Host refused\n"
        f"    HostName {inner(hosts, 1)}\n"
        f"    ProxyJump {a}:2223\n"
        "Host unreachable-behind\n"
        f"    HostName {hosts.subnet}.77\n"  # on the jump host's subnet: nobody there
        f"    ProxyJump {a}\n"
        "Host looping\n"
        f"    HostName {inner(hosts, 1)}\n"
        "    ProxyJump loop-jump\n"
        "Host loop-jump\n"
        f"    HostName {a}\n"
        "    ProxyJump loop-jump\n"
        "Host unrouted\n"
        f"    HostName {unrouted}\n"
        f"    ProxyJump {a}\n"
        "Host strict-b\n"
        f"    HostName {inner(hosts, 1)}\n"
        f"    ProxyJump {a}\n"
        "    StrictHostKeyChecking yes\n") + common_config(hosts, key))
    # The jump host refuses the port.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "refused:1", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"refused: exited {p.returncode}, want 3 and one error", p.stderr)
    check(re.match(rf"^hvdrun: error: refused: jump host {re.escape(a)}: connection refused \({re.escape(a)}:2223\)$",
                   errs[0]), "refused: the line does not name the jump host and its address", errs[0])
    # The jump host cannot reach the worker's address.
    p, took = run_hvdrun(hosts, ["-np", "1", "-H", "unreachable-behind:1", "--start-timeout", "10", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"unreachable-behind: exited {p.returncode}, want 3 and one error",
          p.stderr)
    check(re.match(rf"^hvdrun: error: unreachable-behind: jump host {re.escape(a)} \({re.escape(a)}:22\) could not "
                   rf"connect to {re.escape(hosts.subnet)}\.77:22 \(.+\)$", errs[0]),
          "unreachable-behind: the line does not say the jump host could not connect", errs[0])
    # A loop.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "looping:1", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1 and "ProxyJump goes more than 8 jump hosts deep" in errs[0]
          and "loop-jump" in errs[0], f"looping: exited {p.returncode}, want 3 and one loop line", p.stderr)
    # No route from here to a proxied host's address: the driver address
    # cannot be chosen; --network-interface can.
    run("ip", "route", "add", "unreachable", f"{unrouted}/32")
    try:
        p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "unrouted:1", "true"])
        errs = error_lines(p.stderr)
        check(p.returncode == 2 and len(errs) == 1 and "--network-interface" in errs[0]
              and f"unrouted (through ProxyJump {a})" in errs[0],
              f"unrouted: exited {p.returncode}, want 2 and one line naming --network-interface", p.stderr)
    finally:
        run("ip", "route", "del", "unreachable", f"{unrouted}/32", check=False)
    # A strict refusal: the hint scans from the jump host.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "strict-b:1", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"strict-b: exited {p.returncode}, want 3", p.stderr)
    check(f"add it with: ssh {a} ssh-keyscan -p 22 {inner(hosts, 1)} >> " in errs[0],
          "strict-b: the hint does not scan from the jump host", errs[0])
    print(f"proxy_jump_errors: ok (unreachable behind the jump host: {took:.1f} s)")


def case_proxy_jump_volume_and_loss(hosts):
    """Through the jump host: 4 ranks print 20,000 lines each (the relay's
    flow control: nothing lost, nothing reordered); then the jump host's
    sshd session is killed mid-job: the loss is reported naming the jump
    host, hvdrun exits 3 within seconds, and the workers behind the jump
    host are stopped by their sshd (ClientAliveInterval 1)."""
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    write_config(hosts, workers_behind(hosts, a) + common_config(hosts, key))
    n = 20000
    cmd = f'seq -f "$HOROVOD_RANK-%g-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" {n}'
    p, took = run_hvdrun(hosts, ["-np", "4", "-H", "worker-b:2,worker-c:2", "sh", "-c", cmd])
    check(p.returncode == 0, f"volume: exited {p.returncode}", p.stderr[-2000:])
    lines = p.stdout.splitlines()
    for rank in range(4):
        got = [l for l in lines if l.startswith(f"[{rank}]<stdout>:")]
        want = [f"[{rank}]<stdout>:{rank}-{i}-" + "x" * 48 for i in range(1, n + 1)]
        check(got == want, f"volume: rank {rank}: {len(got)} lines, want {n} in order")
    # The jump host's sessions die mid-job.
    proc = start_sleepers(hosts, ["-np", "2", "-H", "worker-b:1,worker-c:1"], "301")
    try:
        sessions = [pid for pid in netns_hosts.ns_pids(hosts.namespaces[0])
                    if netns_hosts.proc_cmdline(pid).startswith("sshd: root")]
        check(sessions, "no sshd session on the jump host")
        t0 = time.monotonic()
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        lost_after = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(proc.returncode == 3, f"loss: exited {proc.returncode}, want 3", err)
    check(re.search(rf"lost: SSH connection to worker-[bc] lost: jump host {re.escape(a)}: connection closed", err),
          "loss: the rank was not reported lost naming the jump host", err)
    check(lost_after < 5, f"loss: noticed after {lost_after:.1f} s")
    left = hosts.wait_no_leftovers(10)
    check(not left, "processes left behind the jump host after it was lost", left)
    print(f"proxy_jump_volume_and_loss: ok ({4 * n} lines in {took:.1f} s; loss noticed after {lost_after:.1f} s)")


def case_proxy_command(hosts):
    setup_topology(hosts)
    key = install_key(hosts)
    a = hosts.addrs[0]
    marker = f"hvdproxy{os.getpid()}"
    # Real OpenSSH as the proxy, with its own options (the test's HOME is
    # not the one OpenSSH reads: it takes the passwd entry's).
    ssh = (f"ssh -F /dev/null -i {key} -o UserKnownHostsFile={hosts.home}/.ssh/jump_known_hosts "
           f"-o StrictHostKeyChecking=accept-new -o BatchMode=yes -o SetEnv=M={marker}")
    write_config(hosts, (
        "Host worker-b worker-c\n"
        f"    ProxyCommand {ssh} -W %h:%p root@{a}\n"
        "Host worker-b\n"
        f"    HostName {inner(hosts, 1)}\n"
        "Host worker-c\n"
        f"    HostName {inner(hosts, 2)}\n"
        "Host failing\n"
        f"    HostName {inner(hosts, 1)}\n"
        "    ProxyCommand sh -c 'echo the bastion is down >&2; exit 7'\n"
        "Host hanging\n"
        f"    HostName {inner(hosts, 1)}\n"
        f"    ProxyCommand sleep 7{os.getpid() % 1000} # {marker}\n") + common_config(hosts, key))
    p, took = run_hvdrun(hosts, ["-np", "2", "-H", "worker-b:1,worker-c:1", "python3", "-c", WORKER])
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    check(f"[0]<stdout>:on {inner(hosts, 1)}/32" in p.stdout and f"[1]<stdout>:on {inner(hosts, 2)}/32" in p.stdout,
          "the ranks did not run on the workers behind the proxy", p.stdout, p.stderr)
    for i in (1, 2):
        check(connections_from(hosts, i, a) >= 1, f"host {i}'s sshd saw no connection from the proxy's host",
              hosts.sshd_log(i))
    left = netns_hosts.wait_until_empty(lambda: local_proxies(marker), 3)
    check(not left, "ProxyCommand processes outlived the job", left)
    # A command that fails: its own stderr, then one line with its status.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "failing:1", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"failing: exited {p.returncode}, want 3 and one error", p.stderr)
    check("the bastion is down" in p.stderr, "failing: the command's stderr was not shown", p.stderr)
    check(re.match(r"^hvdrun: error: failing: its ProxyCommand exited with code 7 during the SSH handshake "
                   r"\(through its ProxyCommand\)$", errs[0]), "failing: the line does not give the status", errs[0])
    # A command that never answers: the start timeout, then it is killed.
    p, took2 = run_hvdrun(hosts, ["-np", "1", "-H", "hanging:1", "--start-timeout", "2", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1 and "timed out" in errs[0],
          f"hanging: exited {p.returncode}, want 3 and one timeout line", p.stderr)
    check(took2 < 6, f"hanging: took {took2:.1f} s with --start-timeout 2")
    left = netns_hosts.wait_until_empty(lambda: local_proxies(f"sleep 7{os.getpid() % 1000}"), 3)
    check(not left, "the hanging ProxyCommand was left running", left)
    print(f"proxy_command: ok (job {took:.1f} s; hanging command ended after {took2:.1f} s)")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    def set_args(args):
        global ARGS
        ARGS = args

    return netns_hosts.run_cases_main(CASES, set_args, count=3)


if __name__ == "__main__":
    sys.exit(main())
