"""python.runner_launch: horovod.runner.launch (hvdcomm.runner.launch) as
Horovod's callers use it (docs/python.md, "horovod.runner.launch"). Needs no
torch.

PYTHONPATH=<build>/python:<build>/python/compat; usage: launch_test.py HVDRUN

* _HorovodArgs: Horovod's attributes and defaults; every attribute set
  becomes its horovodrun flag, and the build's hvdrun accepts the lot
  (--dry-run), static and elastic, the True and the False form of every
  two-way switch; an attribute _HorovodArgs lacks, both or neither of
  run_func and command, a command given as one string: ValueError before
  anything starts;
* _run(args): run_func on 2 ranks returns every rank's value in rank order;
  a command returns None, a failing one raises RuntimeError with Horovod's
  words and hvdrun's status and reason; elastic on fixed hosts (Horovod's
  test_interactiverun);
* python -m horovod.runner.launch: hvdrun's exit status (0, 3, 2 for a bad
  flag) and output;
* horovod.run's error for a raising rank starts with Horovod's words (gloo),
  or "mpirun failed with exit code N" for use_mpi.
"""
import os
import pickle
import subprocess
import sys
import tempfile
import warnings

import horovod.runner
import horovod.runner.launch
import hvdcomm.runner as runner
import hvdcomm.runner.launch as launch

HVDRUN = sys.argv[1]
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr, flush=True)
        sys.exit(1)
    checks += 1


def raises(exc_type, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc_type as e:
        return e
    except BaseException as e:  # noqa: BLE001
        check(False, f"expected {exc_type.__name__}, got {type(e).__name__}: {e}")
    check(False, f"expected {exc_type.__name__}, nothing raised")


def dry_run(flags):
    p = subprocess.run([HVDRUN] + flags + ["--dry-run", "--", "true"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    return p.returncode, p.stdout


def rank_times(k):
    return int(os.environ["HOROVOD_RANK"]) * k


def main():
    os.environ[runner.HVDRUN_ENV] = HVDRUN
    check(horovod.runner._HorovodArgs is launch.HorovodArgs and horovod.runner.launch._run is launch.run_args,
          "horovod.runner._HorovodArgs and horovod.runner.launch._run")
    a = horovod.runner._HorovodArgs()
    check(a.num_proc == 1 and a.command is None and a.run_func is None and a.use_gloo is None
          and a.cooldown_range is None and set(launch.ATTRIBUTES) <= set(vars(a)), f"defaults: {a!r}")
    # Attributes Horovod's _HorovodArgs has (v0.28): every one is ours too.
    horovods = ("num_proc check_build ssh_port ssh_identity_file disable_cache start_timeout nic output_filename "
                "verbose command run_func config_file nics executable fusion_threshold_mb cycle_time_ms "
                "cache_capacity hierarchical_allreduce hierarchical_allgather torus_allreduce autotune "
                "autotune_log_file autotune_warmup_samples autotune_steps_per_sample "
                "autotune_bayes_opt_max_samples autotune_gaussian_process_noise min_num_proc max_num_proc slots "
                "elastic_timeout reset_limit cooldown_range timeline_filename timeline_mark_cycles no_stall_check "
                "stall_check_warning_time_seconds stall_check_shutdown_time_seconds mpi_threads_disable mpi_args "
                "tcp_flag binding_args num_nccl_streams thread_affinity gloo_timeout_seconds log_level "
                "log_with_timestamp prefix_output_with_timestamp hosts hostfile host_discovery_script use_gloo "
                "use_mpi use_jsrun").split()
    check(sorted(horovods) == sorted(launch.ATTRIBUTES), f"the attribute set is Horovod's: "
          f"{sorted(set(horovods) ^ set(launch.ATTRIBUTES))}")
    check(launch.hvdrun_flags(a) == ["--num-proc=1", "--hosts=localhost:1"], f"defaults -> {launch.hvdrun_flags(a)}")
    a.cycle_time_ms = (None,)  # Horovod's own default for it (a trailing comma)
    a.cache_capacity = (None,)
    check(launch.hvdrun_flags(a) == ["--num-proc=1", "--hosts=localhost:1"], "(None,) is unset")
    a.num_proc = None
    check(launch.hvdrun_flags(a) == [], "no num_proc: no flag, and no default host (hvdrun says -np is required)")
    a.num_proc = 1

    with tempfile.TemporaryDirectory(prefix="hvd-launch-") as d:
        ident = os.path.join(d, "id")
        cfg = os.path.join(d, "cfg.yaml")
        disc = os.path.join(d, "discover.sh")
        for path, text in ((ident, "key\n"), (cfg, "verbose: true\n"), (disc, "#!/bin/sh\necho localhost:2\n")):
            with open(path, "w") as f:
                f.write(text)
        os.chmod(disc, 0o755)
        os.chmod(ident, 0o600)
        a = launch.HorovodArgs()
        values = dict(num_proc=2, ssh_port=2222, ssh_identity_file=ident, start_timeout=20,
                      output_filename=os.path.join(d, "out"), config_file=cfg, fusion_threshold_mb=32,
                      cycle_time_ms=3.5, cache_capacity=512, autotune_log_file=os.path.join(d, "at.csv"),
                      autotune_warmup_samples=2, autotune_steps_per_sample=5, autotune_bayes_opt_max_samples=10,
                      autotune_gaussian_process_noise=0.5, timeline_filename=os.path.join(d, "tl.json"),
                      stall_check_warning_time_seconds=30, stall_check_shutdown_time_seconds=90,
                      mpi_args="--bind-to none", binding_args="-bind-to none", num_nccl_streams=2,
                      thread_affinity=1, gloo_timeout_seconds=40, log_level="WARNING", hosts="localhost:2",
                      disable_cache=True, verbose=True, tcp_flag=True, prefix_output_with_timestamp=True,
                      use_gloo=True, hierarchical_allreduce=True, hierarchical_allgather=True,
                      torus_allreduce=True, autotune=True, timeline_mark_cycles=True, no_stall_check=False,
                      mpi_threads_disable=True, log_with_timestamp=True, nics={"lo"})
        for k, v in values.items():
            setattr(a, k, v)
        flags = launch.hvdrun_flags(a)
        want = ["--num-proc=2", "--ssh-port=2222", f"--ssh-identity-file={ident}", "--start-timeout=20",
                f"--output-filename={d}/out", f"--config-file={cfg}", "--fusion-threshold-mb=32",
                "--cycle-time-ms=3.5", "--cache-capacity=512", f"--autotune-log-file={d}/at.csv",
                "--autotune-warmup-samples=2", "--autotune-steps-per-sample=5",
                "--autotune-bayes-opt-max-samples=10", "--autotune-gaussian-process-noise=0.5",
                f"--timeline-filename={d}/tl.json", "--stall-check-warning-time-seconds=30",
                "--stall-check-shutdown-time-seconds=90", "--mpi-args=--bind-to none",
                "--binding-args=-bind-to none", "--num-nccl-streams=2", "--thread-affinity=1",
                "--gloo-timeout-seconds=40", "--log-level=WARNING", "--hosts=localhost:2", "--disable-cache",
                "--verbose", "--tcp", "--prefix-output-with-timestamp", "--gloo", "--hierarchical-allreduce",
                "--hierarchical-allgather", "--torus-allreduce", "--autotune", "--timeline-mark-cycles",
                "--stall-check", "--mpi-threads-disable", "--log-with-timestamp", "--network-interface=lo"]
        check(flags == want, f"every static attribute -> its flag: {flags}")
        rc, out = dry_run(flags)
        check(rc == 0, f"hvdrun accepts every static flag: {out}")
        for name in ("hierarchical_allreduce", "hierarchical_allgather", "torus_allreduce", "autotune",
                     "timeline_mark_cycles", "mpi_threads_disable", "log_with_timestamp"):
            setattr(a, name, False)
        a.no_stall_check = True
        flags = launch.hvdrun_flags(a)
        for f in ("--no-hierarchical-allreduce", "--no-hierarchical-allgather", "--no-torus-allreduce",
                  "--no-autotune", "--no-timeline-mark-cycles", "--no-stall-check", "--no-mpi-threads-disable",
                  "--log-without-timestamp"):
            check(f in flags, f"False -> {f}: {flags}")
        rc, out = dry_run(flags)
        check(rc == 0, f"hvdrun accepts the False forms: {out}")

        e = launch.HorovodArgs()
        e.num_proc, e.min_num_proc, e.max_num_proc, e.slots = 2, 1, 4, 2
        e.host_discovery_script, e.elastic_timeout, e.reset_limit, e.cooldown_range = disc, 60, 3, (5, 10)
        e.nic = "lo"  # the deprecated spelling
        flags = launch.hvdrun_flags(e)
        check(flags == ["--num-proc=2", "--min-np=1", "--max-np=4", "--slots-per-host=2", "--elastic-timeout=60",
                        "--reset-limit=3", f"--host-discovery-script={disc}", "--network-interface=lo",
                        "--blacklist-cooldown-range", "5", "10"], f"elastic attributes -> flags: {flags}")
        rc, out = dry_run(flags)
        check(rc == 0, f"hvdrun accepts the elastic flags: {out}")

        # Refusals, before anything starts (a wrong hvdrun would be reached otherwise).
        os.environ[runner.HVDRUN_ENV] = "/nonexistent/hvdrun"
        try:
            b = launch.HorovodArgs()
            b.num_procs = 2  # a misspelling
            b.command = ["true"]
            err = raises(ValueError, launch.run_args, b)
            check("num_procs is not an attribute" in str(err), f"unknown attribute: {err}")
            b = launch.HorovodArgs()
            err = raises(ValueError, launch.run_args, b)
            check("nothing to run" in str(err), f"neither command nor run_func: {err}")
            b.command, b.run_func = ["true"], rank_times
            check("not both" in str(raises(ValueError, launch.run_args, b)), "both command and run_func")
            b.run_func, b.command = None, "echo hi"
            check("list of words" in str(raises(ValueError, launch.run_args, b)), "a command string")
            b.command, b.cooldown_range = ["true"], (5,)
            check("cooldown_range" in str(raises(ValueError, launch.run_args, b)), "a bad cooldown pair")
            b.cooldown_range, b.hosts = None, ["localhost:1"]
            check("hosts must be one value" in str(raises(ValueError, launch.run_args, b)), "a list for hosts")
        finally:
            os.environ[runner.HVDRUN_ENV] = HVDRUN

    # _run(args) for real.
    a = horovod.runner._HorovodArgs()
    a.num_proc, a.run_func = 2, lambda: rank_times(7)
    check(horovod.runner.launch._run(a) == [0, 7], "run_func: every rank's value, in rank order")
    a = horovod.runner._HorovodArgs()
    a.num_proc, a.command = 2, [sys.executable, "-c", "import os; print('rank', os.environ['HOROVOD_RANK'])"]
    check(horovod.runner.launch._run(a) is None, "a command: None")
    a.executable = sys.executable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        horovod.runner.launch._run(a)
    check(any("executable=" in str(w.message) and "ignored" in str(w.message) for w in caught),
          f"executable with a command: one warning: {[str(w.message) for w in caught]}")
    a.executable = None
    a.command = [sys.executable, "-c", "import os, sys; sys.exit(3 if os.environ['HOROVOD_RANK'] == '1' else 0)"]
    err = raises(RuntimeError, horovod.runner.launch._run, a)
    check(runner.HOROVOD_GLOO_FAILED in str(err) and "status 3" in str(err) and "rank 1 on localhost: exited "
          "with code 3" in str(err), f"a failing command: Horovod's words, hvdrun's status and reason: {err}")
    a = horovod.runner._HorovodArgs()  # Horovod's test_interactiverun: elastic on fixed hosts
    a.hosts, a.command, a.num_proc, a.min_num_proc = "localhost:2,127.0.0.1:2", [sys.executable, "-V"], 2, 2
    check(horovod.runner.launch._run(a) is None, "elastic on fixed hosts")

    # python -m horovod.runner.launch
    def module(*argv):
        return subprocess.run([sys.executable, "-m", "horovod.runner.launch"] + list(argv), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=60)
    p = module("-np", "2", "-H", "localhost:2", "echo", "hello")
    check(p.returncode == 0 and "[0]<stdout>:hello" in p.stdout and "[1]<stdout>:hello" in p.stdout,
          f"python -m horovod.runner.launch runs hvdrun: {p.returncode} {p.stdout}")
    p = module("-np", "2", "-H", "localhost:2", "sh", "-c", "exit 3")
    check(p.returncode == 3, f"its exit status is hvdrun's: {p.returncode} {p.stdout}")
    p = module("--no-such-flag")
    check(p.returncode == 2 and "--no-such-flag" in p.stdout, f"a bad flag: {p.returncode} {p.stdout}")

    # horovod.run's error for a raising rank: Horovod's words first.
    def record(rank):
        return rank, pickle.dumps({"status": "error", "type": "ValueError", "message": "boom", "traceback": "tb",
                                   "host": "h", "pid": 9})
    err = raises(runner.RunError, runner._collect, [record(1)], 1, [], 2, False)
    check(str(err).startswith(f"horovod.run: {runner.HOROVOD_GLOO_FAILED}: rank 1 (host h, pid 9) raised "
                              "ValueError: boom"), f"gloo: {err}")
    err = raises(runner.RunError, runner._collect, [record(0)], 1, [], 2, False, True)
    check(str(err).startswith("horovod.run: mpirun failed with exit code 1: rank 0"), f"use_mpi: {err}")
    print(f"launch: {checks} checks passed")


if __name__ == "__main__":
    main()
