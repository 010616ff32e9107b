#!/usr/bin/env python3
"""Start-up at scale on one host (issue 28), for docs/performance.md ("Scaling").

For each job size N it runs, ROUNDS times and alternating (so background
load hits both launchers alike):
  * `hvdrun -np N -H localhost:N true`                       (launch only)
  * `mpirun --oversubscribe -np N true`                      (launch only)
  * `hvdrun -np N -H localhost:N hello_allreduce`            (apps/examples:
     hvd::init, a 4 KiB allreduce, an allgather, a broadcast, shutdown)
  * `mpirun --oversubscribe -np N bench_mpi_hello`           (scripts/
     bench_mpi_hello.c: MPI_Init, a 4 KiB MPI_Allreduce, MPI_Finalize)
and reports the median wall time of each (launch to exit of the whole job),
the ratios hvdrun/mpirun, and "init": hello minus true, i.e. what a job pays
from its workers' start to the end of its first collectives and shutdown.
/proc/loadavg is read before every size. mpirun is skipped above
--mpi-max-np (on 2 cores an Open MPI job of 256 ranks takes minutes).

With --baseline-build DIR (a build of an earlier commit) every round also
runs that build's hello_allreduce under this build's hvdrun, in the column
"hello, baseline": the library's start-up before and after, same run.

With --before-build DIR (a build of the commit before a launcher change)
every round also runs that build's hvdrun with `true` and with its own
hello_allreduce, in the columns "before": the launcher before and after,
same run, same load.

With --elastic-np N it also runs the elastic target: an elastic job of N
ranks (elastic_trainer, -H localhost:N --min-np N/2) whose worker w3 is
SIGKILLed once the job trains at size N; the job must complete.

    /usr/bin/python3 scripts/bench_scaling.py --build build --rounds 3 \\
        --np 1,2,4,8,16,32,64,128,256 --mpi-max-np 64 --elastic-np 64

With --hosts 1,2,4,8 (root and `ip netns` needed) it also runs the
multi-host rows: H network-namespace hosts, each with its own sshd and host
name (tests/integration/netns/netns_hosts.py, addresses on 198.18.X.0/24
that it creates and removes), --slots ranks each, from this (the root)
namespace over SSH with the same key and known_hosts for both launchers:
  * `hvdrun -np H*S -H a:S,b:S,... -i KEY hello_allreduce`
  * `mpirun -np H*S -H a:S,b:S,... -mca plm_rsh_args "-i KEY ..." bench_mpi_hello`
    (daemons started one per host over ssh, no tree spawn; oob and btl on
    the test subnet)
launch to exit of the whole job (which includes its first allreduce).

    sudo /usr/bin/python3 scripts/bench_scaling.py --np 1 --hosts 1,2,4,8 --slots 4
"""
import argparse
import atexit
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed(cmd, timeout, env=None, replace_env=False):
    """Wall seconds of `cmd`, or None when it failed or timed out. `env`
    adds to this environment, or replaces it with replace_env."""
    t0 = time.perf_counter()
    if env is not None and not replace_env:
        env = {**os.environ, **env}
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=env, start_new_session=True)
    try:
        _, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the whole job, not only the launcher
        p.communicate()
        sys.stderr.write("timed out after %d s: %s\n" % (timeout, " ".join(cmd)))
        return None
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write("exit %d: %s\n%s\n" % (p.returncode, " ".join(cmd), err.decode()[-1500:]))
        return None
    return dt


def median_ms(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) * 1000 if xs else None


def fmt_ms(v):
    return "-" if v is None else "%.0f" % v


def fmt_ratio(a, b):
    return "-" if a is None or b is None or b <= 0 else "%.2f" % (a / b)


def build_mpi_hello(mpicc):
    d = tempfile.mkdtemp(prefix="hvd-bench-")
    atexit.register(shutil.rmtree, d, True)  # nothing left behind in $TMPDIR
    out = os.path.join(d, "bench_mpi_hello")
    subprocess.run([mpicc, "-O2", "-o", out, os.path.join(HERE, "bench_mpi_hello.c")], check=True)
    return out


def elastic_target(args, hvdrun, trainer):
    """An elastic job of N ranks, one worker killed: (completed, seconds, detail)."""
    n = args.elastic_np
    token = uuid.uuid4().hex
    env = dict(os.environ, HVD_TEST_TOKEN=token, HVD_TRAINER_STEPS=str(args.elastic_steps), HVD_TRAINER_STEP_MS="20")
    cmd = [hvdrun, "-np", str(n), "--min-np", str(max(1, n // 2)), "-H", "localhost:%d" % n, trainer]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    step_re = re.compile(r"<stdout>:step (\d+) size (\d+)")
    killed = None
    lines = []
    victim = "HVDRUN_WORKER_ID=w3".encode()
    try:
        deadline = time.monotonic() + args.timeout
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            m = step_re.search(line)
            if killed is None and m and int(m.group(2)) == n and int(m.group(1)) >= 2:
                for name in os.listdir("/proc"):
                    if not name.isdigit():
                        continue
                    try:
                        with open("/proc/%s/environ" % name, "rb") as f:
                            envs = f.read().split(b"\0")
                        with open("/proc/%s/cmdline" % name, "rb") as f:
                            argv = f.read().split(b"\0")
                    except OSError:
                        continue
                    if ("HVD_TEST_TOKEN=" + token).encode() in envs and victim in envs and os.path.basename(argv[0]) != b"hvdrun-agent":
                        os.kill(int(name), signal.SIGKILL)
                        killed = time.perf_counter() - t0
                        break
            if time.monotonic() > deadline:
                break
        proc.wait(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    dt = time.perf_counter() - t0
    finals = set(re.findall(r"final checksum (\S+)", "".join(lines)))
    ok = proc.returncode == 0 and killed is not None and len(finals) == 1
    detail = "exit %s, worker w3 killed at %s s, %d distinct final checksum(s)" % (
        proc.returncode, "never" if killed is None else "%.1f" % killed, len(finals))
    if not ok:
        sys.stderr.write("".join(lines[-40:]))
    return ok, dt, detail


def multihost_rows(args, hvdrun, hello, mpi_hello):
    """The multi-host table (see the module text); returns 0, or 1 when a
    host setup failed."""
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration", "netns"))
    import netns_hosts
    counts = [int(x) for x in args.hosts.split(",") if x]
    if os.geteuid() != 0:
        sys.stderr.write("--hosts needs root (ip netns, sshd)\n")
        return 1
    slots = args.slots
    with netns_hosts.NetnsHosts(count=max(counts), own_hostnames=True) as hosts:
        os.makedirs(os.path.dirname(hosts.known_hosts), exist_ok=True)
        host_key = " ".join(hosts.host_pub_key().split()[:2])
        with open(hosts.known_hosts, "w") as f:
            f.write("".join("%s %s\n" % (a, host_key) for a in hosts.addrs))
        env = netns_hosts.hvdrun_env(hosts, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                                     OMPI_MCA_btl_vader_single_copy_mechanism="none")
        for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR", "HVDRUN_SECRET"):
            env.pop(name, None)
        subnet = hosts.addrs[0].rsplit(".", 1)[0] + ".0/24"
        rsh = "-i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes" % (
            hosts.key, hosts.known_hosts)
        print()
        print("Multi-host: network-namespace hosts over SSH, %d slots each (median of %d, alternating; "
              "launch to exit, ms)" % (slots, args.rounds))
        print()
        print("| hosts | np | load (1/5/15 min) | hvdrun hello | mpirun hello | ratio |")
        print("|---:|---:|---|---:|---:|---:|")
        for h in counts:
            n = h * slots
            hostlist = ",".join("%s:%d" % (a, slots) for a in hosts.addrs[:h])
            hv = [hvdrun, "-np", str(n), "-H", hostlist, "-i", hosts.key, hello]
            mp = [args.mpirun, "--allow-run-as-root", "-np", str(n), "-H", hostlist, "-bind-to", "none",
                  "-mca", "plm_rsh_args", rsh, "-mca", "plm_rsh_no_tree_spawn", "1",
                  "-mca", "oob_tcp_if_include", subnet, "-mca", "btl_tcp_if_include", subnet, mpi_hello]
            load = loadavg()
            th, tm = [], []
            for _ in range(args.rounds):
                th.append(timed(hv, args.timeout, env=env, replace_env=True))
                tm.append(timed(mp, args.mpi_timeout, env=env, replace_env=True))
            hh, mh = median_ms(th), median_ms(tm)
            print("| %d | %d | %s | %s | %s | %s |" % (h, n, load, fmt_ms(hh), fmt_ms(mh), fmt_ratio(hh, mh)),
                  flush=True)
        left = hosts.wait_no_leftovers(10)
        if left:
            print("\nnote: processes left in the namespaces: %s" % left)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="the CMake build folder (hvdrun, hello_allreduce, elastic_trainer)")
    ap.add_argument("--np", default="1,2,4,8,16,32,64,128,256", help="job sizes, comma separated")
    ap.add_argument("--rounds", type=int, default=3, help="runs of each command per size (median)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--mpicc", default="mpicc")
    ap.add_argument("--mpi-max-np", type=int, default=64, help="skip mpirun above this size")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per hvdrun job")
    ap.add_argument("--mpi-timeout", type=int, default=120, help="seconds per mpirun job (a hung one counts as failed)")
    ap.add_argument("--baseline-build", help="an earlier build whose hello_allreduce runs beside (same hvdrun)")
    ap.add_argument("--before-build", help="an earlier build whose hvdrun runs `true` and its hello beside")
    ap.add_argument("--elastic-np", type=int, default=0, help="also run the elastic target at this size (0: no)")
    ap.add_argument("--elastic-steps", type=int, default=40)
    ap.add_argument("--hosts", default="", help="also the multi-host rows for these host counts, e.g. 1,2,4,8 (root)")
    ap.add_argument("--slots", type=int, default=4, help="ranks per host in the multi-host rows")
    args = ap.parse_args()

    hvdrun = os.path.join(args.build, "apps", "hvdrun", "hvdrun")
    hello = os.path.join(args.build, "apps", "examples", "hello_allreduce")
    trainer = os.path.join(args.build, "apps", "examples", "elastic_trainer")
    mpi_hello = build_mpi_hello(args.mpicc)
    mpirun = [args.mpirun, "--allow-run-as-root", "--oversubscribe", "--mca", "btl_tcp_if_include", "lo", "--mca",
              "oob_tcp_if_include", "lo"]
    sizes = [int(x) for x in args.np.split(",") if x]
    shm_before = set(os.listdir("/dev/shm"))
    base_hello = os.path.join(args.baseline_build, "apps", "examples", "hello_allreduce") if args.baseline_build else None
    before = args.before_build
    before_hvdrun = os.path.join(before, "apps", "hvdrun", "hvdrun") if before else None
    before_hello = os.path.join(before, "apps", "examples", "hello_allreduce") if before else None

    print("# %s, %d CPUs, %s; median of %d, alternating; times in ms, launch to exit" %
          (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), os.uname().release, args.rounds))
    print("# command: %s" % " ".join([os.path.basename(sys.executable)] + sys.argv))
    print()
    print("| np | load (1/5/15 min) | hvdrun `true` | mpirun `true` | ratio | hvdrun hello | mpirun hello | ratio "
          "| hvdrun init (hello - true) | mpirun init | ratio |" + (" hello, baseline |" if base_hello else "") +
          (" hvdrun `true`, before | ratio | hvdrun hello, before | ratio |" if before else ""))
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if base_hello else "") +
          ("---:|---:|---:|---:|" if before else ""))
    for n in sizes:
        load = loadavg()
        use_mpi = n <= args.mpi_max_np
        t = {k: [] for k in ("ht", "mt", "hh", "mh", "bh", "Bt", "Bh")}
        for _ in range(args.rounds):
            t["ht"].append(timed([hvdrun, "-np", str(n), "-H", "localhost:%d" % n, "true"], args.timeout))
            if use_mpi:
                t["mt"].append(timed(mpirun + ["-np", str(n), "true"], args.mpi_timeout))
            t["hh"].append(timed([hvdrun, "-np", str(n), "-H", "localhost:%d" % n, hello], args.timeout))
            if use_mpi:
                t["mh"].append(timed(mpirun + ["-np", str(n), mpi_hello], args.mpi_timeout))
            if base_hello:
                t["bh"].append(timed([hvdrun, "-np", str(n), "-H", "localhost:%d" % n, base_hello], args.timeout))
            if before:
                t["Bt"].append(timed([before_hvdrun, "-np", str(n), "-H", "localhost:%d" % n, "true"], args.timeout))
                t["Bh"].append(timed([before_hvdrun, "-np", str(n), "-H", "localhost:%d" % n, before_hello],
                                     args.timeout))
        ht, mt, hh, mh = (median_ms(t[k]) for k in ("ht", "mt", "hh", "mh"))
        hi = None if hh is None or ht is None else hh - ht
        mi = None if mh is None or mt is None else mh - mt
        row = "| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            n, load, fmt_ms(ht), fmt_ms(mt), fmt_ratio(ht, mt), fmt_ms(hh), fmt_ms(mh), fmt_ratio(hh, mh), fmt_ms(hi),
            fmt_ms(mi), fmt_ratio(hi, mi))
        if base_hello:
            bh = median_ms(t["bh"])
            failed = sum(1 for x in t["bh"] if x is None)
            row += " %s |" % (fmt_ms(bh) + (" (%d of %d failed)" % (failed, len(t["bh"])) if failed else ""))
        if before:
            bt, bhh = median_ms(t["Bt"]), median_ms(t["Bh"])
            row += " %s | %s | %s | %s |" % (fmt_ms(bt), fmt_ratio(bt, mt), fmt_ms(bhh), fmt_ratio(bhh, mh))
        print(row, flush=True)

    # An Open MPI job killed at its timeout leaves its shared-memory files.
    left = sorted(f for f in os.listdir("/dev/shm") if f.startswith("vader_segment") and f not in shm_before)
    if left:
        print("\nnote: %d Open MPI segment(s) left in /dev/shm by killed mpirun jobs (%s ...)" % (len(left), left[0]))

    if args.hosts:
        if multihost_rows(args, hvdrun, hello, mpi_hello) != 0:
            return 1

    if args.elastic_np:
        print()
        ok, dt, detail = elastic_target(args, hvdrun, trainer)
        print("elastic target: %d ranks, one worker killed: %s in %.1f s (%s; load %s)" %
              (args.elastic_np, "completed" if ok else "FAILED", dt, detail, loadavg()))
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
