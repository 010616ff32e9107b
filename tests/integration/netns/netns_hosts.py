#!/usr/bin/env python3
"""Test hosts in network namespaces, each running a real OpenSSH sshd.

    with NetnsHosts(count=2) as hosts:   # hosts.addrs == ["198.18.X.2", "198.18.X.3"]
        ... run hvdrun with HOME=hosts.home, -i hosts.key ...

Layout (names carry this process's pid, so concurrent runs never collide):
  * a bridge hvdb<pid> in the root namespace with 198.18.X.1/24, where X is
    derived from the pid (198.18.0.0/15 only: never real addresses);
  * namespaces hvdt<pid>a, hvdt<pid>b, ... each with loopback up and one veth
    end (eth0, 198.18.X.2, .3, ...) whose peer is enslaved to the bridge;
  * a temporary directory with an ed25519 client key (authorized in every
    sshd), a second key that is authorized nowhere (for wrong-key tests), the
    host key, per-namespace sshd configs/logs, and an empty HOME for hvdrun.
  * every sshd listens on ports 22 and 2222 (for -p tests);
  * 198.18.X.9 is in the subnet with nothing behind it (unreachable host).

Teardown (always: context exit, atexit, SIGTERM/SIGINT) kills every process
in each namespace (`ip netns pids`), deletes the namespaces (which removes
the veths) and the bridge, and removes the temporary directory. Leftovers of
runs that were SIGKILLed (their pid is gone) are removed on the next start.

Also a small CLI for manual use:  netns_hosts.py up [N]  /  netns_hosts.py down PID
"""
import atexit
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP_CODE = 77
SKIP_MESSAGE = "SKIPPED: needs root and ip netns"


def secrets_token():
    return os.urandom(4).hex()


def run(*args, check=True, **kw):
    return subprocess.run(list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


def available():
    """True when we can create namespaces and run sshd."""
    if os.geteuid() != 0:
        return False
    if shutil.which("ip") is None or not os.path.exists("/usr/sbin/sshd") or shutil.which("ssh-keygen") is None:
        return False
    return run("ip", "netns", "list", check=False).returncode == 0


def skip_unless_available():
    if not available():
        print(SKIP_MESSAGE, flush=True)
        sys.exit(SKIP_CODE)


def ns_pids(ns):
    r = run("ip", "netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.strip().isdigit()]


def proc_cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def wait_until_empty(listing, timeout):
    """Calls listing() every 0.1 s until it returns nothing or `timeout`
    seconds passed; returns its last answer."""
    end = time.monotonic() + timeout
    while True:
        left = listing()
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.1)


def kill_namespace_processes(ns, keep=(), rounds=20):
    """SIGKILLs every process in namespace `ns` but `keep`, again until none
    is left (children forked meanwhile included); returns what is left."""
    for _ in range(rounds):
        pids = [p for p in ns_pids(ns) if p not in keep]
        if not pids:
            return []
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    return [p for p in ns_pids(ns) if p not in keep]


def _kill_namespace(ns):
    kill_namespace_processes(ns)
    run("ip", "netns", "del", ns, check=False)


def cleanup_pid(pid):
    """Removes every namespace and link that run `pid` created."""
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if re.fullmatch(rf"hvdt{pid}[a-z]", name):
            _kill_namespace(name)
    run("ip", "link", "del", f"hvdb{pid}", check=False)
    run("ip", "link", "del", f"hvdd{pid}", check=False)  # add_dummy's veth pair (an extra local address)


def cleanup_stale():
    """Leftovers of earlier runs whose process is gone (e.g. SIGKILLed by a timeout)."""
    seen = set()
    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        m = re.match(r"hvdt(\d+)[a-z]\b", line)
        if m:
            seen.add(int(m.group(1)))
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        m = re.search(r"\bhvd[bd](\d+)\b", line)
        if m:
            seen.add(int(m.group(1)))
    for pid in seen:
        if pid != os.getpid() and not os.path.exists(f"/proc/{pid}"):
            cleanup_pid(pid)


class NetnsHosts:
    def __init__(self, count=2, client_alive_interval=1, own_hostnames=False, hostnames=None, sshd=True):
        """own_hostnames: each host's sshd (and so every login) runs in a
        UTS namespace of its own named hvdhost-a, hvdhost-b, ... By default
        the hosts share this machine's host name, which tests hvdrun's node
        identity; Open MPI keys its session directories and shared-memory
        files by host name, and two of its daemons with one name in one /tmp
        clash (a daemon vanished in about one job in ten).

        hostnames: the hosts' own names (implies own_hostnames); they also
        resolve to the hosts' addresses: self.etc_hosts (this machine's
        /etc/hosts plus one line per host) is bind-mounted over /etc/hosts
        in each sshd's mount namespace (start other processes with
        self.host_wrap(i) / self.login_wrap() to see it too).

        sshd=False: the namespaces get no sshd (nothing listens on port 22)."""
        self.pid = os.getpid()
        self.count = count
        self.client_alive_interval = client_alive_interval
        self.own_hostnames = own_hostnames or bool(hostnames)
        self.hostnames = list(hostnames) if hostnames else None
        if self.hostnames and len(self.hostnames) != count:
            raise ValueError(f"{len(self.hostnames)} host names for {count} hosts")
        self.with_sshd = sshd
        self._set_subnet(1 + self.pid % 250)
        self.namespaces = [f"hvdt{self.pid}{chr(ord('a') + i)}" for i in range(count)]
        self.bridge = f"hvdb{self.pid}"
        self.dummy = f"hvdd{self.pid}"  # add_dummy(): one end of a veth pair
        self.dummy_made = False
        self.tmp = None
        self.sshd = []  # Popen per namespace
        self._up = False

    def _set_subnet(self, x):
        self.subnet = f"198.18.{x}"  # 198.18.X.0/24
        self.gateway = f"{self.subnet}.1"
        self.addrs = [f"{self.subnet}.{2 + i}" for i in range(self.count)]
        self.unreachable = f"{self.subnet}.9"

    def _claim_subnet(self):
        """Picks a 198.18.X.0/24 no other run uses (under a lock, since
        concurrent runs scan and claim at the same time) and creates the
        bridge with its gateway address."""
        import fcntl
        os.makedirs("/run/lock", exist_ok=True)
        with open("/run/lock/hvd-netns.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = set(int(m) for m in re.findall(r"inet 198\.18\.(\d+)\.", run("ip", "-o", "-4", "addr").stdout))
            start = 1 + self.pid % 250
            for k in range(250):
                x = 1 + (start - 1 + k) % 250
                if x not in used:
                    break
            else:
                raise RuntimeError("no free 198.18.X.0/24 test subnet")
            self._set_subnet(x)
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")

    # ---- paths
    @property
    def home(self):
        return os.path.join(self.tmp, "home")

    @property
    def key(self):
        return os.path.join(self.tmp, "id_client")

    @property
    def wrong_key(self):
        return os.path.join(self.tmp, "id_wrong")

    @property
    def known_hosts(self):
        return os.path.join(self.home, ".ssh", "known_hosts")

    def host_pub_key(self):
        with open(os.path.join(self.tmp, "host_key.pub")) as f:
            return f.read().strip()

    # ---- lifecycle
    def __enter__(self):
        try:
            self.up()
        except BaseException:
            self.down()
            raise
        return self

    def __exit__(self, *exc):
        self.down()
        return False

    def up(self):
        cleanup_stale()
        atexit.register(self.down)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self._up = True
        self.tmp = tempfile.mkdtemp(prefix=f"hvdnetns{self.pid}-")
        os.makedirs(self.home, mode=0o700)
        for name in ("id_client", "id_wrong", "host_key"):
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", os.path.join(self.tmp, name))
        shutil.copy(self.key + ".pub", os.path.join(self.tmp, "authorized_keys"))
        os.makedirs("/run/sshd", exist_ok=True)

        self._claim_subnet()
        for i, ns in enumerate(self.namespaces):
            outer, inner = f"hv{self.pid}{i}r", f"hv{self.pid}{i}n"
            run("ip", "netns", "add", ns)
            run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            run("ip", "link", "set", inner, "netns", ns)
            run("ip", "link", "set", outer, "master", self.bridge)
            run("ip", "link", "set", outer, "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
            run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", "eth0")
            run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.addrs[i]}/24", "dev", "eth0")
            run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        if self.hostnames:
            with open("/etc/hosts") as f:
                base = f.read().rstrip("\n")
            with open(self.etc_hosts, "w") as f:
                f.write(base + "\n# test hosts\n" + "".join(f"{a} {n}\n" for a, n in zip(self.addrs, self.hostnames)))
        if not self.with_sshd:
            return self
        for i in range(self.count):
            self.sshd.append(self._start_sshd(i))
        for i in range(self.count):
            self._wait_port(self.addrs[i], 22)
        return self

    @property
    def etc_hosts(self):
        """The test's /etc/hosts (hostnames=... only)."""
        return os.path.join(self.tmp, "etc-hosts")

    def host_wrap(self, i):
        """Command prefix running a command on host i: in its network
        namespace, in a mount namespace of its own that sees the test
        /etc/hosts (hostnames=...) and in a UTS namespace with the host's
        name (own_hostnames). Every wrapper execs: the Popen pid is the
        command's."""
        name = self.hostname(i) if self.own_hostnames else ""
        hosts = self.etc_hosts if self.hostnames else ""
        return ["ip", "netns", "exec", self.namespaces[i], "unshare", "--mount", *(["--uts"] if name else []),
                "sh", "-c", '{ [ -z "$1" ] || hostname "$1"; } && { [ -z "$0" ] || mount --bind "$0" /etc/hosts; } '
                '&& shift && exec "$@"', hosts, name]

    def login_wrap(self):
        """Command prefix running a command in this (the root) network
        namespace where the test /etc/hosts names the hosts (hostnames=...)."""
        if not self.hostnames:
            return []
        return ["unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', self.etc_hosts]

    def _start_sshd(self, i, host_key=None, extra="", max_startups="100:30:200"):
        host_key = host_key or os.path.join(self.tmp, "host_key")
        # sshd takes the first SetEnv line only: a case's SetEnv variables
        # join ours on one line.
        setenv = ["PYENV_REHASH_TIMEOUT=0"]
        kept = []
        for line in extra.splitlines():
            if line.startswith("SetEnv "):
                setenv += line.split()[1:]
            elif line.strip():
                kept.append(line)
        extra = "".join(line + "\n" for line in kept)
        cfg = os.path.join(self.tmp, f"sshd_{i}.conf")
        with open(cfg, "w") as f:
            f.write(
                f"ListenAddress {self.addrs[i]}:22\n"
                f"ListenAddress {self.addrs[i]}:2222\n"
                f"HostKey {host_key}\n"
                f"PidFile {os.path.join(self.tmp, f'sshd_{i}.pid')}\n"
                f"AuthorizedKeysFile {os.path.join(self.tmp, 'authorized_keys')}\n"
                "PermitRootLogin yes\n"
                "StrictModes no\n"
                "UsePAM no\n"
                "PasswordAuthentication no\n"
                "KbdInteractiveAuthentication no\n"
                f"MaxStartups {max_startups}\n"
                "MaxSessions 64\n"
                f"ClientAliveInterval {self.client_alive_interval}\n"
                "ClientAliveCountMax 3\n"
                "LogLevel VERBOSE\n"
                # root's ~/.bashrc on the CI image runs `pyenv rehash`, which
                # takes a lock file; a session killed mid-rehash (tests kill
                # sessions) leaves it behind, and every later login waited
                # 60 s for it. With 0 a login tries once and goes on (the
                # shims are already there).
                f"SetEnv {' '.join(setenv)}\n"
                f"{extra}")
        log = os.path.join(self.tmp, f"sshd_{i}.log")
        # In a mount namespace of its own with an empty /root, like a fresh
        # machine's: logins never run this machine's ~/.bashrc (on the CI
        # image it runs `pyenv rehash`, whose lock a killed session leaves
        # behind, hanging every later login for 60 s).
        root = os.path.join(self.tmp, "remote-root")
        os.makedirs(root, exist_ok=True)
        uts = ["--uts"] if self.own_hostnames else []
        name = self.hostname(i) if self.own_hostnames else ""
        hosts = self.etc_hosts if self.hostnames else ""
        return subprocess.Popen(["ip", "netns", "exec", self.namespaces[i], "unshare", "--mount", *uts, "sh", "-c",
                                 '{ [ -z "$3" ] || hostname "$3"; } && { [ -z "$4" ] || mount --bind "$4" /etc/hosts; } '
                                 '&& mount --bind "$0" /root && exec /usr/sbin/sshd -D -f "$1" -E "$2"',
                                 root, cfg, log, name, hosts],
                                stdin=subprocess.DEVNULL)

    def add_dummy(self, address):
        """An extra interface in this (the root) namespace holding `address`
        (/32), removed at teardown (and by cleanup_stale after a SIGKILL):
        a local address that is not the bridge's. The hosts route to it
        through the bridge's gateway address. A veth pair with both ends
        here (not every kernel has the dummy driver)."""
        run("ip", "link", "add", self.dummy, "type", "veth", "peer", "name", f"hvde{self.pid}")
        self.dummy_made = True
        run("ip", "addr", "add", f"{address}/32", "dev", self.dummy)
        run("ip", "link", "set", self.dummy, "up")
        run("ip", "link", "set", f"hvde{self.pid}", "up")
        for ns in self.namespaces:
            run("ip", "netns", "exec", ns, "ip", "route", "add", f"{address}/32", "via", self.gateway)

    def hostname(self, i):
        """Host i's own host name (own_hostnames=True or hostnames=...)."""
        if self.hostnames:
            return self.hostnames[i]
        return f"hvdhost-{chr(ord('a') + i)}"

    def restart_sshd(self, i, new_host_key=False, extra="", max_startups="100:30:200"):
        """Restarts host i's sshd, optionally with a freshly generated host key
        (a recreated pod), extra sshd_config lines and another MaxStartups
        (sshd takes a keyword's first line: extra cannot change it). Returns
        the new host key's public line when one was made."""
        p = self.sshd[i]
        p.kill()
        p.wait(timeout=5)
        self._wait_closed(self.addrs[i], 22)
        key, pub = None, None
        if new_host_key:
            key = os.path.join(self.tmp, f"host_key_{i}_{secrets_token()}")
            run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "recreated", "-f", key)
            with open(key + ".pub") as f:
                pub = f.read().strip()
        self.sshd[i] = self._start_sshd(i, host_key=key, extra=extra, max_startups=max_startups)
        self._wait_port(self.addrs[i], 22)
        self._wait_port(self.addrs[i], 2222)
        return pub

    def _wait_closed(self, addr, port, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with socket.create_connection((addr, port), timeout=0.5):
                    pass
            except OSError:
                return
            time.sleep(0.05)

    def _wait_port(self, addr, port, timeout=10.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                with socket.create_connection((addr, port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd on {addr}:{port} did not come up; see {self.tmp}/sshd_*.log")

    def sshd_log(self, i):
        try:
            with open(os.path.join(self.tmp, f"sshd_{i}.log")) as f:
                return f.read()
        except OSError:
            return ""

    def print_sshd_logs(self, tail=3000, file=sys.stderr):
        """The end of every host's sshd log, for a failed case's report."""
        for i in range(self.count):
            log = self.sshd_log(i)[-tail:]
            if log:
                print(f"--- sshd log of {self.namespaces[i]} (tail):\n{log}", file=file)

    def processes(self, i, keep=()):
        """(pid, cmdline) of every process in namespace i except the listening
        sshd, sshd's per-connection processes ("sshd: root@notty") and the
        pids in `keep` (a caller's own daemons)."""
        keep = set(keep) | ({self.sshd[i].pid} if i < len(self.sshd) else set())
        out = []
        for p in ns_pids(self.namespaces[i]):
            cmd = proc_cmdline(p)
            if p in keep or cmd == "" or cmd.startswith("sshd:"):
                continue
            out.append((p, cmd))
        return out

    def leftovers(self):
        """Every worker-side process (agent, shell, worker) in any namespace."""
        return [(self.namespaces[i], p, cmd) for i in range(self.count) for p, cmd in self.processes(i)]

    def wait_no_leftovers(self, timeout):
        return wait_until_empty(self.leftovers, timeout)

    def _on_signal(self, signum, frame):
        self.down()
        sys.exit(128 + signum)

    def down(self):
        if not self._up:
            return
        self._up = False
        for p in self.sshd:
            try:
                p.kill()
                p.wait(timeout=5)
            except Exception:
                pass
        for ns in self.namespaces:
            _kill_namespace(ns)
        run("ip", "link", "del", self.bridge, check=False)
        if self.dummy_made:
            run("ip", "link", "del", self.dummy, check=False)
        if self.tmp and os.environ.get("HVD_NETNS_KEEP_TMP") != "1":
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---- what the case-per-invocation scripts (test_netns.py, test_ssh_config.py) share

class Failure(Exception):
    """A case's check failed: the message says what, then the details."""


def check(cond, what, *details):
    if not cond:
        raise Failure(what + "".join("\n--- " + str(d) for d in details))


def hvdrun_env(hosts, **extra):
    """hvdrun's environment for these hosts: their HOME (known_hosts,
    ~/.ssh/config), no ssh-agent (only the keys a case gives), no remote
    agent override."""
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    env.pop("HVDRUN_REMOTE_AGENT", None)
    env["HOME"] = hosts.home
    env["USER"] = "root"
    env.update(extra)
    return env


def run_cases_main(cases, on_args, add_arguments=None, count=2):
    """`SCRIPT --hvdrun PATH [--driver PATH] [more] CASE`: runs one case
    against fresh hosts; exit 0, 1 (a Failure, with the sshd logs) or 77
    (no root / ip netns). on_args(args) receives the parsed arguments
    before the case runs."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--hvdrun", required=True)
    ap.add_argument("--driver")
    if add_arguments:
        add_arguments(ap)
    ap.add_argument("case", choices=sorted(cases))
    args = ap.parse_args()
    on_args(args)
    skip_unless_available()
    check(os.access(args.hvdrun, os.X_OK), f"{args.hvdrun} is not executable (build target hvdrun)")
    t0 = time.monotonic()
    with NetnsHosts(count=count) as hosts:
        try:
            cases[args.case](hosts)
        except Failure as e:
            print(f"FAILED: {args.case}: {e}", file=sys.stderr)
            hosts.print_sshd_logs()
            return 1
    print(f"{args.case}: {time.monotonic() - t0:.1f} s including setup and teardown")
    return 0


def main(argv):
    if len(argv) >= 2 and argv[1] == "up":
        skip_unless_available()
        hosts = NetnsHosts(count=int(argv[2]) if len(argv) > 2 else 2)
        hosts.up()
        atexit.unregister(hosts.down)
        print(f"pid={hosts.pid} addrs={','.join(hosts.addrs)} key={hosts.key} home={hosts.home} tmp={hosts.tmp}")
        print(f"tear down with: {argv[0]} down {hosts.pid}")
        os._exit(0)  # keep the namespaces (sshd keeps running inside them)
    if len(argv) == 3 and argv[1] == "down":
        cleanup_pid(int(argv[2]))
        return 0
    print(f"usage: {argv[0]} up [N] | down PID", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
