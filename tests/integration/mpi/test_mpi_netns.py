#!/usr/bin/env python3
"""MPI jobs across two network-namespace hosts with real sshd's, through
Open MPI's ssh launcher (issue 4: "a 2-host run through the network-namespace
sshd hosts with Open MPI's ssh launcher"). Ranks on both hosts form the job
through hvdrun's store, derive local/cross ranks and pass allreduce. Each
host has its own host name, as real machines do: Open MPI names its session
directories and shared-memory files by host name, and two of its daemons
sharing a name and a /tmp clashed (one vanished in about one job in ten).

Cases (one CTest entry each):
  driver  run_mpi_job (hvdrun --mpi's engine, through mpi_job_driver) with
          the ssh options given in --mpi-args;
  hvdrun  the real command line `hvdrun --mpi -np 2 -H a:1,b:1 -i KEY -p 2222`:
          hvdrun turns -i/-p into `-mca plm_rsh_args "-p 2222 -i KEY"` and
          Open MPI's ssh must get into both sshd's with exactly that (the
          sshd logs must show the key accepted on port 2222).
Each checks ranks, hosts and that no process is left in any namespace.
Needs root and `ip netns` (tests/integration/netns/netns_hosts.py); otherwise
it prints a SKIPPED line and exits 77.

    test_mpi_netns.py --driver mpi_job_driver --probe mpi_store_probe --allreduce mpi_allreduce_probe [driver]
    test_mpi_netns.py --hvdrun hvdrun --allreduce mpi_allreduce_probe hvdrun
"""
import argparse
import os
import re
import signal
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "netns"))
from netns_hosts import NetnsHosts, ns_pids, proc_cmdline, skip_unless_available  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from procs import processes_mentioning  # noqa: E402

SSH_PORT = 2222  # every test sshd listens on 22 and 2222


def untag(text):
    # Open MPI's --tag-output prefixes lines with "[jobid,rank]<stdout>:".
    return re.sub(r"^\[\d+,\d+\]<std(out|err)>:", "", text, flags=re.M)


def prepare(hosts):
    """known_hosts for both hosts and the environment every case runs in."""
    a, b = hosts.addrs
    os.makedirs(os.path.dirname(hosts.known_hosts), exist_ok=True)
    host_key = " ".join(hosts.host_pub_key().split()[:2])
    with open(hosts.known_hosts, "w") as f:
        f.write(f"{a} {host_key}\n{b} {host_key}\n[{a}]:{SSH_PORT} {host_key}\n[{b}]:{SSH_PORT} {host_key}\n")
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HVDRUN_SECRET",
                 "HVD_MASTER_ADDR", "HVD_MASTER_PORT", "HVD_MASTER_SECRET"):
        env.pop(name, None)
    env.update(HOME=hosts.home, USER="root", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none")
    subnet = a.rsplit(".", 1)[0] + ".0/24"
    # Open MPI's daemons call back to mpirun over the test subnet only.
    wireup = f"-mca plm_rsh_no_tree_spawn 1 -mca oob_tcp_if_include {subnet} -mca btl_tcp_if_include {subnet}"
    return env, wireup


def run(argv, env, timeout=50, hosts=None):
    """Runs argv; past the timeout it is sent SIGINT (hvdrun's Ctrl-C path
    tears the job down) and then SIGKILL, and the output so far is kept so
    that a hang shows where it hung."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if hosts is not None:
            print(f"timed out after {timeout} s; processes then:", flush=True)
            print(subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:20,args", "--forest"], text=True,
                                 stdout=subprocess.PIPE).stdout[-6000:], flush=True)
            for i, ns in enumerate(hosts.namespaces):
                print(f"namespace {i}: {[(q, proc_cmdline(q)[:200]) for q in ns_pids(ns)]}", flush=True)
            print(subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:20,args"], text=True,
                                 stdout=subprocess.PIPE).stdout.count("\n"), "processes; ssh ones:", flush=True)
            for line in subprocess.run(["ps", "-eo", "pid,ppid,stat,wchan:20,args"], text=True,
                                       stdout=subprocess.PIPE).stdout.splitlines():
                if "ssh" in line:
                    print("  " + line[:300], flush=True)
            hosts.print_sshd_logs(file=sys.stdout)
        p.send_signal(signal.SIGINT)
        try:
            out, err = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        err = f"{err}\n(timed out after {timeout} s)"
        return subprocess.CompletedProcess(argv, 124, out, err)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def case_driver(hosts, args):
    a, b = hosts.addrs
    env, wireup = prepare(hosts)
    rsh = (f"-i {hosts.key} -o UserKnownHostsFile={hosts.known_hosts} -o BatchMode=yes "
           f"-o StrictHostKeyChecking=yes")
    mpi_args = f"-mca plm_rsh_args '{rsh}' {wireup}"
    failures = []
    for program, pattern in (
            (args.probe, r"rank {r} size 2 local 0/1 cross {r}/2 mode hvdrun"),
            (args.allreduce, r"rank {r} of 2: local 0/1 cross {r}/2")):
        argv = [args.driver, "-np", "2", "-H", f"{a}:1,{b}:1", "--mpi-args", mpi_args, "--", program]
        p = run(argv, env)
        out = untag(p.stdout)
        ok = p.returncode == 0 and all(re.search(pattern.format(r=r), out) for r in range(2))
        print(f"{os.path.basename(program)}: {'ok' if ok else 'FAILED'} (exit {p.returncode})")
        if not ok:
            failures.append(f"{program}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return failures


def sshd_refusals(hosts):
    """A line per host whose sshd did not accept the key on SSH_PORT (the
    -i/-p that hvdrun passed on to the MPI's ssh)."""
    out = []
    for i, addr in enumerate(hosts.addrs):
        log = hosts.sshd_log(i)
        if not re.search(rf"on {re.escape(addr)} port {SSH_PORT}\b", log) or "Accepted publickey for root" not in log:
            out.append(f"sshd on {addr} did not accept the key on port {SSH_PORT}:\n{log[-2000:]}")
    return out


def case_hvdrun(hosts, args):
    """The user's command line. ssh itself reads known_hosts from the
    passwd home directory, not $HOME, so an `ssh` first on PATH adds the
    test's known_hosts file (and nothing else: the key and port are
    hvdrun's -i and -p, passed on by Open MPI)."""
    a, b = hosts.addrs
    env, wireup = prepare(hosts)
    bindir = os.path.join(hosts.tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    wrapper = os.path.join(bindir, "ssh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n"
                f"exec /usr/bin/ssh -o UserKnownHostsFile={hosts.known_hosts} -o StrictHostKeyChecking=yes "
                "-o BatchMode=yes \"$@\"\n")
    os.chmod(wrapper, stat.S_IRWXU)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    argv = [args.hvdrun, "--mpi", "-np", "2", "-H", f"{a}:1,{b}:1", "-i", hosts.key, "-p", str(SSH_PORT),
            "--mpi-args", wireup, args.allreduce]
    failures = []
    dry = run(argv[:1] + ["--dry-run"] + argv[1:], env, timeout=20)
    want = f"-mca plm_rsh_args \"-p {SSH_PORT} -i {hosts.key}\""
    if dry.returncode != 0 or want.replace('"', "") not in dry.stdout.replace('"', "").replace("'", ""):
        failures.append(f"--dry-run does not pass -i/-p as plm_rsh_args ({want}):\n{dry.stdout}\n{dry.stderr}")
    p = run(argv, env, hosts=hosts)
    out = untag(p.stdout)
    for r, addr in enumerate((a, b)):
        for pattern in (rf"rank {r} of 2: allreduce ok", rf"rank {r} of 2: local 0/1 cross {r}/2",
                        rf"rank {r} of 2: address {re.escape(addr)}\b"):
            if not re.search(pattern, out):
                failures.append(f"missing '{pattern}'")
    if p.returncode != 0:
        failures.append(f"hvdrun --mpi exited {p.returncode}")
    failures += sshd_refusals(hosts)
    print(f"hvdrun --mpi: {'ok' if not failures else 'FAILED'} (exit {p.returncode})")
    for line in out.splitlines():
        if re.match(r"rank \d of 2: (address|local)", line):
            print("  " + line)
    if failures:
        failures.append(f"command: {argv}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return failures


def case_mpich(hosts, args):
    """The same command line with MPICH's mpiexec (Hydra) as `mpirun`:
    hvdrun turns -i/-p into `-bootstrap ssh -bootstrap-exec-args "-p 2222
    -i KEY"`, Hydra's ssh starts its proxy on both hosts with exactly that,
    and the ranks form the job from PMI_* through hvdrun's store."""
    a, b = hosts.addrs
    env, _ = prepare(hosts)
    bindir = os.path.join(hosts.tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    with open(os.path.join(bindir, "ssh"), "w") as f:
        f.write("#!/bin/sh\n"
                f"exec /usr/bin/ssh -o UserKnownHostsFile={hosts.known_hosts} -o StrictHostKeyChecking=yes "
                "-o BatchMode=yes \"$@\"\n")
    with open(os.path.join(bindir, "mpirun"), "w") as f:
        f.write("#!/bin/sh\nexec /usr/bin/mpiexec.hydra \"$@\"\n")  # Hydra finds its proxy beside this path
    for name in ("ssh", "mpirun"):
        os.chmod(os.path.join(bindir, name), stat.S_IRWXU)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    out_dir = os.path.join(hosts.tmp, "out")
    argv = [args.hvdrun, "--mpi", "-np", "2", "-H", f"{a}:1,{b}:1", "-i", hosts.key, "-p", str(SSH_PORT),
            "--ssh-strict-host-key-checking", "--output-filename", out_dir, args.allreduce]
    failures = []
    p = run(argv, env, hosts=hosts)
    if p.returncode != 0:
        failures.append(f"hvdrun --mpi (MPICH) exited {p.returncode}")
    for r, addr in enumerate((a, b)):
        try:
            with open(os.path.join(out_dir, f"rank.{r}", "stdout")) as f:
                text = re.sub(r"^\[\d+\] ", "", f.read(), flags=re.M)
        except OSError as e:
            failures.append(f"rank {r}'s output file: {e}")
            continue
        for pattern in (rf"rank {r} of 2: allreduce ok", rf"rank {r} of 2: local 0/1 cross {r}/2",
                        rf"rank {r} of 2: address {re.escape(addr)}\b"):
            if not re.search(pattern, text):
                failures.append(f"rank {r}: missing '{pattern}' in {text!r}")
    failures += sshd_refusals(hosts)
    print(f"hvdrun --mpi with MPICH: {'ok' if not failures else 'FAILED'} (exit {p.returncode})")
    if failures:
        failures.append(f"command: {argv}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return failures


CASES = {"driver": case_driver, "hvdrun": case_hvdrun, "mpich": case_mpich}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver")
    ap.add_argument("--probe")
    ap.add_argument("--allreduce", required=True)
    ap.add_argument("--hvdrun")
    ap.add_argument("case", nargs="?", default="driver", choices=sorted(CASES))
    args = ap.parse_args()
    needed = {"driver": ("driver", "probe"), "hvdrun": ("hvdrun",), "mpich": ("hvdrun",)}[args.case]
    missing = [f"--{n}" for n in needed if not getattr(args, n)]
    if missing:
        ap.error(f"case {args.case} needs {' '.join(missing)}")
    skip_unless_available()
    if args.case == "mpich" and not os.access("/usr/bin/mpiexec.hydra", os.X_OK):
        print("SKIPPED: no MPICH (/usr/bin/mpiexec.hydra); scripts/setup.sh installs mpich")
        return 77
    with NetnsHosts(count=2, own_hostnames=True) as hosts:
        failures = CASES[args.case](hosts, args)
        left = hosts.wait_no_leftovers(5)
        if left:
            failures.append(f"processes left in the namespaces: {left}")
        # and none in this namespace (mpirun, ssh: their argv names the key)
        daemons = {p.pid for p in hosts.sshd}
        stray = [(pid, cmd) for pid, cmd in processes_mentioning(hosts.tmp) if pid not in daemons]
        if stray:
            failures.append(f"processes left behind: {stray}")
    if failures:
        print("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
