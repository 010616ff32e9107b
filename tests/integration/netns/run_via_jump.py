#!/usr/bin/env python3
"""Runs one hvdrun command line on two workers that are reachable only
through a jump host (test_ssh_proxy.py's topology: three network
namespaces with real sshd's), for checks by hand such as Horovod's own test
suite over ProxyJump (docs/python.md):

    run_via_jump.py [--cwd DIR] HVDRUN ARGS...

ARGS name the workers `worker-b` and `worker-c` (e.g. `-np 2 -H
worker-b:1,worker-c:1 python3 train.py`); ~/.ssh/config sends both through
the jump host. Prints hvdrun's output, then how many logins each worker's
sshd saw from the jump host; exits with hvdrun's status (77: no root or ip
netns). Everything is removed afterwards.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns_hosts  # noqa: E402
import test_ssh_proxy as proxy  # noqa: E402


def main(argv):
    cwd = None
    if len(argv) > 2 and argv[1] == "--cwd":
        cwd, argv = argv[2], [argv[0]] + argv[3:]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    netns_hosts.skip_unless_available()
    with netns_hosts.NetnsHosts(count=3) as hosts:
        proxy.setup_topology(hosts)
        key = proxy.install_key(hosts)
        a = hosts.addrs[0]
        proxy.write_config(hosts, ("Host worker-b\n" f"    HostName {proxy.inner(hosts, 1)}\n"
                                   "Host worker-c\n" f"    HostName {proxy.inner(hosts, 2)}\n"
                                   "Host worker-*\n" f"    ProxyJump {a}\n") + proxy.common_config(hosts, key))
        p = subprocess.run(argv[1:], cwd=cwd, env=netns_hosts.hvdrun_env(hosts), stdin=subprocess.DEVNULL)
        print(f"logins from the jump host {a}: worker-b {proxy.connections_from(hosts, 1, a)}, "
              f"worker-c {proxy.connections_from(hosts, 2, a)}", flush=True)
        return p.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv))
