#!/usr/bin/env python3
"""run_mpi_job (hvdrun --mpi's engine) across two network-namespace hosts
with real sshd's, through Open MPI's ssh launcher: ranks on both hosts form
the job through hvdrun's store, derive local/cross ranks (the namespaces
share a host name; the node identity tells them apart) and pass allreduce.
Needs root and `ip netns` (tests/integration/netns/netns_hosts.py); otherwise
it prints a SKIPPED line and exits 77.

    test_mpi_netns.py --driver mpi_job_driver --probe mpi_store_probe --allreduce mpi_allreduce_probe
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "netns"))
from netns_hosts import NetnsHosts, skip_unless_available  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--driver", required=True)
    ap.add_argument("--probe", required=True)
    ap.add_argument("--allreduce", required=True)
    args = ap.parse_args()
    skip_unless_available()
    with NetnsHosts(count=2) as hosts:
        a, b = hosts.addrs
        subnet = a.rsplit(".", 1)[0] + ".0/24"
        os.makedirs(os.path.dirname(hosts.known_hosts), exist_ok=True)
        host_key = " ".join(hosts.host_pub_key().split()[:2])
        with open(hosts.known_hosts, "w") as f:
            f.write(f"{a} {host_key}\n{b} {host_key}\n")
        env = dict(os.environ)
        env.pop("SSH_AUTH_SOCK", None)
        env.update(HOME=hosts.home, USER="root", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl_vader_single_copy_mechanism="none")
        rsh = (f"-i {hosts.key} -o UserKnownHostsFile={hosts.known_hosts} -o BatchMode=yes "
               f"-o StrictHostKeyChecking=yes")
        mpi_args = (f"-mca plm_rsh_args '{rsh}' -mca plm_rsh_no_tree_spawn 1 "
                    f"-mca oob_tcp_if_include {subnet} -mca btl_tcp_if_include {subnet}")
        failures = []
        for program, pattern in (
                (args.probe, r"rank {r} size 2 local 0/1 cross {r}/2 mode hvdrun"),
                (args.allreduce, r"rank {r} of 2: local 0/1 cross {r}/2")):
            argv = [args.driver, "-np", "2", "-H", f"{a}:1,{b}:1", "--mpi-args", mpi_args, "--", program]
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=50, env=env)
            out = re.sub(r"^\[\d+,\d+\]<stdout>:", "", p.stdout, flags=re.M)
            ok = p.returncode == 0 and all(re.search(pattern.format(r=r), out) for r in range(2))
            print(f"{os.path.basename(program)}: {'ok' if ok else 'FAILED'} (exit {p.returncode})")
            if not ok:
                failures.append(f"{program}: exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        left = hosts.wait_no_leftovers(5)
        if left:
            failures.append(f"processes left in the namespaces: {left}")
    if failures:
        print("\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
