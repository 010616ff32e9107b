#!/usr/bin/env python3
"""hvdrun's SSH as Kubernetes pods use it (issue 16 section 4) and the SSH
defects of issue 21, against real sshd's in network namespaces
(netns_hosts.py). One CTest test per case:

    test_ssh_config.py --hvdrun PATH [--driver PATH] CASE

Cases:
  config_alias      ~/.ssh/config Host patterns map aliases to netns
                    addresses with HostName, Port, User, IdentityFile; a Match
                    block hvdrun cannot evaluate (localnetwork) warns once
                    with file:line and is skipped; Tunnel and
                    CertificateFile warn once per config line; ForwardX11 is
                    listed under --verbose only; a bad Port fails with
                    file:line.
  match_blocks      Match originalhost / host / exec / final / all
                    decide HostName, HostKeyAlias, Port, key, User and
                    host key policy (the alias's ssh-keyscan hint, run as
                    printed, makes a strict run work);
                    the exec's flag file removed: its block no longer
                    applies (port 22, no key: exit 3).
  host_key_policies StrictHostKeyChecking accept-new (unknown host recorded,
                    then a recreated sshd's new key refused), no (accepted
                    with one warning), yes (refused), /dev/null, and
                    hvdrun's flags beating the file.
  remote_path       hvdrun missing at the same absolute path on a host: the
                    agent comes from that host's PATH (one log line); neither:
                    one clear error.
  signal_connecting SIGINT/SIGTERM while a host is still connecting (TCP
                    connect to an address with nothing behind it, and an SSH
                    handshake with a server that never answers): exit 130 /
                    143 within 1 s, static and elastic modes.
  unreachable_address
                    the unreachable-host message carries the address and port,
                    as docs/ssh.md shows; ssh_config ConnectTimeout ends the
                    attempt after its time, well before --start-timeout;
                    ConnectionAttempts 2 tries again a second later.
  bind_source       BindAddress (a second address of the bridge) and
                    BindInterface (a dummy interface's address): each sshd
                    logs the login from that address; BindAddress wins; a
                    missing interface fails with file:line.

Without root or `ip netns` every case prints "SKIPPED: needs root and ip
netns" and exits 77.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402
from netns_hosts import Failure, check, hvdrun_env as env_for  # noqa: E402,F401

ARGS = None


def run_hvdrun(hosts, args, timeout=30, env=None):
    t0 = time.monotonic()
    p = subprocess.run([ARGS.hvdrun, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, env=env or env_for(hosts), stdin=subprocess.DEVNULL)
    return p, time.monotonic() - t0


def write_config(hosts, text):
    d = os.path.join(hosts.home, ".ssh")
    os.makedirs(d, mode=0o700, exist_ok=True)
    path = os.path.join(d, "config")
    with open(path, "w") as f:
        f.write(text)
    return path


def install_key(hosts, name="k8s_key"):
    """The client key under a name ssh would not try by default."""
    d = os.path.join(hosts.home, ".ssh")
    os.makedirs(d, mode=0o700, exist_ok=True)
    dst = os.path.join(d, name)
    shutil.copy(hosts.key, dst)
    os.chmod(dst, 0o600)
    return dst


def known_hosts(hosts):
    try:
        with open(hosts.known_hosts) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def error_lines(stderr):
    return [l for l in stderr.splitlines() if "error" in l.lower()]


# ---------------------------------------------------------------------------
# cases

def case_config_alias(hosts):
    """Aliases from ~/.ssh/config: HostName, Port 2222, User, IdentityFile;
    no -i, -p or real host names on the command line."""
    a, b = hosts.addrs
    install_key(hosts)
    write_config(hosts, (
        "# as a Horovod helm chart would write it, plus aliases\n"
        "Host worker-*\n"
        "    Port 2222\n"
        "    User root\n"
        "    IdentityFile ~/.ssh/k8s_key\n"
        "    StrictHostKeyChecking accept-new\n"
        "    CertificateFile ~/.ssh/k8s_key-cert.pub\n"
        "Host worker-0\n"
        "    HostName {a}\n"
        "Host worker-1\n"
        "    HostName {b}\n"
        "    Tunnel yes\n"
        "Match localnetwork 10.0.0.0/8\n"
        "    Port 1\n"
        "Host *\n"
        "    ForwardX11 yes\n").format(a=a, b=b))
    worker = "import os; print('on', [l.split()[3] for l in os.popen('ip -o -4 addr show dev eth0')][0])"
    # USER is not root: only the config's User makes the login work.
    p, took = run_hvdrun(hosts, ["--verbose", "-np", "2", "-H", "worker-0:1,worker-1:1", "python3", "-c", worker],
                         env=env_for(hosts, USER="nosuchuser"))
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    check(f"[0]<stdout>:on {a}/24" in p.stdout and f"[1]<stdout>:on {b}/24" in p.stdout,
          "ranks did not run on the HostName addresses", p.stdout)
    # Recorded under HostName and port, as OpenSSH does.
    known = known_hosts(hosts)
    for h in (a, b):
        check(f"[{h}]:2222 ssh-ed25519 " in known, f"[{h}]:2222 not recorded", known)
    check("worker-" not in known, "the alias was recorded instead of the HostName", known)
    # One warning for the Match block hvdrun cannot evaluate (localnetwork),
    # naming file:line, its block skipped (Port 1 would fail); one for Tunnel
    # (it applies to worker-1 only); the cosmetic ForwardX11 only under --verbose.
    match = [l for l in p.stderr.splitlines() if "Match" in l and "not supported" in l]
    check(len(match) == 1 and "~/.ssh/config:13:" in match[0] and "skipped" in match[0],
          "want one Match warning naming ~/.ssh/config:13", p.stderr)
    tunnel = [l for l in p.stderr.splitlines() if "Tunnel" in l]
    check(len(tunnel) == 1 and "not supported" in tunnel[0] and "~/.ssh/config:12:" in tunnel[0]
          and "worker-1" in tunnel[0], "want one Tunnel warning", p.stderr)
    # CertificateFile applies to both hosts: still one line.
    cert = [l for l in p.stderr.splitlines() if "CertificateFile" in l]
    check(len(cert) == 1 and "~/.ssh/config:7:" in cert[0], "want one CertificateFile warning for two hosts",
          p.stderr)
    check(any("ForwardX11 ignored" in l for l in p.stderr.splitlines()), "ForwardX11 not listed under --verbose",
          p.stderr)
    # Without --verbose, the cosmetic key is not mentioned.
    p2, _ = run_hvdrun(hosts, ["-np", "1", "-H", "worker-0:1", "true"], env=env_for(hosts, USER="nosuchuser"))
    check(p2.returncode == 0, f"second run exited {p2.returncode}", p2.stderr)
    check("ForwardX11" not in p2.stderr, "cosmetic keys reported without --verbose", p2.stderr)
    # A value hvdrun cannot use: one line naming file:line, exit 3.
    write_config(hosts, f"Host worker-bad\n    HostName {a}\n    Port not-a-port\n")
    p3, _ = run_hvdrun(hosts, ["-np", "1", "-H", "worker-bad:1", "true"])
    check(p3.returncode == 3, f"bad Port: exited {p3.returncode}, want 3", p3.stderr)
    check(re.search(r"hvdrun: error: worker-bad: .*config:3: Port 'not-a-port' is not a port number", p3.stderr),
          "bad Port: no line naming file:line", p3.stderr)
    print(f"config_alias: ok ({took:.1f} s)")


def case_match_blocks(hosts):
    """Match blocks decide every connection setting, evaluated as OpenSSH
    does: `originalhost` on the alias gives the HostName, `host` then sees
    that address, `exec` runs a test per alias (%n), `all` and `final`
    apply to everyone (`user` and the final pass's effect on it: unit
    tests). Without the exec's flag file the block does not apply: the
    connection goes to port 22 without the block's key (refused, exit 3)."""
    a, b = hosts.addrs
    install_key(hosts)
    ssh_dir = os.path.join(hosts.home, ".ssh")
    for alias in ("worker-0", "worker-1"):
        open(os.path.join(ssh_dir, "ok-" + alias), "w").close()
    write_config(hosts, (
        "Match originalhost worker-0\n"
        "    HostName {a}\n"
        "Match originalhost worker-1\n"
        "    HostName {b}\n"
        "    HostKeyAlias pod-b\n"
        "Match host {a},{b} exec \"test -f %d/.ssh/ok-%n\"\n"
        "    Port 2222\n"
        "    IdentityFile ~/.ssh/k8s_key\n"
        "Match final\n"
        "    StrictHostKeyChecking accept-new\n"
        "Match all\n"
        "    User root\n").format(a=a, b=b))
    worker = "import os; print('on', [l.split()[3] for l in os.popen('ip -o -4 addr show dev eth0')][0])"
    env = env_for(hosts, USER="nosuchuser")
    p, _ = run_hvdrun(hosts, ["-np", "2", "-H", "worker-0:1,worker-1:1", "python3", "-c", worker], env=env)
    check(p.returncode == 0, f"hvdrun exited {p.returncode}", p.stdout, p.stderr)
    check(f"[0]<stdout>:on {a}/24" in p.stdout and f"[1]<stdout>:on {b}/24" in p.stdout,
          "ranks did not run on the Match blocks' HostName addresses", p.stdout)
    check("Match" not in p.stderr, "a Match block was reported", p.stderr)
    known = known_hosts(hosts)
    check(f"[{a}]:2222 " in known and "[pod-b]:2222 " in known, "host keys not recorded under port 2222", known)
    check(f"[{b}]:" not in known, "worker-1's key recorded under its address, not its HostKeyAlias", known)
    # The exec's flag gone for worker-1: its block does not apply (port 22).
    os.unlink(os.path.join(ssh_dir, "ok-worker-1"))
    p2, took = run_hvdrun(hosts, ["-np", "1", "-H", "worker-1:1", "true"], env=env)
    check(p2.returncode == 3, f"without the flag: exited {p2.returncode}, want 3", p2.stderr + p2.stdout)
    # Port 22 (sshd listens there too: its key is recorded without a port)
    # and no key: the block's IdentityFile did not apply either.
    check("SSH authentication failed for user root" in p2.stderr, "not refused for want of the block's key",
          p2.stderr)
    check(re.search(r"^pod-b ssh-ed25519 ", known_hosts(hosts), re.M),
          "worker-1's host key not recorded under pod-b for port 22", known_hosts(hosts))
    # StrictHostKeyChecking yes and a HostKeyAlias not recorded yet: refused
    # with an ssh-keyscan line that records the key under the alias; run
    # as printed, it makes the next run work.
    open(os.path.join(ssh_dir, "ok-worker-1"), "w").close()
    with open(os.path.join(ssh_dir, "config"), "a") as f:
        f.write("Match originalhost worker-0\n    HostKeyAlias pod-a\n")
    p3, _ = run_hvdrun(hosts, ["--ssh-strict-host-key-checking", "-np", "1", "-H", "worker-0:1", "true"], env=env)
    hint = re.search(r"add it with: (ssh-keyscan .*)$", p3.stderr, re.M)
    check(p3.returncode == 3 and hint and "[pod-a]:2222" in hint.group(1), "no ssh-keyscan hint for the alias",
          p3.stderr)
    subprocess.run(hint.group(1).replace("~", hosts.home), shell=True, check=True, stderr=subprocess.DEVNULL)
    p4, _ = run_hvdrun(hosts, ["--ssh-strict-host-key-checking", "-np", "1", "-H", "worker-0:1", "true"], env=env)
    check(p4.returncode == 0, f"after the hint: exited {p4.returncode}", p4.stderr, known_hosts(hosts))
    check(took < 15, f"took {took:.1f} s", p2.stderr)
    print(f"match_blocks: exec-gated block applied per alias; without its flag: {error_lines(p2.stderr)[-1:]}")


def case_host_key_policies(hosts):
    """accept-new / no / yes as OpenSSH, a recreated sshd (new host key),
    /dev/null, and command-line flags beating ~/.ssh/config."""
    a, b = hosts.addrs
    key = install_key(hosts)
    base = f"Host pod-a\n    HostName {a}\nHost pod-b\n    HostName {b}\nHost *\n    IdentityFile {key}\n"
    run_args = ["-np", "1", "-H", "pod-a:1", "echo", "reached"]

    # accept-new: the unknown host is recorded and the job runs.
    write_config(hosts, base + "    StrictHostKeyChecking accept-new\n")
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0 and "reached" in p.stdout, f"accept-new, unknown host: exited {p.returncode}", p.stderr)
    check(known_hosts(hosts).startswith(f"{a} ssh-ed25519 "), "accept-new did not record the key", known_hosts(hosts))
    check("permanently added" in p.stderr, "no line about the recorded key", p.stderr)

    # The pod is recreated: same address, new host key.
    new_pub = hosts.restart_sshd(0, new_host_key=True)
    fingerprint = subprocess.run(["ssh-keygen", "-lf", "-"], input=new_pub, text=True, stdout=subprocess.PIPE,
                                 check=True).stdout.split()[1]
    before = known_hosts(hosts)
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 3, f"accept-new, changed key: exited {p.returncode}, want 3", p.stderr)
    errs = error_lines(p.stderr)
    check(len(errs) == 1, "want exactly one error line", p.stderr)
    for part in ("pod-a", "REFUSED", fingerprint, f"{hosts.known_hosts}:1", "ssh-keygen -R", "StrictHostKeyChecking"):
        check(part in errs[0], f"the refusal lacks {part!r}", errs[0])
    check(known_hosts(hosts) == before, "known_hosts changed on a refusal")

    # no: the changed key is accepted with one warning line; the file is left alone.
    write_config(hosts, base + "    StrictHostKeyChecking no\n")
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0 and "reached" in p.stdout, f"no, changed key: exited {p.returncode}", p.stderr)
    warn = [l for l in p.stderr.splitlines() if "differs from the one recorded" in l]
    check(len(warn) == 1 and fingerprint in warn[0] and "StrictHostKeyChecking is no" in warn[0]
          and "config:7" in warn[0], "want one warning naming the key and the setting", p.stderr)
    check(known_hosts(hosts) == before, "known_hosts changed under 'no'")

    # --ssh-strict-host-key-checking beats the file's 'no'.
    p, _ = run_hvdrun(hosts, ["--ssh-strict-host-key-checking"] + run_args)
    check(p.returncode == 3 and "--ssh-strict-host-key-checking" in p.stderr,
          f"flag over file: exited {p.returncode}, want 3", p.stderr)

    # no, unknown host: recorded, like accept-new.
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "pod-b:1", "true"])
    check(p.returncode == 0, f"no, unknown host: exited {p.returncode}", p.stderr)
    check(f"\n{b} ssh-ed25519 " in known_hosts(hosts), "'no' did not record the unknown host", known_hosts(hosts))

    # yes ('ask' reads the same): an unknown host is refused with the fix.
    # Several UserKnownHostsFile files: all are read, new keys go to the first.
    kh1, kh2 = (os.path.join(hosts.home, ".ssh", n) for n in ("kh_first", "kh_second"))
    with open(kh2, "w") as f:
        f.write(f"[{b}]:2222 {' '.join(hosts.host_pub_key().split()[:2])}\n")
    write_config(hosts, base + "    StrictHostKeyChecking ask\n    UserKnownHostsFile ~/.ssh/kh_first ~/.ssh/kh_second\n")
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "pod-a:1", "-p", "2222", "true"])
    check(p.returncode == 3, f"ask, unknown [host]:2222: exited {p.returncode}, want 3", p.stderr)
    errs = error_lines(p.stderr)
    check(len(errs) == 1 and "is not in" in errs[0] and "ssh-keyscan -p 2222" in errs[0]
          and kh1 in errs[0] and "SHA256:" in errs[0], "unclear 'yes' refusal", p.stderr)
    check(not os.path.exists(kh1), "'yes' recorded a key")
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "pod-b:1", "-p", "2222", "true"])
    check(p.returncode == 0, f"yes, key in the second file: exited {p.returncode}", p.stderr)

    # The flag -p beats the file's Port.
    write_config(hosts, base + "    StrictHostKeyChecking no\n    Port 1\n")
    p, _ = run_hvdrun(hosts, ["-np", "1", "-H", "pod-b:1", "true"])
    check(p.returncode == 3 and f"({b}:1)" in p.stderr, f"file Port 1: exited {p.returncode}", p.stderr)
    p, _ = run_hvdrun(hosts, ["-p", "22", "-np", "1", "-H", "pod-b:1", "true"])
    check(p.returncode == 0, f"-p 22 over the file's Port 1: exited {p.returncode}", p.stderr)

    # The helm chart's setting: no + UserKnownHostsFile /dev/null: nothing written.
    os.unlink(hosts.known_hosts)
    write_config(hosts, base + "    StrictHostKeyChecking no\n    UserKnownHostsFile /dev/null\n")
    p, _ = run_hvdrun(hosts, ["-np", "2", "-H", "pod-a:1,pod-b:1", "true"])
    check(p.returncode == 0, f"/dev/null: exited {p.returncode}", p.stderr)
    check(not os.path.exists(hosts.known_hosts), "a known_hosts file was written despite /dev/null")
    print("host_key_policies: ok")


def case_remote_path(hosts):
    """The agent path: same absolute path, else `hvdrun` from the host's PATH,
    else one clear error. Driven with ssh_spawner_driver --agent, so the
    'local' path can be one that exists on no host."""
    check(ARGS.driver, "--driver is required for this case")
    a, b = hosts.addrs
    bindir = os.path.join(hosts.tmp, "remote-bin")
    os.makedirs(bindir)
    agent = os.path.join(os.path.dirname(os.path.abspath(ARGS.hvdrun)), "hvdrun-agent")
    os.symlink(agent, os.path.join(bindir, "hvdrun-agent"))
    # Host a's non-interactive sessions have bindir on their PATH; host b's
    # have sshd's default PATH, without any hvdrun-agent.
    hosts.restart_sshd(0, extra=f"SetEnv PATH={bindir}:/usr/bin:/bin\n")
    missing = os.path.join(hosts.tmp, "not-installed", "hvdrun-agent")

    def driver(host, agent):
        return subprocess.run([ARGS.driver, "--host", host, "--identity", hosts.key, "--timeout", "10", "--agent",
                               agent, "--", "echo", "agent-ran"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env_for(hosts), timeout=30)

    p = driver(a, missing)
    check(p.returncode == 0 and "out 0 stdout agent-ran" in p.stdout, f"PATH fallback: exited {p.returncode}",
          p.stdout, p.stderr)
    used = [l for l in p.stderr.splitlines() if "from its PATH" in l]
    check(len(used) == 1 and missing in used[0] and os.path.join(bindir, "hvdrun-agent") in used[0],
          "want one line naming the missing path and the PATH one", p.stderr)
    # Same path: no fallback line.
    p = driver(a, agent)
    check(p.returncode == 0 and "from its PATH" not in p.stderr, f"same path: exited {p.returncode}", p.stderr)
    # Neither: one error naming both, and the launch fails (exit 3).
    if shutil.which("hvdrun-agent", path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"):
        print("remote_path: note: an hvdrun-agent is installed on the default PATH; skipping the 'neither' check")
    else:
        p = driver(b, missing)
        check(p.returncode == 3, f"neither: exited {p.returncode}, want 3", p.stdout, p.stderr)
        check(re.search(rf"{re.escape(b)}.*hvdrun-agent not found there: {re.escape(missing)} does not exist.*PATH=",
                        p.stderr), "unclear 'not found' error", p.stderr)
    print("remote_path: ok")


def _silent_listener(hosts, i, port):
    """A TCP server in namespace i that accepts and never says a word (an
    SSH server stuck before its banner). Dies with the namespace."""
    code = ("import socket, time\n"
            f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{hosts.addrs[i]}', {port})); s.listen(16)\n"
            "conns = []\n"
            "while True:\n"
            "    conns.append(s.accept()[0])\n")
    p = subprocess.Popen(["ip", "netns", "exec", hosts.namespaces[i], sys.executable, "-c", code],
                         stdin=subprocess.DEVNULL)
    hosts._wait_port(hosts.addrs[i], port)
    return p


def _interrupt_while_connecting(hosts, args, sig, want, label):
    env = env_for(hosts)
    proc = subprocess.Popen([ARGS.hvdrun, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        if proc.poll() is not None:
            raise Failure(f"{label}: hvdrun ended before the signal ({proc.returncode})", proc.communicate()[1])
        t0 = time.monotonic()
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise Failure(f"{label}: hvdrun still running 10 s after the signal", err)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    check(proc.returncode == want, f"{label}: exited {proc.returncode}, want {want}", err)
    check(took < 1.0, f"{label}: took {took:.2f} s after the signal, want < 1 s", err)
    end = time.monotonic() + 5
    while True:
        left = [x for x in hosts.leftovers() if "s.listen(16)" not in x[2]]
        if not left or time.monotonic() > end:
            break
        time.sleep(0.1)
    check(not left, f"{label}: processes left on the hosts", left)
    return took


def case_signal_connecting(hosts):
    """Issue 21 item 3: SIGINT/SIGTERM while a host is still connecting."""
    a, b = hosts.addrs
    bad = hosts.unreachable
    key = install_key(hosts)
    _silent_listener(hosts, 1, 2200)
    write_config(hosts, f"Host mute\n    HostName {b}\n    Port 2200\nHost *\n    IdentityFile {key}\n")
    slow = ["--start-timeout", "30", "-i", hosts.key]
    # Static: TCP connect to an address with nothing behind it.
    t1 = _interrupt_while_connecting(hosts, slow + ["-np", "2", "-H", f"{a}:1,{bad}:1", "sleep", "30"],
                                     signal.SIGINT, 130, "static SIGINT, TCP connect")
    # Static: a server that accepts and never answers (SSH handshake).
    t2 = _interrupt_while_connecting(hosts, slow + ["-np", "2", "-H", f"{a}:1,mute:1", "sleep", "30"],
                                     signal.SIGTERM, 143, "static SIGTERM, SSH handshake")
    # Elastic: the discovery script lists a good host and the unreachable one.
    script = os.path.join(hosts.tmp, "discover.sh")
    with open(script, "w") as f:
        # Another address with nothing behind it: .9's failed ARP entry is
        # cached by now and would fail fast ("no route to host").
        f.write(f"#!/bin/sh\necho {a}:1\necho {hosts.subnet}.10:1\n")
    os.chmod(script, 0o755)
    t3 = _interrupt_while_connecting(hosts, slow + ["-np", "2", "--min-np", "2", "--host-discovery-script", script,
                                                    "sleep", "30"], signal.SIGINT, 130, "elastic SIGINT, TCP connect")
    with open(script, "w") as f:
        f.write(f"#!/bin/sh\necho {a}:1\necho mute:1\n")
    t4 = _interrupt_while_connecting(hosts, slow + ["-np", "2", "--min-np", "2", "--host-discovery-script", script,
                                                    "sleep", "30"], signal.SIGTERM, 143, "elastic SIGTERM, handshake")
    print(f"signal_connecting: ok (static {t1:.2f} s / {t2:.2f} s, elastic {t3:.2f} s / {t4:.2f} s)")


def case_unreachable_address(hosts):
    """Issue 21: the unreachable-host message names the address and port, as
    docs/ssh.md shows ("node2: ... (198.18.0.9:22)"), for an address and for
    an ssh_config alias."""
    bad = hosts.unreachable
    write_config(hosts, f"Host node2\n    HostName {bad}\n")
    for host in (bad, "node2"):
        p, took = run_hvdrun(hosts, ["-i", hosts.key, "-np", "1", "-H", f"{host}:1", "--start-timeout", "2", "true"])
        check(p.returncode == 3, f"{host}: exited {p.returncode}, want 3", p.stderr)
        errs = error_lines(p.stderr)
        check(len(errs) == 1, f"{host}: want one error line", p.stderr)
        want = rf"^hvdrun: error: {re.escape(host)}: (connection timed out after \d+ s|no route to host) " \
               rf"\({re.escape(bad)}:22\)$"
        check(re.match(want, errs[0]), f"{host}: the line does not match docs/ssh.md's form {want}", errs[0])
        check(took < 4.5, f"{host}: took {took:.1f} s with --start-timeout 2")
    # ssh_config ConnectTimeout: the address fails after 1 s, well before
    # --start-timeout (and before the ARP failure's "no route to host").
    write_config(hosts, f"Host node3\n    HostName {bad}\n    ConnectTimeout 1\n")
    p, took = run_hvdrun(hosts, ["-i", hosts.key, "-np", "1", "-H", "node3:1", "--start-timeout", "20", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"node3: exited {p.returncode}, want 3 and one error", p.stderr)
    check(re.match(rf"^hvdrun: error: node3: connection timed out after 1 s \({re.escape(bad)}:22\)$", errs[0]),
          "ConnectTimeout 1 did not end the connection after 1 s", errs[0])
    check(took < 3.5, f"node3: took {took:.1f} s with ConnectTimeout 1")
    # ConnectionAttempts 2: a second attempt a second after the first one
    # timed out, each bounded by ConnectTimeout; the line counts them.
    write_config(hosts, f"Host node4\n    HostName {bad}\n    ConnectTimeout 1\n    ConnectionAttempts 2\n")
    p, took = run_hvdrun(hosts, ["-i", hosts.key, "-np", "1", "-H", "node4:1", "--start-timeout", "20", "true"])
    errs4 = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs4) == 1, f"node4: exited {p.returncode}, want 3 and one error", p.stderr)
    check(re.match(rf"^hvdrun: error: node4: (connection timed out after 1 s|no route to host) "
                   rf"\({re.escape(bad)}:22; 2 attempts\)$", errs4[0]), "ConnectionAttempts 2: not two attempts",
          errs4[0])
    check(1.0 < took < 5.5, f"node4: took {took:.1f} s for 2 attempts (at most 1 s each), 1 s apart")
    print(f"unreachable_address: ok: {errs[0]}")


def case_bind_source(hosts):
    """ssh_config BindAddress and BindInterface: each host's sshd sees the
    connection come from the configured local address; a BindInterface
    that does not exist fails with one line naming file:line (exit 3)."""
    a, b = hosts.addrs
    bound, iface_addr = f"{hosts.subnet}.250", f"{hosts.subnet}.251"
    run_ip = netns_hosts.run
    run_ip("ip", "addr", "add", f"{bound}/24", "dev", hosts.bridge)  # a second address of the bridge
    hosts.add_dummy(iface_addr)
    write_config(hosts, (
        f"Host node-a\n    HostName {a}\n    BindAddress {bound}\n    BindInterface {hosts.dummy}\n"
        f"Host node-b\n    HostName {b}\n    BindInterface {hosts.dummy}\n"
        f"Host node-bad\n    HostName {a}\n    BindInterface hvdnosuch0\n"))
    p, took = run_hvdrun(hosts, ["-i", hosts.key, "-np", "2", "-H", "node-a:1,node-b:1", "true"])
    check(p.returncode == 0, f"exited {p.returncode}", p.stderr)
    logins = lambda i, addr: re.search(rf"Accepted publickey for root from {re.escape(addr)} port", hosts.sshd_log(i))
    check(logins(0, bound), f"node-a: the login did not come from the BindAddress {bound} (it wins over "
          "BindInterface)", hosts.sshd_log(0))
    check(logins(1, iface_addr), f"node-b: the login did not come from {hosts.dummy}'s {iface_addr}",
          hosts.sshd_log(1))
    p, _ = run_hvdrun(hosts, ["-i", hosts.key, "-np", "1", "-H", "node-bad:1", "true"])
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1, f"node-bad: exited {p.returncode}, want 3 and one error", p.stderr)
    check(re.match(r"^hvdrun: error: node-bad: ~/\.ssh/config:10: BindInterface hvdnosuch0: no such interface",
                   errs[0]), "node-bad: the line does not name file:line and the interface", errs[0])
    print(f"bind_source: ok ({took:.1f} s)")


def case_host_keys_and_algorithms(hosts):
    """A host with two host keys (ed25519 and ECDSA, as Debian's sshd has):
    the type the known_hosts files record is asked for first (as OpenSSH
    does), GlobalKnownHostsFile is read, and Ciphers / MACs / KexAlgorithms
    / HostKeyAlgorithms reach the handshake."""
    a = hosts.addrs[0]
    key = install_key(hosts)
    ecdsa = os.path.join(hosts.tmp, "host_key_ecdsa")
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-C", "ecdsa", "-f", ecdsa], check=True)
    # sshd offers both keys; it accepts only what the cases below ask for.
    hosts.restart_sshd(0, extra=f"HostKey {ecdsa}\nCiphers aes256-ctr,aes128-ctr\nMACs hmac-sha2-256,hmac-sha2-512\n"
                                "KexAlgorithms curve25519-sha256,diffie-hellman-group14-sha256\n")
    ed_pub = " ".join(hosts.host_pub_key().split()[:2])
    with open(ecdsa + ".pub") as f:
        ec_pub = " ".join(f.read().split()[:2])
    ec_print = subprocess.run(["ssh-keygen", "-lf", ecdsa + ".pub"], stdout=subprocess.PIPE, text=True,
                              check=True).stdout.split()[1]
    base = f"Host pod-a\n    HostName {a}\nHost *\n    IdentityFile {key}\n    StrictHostKeyChecking yes\n"
    run_args = ["-np", "1", "-H", "pod-a:1", "echo", "reached"]
    os.makedirs(os.path.dirname(hosts.known_hosts), exist_ok=True)

    # 1. Only the ed25519 key is recorded (what OpenSSH negotiates and
    # records): libssh2 alone would ask for ECDSA first and be refused.
    with open(hosts.known_hosts, "w") as f:
        f.write(f"{a} {ed_pub}\n")
    openssh = subprocess.run(["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                              "-o", f"UserKnownHostsFile={hosts.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                              "-i", key, a, "true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30, env=env_for(hosts), stdin=subprocess.DEVNULL)
    check(openssh.returncode == 0, f"OpenSSH itself refused the file: {openssh.returncode}", openssh.stderr)
    write_config(hosts, base)
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0 and "reached" in p.stdout, f"ed25519 recorded, strict: exited {p.returncode}", p.stderr)
    check(known_hosts(hosts) == f"{a} {ed_pub}\n", "known_hosts changed", known_hosts(hosts))
    # Only the ECDSA key recorded: that one is asked for.
    with open(hosts.known_hosts, "w") as f:
        f.write(f"{a} {ec_pub}\n")
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0, f"ecdsa recorded, strict: exited {p.returncode}", p.stderr)

    # 2. GlobalKnownHostsFile: read (a match there accepts), never written.
    site = os.path.join(hosts.tmp, "ssh_known_hosts")
    with open(site, "w") as f:
        f.write(f"# the site's file\n{a} {ed_pub}\n")
    os.unlink(hosts.known_hosts)
    write_config(hosts, base + f"    GlobalKnownHostsFile {site}\n")
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0, f"key in the global file: exited {p.returncode}", p.stderr)
    check(not os.path.exists(hosts.known_hosts), "a known_hosts file was written")
    check(open(site).read() == f"# the site's file\n{a} {ed_pub}\n", "the global file was modified")
    # Without it (the default /etc/ssh/ssh_known_hosts lacks the host): refused, naming the user file.
    write_config(hosts, base)
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 3 and "is not in" in p.stderr and hosts.known_hosts in p.stderr,
          f"no recorded key: exited {p.returncode}", p.stderr)
    # A different key in the global file: refused, naming its file and line.
    other = os.path.join(hosts.tmp, "other_ecdsa")
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-N", "", "-f", other], check=True)
    with open(other + ".pub") as f:
        other_pub = " ".join(f.read().split()[:2])
    with open(site, "w") as f:
        f.write(f"# the site's file\n{a} {other_pub}\n")
    write_config(hosts, base + f"    GlobalKnownHostsFile {site}\n")
    p, _ = run_hvdrun(hosts, run_args)
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1 and f"{site}:2" in errs[0] and ec_print in errs[0]
          and "differs" in errs[0], f"changed key in the global file: exited {p.returncode}", p.stderr)

    # 3. HostKeyAlgorithms as an explicit list wins over the recorded type
    # (as in OpenSSH): ed25519 is asked for although ECDSA is recorded.
    with open(hosts.known_hosts, "w") as f:
        f.write(f"{a} {ec_pub}\n")
    write_config(hosts, base.replace("yes", "accept-new") + "    GlobalKnownHostsFile none\n"
                 "    HostKeyAlgorithms ssh-ed25519\n")
    p, _ = run_hvdrun(hosts, run_args)
    check(p.returncode == 0 and "permanently added the ssh-ed25519 host key" in p.stderr,
          f"HostKeyAlgorithms ssh-ed25519: exited {p.returncode}", p.stderr)
    check(known_hosts(hosts) == f"{a} {ec_pub}\n{a} {ed_pub}\n", "the ed25519 key was not appended",
          known_hosts(hosts))

    # 4. Ciphers, MACs, KexAlgorithms reach libssh2: a list the server
    # refuses fails the handshake, one it accepts works.
    base_ok = base + "    GlobalKnownHostsFile none\n"
    for kw, refused, accepted in (("Ciphers", "aes192-ctr", "^aes256-ctr"),
                                  ("MACs", "hmac-sha1", "hmac-sha1,hmac-sha2-512"),
                                  ("KexAlgorithms", "ecdh-sha2-nistp256", "-ecdh-*")):
        write_config(hosts, base_ok + f"    {kw} {refused}\n")
        p, _ = run_hvdrun(hosts, run_args)
        errs = error_lines(p.stderr)
        check(p.returncode == 3 and len(errs) == 1 and "SSH handshake failed" in errs[0],
              f"{kw} {refused} (refused by sshd): exited {p.returncode}", p.stderr)
        write_config(hosts, base_ok + f"    {kw} {accepted}\n")
        p, _ = run_hvdrun(hosts, run_args)
        check(p.returncode == 0, f"{kw} {accepted}: exited {p.returncode}", p.stderr)

    # 5. Names libssh2 lacks: left out with one warning; nothing left: one error line.
    write_config(hosts, base_ok + "    Ciphers chacha20-poly1305@openssh.com,aes256-ctr\n")
    p, _ = run_hvdrun(hosts, ["-np", "2", "-H", "pod-a:2", "echo", "reached"])
    warn = [l for l in p.stderr.splitlines() if "not offered by hvdrun's SSH library" in l]
    check(p.returncode == 0 and len(warn) == 1 and "chacha20-poly1305@openssh.com" in warn[0]
          and "config:7" in warn[0], f"a name libssh2 lacks: exited {p.returncode}", p.stderr)
    write_config(hosts, base_ok + "    Ciphers chacha20-poly1305@openssh.com\n")
    p, _ = run_hvdrun(hosts, run_args)
    errs = error_lines(p.stderr)
    check(p.returncode == 3 and len(errs) == 1 and "offers none of these" in errs[0] and "aes256-ctr" in errs[0],
          f"no cipher left: exited {p.returncode}", p.stderr)
    print("host_keys_and_algorithms: ok")


CASES = {name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    def set_args(args):
        global ARGS
        ARGS = args

    return netns_hosts.run_cases_main(CASES, set_args)


if __name__ == "__main__":
    sys.exit(main())
