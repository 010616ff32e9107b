#!/usr/bin/env python3
"""A real Slurm cluster on network-namespace nodes, for the tests.

    with SlurmCluster(nodes=3, cpus=2) as c:
        p = c.run(["sbatch", "--wait", "-N3", "job.sh"])   # what a user types
        c.leftovers()                                      # job processes left

Layout (on top of tests/integration/netns/netns_hosts.py, names carry this
process's pid so concurrent runs never collide):
  * the controller machine: a namespace of its own, hvdt<pid>z at
    198.18.X.10, host name hvdctl (SlurmctldHost=hvdctl(198.18.X.10)),
    running slurmctld and munged (its own key, socket, seed, pid and log
    files in the temporary directory; the socket is a file that every
    namespace reaches);
  * nodes node1..nodeN: the netns hosts (198.18.X.2, .3, ...), each running
    one slurmd in the node's network namespace, a UTS namespace with the
    node's name and a mount namespace where the test /etc/hosts names every
    node (no name ever goes to DNS); NodeName/NodeAddr in the generated
    slurm.conf. With ssh=True (the default: hvdrun starts workers on other
    nodes over SSH today) every node also runs a real sshd that accepts
    hosts.key, and HOME/.ssh/config points ssh and hvdrun at that key and
    the test known_hosts; with ssh=False no node runs an sshd;
  * the "login node" is this namespace: run()/popen() start a command here
    in a mount namespace that sees the test /etc/hosts, in the shared
    directory self.workdir, with SLURM_CONF, HOME, USER=root and PATH
    starting with self.bindir (where `python` is this interpreter), then
    path_prepend; no SLURM_* variable of the caller leaks in. Jobs inherit
    that environment (sbatch/salloc/srun export it).
  * slurm.conf: select/cons_tres with CR_CPU (cpus CPUs per node),
    proctrack/linuxproc and task/none (no cgroups: the nodes share one
    kernel), accounting_storage/none and jobcomp/filetxt (so `sacct
    --completion` shows finished jobs' states and exit codes without
    slurmdbd), KillWait (the grace between SIGTERM and SIGKILL on scancel
    or a time limit), SlurmdTimeout (a node whose slurmd stops is DOWN after
    it), ReturnToService=2.

Teardown (context exit, atexit, SIGTERM/SIGINT/SIGHUP) stops every client
the cluster started, slurmd's, slurmctld and munged, kills whatever is left
in the namespaces (slurmstepd's and job processes included), deletes the
namespaces and the bridge and removes the temporary directory
(HVD_NETNS_KEEP_TMP=1 keeps it, for the logs).

CLI:  slurm_cluster.py [--nodes N] [--cpus C] [--no-ssh] [-- CMD ARGS...]
runs CMD (default: an interactive shell) on the login node of a fresh
cluster and tears it down when CMD exits; exit 77 with one SKIPPED line when
root, ip netns, munged or the Slurm daemons are missing.
"""
import atexit
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
import netns_hosts  # noqa: E402
from netns_hosts import NetnsHosts, run  # noqa: E402

SKIP_CODE = 77
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "salloc", "srun", "sacct", "scontrol", "scancel",
           "sinfo")


def missing():
    """What this machine lacks for a cluster ("" when nothing)."""
    if not netns_hosts.available():
        return "root and ip netns"
    for tool in DAEMONS:
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} (Debian packages slurm-wlm and munge: scripts/setup.sh)"
    return ""


def skip_unless_available():
    what = missing()
    if what:
        print(f"SKIPPED: a Slurm cluster needs {what}", flush=True)
        sys.exit(SKIP_CODE)


def _die_with_parent():
    """In a client's child before exec: SIGKILL when the test process dies
    (even by SIGKILL, e.g. a CTest timeout), so no sbatch/srun/salloc
    outlives it."""
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def which(tool):
    return shutil.which(tool) or f"/usr/sbin/{tool}"


class SlurmCluster:
    CTL_ADDR_HOST = 10  # 198.18.X.10

    def __init__(self, nodes=3, cpus=2, ssh=True, kill_wait=5, slurmd_timeout=6, path_prepend=(), env=None):
        self.names = [f"node{i + 1}" for i in range(nodes)]
        self.cpus = cpus
        self.ssh = ssh
        self.kill_wait = kill_wait
        self.slurmd_timeout = slurmd_timeout
        self.path_prepend = list(path_prepend)
        self.extra_env = dict(env or {})
        self.hosts = NetnsHosts(count=nodes, hostnames=self.names, sshd=ssh)
        self.ctl_ns = f"hvdt{self.hosts.pid}z"
        self.tmp = None
        self.munged = None
        self.slurmctld = None
        self.slurmd = [None] * nodes
        self.clients = []
        self._up = False

    # ---- paths and addresses
    @property
    def addrs(self):
        return self.hosts.addrs

    @property
    def ctl_addr(self):
        return f"{self.hosts.subnet}.{self.CTL_ADDR_HOST}"

    @property
    def conf(self):
        return os.path.join(self.tmp, "slurm.conf")

    @property
    def jobcomp(self):
        return os.path.join(self.tmp, "jobcomp.txt")

    def log(self, name):
        return os.path.join(self.tmp, "log", f"{name}.log")

    def log_tail(self, name, n=3000):
        try:
            with open(self.log(name), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def logs(self, n=2500):
        """The end of every daemon's log, for a failure report."""
        out = []
        for name in ["slurmctld"] + [f"slurmd-{n_}" for n_ in self.names]:
            out.append(f"--- {name}.log (tail):\n{self.log_tail(name, n)}")
        return "\n".join(out)

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
        self._up = True
        self.hosts.up()  # registers its own atexit/signal teardown; ours runs first
        atexit.register(self.down)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.tmp = os.path.join(self.hosts.tmp, "slurm")
        for d in ("log", "ctld", "munge", "spool"):
            os.makedirs(os.path.join(self.tmp, d), mode=0o700)
        # The users' shared directory (every node sees this file system) and
        # their bin/, first on PATH: `python` is this interpreter.
        self.workdir = os.path.join(self.hosts.tmp, "work")
        self.bindir = os.path.join(self.workdir, "bin")
        os.makedirs(self.bindir)
        os.symlink(sys.executable, os.path.join(self.bindir, "python"))
        self._ssh_setup()
        self._make_ctl_namespace()
        self._start_munged()
        self._write_conf()
        self._start_slurmctld()
        for i in range(len(self.names)):
            self.start_slurmd(i)
        self.wait_nodes_idle(30)
        return self

    def _ssh_setup(self):
        """~/.ssh of the test HOME: the client key for every node, the
        nodes' host key under their names and addresses."""
        h = self.hosts
        ssh_dir = os.path.join(h.home, ".ssh")
        os.makedirs(ssh_dir, mode=0o700, exist_ok=True)
        if not self.ssh:
            return
        key = " ".join(h.host_pub_key().split()[:2])
        with open(h.known_hosts, "w") as f:
            for name, addr in zip(self.names, self.addrs):
                f.write(f"{name} {key}\n{addr} {key}\n")
        with open(os.path.join(ssh_dir, "config"), "w") as f:
            f.write(f"Host *\n  IdentityFile {h.key}\n  UserKnownHostsFile {h.known_hosts}\n"
                    "  StrictHostKeyChecking yes\n  BatchMode yes\n")

    def _start_munged(self):
        m = os.path.join(self.tmp, "munge")
        self.munge_socket = os.path.join(m, "munge.socket")
        key = os.path.join(m, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munged = subprocess.Popen(
            self._ctl_wrap() + [which("munged"), "-F", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
             f"--pid-file={m}/munged.pid", f"--seed-file={m}/munged.seed", f"--log-file={self.log('munged')}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(self.log("munged-stderr"), "w"))
        self._wait(lambda: os.path.exists(self.munge_socket), 10, "munged's socket", "munged")

    def _write_conf(self):
        t = self.tmp
        nodes = "".join(f"NodeName={n} NodeAddr={a} CPUs={self.cpus} State=UNKNOWN\n"
                        for n, a in zip(self.names, self.addrs))
        with open(self.conf, "w") as f:
            f.write(f"""# generated by tests/integration/slurm/slurm_cluster.py
ClusterName=hvd{self.hosts.pid}
SlurmctldHost=hvdctl({self.ctl_addr})
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={t}/ctld
SlurmdSpoolDir={t}/spool/%n
SlurmctldPidFile={t}/slurmctld.pid
SlurmdPidFile={t}/spool/slurmd-%n.pid
SlurmctldLogFile={self.log('slurmctld')}
SlurmdLogFile={t}/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
PlugStackConfig={t}/plugstack.conf
ReturnToService=2
SlurmdTimeout={self.slurmd_timeout}
SlurmctldTimeout=10
MessageTimeout=5
KillWait={self.kill_wait}
OverTimeLimit=0
InactiveLimit=0
MinJobAge=600
UnkillableStepTimeout=30
{nodes}PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
        open(os.path.join(t, "plugstack.conf"), "w").close()
        # slurmd 22.05 initializes a cgroup plugin whatever the other plugins
        # are; v1 named outright needs no cgroup file system (autodetection
        # fails in the nodes' fresh /sys).
        with open(os.path.join(t, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nCgroupAutomount=no\n")
        for n in self.names:
            os.makedirs(os.path.join(t, "spool", n), mode=0o700)

    def _make_ctl_namespace(self):
        """The controller's machine: namespace hvdt<pid>z on the bridge at
        198.18.X.10, named hvdctl in the test /etc/hosts. munged runs there
        too (its socket is a file every namespace reaches), so that a run
        killed with SIGKILL leaves nothing that the next run's cleanup of
        stale namespaces does not end."""
        h = self.hosts
        ns, outer, inner = self.ctl_ns, f"hv{h.pid}zr", f"hv{h.pid}zn"
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        run("ip", "link", "set", inner, "netns", ns)
        run("ip", "link", "set", outer, "master", h.bridge)
        run("ip", "link", "set", outer, "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        run("ip", "netns", "exec", ns, "ip", "link", "set", inner, "name", "eth0")
        run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.ctl_addr}/24", "dev", "eth0")
        run("ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up")
        with open(h.etc_hosts, "a") as f:  # in place: the bind mounts see it
            f.write(f"{self.ctl_addr} hvdctl\n")

    def _ctl_wrap(self):
        return ["ip", "netns", "exec", self.ctl_ns, "unshare", "--mount", "--uts", "sh", "-c",
                'hostname hvdctl && mount --bind "$0" /etc/hosts && exec "$@"', self.hosts.etc_hosts]

    def _start_slurmctld(self):
        self.slurmctld = subprocess.Popen(self._ctl_wrap() + [which("slurmctld"), "-D", "-i", "-f", self.conf],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=open(self.log("slurmctld-stderr"), "w"))
        self._wait(lambda: self.run(["scontrol", "ping"], timeout=10).stdout.count("UP") > 0, 20,
                   "slurmctld answering `scontrol ping`", "slurmctld")

    def start_slurmd(self, i):
        """Starts (or restarts) node i's slurmd."""
        name = self.names[i]
        self.slurmd[i] = subprocess.Popen(
            self.hosts.host_wrap(i) + [which("slurmd"), "-D", "-f", self.conf],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.log(f"slurmd-{name}-stderr"), "w"), env=self._daemon_env())

    def stop_slurmd(self, i, sig=signal.SIGKILL):
        """Stops node i's slurmd (SIGKILL: as if it crashed); the node's
        running job processes stay."""
        p = self.slurmd[i]
        if p and p.poll() is None:
            p.send_signal(sig)
            p.wait(timeout=10)

    def _daemon_env(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "HVD", "HOROVOD"))}
        env.pop("SSH_AUTH_SOCK", None)
        env["SLURM_CONF"] = self.conf
        return env

    def node_states(self):
        """{node: state} from sinfo (e.g. 'idle', 'alloc', 'down*')."""
        p = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
        out = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                out[parts[0]] = parts[1]
        return out

    def wait_nodes_idle(self, timeout):
        self._wait(lambda: all(s == "idle" for s in self.node_states().values())
                   and len(self.node_states()) == len(self.names),
                   timeout, "every node idle in sinfo", "slurmctld")

    def _wait(self, cond, timeout, what, log):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if cond():
                    return
            except (subprocess.TimeoutExpired, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{what}: not within {timeout} s\n{self.logs()}\n"
                           f"--- {log} stderr:\n{self.log_tail(log + '-stderr')}")

    # ---- the login node
    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "SBATCH_", "SALLOC_", "SRUN_"))}
        env.pop("SSH_AUTH_SOCK", None)
        env.pop("HVDRUN_REMOTE_AGENT", None)
        env.update(SLURM_CONF=self.conf, HOME=self.hosts.home, USER="root")
        env["PATH"] = ":".join([self.bindir] + self.path_prepend + [env.get("PATH", "/usr/bin:/bin")])
        env.update(self.extra_env)
        env.update(extra)
        return env

    def popen(self, argv, env=None, cwd=None, **kw):
        """argv on the login node (this namespace, the test /etc/hosts), in
        `cwd` (default: self.workdir); stdout/stderr piped (text) unless
        given. The Popen's pid is argv's."""
        cwd = cwd or self.workdir
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        p = subprocess.Popen(self.hosts.login_wrap() + list(argv), stdin=subprocess.DEVNULL, text=True,
                             env=self.env(**(env or {})), cwd=cwd, preexec_fn=_die_with_parent, **kw)
        p.started_at = time.monotonic()
        self.clients.append(p)
        return p

    def run(self, argv, timeout=60, env=None, cwd=None):
        """argv on the login node; returns the CompletedProcess (text). A run
        past `timeout` is killed (SIGTERM, then SIGKILL) and raises
        subprocess.TimeoutExpired."""
        p = self.popen(argv, env=env, cwd=cwd)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._stop_client(p)
            raise
        return subprocess.CompletedProcess(argv, p.returncode, out, err)

    def _stop_client(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()

    # ---- what tests look at
    FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                    "BOOT_FAIL", "DEADLINE")

    def job_records(self, job_id):
        """The job's lines in `sacct --completion`, oldest first, as dicts
        (jobid, state, exitcode, nodelist, elapsed). jobcomp/filetxt writes a
        line when the job ends, and one (state RESIZING) whenever it shrinks,
        e.g. when a node of a --no-kill job fails."""
        fields = "jobid,state,exitcode,nodelist,elapsed"
        p = self.run(["sacct", "--completion", "-n", "-P", "-j", str(job_id), "-o", fields], timeout=15)
        out = []
        for line in p.stdout.splitlines():
            parts = line.split("|")
            if parts and parts[0] == str(job_id):
                out.append(dict(zip(fields.split(","), parts)))
        return out

    def job_record(self, job_id):
        """The job's final line in `sacct --completion` (its state one of
        FINAL_STATES, e.g. "CANCELLED by 0"), or None while it runs."""
        for rec in reversed(self.job_records(job_id)):
            if rec["state"].split()[0] in self.FINAL_STATES:
                return rec
        return None

    def wait_job_record(self, job_id, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rec = self.job_record(job_id)
            if rec:
                return rec
            time.sleep(0.3)
        return None

    def job_state(self, job_id):
        """squeue's state of a job still known to slurmctld ('PENDING',
        'RUNNING', 'COMPLETING', ...), else None."""
        p = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], timeout=15)
        return p.stdout.strip() or None

    def processes(self, i):
        """(pid, cmdline) of the job-side processes in node i: everything but
        the node's slurmd and sshd (daemon and per-connection processes)."""
        return self.hosts.processes(i, keep={p.pid for p in (self.slurmd[i],) if p})

    def leftovers(self):
        return [(self.names[i], pid, cmd) for i in range(len(self.names)) for pid, cmd in self.processes(i)]

    def wait_no_leftovers(self, timeout):
        return netns_hosts.wait_until_empty(self.leftovers, timeout)

    # ---- teardown
    def _on_signal(self, signum, frame):
        self.down()
        sys.exit(128 + signum)

    def down(self):
        if not self._up:
            return
        self._up = False
        for p in self.clients:
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for p in self.slurmd + [self.slurmctld, self.munged]:
            if p and p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        if os.path.exists(f"/var/run/netns/{self.ctl_ns}"):
            netns_hosts._kill_namespace(self.ctl_ns)
        self.hosts.down()


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description="a Slurm cluster on network-namespace nodes; runs CMD on its login node")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs (task slots) per node")
    ap.add_argument("--no-ssh", action="store_true", help="no sshd on the nodes")
    ap.add_argument("cmd", nargs="*", help="command to run (default: $SHELL)")
    args = ap.parse_args(argv[1:])
    skip_unless_available()
    with SlurmCluster(nodes=args.nodes, cpus=args.cpus, ssh=not args.no_ssh) as c:
        print(f"nodes: {', '.join(f'{n}={a}' for n, a in zip(c.names, c.addrs))}; slurmctld: {c.ctl_addr}; "
              f"SLURM_CONF={c.conf}", flush=True)
        cmd = args.cmd or [os.environ.get("SHELL", "/bin/sh")]
        p = subprocess.Popen(c.hosts.login_wrap() + cmd, env=c.env())
        return p.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
