#!/usr/bin/env python3
"""Multi-machine platform jobs on network-namespace hosts: the harness.

Every "machine" of a platform job is one network namespace of
tests/integration/netns/netns_hosts.py (its own addresses, loopback,
abstract Unix sockets and a real sshd on port 22). A machine is described by
the files and variables its platform gives it; the harness runs the *same*
hvdrun command line on every machine at once, each inside its namespace, and
collects each machine's exit status and output.

    from platform_e2e import Machine, PlatformCluster

    machines = [Machine("algo-1", env={"SAGEMAKER_BASE_DIR": "{dir}/ml"},
                        files={"ml/input/config/resourceconfig.json": {"current_host": "algo-1", ...}}),
                Machine("algo-2", ...)]
    with PlatformCluster(machines, hvdrun=HVDRUN) as cluster:
        results = cluster.run_all(["-np", "4", "sh", "-c", "..."], timeout=40)
        results[0].code, results[0].stdout, results[1].stderr, results[1].took
        cluster.check_no_leftovers()

API
  Machine(name, env=None, files=None, hostname=None)
      name   the machine's platform host name (resolves to its namespace's
             address on every machine: each hvdrun sees a test /etc/hosts)
      env    the platform's variables on that machine; "{dir}" in a value is
             replaced by the machine's own directory, "{addr}" by its address
             (nothing else: JSON values keep their braces)
      files  path relative to the machine's directory -> content (str, or a
             dict/list written as JSON)
      hostname  when set, hvdrun runs in a UTS namespace of its own with
             this host name (platforms that name this machine by
             gethostname()); by default every machine shares this one's
  PlatformCluster(machines, hvdrun, common_env=None)   (a context manager)
      .hosts           the NetnsHosts (addrs, namespaces, key, home, tmp)
      .dirs[i]         machine i's directory
      .argv(args)      [hvdrun, "-i", key] + args: the shared command line
      .start(i, args, env=None) -> Popen of hvdrun on machine i
      .run_all(args, timeout=60, only=None, env=None) -> [Result]
            starts `hvdrun -i KEY args` on every machine (or the indices in
            `only`) at once and waits for all; Result: code, stdout, stderr,
            took (seconds), machine (name); None for machines not run
      .collect(procs, timeout) -> [Result]   for processes from start()
      .wait_processes(i, pattern, count, timeout)  processes of machine i
            whose command line matches `pattern`
      .check_no_leftovers(timeout=5)  raises AssertionError naming what is
            left in any namespace (workers, agents, followers)
      .subnet          "198.18.X.0/24"
  Extra variables for every machine: common_env, then run_all/start's env.
  The harness sets HOME (known_hosts with every machine's name and address,
  no ssh-agent), USER=root, an `ssh` on PATH for Open MPI that uses the test
  known_hosts, and Open MPI's variables to stay on the test subnet.

Needs root and `ip netns` (else SKIPPED and exit 77: skip_unless_available).
"""
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
from netns_hosts import NetnsHosts, skip_unless_available  # noqa: E402,F401

DROPPED_PREFIXES = ("SLURM_", "SLURMD_", "SM_", "SAGEMAKER_", "HVDRUN_", "HOROVOD_", "HVD_", "OMPI_", "PMIX_",
                    "PMI_", "CLUSTER_SPEC", "TF_CONFIG", "LSB_", "LSF_", "OCI__", "TRAINING_JOB_NAME")


class Machine:
    def __init__(self, name, env=None, files=None, hostname=None):
        self.name = name
        self.env = dict(env or {})
        self.files = dict(files or {})
        self.hostname = hostname


class Result:
    def __init__(self, machine, code, stdout, stderr, took):
        self.machine, self.code, self.stdout, self.stderr, self.took = machine, code, stdout, stderr, took

    def __repr__(self):
        return (f"--- {self.machine}: exit {self.code} after {self.took:.1f} s\n"
                f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}")


class PlatformCluster:
    def __init__(self, machines, hvdrun, common_env=None):
        self.machines = machines
        self.hvdrun = hvdrun
        self.common_env = dict(common_env or {})
        self.hosts = NetnsHosts(count=len(machines))
        self.dirs = []

    # ---- lifecycle
    def __enter__(self):
        self.hosts.__enter__()
        try:
            self._prepare()
        except BaseException:
            self.hosts.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        self.hosts.__exit__(*exc)
        return False

    @property
    def subnet(self):
        return f"{self.hosts.subnet}.0/24"

    def _prepare(self):
        h = self.hosts
        tmp = h.tmp
        # Name resolution: every machine's hvdrun sees this /etc/hosts.
        self.etc_hosts = os.path.join(tmp, "etc-hosts")
        with open("/etc/hosts") as f:
            base = f.read().rstrip("\n")
        with open(self.etc_hosts, "w") as f:
            f.write(base + "\n# platform e2e machines\n")
            for m, addr in zip(self.machines, h.addrs):
                f.write(f"{addr} {m.name}\n")
        # known_hosts for names and addresses; ssh for Open MPI.
        os.makedirs(os.path.dirname(h.known_hosts), exist_ok=True)
        key = " ".join(h.host_pub_key().split()[:2])
        with open(h.known_hosts, "w") as f:
            for m, addr in zip(self.machines, h.addrs):
                f.write(f"{m.name} {key}\n{addr} {key}\n")
        self.bindir = os.path.join(tmp, "bin")
        os.makedirs(self.bindir, exist_ok=True)
        wrapper = os.path.join(self.bindir, "ssh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\n"
                    f"exec /usr/bin/ssh -o UserKnownHostsFile={h.known_hosts} -o StrictHostKeyChecking=yes "
                    f"-o BatchMode=yes -i {h.key} \"$@\"\n")
        os.chmod(wrapper, stat.S_IRWXU)
        for i, m in enumerate(self.machines):
            d = os.path.join(tmp, f"machine-{i}-{m.name}")
            os.makedirs(d)
            self.dirs.append(d)
            for rel, content in m.files.items():
                path = os.path.join(d, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(content if isinstance(content, str) else json.dumps(content))

    # ---- running
    def env_for(self, i, extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(DROPPED_PREFIXES)}
        env.pop("SSH_AUTH_SOCK", None)
        env["HVDRUN_LOG_LEVEL"] = "info"  # the tests read the leader's and followers' state lines
        # The machines carry a platform's variables without the platform: no
        # Slurm answers srun here (the real-Slurm tests cover --launcher srun).
        env["HVDRUN_LAUNCHER"] = "ssh"
        subnet = self.subnet
        env.update(HOME=self.hosts.home, USER="root", PATH=f"{self.bindir}:{env.get('PATH', '/usr/bin:/bin')}",
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_oob_tcp_if_include=subnet, OMPI_MCA_btl_tcp_if_include=subnet,
                   OMPI_MCA_plm_rsh_no_tree_spawn="1", OMPI_MCA_btl_vader_single_copy_mechanism="none")
        env.update(self.common_env)
        for k, v in self.machines[i].env.items():
            env[k] = v.replace("{dir}", self.dirs[i]).replace("{addr}", self.hosts.addrs[i])
        env.update(extra or {})
        return env

    def argv(self, args):
        return [self.hvdrun, "-i", self.hosts.key] + list(args)

    def start(self, i, args, env=None):
        """hvdrun on machine i, in its namespace and a private mount namespace
        where the test /etc/hosts names every machine. The Popen's pid is
        hvdrun's own (every wrapper execs)."""
        hostname = self.machines[i].hostname
        wrap = ["ip", "netns", "exec", self.hosts.namespaces[i], "unshare", "--mount", "--propagation", "private"]
        if hostname:
            wrap += ["--uts", "sh", "-c", f'hostname {hostname} && mount --bind "$0" /etc/hosts && exec "$@"']
        else:
            wrap += ["sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"']
        wrap.append(self.etc_hosts)
        p = subprocess.Popen(wrap + self.argv(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env_for(i, env))
        p.started_at = time.monotonic()
        p.machine = self.machines[i].name
        return p

    def collect(self, procs, timeout=60):
        """Waits for every process (None entries stay None); one that runs
        past `timeout` is killed and reported with code None."""
        end = time.monotonic() + timeout
        results = []
        for p in procs:
            if p is None:
                results.append(None)
                continue
            try:
                out, err = p.communicate(timeout=max(0.1, end - time.monotonic()))
                code = p.returncode
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                code = None
            results.append(Result(p.machine, code, out, err, time.monotonic() - p.started_at))
        return results

    def run_all(self, args, timeout=60, only=None, env=None):
        procs = [self.start(i, args, env) if only is None or i in only else None for i in range(len(self.machines))]
        return self.collect(procs, timeout)

    def wait_processes(self, i, pattern, count=1, timeout=15):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            found = [c for _, c in self.hosts.processes(i) if re.search(pattern, c)]
            if len(found) >= count:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{self.machines[i].name}: no {count} processes matching {pattern!r} within "
                             f"{timeout} s: {self.hosts.processes(i)}")

    def check_no_leftovers(self, timeout=5):
        left = self.hosts.wait_no_leftovers(timeout)
        if left:
            raise AssertionError(f"processes left in the machines' namespaces after {timeout} s: {left}")
