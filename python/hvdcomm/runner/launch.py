"""horovodrun's Python entry points on hvdrun (docs/python.md,
"horovod.runner.launch"):

* ``run_commandline()`` -- what ``python -m horovod.runner.launch <horovodrun
  arguments>`` runs: hvdrun with those arguments, in this process's place
  (exec), so its exit status, output and signals are hvdrun's;
* ``HorovodArgs`` -- Horovod's ``horovod.runner._HorovodArgs``: the
  attributes horovodrun's parser fills, every one None (``num_proc`` 1)
  until set;
* ``run_args(args)`` -- Horovod's ``horovod.runner.launch._run(args)``:
  runs ``args.command`` (returns None) or ``args.run_func`` (returns the
  list of every rank's return value, as ``horovod.run``) with the hvdrun
  flags ``args`` maps to (``hvdrun_flags``); output and Ctrl-C as
  ``horovod.run``.

Every attribute either becomes the horovodrun flag of the same meaning, or
is reported: an attribute HorovodArgs does not have (a misspelling, or one
of a newer Horovod) makes ``run_args`` raise ValueError naming it, before
anything starts; hvdrun then checks the values as it does on its command
line.
"""
import os
import sys
import warnings

from hvdcomm import runner as _runner

# Attributes that become "<flag>=<value>" (one value each).
_VALUE_FLAGS = {
    "num_proc": "--num-proc",
    "ssh_port": "--ssh-port",
    "ssh_identity_file": "--ssh-identity-file",
    "start_timeout": "--start-timeout",
    "output_filename": "--output-filename",
    "config_file": "--config-file",
    "fusion_threshold_mb": "--fusion-threshold-mb",
    "cycle_time_ms": "--cycle-time-ms",
    "cache_capacity": "--cache-capacity",
    "autotune_log_file": "--autotune-log-file",
    "autotune_warmup_samples": "--autotune-warmup-samples",
    "autotune_steps_per_sample": "--autotune-steps-per-sample",
    "autotune_bayes_opt_max_samples": "--autotune-bayes-opt-max-samples",
    "autotune_gaussian_process_noise": "--autotune-gaussian-process-noise",
    "min_num_proc": "--min-np",
    "max_num_proc": "--max-np",
    "slots": "--slots-per-host",
    "elastic_timeout": "--elastic-timeout",
    "reset_limit": "--reset-limit",
    "timeline_filename": "--timeline-filename",
    "stall_check_warning_time_seconds": "--stall-check-warning-time-seconds",
    "stall_check_shutdown_time_seconds": "--stall-check-shutdown-time-seconds",
    "mpi_args": "--mpi-args",
    "binding_args": "--binding-args",
    "num_nccl_streams": "--num-nccl-streams",
    "thread_affinity": "--thread-affinity",
    "gloo_timeout_seconds": "--gloo-timeout-seconds",
    "log_level": "--log-level",
    "hosts": "--hosts",
    "hostfile": "--hostfile",
    "host_discovery_script": "--host-discovery-script",
}
# Attributes that are switches: the flag when true, nothing when false/None.
_SWITCH_FLAGS = {
    "check_build": "--check-build",
    "disable_cache": "--disable-cache",
    "verbose": "--verbose",
    "tcp_flag": "--tcp",
    "prefix_output_with_timestamp": "--prefix-output-with-timestamp",
    "use_gloo": "--gloo",
    "use_mpi": "--mpi",
    "use_jsrun": "--jsrun",
}
# Attributes with a flag for True and one for False (None: neither).
_BOOL_FLAGS = {
    "hierarchical_allreduce": ("--hierarchical-allreduce", "--no-hierarchical-allreduce"),
    "hierarchical_allgather": ("--hierarchical-allgather", "--no-hierarchical-allgather"),
    "torus_allreduce": ("--torus-allreduce", "--no-torus-allreduce"),
    "autotune": ("--autotune", "--no-autotune"),
    "timeline_mark_cycles": ("--timeline-mark-cycles", "--no-timeline-mark-cycles"),
    "no_stall_check": ("--no-stall-check", "--stall-check"),
    "mpi_threads_disable": ("--mpi-threads-disable", "--no-mpi-threads-disable"),
    "log_with_timestamp": ("--log-with-timestamp", "--log-without-timestamp"),
}
# Handled on their own: the network interfaces (nics; nic, the deprecated
# spelling), the cooldown pair, what to run and its interpreter.
_OTHER = ("nic", "nics", "cooldown_range", "command", "run_func", "executable")
ATTRIBUTES = tuple(_VALUE_FLAGS) + tuple(_SWITCH_FLAGS) + tuple(_BOOL_FLAGS) + _OTHER


class HorovodArgs:
    """Horovod's ``horovod.runner._HorovodArgs``: every attribute horovodrun's
    parser fills (``ATTRIBUTES``), None until set, except ``num_proc`` (1)."""

    def __init__(self):
        for name in ATTRIBUTES:
            setattr(self, name, None)
        self.num_proc = 1

    def __repr__(self):
        given = {k: v for k, v in vars(self).items() if v is not None}
        return f"HorovodArgs({', '.join(f'{k}={v!r}' for k, v in sorted(given.items()))})"


def _unset(value):
    # Horovod's _HorovodArgs leaves cycle_time_ms and cache_capacity at
    # (None,) (a trailing comma): that is "not set" too.
    return value is None or value == (None,)


def _nics(value):
    if isinstance(value, str):
        items = value.split(",")
    else:
        items = list(value)
    items = [str(v).strip() for v in items]
    if not items or not all(items):
        raise ValueError(f"horovod.runner.launch: nics must name at least one interface, got {value!r}")
    return ",".join(sorted(set(items)) if isinstance(value, (set, frozenset)) else items)


def hvdrun_flags(args):
    """The hvdrun flags for a HorovodArgs (or any object with its
    attributes), without what to run. When neither hosts, hostfile nor
    host_discovery_script is set, ``--hosts localhost:<num_proc>`` (Horovod's
    default; without num_proc, hvdrun says it is required). Raises ValueError naming any attribute HorovodArgs does not
    have, or a value that cannot be a flag."""
    given = vars(args)
    unknown = sorted(k for k, v in given.items() if k not in ATTRIBUTES and not k.startswith("_"))
    if unknown:
        raise ValueError(f"horovod.runner.launch: {', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} "
                         "not an attribute of horovodrun's arguments (_HorovodArgs); nothing would use "
                         f"{'it' if len(unknown) == 1 else 'them'}")
    get = lambda name: given.get(name)  # noqa: E731
    out = []
    for name, flag in _VALUE_FLAGS.items():
        value = get(name)
        if not _unset(value):
            if isinstance(value, bool) or isinstance(value, (list, tuple, set, dict)):
                raise ValueError(f"horovod.runner.launch: {name} must be one value, got {value!r}")
            out.append(f"{flag}={value}")
    for name, flag in _SWITCH_FLAGS.items():
        if get(name):
            out.append(flag)
    for name, (on, off) in _BOOL_FLAGS.items():
        value = get(name)
        if value is not None:
            out.append(on if value else off)
    nics = get("nics")
    if nics is None and get("nic") is not None:
        nics = get("nic")
    if nics is not None and not (isinstance(nics, (set, list, tuple)) and not nics):
        out.append(f"--network-interface={_nics(nics)}")
    cooldown = get("cooldown_range")
    if cooldown is not None:
        if isinstance(cooldown, (str, bytes)) or len(cooldown) != 2:
            raise ValueError(f"horovod.runner.launch: cooldown_range must be (min_seconds, max_seconds), "
                             f"got {cooldown!r}")
        out += ["--blacklist-cooldown-range", str(cooldown[0]), str(cooldown[1])]
    if all(_unset(get(n)) for n in ("hosts", "hostfile", "host_discovery_script")) and not _unset(get("num_proc")):
        out.append(f"--hosts=localhost:{get('num_proc')}")
    return out


def _is_elastic(args):
    return any(not _unset(getattr(args, n, None)) for n in ("host_discovery_script", "min_num_proc",
                                                            "max_num_proc"))


def run_args(args):
    """Horovod's ``horovod.runner.launch._run(args)``: ``args.run_func``
    (called with no arguments on every rank; returns their results in rank
    order, raising RunError as ``horovod.run`` does) or ``args.command`` (a
    list of words; returns None, or raises RuntimeError when the job
    fails -- Horovod's words, then hvdrun's exit status)."""
    flags = hvdrun_flags(args)
    func, command = getattr(args, "run_func", None), getattr(args, "command", None)
    if func is not None and command:
        raise ValueError("horovod.runner.launch: set run_func or command, not both")
    if func is not None:
        num_proc = getattr(args, "num_proc", None)
        return _runner.run_with_flags(
            func, (), {}, flags, num_proc=None if _unset(num_proc) else int(num_proc), elastic=_is_elastic(args),
            hosts=getattr(args, "hosts", None), hostfile=getattr(args, "hostfile", None),
            host_discovery_script=getattr(args, "host_discovery_script", None),
            network_interfaces=getattr(args, "nics", None) or getattr(args, "nic", None),
            executable=getattr(args, "executable", None), use_mpi=bool(getattr(args, "use_mpi", None)))
    if not command:
        raise ValueError("horovod.runner.launch: nothing to run: set args.command (a list of words) "
                         "or args.run_func")
    if isinstance(command, str):
        raise ValueError(f"horovod.runner.launch: command must be a list of words, got the string {command!r}")
    if getattr(args, "executable", None) is not None:
        warnings.warn(f"horovod.runner.launch: executable={args.executable!r} is ignored: it is the workers' "
                      "Python for run_func, and a command names its own program", stacklevel=2)
    # As horovod.run: output copied to sys.stdout/sys.stderr, Ctrl-C passed on.
    rc, tail = _runner._run_hvdrun([_runner.find_hvdrun()] + flags + ["--"] + [str(w) for w in command],
                                   dict(os.environ))
    if rc != 0:
        lead = f"mpirun failed with exit code {rc}" if getattr(args, "use_mpi", None) else \
            _runner.HOROVOD_GLOO_FAILED
        detail = _runner._hvdrun_detail(tail)
        raise RuntimeError(f"horovod.runner.launch: {lead}; hvdrun exited with status {rc}"
                           + (f": {detail}" if detail else ""))
    return None


def run_commandline(argv=None):
    """``python -m horovod.runner.launch ...``: hvdrun with these arguments
    (default ``sys.argv[1:]``), in this process's place."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hvdrun = _runner.find_hvdrun()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(hvdrun, [hvdrun] + argv)


if __name__ == "__main__":
    run_commandline()
