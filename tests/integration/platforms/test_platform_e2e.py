#!/usr/bin/env python3
"""Platform jobs across machines (docs/platforms.md#followers): every machine
is a network namespace with a real sshd (platform_e2e.py), given exactly the
files and variables its platform gives it, and runs the same hvdrun command
line; the leader launches, the followers wait and exit with the job's status.

Cases (one CTest entry each, label platforms.e2e):
  sagemaker         2 machines x processes_per_host 2, no -np: one job of 4
                    ranks (collective ops across the machines), both exit 0
  sagemaker_mpi     the same through --mpi with custom_mpi_options
                    "-verbose" (passed to mpirun): mpirun across the machines
  sagemaker_mpi_guide  the guide's verbatim "-verbose --NCCL_DEBUG=INFO"
                    (needs the mapping of --NCCL_DEBUG=INFO to the workers'
                    environment, branch plat-vertex: register it in
                    CMakeLists.txt once that is merged)
  slurm             3 nodes (node[01-03], SLURM_TASKS_PER_NODE 2,1(x2)) in an
                    srun step: 4 ranks placed by the allocation
  failing_rank      rank 1 (on a follower) exits 3: the leader and every
                    follower exit 3 (Slurm; failing_rank_sagemaker and
                    failing_rank_vertex the same on those platforms, the
                    Vertex reduction server exiting 0 at once)
  no_leader         the leader never starts: the follower exits 6 within its
                    --start-timeout, with one line (and warns that nothing
                    listens on its SSH port -p 2223)
  no_follower       a follower never starts: the leader exits 3 with one line
  leader_killed     the leader is SIGKILLed mid-job: the follower exits 6
                    within a few seconds, nothing is left on any machine
  leader_interrupted  SIGINT to the leader mid-job: the leader and the
                    follower exit 130
  key_mismatch      the machines disagree on the job id (TRAINING_JOB_NAME
                    only on the leader): the leader exits 3 naming the key the
                    follower listens under, the follower 6
  follower_late     the follower's machine comes up after the leader (sshd
                    refusing at first): the leader keeps trying until
                    --start-timeout and the job runs
  vertex            Vertex AI CLUSTER_SPEC with a primary (workerpool0), one
                    worker (workerpool1) and a reduction server
                    (workerpool2): 2 ranks on the primary and the worker; the
                    reduction server's hvdrun gets no ranks and exits 0 at
                    once; the worker follows and exits with the job
  lsf               LSF, LSB_MCPU_HOSTS "lsf1 2 lsf2 2" with each machine's
                    own host name: lsf1 (first entry, no GPUs) is horovodrun's
                    launch node, where LSF runs the job script, and starts 2
                    ranks on lsf2 over SSH, attaching to nobody (not one of the hosts); hvdrun run on
                    lsf2 by hand exits 6 at once with one line

    test_platform_e2e.py --hvdrun PATH [--worker collective_worker] CASE
"""
import argparse
import json
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from platform_e2e import Machine, PlatformCluster, skip_unless_available  # noqa: E402

ARGS = None
# What a worker says about itself: its rank and the machine it runs on (the
# namespaces share a host name; their addresses tell them apart).
WHOAMI = 'echo "rank $HOROVOD_RANK of $HOROVOD_SIZE on $HOROVOD_HOSTNAME at $(hostname -I | tr -d " ")"'


class Failure(Exception):
    pass


def check(cond, what, *details):
    if not cond:
        raise Failure(what + "".join("\n" + repr(d) if not isinstance(d, str) else "\n--- " + d for d in details))


def sagemaker_machines(count, per_host, custom_mpi_options=None, user_hyperparameters=None):
    names = [f"algo-{i + 1}" for i in range(count)]
    hyper = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": str(per_host)}
    if custom_mpi_options is not None:
        hyper["sagemaker_mpi_custom_mpi_options"] = custom_mpi_options
    hyper.update(user_hyperparameters or {})
    # SageMaker writes every hyperparameter value JSON-encoded.
    hyper = {k: '"%s"' % v if not v.isdigit() else v for k, v in hyper.items()}
    machines = []
    for name in names:
        machines.append(Machine(name, env={"SAGEMAKER_BASE_DIR": "{dir}/ml", "TRAINING_JOB_NAME": "e2e-job",
                                           "SM_CHANNEL_TRAINING": "/opt/ml/input/data/training",
                                           "SM_CURRENT_HOST": name, "SM_HOSTS": '["%s"]' % '","'.join(names)},
                                files={"ml/input/config/resourceconfig.json": {
                                    "current_host": name, "hosts": names, "network_interface_name": "eth0"},
                                    "ml/input/config/hyperparameters.json": hyper}))
    return machines


def slurm_machines(nodelist, names, tasks_per_node):
    return [Machine(name, env={"SLURM_JOB_ID": "4711", "SLURM_JOB_NODELIST": nodelist,
                               "SLURM_TASKS_PER_NODE": tasks_per_node, "SLURMD_NODENAME": name,
                               "SLURM_STEP_NUM_NODES": str(len(names)), "SLURM_NODEID": str(i)})
            for i, name in enumerate(names)]


def vertex_machines():
    cluster = {"workerpool0": ["vm-0:2222"], "workerpool1": ["vm-1:2222"], "workerpool2": ["rs-0:2222"]}
    tasks = [("vm-0", "workerpool0"), ("vm-1", "workerpool1"), ("rs-0", "workerpool2")]
    return [Machine(name, env={"CLOUD_ML_JOB_ID": "1234567890",
                               "CLUSTER_SPEC": json.dumps({"cluster": cluster, "environment": "cloud",
                                                           "task": {"type": pool, "index": 0}})})
            for name, pool in tasks]


def lsf_machines():
    return [Machine(name, env={"LSB_JOBID": "4242", "LSB_MCPU_HOSTS": "lsf1 2 lsf2 2"}, hostname=name)
            for name in ("lsf1", "lsf2")]


def check_ranks(cluster, out, placement, size):
    for rank, machine in placement.items():
        i = [m.name for m in cluster.machines].index(machine)
        want = f"rank {rank} of {size} on {machine} at {cluster.hosts.addrs[i]}"
        check(want in out, f"missing '{want}' in the leader's output", out)


def follower_lines(r):
    return [line for line in r.stderr.splitlines() if line.strip()]


def case_sagemaker(cluster):
    # What SageMaker's training toolkit gives a script: the hyperparameters as
    # arguments, SM_MODEL_DIR, and each machine's own SM_CURRENT_HOST.
    whoami = (WHOAMI + '; echo "rank $HOROVOD_RANK channel $SM_CHANNEL_TRAINING"'
              '; echo "rank $HOROVOD_RANK host $SM_CURRENT_HOST model $SM_MODEL_DIR args $*"')
    worker = f'{whoami}; exec "$0" ops' if ARGS.worker else whoami
    args = ["sh", "-c", worker, ARGS.worker or "sh"]
    leader, follower = cluster.run_all(args, timeout=45)
    check(leader.code == 0 and follower.code == 0, "the job did not succeed on both machines", leader, follower)
    check_ranks(cluster, leader.stdout, {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}, 4)
    if ARGS.worker:
        for rank in range(4):
            check(f"rank {rank}: ops ok" in leader.stdout, f"rank {rank} did not pass the collective ops", leader)
    for rank in range(4):  # SM_* variables reach every worker untouched, on every machine
        check(f"rank {rank} channel /opt/ml/input/data/training" in leader.stdout, "SM_CHANNEL_TRAINING lost", leader)
        want = (f"rank {rank} host {'algo-1' if rank < 2 else 'algo-2'} model {cluster.dirs[0]}/ml/model "
                "args --epochs 3 --model-name resnet")
        check(want in leader.stdout, f"missing '{want}' (toolkit arguments and variables)", leader)
    check("-np not given: 4 ranks, the sagemaker job's slots" in leader.stderr, "no -np default line", leader)
    check("attached to the follower on algo-2" in leader.stderr, "the leader did not attach", leader)
    check("follower of the sagemaker job: waiting for the leader algo-1 (up to 30s)" in follower.stderr,
          "no follower info line", follower)
    check("SSH port" not in follower.stderr, "sshd listens on port 22, yet the follower warned", follower)
    check("ended with exit status 0" in follower.stderr, "the follower did not get the status", follower)
    check(follower.stdout == "", "the follower printed on stdout", follower)


def case_sagemaker_mpi(cluster):
    if shutil.which("mpirun") is None:
        print("SKIPPED: no mpirun on PATH", flush=True)
        sys.exit(77)
    worker = ('echo "rank $OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE on $HOROVOD_HOSTNAME at '
              '$(hostname -I | tr -d " ")"; echo "rank $OMPI_COMM_WORLD_RANK NCCL_DEBUG=$NCCL_DEBUG"')
    options = cluster.machines[0].files["ml/input/config/hyperparameters.json"].get(
        "sagemaker_mpi_custom_mpi_options", "")
    leader, follower = cluster.run_all(["--mpi", "sh", "-c", worker], timeout=50)
    check(leader.code == 0 and follower.code == 0, "the --mpi job did not succeed on both machines", leader, follower)
    for rank in range(4):
        i = 0 if rank < 2 else 1
        check(re.search(rf"rank {rank} of 4 on \S* ?at {re.escape(cluster.hosts.addrs[i])}\b", leader.stdout),
              f"rank {rank} did not run on {cluster.machines[i].name}", leader)
    if "--NCCL_DEBUG=INFO" in options:  # the toolkit's mapping: -x NCCL_DEBUG=INFO reaches every rank
        for rank in range(4):
            check(f"rank {rank} NCCL_DEBUG=INFO" in leader.stdout, f"NCCL_DEBUG did not reach rank {rank}", leader)
    check("ended with exit status 0" in follower.stderr, "the follower did not get the status", follower)


def case_slurm(cluster):
    leader, *followers = cluster.run_all(["sh", "-c", WHOAMI], timeout=45)
    check(leader.code == 0 and all(f.code == 0 for f in followers), "the Slurm job did not succeed everywhere",
          leader, *followers)
    check_ranks(cluster, leader.stdout, {0: "node01", 1: "node01", 2: "node02", 3: "node03"}, 4)
    check("attached to the followers on node02, node03" in leader.stderr, "the leader did not attach", leader)


def case_vertex(cluster):
    primary, worker, reduction_server = cluster.run_all(["sh", "-c", WHOAMI], timeout=45)
    check(primary.code == 0 and worker.code == 0, "the Vertex job did not succeed", primary, worker)
    check_ranks(cluster, primary.stdout, {0: "vm-0", 1: "vm-1"}, 2)
    check(reduction_server.code == 0 and "gets no ranks" in reduction_server.stderr
          and "rank " not in reduction_server.stdout and reduction_server.took < 10,
          "the reduction server's hvdrun did not exit 0 at once with its line", reduction_server)
    check("follower of the vertex job" in worker.stderr, "the worker did not follow", worker)


def case_lsf(cluster):
    launch, _ = cluster.run_all(["sh", "-c", WHOAMI], timeout=45, only=[0])
    check(launch.code == 0, "the LSF job did not succeed", launch)
    check_ranks(cluster, launch.stdout, {0: "lsf2", 1: "lsf2"}, 2)
    check("attached to" not in launch.stderr and "this host: not one of them" in launch.stderr,
          "the launch node attached to followers", launch)
    _, compute = cluster.run_all(["sh", "-c", WHOAMI], timeout=20, only=[1])
    check(compute.code == 6 and compute.took < 5 and "no leader attaches to it" in compute.stderr
          and "rank " not in compute.stdout, "hvdrun on an LSF compute host did not refuse at once", compute)


def case_failing_rank(cluster):
    t0 = time.monotonic()
    results = cluster.run_all(["sh", "-c", f'{WHOAMI}; [ "$HOROVOD_RANK" = 1 ] && exit 3; exec sleep 60'],
                              timeout=45)
    took = time.monotonic() - t0
    if cluster.machines[-1].name.startswith("rs-"):  # Vertex's reduction server: no ranks, exits 0 at once
        check(results[-1].code == 0 and "gets no ranks" in results[-1].stderr, "the reduction server", results[-1])
        results = results[:-1]
    check(all(r.code == 3 for r in results), "not every machine exited 3 (the job's status)", *results)
    check(took < 25, f"the failed job took {took:.1f} s", *results)
    for f in results[1:]:
        check("ended with exit status 3" in f.stderr, "a follower did not get the status", f)


def case_no_leader(cluster):
    t0 = time.monotonic()
    _, follower = cluster.run_all(["--start-timeout", "2", "-p", "2223", "true"], only=[1], timeout=20)
    took = time.monotonic() - t0
    check(follower.code == 6, "the follower did not exit 6", follower)
    check(2 <= follower.took and took < 8, f"the follower took {follower.took:.1f} s for --start-timeout 2", follower)
    errors = [line for line in follower_lines(follower) if line.startswith("hvdrun: error:")]
    check(errors == ["hvdrun: error: this machine is a follower of the sagemaker job, and its leader algo-1 did not "
                     "attach within --start-timeout 2s (is hvdrun running there with the same command line? "
                     "docs/platforms.md#followers)"], "not the one error line", follower)
    check("nothing listens on this machine's SSH port 2223" in follower.stderr, "no SSH port warning", follower)


def case_no_follower(cluster):
    leader, _ = cluster.run_all(["--start-timeout", "2", "true"], only=[0], timeout=20)
    check(leader.code == 3, "the leader did not exit 3", leader)
    errors = [line for line in follower_lines(leader) if line.startswith("hvdrun: error:")]
    check(len(errors) == 1 and errors[0].startswith("hvdrun: error: algo-2: no hvdrun follower")
          and "run the same hvdrun command line on every machine" in errors[0], "not the one error line", leader)
    check(leader.took < 10, f"the leader took {leader.took:.1f} s for --start-timeout 2", leader)


def case_leader_killed(cluster):
    procs = [cluster.start(i, ["sh", "-c", f"{WHOAMI}; exec sleep 60"]) for i in range(2)]
    try:
        cluster.wait_processes(1, r"^sleep 60", 1, timeout=20)
        cluster.wait_processes(0, r"^sleep 60", 1, timeout=5)
    except AssertionError as e:
        results = cluster.collect([p for p in procs if p.kill() or True], timeout=5)
        raise Failure(f"{e}\n{results}")
    t0 = time.monotonic()
    procs[0].send_signal(signal.SIGKILL)
    leader, follower = cluster.collect(procs, timeout=20)
    took = time.monotonic() - t0
    check(leader.code == -signal.SIGKILL, "the leader was not killed", leader)
    check(follower.code == 6, "the follower did not exit 6", follower)
    check(took < 10, f"the follower took {took:.1f} s to notice", follower)
    check("the leader algo-1 of the sagemaker job went away without reporting the job's status" in follower.stderr,
          "not the leader-gone line", follower)


def case_leader_interrupted(cluster):
    procs = [cluster.start(i, ["sh", "-c", f"{WHOAMI}; exec sleep 60"]) for i in range(2)]
    try:
        cluster.wait_processes(1, r"^sleep 60", 1, timeout=20)
        cluster.wait_processes(0, r"^sleep 60", 1, timeout=5)
    finally:
        procs[0].send_signal(signal.SIGINT)
    leader, follower = cluster.collect(procs, timeout=20)
    check(leader.code == 130 and follower.code == 130, "not both 130", leader, follower)
    check("ended with exit status 130" in follower.stderr, "the follower did not get the status", follower)


def case_follower_late(cluster):
    sshd = cluster.hosts.sshd[1]
    sshd.kill()
    sshd.wait(timeout=5)
    args = ["sh", "-c", WHOAMI]
    leader = cluster.start(0, args)
    time.sleep(1.5)
    cluster.hosts.restart_sshd(1)
    follower = cluster.start(1, args)
    leader, follower = cluster.collect([leader, follower], timeout=40)
    check(leader.code == 0 and follower.code == 0, "the job did not succeed on both machines", leader, follower)
    check("algo-2: connection refused (%s:22); trying again until --start-timeout" % cluster.hosts.addrs[1]
          in leader.stderr, "no retry line", leader)
    check_ranks(cluster, leader.stdout, {0: "algo-1", 1: "algo-2"}, 2)


def case_key_mismatch(cluster):
    del cluster.machines[1].env["TRAINING_JOB_NAME"]
    leader, follower = cluster.run_all(["--start-timeout", "2", "true"], timeout=20)
    check(leader.code == 3 and follower.code == 6, "not 3 and 6", leader, follower)
    errors = [line for line in follower_lines(leader) if line.startswith("hvdrun: error:")]
    check(len(errors) == 1 and "no hvdrun follower of sagemaker:e2e-job:algo-2 answered" in errors[0]
          and "hvdrun followers of other keys listen here: sagemaker::algo-2" in errors[0],
          "the leader's line does not name the follower's key", leader)


CASES = {
    "sagemaker": (case_sagemaker, lambda: sagemaker_machines(2, 2, user_hyperparameters={"epochs": "3",
                                                                                          "model-name": "resnet"})),
    "sagemaker_mpi": (case_sagemaker_mpi, lambda: sagemaker_machines(2, 2, "-verbose")),
    "sagemaker_mpi_guide": (case_sagemaker_mpi, lambda: sagemaker_machines(2, 2, "-verbose --NCCL_DEBUG=INFO")),
    "slurm": (case_slurm, lambda: slurm_machines("node[01-03]", ["node01", "node02", "node03"], "2,1(x2)")),
    "failing_rank": (case_failing_rank,
                     lambda: slurm_machines("node[01-03]", ["node01", "node02", "node03"], "1(x3)")),
    "failing_rank_sagemaker": (case_failing_rank, lambda: sagemaker_machines(2, 1)),
    "failing_rank_vertex": (case_failing_rank, vertex_machines),
    "no_leader": (case_no_leader, lambda: sagemaker_machines(2, 1)),
    "no_follower": (case_no_follower, lambda: sagemaker_machines(2, 1)),
    "leader_killed": (case_leader_killed, lambda: sagemaker_machines(2, 1)),
    "leader_interrupted": (case_leader_interrupted, lambda: sagemaker_machines(2, 1)),
    "key_mismatch": (case_key_mismatch, lambda: sagemaker_machines(2, 1)),
    "follower_late": (case_follower_late, lambda: sagemaker_machines(2, 1)),
    "vertex": (case_vertex, vertex_machines),
    "lsf": (case_lsf, lsf_machines),
}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--hvdrun", required=True)
    ap.add_argument("--worker", help="collective_worker (case sagemaker: collective ops across the machines)")
    ap.add_argument("case", choices=sorted(CASES))
    ARGS = ap.parse_args()
    skip_unless_available()
    fn, machines = CASES[ARGS.case]
    t0 = time.monotonic()
    with PlatformCluster(machines(), ARGS.hvdrun) as cluster:
        try:
            fn(cluster)
            cluster.check_no_leftovers(5)
        except (Failure, AssertionError) as e:
            print(f"FAILED: {ARGS.case}: {e}", file=sys.stderr)
            cluster.hosts.print_sshd_logs()
            return 1
    print(f"{ARGS.case}: ok ({time.monotonic() - t0:.1f} s including setup and teardown)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
