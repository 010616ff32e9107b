#!/usr/bin/env python3
"""Launch to first allreduce inside a real Slurm allocation (issue 34):
hvdrun starting its workers through srun (--launcher auto, no sshd on any
node) beside Open MPI's mpirun starting the MPI equivalent in the same kind
of allocation, alternating, median of N.

    sudo scripts/bench_slurm.py --build build [--runs 5] [--nodes 3] [--per-node 2]

Each run is one `salloc -N<nodes> --ntasks-per-node=<per-node> <launcher>`
from the login node of a fresh test cluster (tests/integration/slurm/
slurm_cluster.py: munged, slurmctld, one slurmd per network-namespace node):
  hvdrun: `hvdrun apps/examples/hello_allreduce` (init, a 4 KiB allreduce and
          two more checks, shutdown)
  mpirun: `mpirun --allow-run-as-root scripts/bench_mpi_hello` (MPI_Init, a
          4 KiB MPI_Allreduce, MPI_Finalize; Open MPI starts its daemons
          through srun, as it does in any allocation)
The times include salloc's own grant and release, the same for both. The
machine's load average is printed with the table. Needs root, ip netns,
slurm-wlm, munge and Open MPI (mpicc).
"""
import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration", "slurm"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration", "netns"))
from slurm_cluster import SlurmCluster  # noqa: E402


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--per-node", type=int, default=2)
    ap.add_argument("--mpicc", default="mpicc")
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)  # salloc runs the command from the cluster's own directory
    hvdrun = os.path.join(args.build, "apps", "hvdrun", "hvdrun")
    hello = os.path.join(args.build, "apps", "examples", "hello_allreduce")
    d = tempfile.mkdtemp(prefix="hvd-bench-slurm-")
    atexit.register(shutil.rmtree, d, True)  # nothing left behind in $TMPDIR
    mpi_hello = os.path.join(d, "bench_mpi_hello")
    subprocess.run([args.mpicc, "-O2", "-o", mpi_hello, os.path.join(HERE, "bench_mpi_hello.c")], check=True)
    alloc = ["salloc", f"-N{args.nodes}", f"--ntasks-per-node={args.per_node}"]
    commands = {
        "hvdrun (srun agents)": alloc + [hvdrun, hello],
        "mpirun (Open MPI)": alloc + ["mpirun", "--allow-run-as-root", mpi_hello],
    }
    times = {name: [] for name in commands}
    load_before = loadavg()
    with SlurmCluster(nodes=args.nodes, cpus=args.per_node, ssh=False,
                      path_prepend=[os.path.dirname(hvdrun)]) as c:
        for _ in range(args.runs):
            for name, cmd in commands.items():  # alternating
                t0 = time.monotonic()
                p = c.run(cmd, timeout=120)
                took = time.monotonic() - t0
                if p.returncode != 0:
                    print(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}", file=sys.stderr)
                    return 1
                times[name].append(took * 1000)
    print(f"# {args.nodes} nodes x {args.per_node} slots, {args.runs} runs each, alternating; "
          f"load average {load_before} before, {loadavg()} after")
    print("| launcher | median ms | min ms | runs |")
    print("|---|---:|---:|---:|")
    for name, xs in times.items():
        print(f"| {name} | {statistics.median(xs):.0f} | {min(xs):.0f} | {len(xs)} |")
    h, m = (statistics.median(times[n]) for n in commands)
    print(f"hvdrun / mpirun: {h / m:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
