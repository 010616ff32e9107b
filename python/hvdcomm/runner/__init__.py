"""horovodrun's Python API on hvdrun: ``run(fn, args, kwargs, num_proc=...)``
starts an hvdrun job whose every rank calls ``fn(*args, **kwargs)`` and
returns the list of their return values, in rank order. ``horovod.run`` and
``horovod.runner.run`` are this function (docs/python.md, "horovod.run").

How it works: the caller pickles the call (serialize.py: with cloudpickle,
by value, as Horovod does; without it the standard library's pickle,
functions by reference), serves it on a TCP port of its
own and starts ``hvdrun <flags> -- <python> -c <bootstrap>``; every worker
fetches the call, runs it and sends back its outcome -- the return value or
the exception with its traceback -- over the same channel (channel.py:
mutual HMAC authentication on a fresh per-call secret, every message MACed).
The secret and port reach the workers only through the environment hvdrun
forwards (never a command line); a worker removes both from its environment
before calling ``fn``.
"""
import collections
import operator
import os
import pickle
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import warnings

from hvdcomm.runner import channel, serialize

# The caller <-> worker contract of this module (hvdrun forwards both like
# any other variable of its environment; names with SECRET are never shown
# by hvdrun --dry-run or --verbose).
SECRET_ENV = "HVDCOMM_RUN_SECRET"
PORT_ENV = "HVDCOMM_RUN_PORT"
# The address the channel listens on, when it is one address (else workers
# use hvdrun's rendezvous address).
ADDR_ENV = "HVDCOMM_RUN_ADDR"
# Where run() finds hvdrun first (see find_hvdrun).
HVDRUN_ENV = "HVDCOMM_HVDRUN"

# True inside a worker started by run(): a nested run() there is refused.
_in_worker = False

_BOOTSTRAP = "import sys; sys.path.insert(0, sys.argv.pop(1)); from hvdcomm.runner.task import main; main()"
# What hvdrun accepts as a host name (hosts.h, host_name_error).
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}")
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}


class RunError(RuntimeError):
    """A ``run()`` job failed.

    ``rank``: the rank whose failure is reported (the first to report one),
    None when no rank reported (hvdrun refused the command line, a worker
    died without reporting, ...). ``remote_traceback``: that rank's
    traceback text. ``failures``: every reporting rank -> its traceback
    text. ``exit_code``: hvdrun's exit status."""

    def __init__(self, message, rank=None, remote_traceback=None, failures=None, exit_code=None):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.failures = dict(failures or {})
        self.exit_code = exit_code


def find_hvdrun():
    """The hvdrun run() starts: ``$HVDCOMM_HVDRUN`` when set, else the hvdrun
    of the build or install this package belongs to (recorded by CMake in
    hvdcomm/_build_info.py), else ``hvdrun`` on PATH."""
    given = os.environ.get(HVDRUN_ENV)
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise FileNotFoundError(f"horovod.run: {HVDRUN_ENV}={given} is not an executable file")
    tried = [f"${HVDRUN_ENV} (unset)"]
    try:
        from hvdcomm import _build_info
        recorded = _build_info.HVDRUN
        if not os.path.isabs(recorded):
            recorded = os.path.normpath(os.path.join(os.path.dirname(_build_info.__file__), recorded))
    except ImportError:
        recorded = None
    if recorded:
        if os.path.isfile(recorded) and os.access(recorded, os.X_OK):
            return recorded
        tried.append(f"{recorded} (this build's hvdrun: missing)")
    on_path = shutil.which("hvdrun")
    if on_path:
        return on_path
    tried.append("hvdrun on PATH (not found)")
    raise FileNotFoundError(f"horovod.run: cannot find hvdrun; tried {', '.join(tried)}. "
                            f"Set {HVDRUN_ENV} to its path or put it on PATH")


def _count(name, value, minimum, maximum=None):
    if isinstance(value, bool):
        raise TypeError(f"horovod.run: {name} must be an int, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"horovod.run: {name} must be an int, got {value!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise ValueError(f"horovod.run: {name} must be {bound}, got {value}")
    return value


def _text(name, value):
    value = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(value, str) or not value:
        raise TypeError(f"horovod.run: {name} must be a non-empty string, got {value!r}")
    return value


def _names(name, value):
    """A comma-separated string or an iterable of strings -> "a,b"."""
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [_text(name, v).strip() for v in items]
    if not items or not all(items):
        raise ValueError(f"horovod.run: {name} must name at least one entry, got {value!r}")
    return ",".join(items)


def hvdrun_args(num_proc=1, min_num_proc=None, max_num_proc=None, slots=None, reset_limit=None,
                cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None, start_timeout=None,
                ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None, verbose=None,
                use_gloo=None, use_mpi=None, mpi_args=None, network_interfaces=None):
    """run()'s launch parameters as hvdrun flags (each one maps to exactly
    one horovodrun flag of the same meaning; hvdrun then validates the
    values as it does on its command line). Pure; raises TypeError or
    ValueError for a wrong type or an impossible value."""
    if hosts is not None and hostfile is not None:
        raise ValueError("horovod.run: give hosts or hostfile, not both")
    if use_gloo and use_mpi:
        raise ValueError("horovod.run: use_gloo and use_mpi cannot both be set")
    out = []
    if num_proc is not None:
        out += ["-np", str(_count("num_proc", num_proc, 1))]
    elif host_discovery_script is None:
        raise ValueError("horovod.run: num_proc is required (it may only be None with host_discovery_script)")
    if hosts is not None:
        out += ["-H", _names("hosts", hosts)]
    elif hostfile is not None:
        out += ["--hostfile", _text("hostfile", hostfile)]
    elif host_discovery_script is None:
        # horovod.run's default: every process on this machine.
        out += ["-H", f"localhost:{_count('num_proc', num_proc, 1)}"]
    if host_discovery_script is not None:
        out += ["--host-discovery-script", _text("host_discovery_script", host_discovery_script)]
    if min_num_proc is not None:
        out += ["--min-np", str(_count("min_num_proc", min_num_proc, 1))]
    if max_num_proc is not None:
        out += ["--max-np", str(_count("max_num_proc", max_num_proc, 1))]
    if slots is not None:
        out += ["--slots-per-host", str(_count("slots", slots, 1))]
    if reset_limit is not None:
        out += ["--reset-limit", str(_count("reset_limit", reset_limit, 0))]
    if cooldown_range is not None:
        if isinstance(cooldown_range, (str, bytes)) or len(cooldown_range) != 2:
            raise ValueError(f"horovod.run: cooldown_range must be (min_seconds, max_seconds), got {cooldown_range!r}")
        lo, hi = (_count("cooldown_range", v, 0) for v in cooldown_range)
        out += ["--blacklist-cooldown-range", str(lo), str(hi)]
    if start_timeout is not None:
        out += ["--start-timeout", str(_count("start_timeout", start_timeout, 1))]
    if ssh_port is not None:
        out += ["-p", str(_count("ssh_port", ssh_port, 1, 65535))]
    if ssh_identity_file is not None:
        out += ["-i", _text("ssh_identity_file", ssh_identity_file)]
    if disable_cache:
        out += ["--disable-cache"]
    if output_filename is not None:
        out += ["--output-filename", _text("output_filename", output_filename)]
    if verbose:
        out += ["--verbose"]
    if use_gloo:
        out += ["--gloo"]
    if use_mpi:
        out += ["--mpi"]
    if mpi_args is not None:
        out += [f"--mpi-args={_text('mpi_args', mpi_args)}"]
    if network_interfaces is not None:
        out += ["--network-interface", _names("network_interfaces", network_interfaces)]
    return out


def _host_names(hosts, hostfile):
    """The host names of ``hosts`` (-H entries) or of ``hostfile`` (its
    first word per line, comments dropped), without slot counts."""
    if hosts is not None:
        entries = _names("hosts", hosts).split(",")
    else:
        with open(hostfile, encoding="utf-8", errors="replace") as f:
            entries = [w for w in (line.split("#", 1)[0].split()[:1] for line in f) for w in w]
    out = []
    for entry in entries:
        name = entry.rsplit(":", 1)[0] if entry.count(":") == 1 or entry.startswith("[") else entry
        out.append(name.strip("[]"))
    return out


def _is_loopback(name):
    name = name.lower()
    return name in _LOOPBACK_NAMES or name == "::1" or name.startswith("127.")


def _route_source(host, timeout=2.0):
    """The local address the kernel uses to reach ``host`` (a UDP socket is
    connect()ed: nothing is sent). Name resolution is bounded by ``timeout``.
    Raises OSError."""
    found = []

    def resolve():
        try:
            found.append(socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM))
        except OSError as e:
            found.append(e)

    t = threading.Thread(target=resolve, daemon=True)
    t.start()
    t.join(timeout)
    if not found:
        raise OSError(f"{host} does not resolve within {timeout:g} s")
    if isinstance(found[0], OSError):
        raise OSError(f"{host} does not resolve: {found[0]}")
    family, _, _, _, addr = found[0][0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return s.getsockname()[0]


def _interface_address(name):
    """The IPv4 address of local interface ``name``, else a global IPv6 one;
    None when it has neither (or does not exist)."""
    import fcntl
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            return socket.inet_ntoa(packed[20:24])
        except OSError:
            pass
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                if len(fields) == 6 and fields[5] == name and fields[3] == "00":  # scope global
                    return socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0]))
    except OSError:
        pass
    return None


def _channel_address(hosts, hostfile, host_discovery_script, network_interfaces, route=_route_source):
    """Where the caller's channel listens: (address, why). "127.0.0.1" when
    every host is a loopback name; else the address of the first of
    ``network_interfaces`` that has one here, or the one local address the
    kernel routes to every non-loopback host through; "" (every interface)
    only when that cannot be told, with ``why``. The workers are told the
    address (ADDR_ENV) unless it is ""."""
    if network_interfaces is not None:
        names = _names("network_interfaces", network_interfaces).split(",")
        for name in names:
            addr = _interface_address(name)
            if addr:
                return addr, ""
        return "", f"none of the network interfaces {', '.join(names)} has an address on this machine"
    if host_discovery_script is not None:
        return "", "the hosts come from a discovery script, so the interface that reaches them is not known yet " \
                   "(pass network_interfaces= to name it)"
    if hosts is None and hostfile is None:
        return "127.0.0.1", ""
    try:
        names = _host_names(hosts, hostfile)
    except OSError as e:
        return "", f"cannot read the hostfile: {e}"
    if not all(_HOST_NAME.fullmatch(n) or ":" in n for n in names):
        return "127.0.0.1", ""  # hvdrun refuses the job: nothing to resolve, nobody to serve
    sources = set()
    for name in names:
        if _is_loopback(name):
            continue
        try:
            sources.add(route(name))
        except OSError as e:
            return "", f"{e} (pass network_interfaces= to name the interface)"
    if not sources:
        return "127.0.0.1", ""
    if len(sources) == 1:
        return sources.pop(), ""
    return "", f"the hosts are reached through several local addresses ({', '.join(sorted(sources))}; pass " \
               "network_interfaces= to pick one)"


def _worker_sys_path():
    """The caller's sys.path entries a worker needs: those outside the
    interpreter's own directories (the script's directory, PYTHONPATH, user
    additions), made absolute; the worker's interpreter brings its own."""
    own = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    out = []
    for p in sys.path:
        p = os.path.abspath(p or os.getcwd())
        real = os.path.realpath(p)
        if any(real == d or real.startswith(d.rstrip(os.sep) + os.sep) for d in own):
            continue
        if p not in out:
            out.append(p)
    return out


def _pickle_call(func, args, kwargs):
    try:
        data, main_refs = serialize.dumps((func, args, kwargs))
    except (pickle.PicklingError, AttributeError, TypeError) as e:
        if serialize.by_value():
            raise TypeError(
                f"horovod.run: cannot pickle the call of {getattr(func, '__qualname__', func)!r}: {e}. "
                "The function, its arguments and whatever the function refers to must be picklable "
                "(cloudpickle sends functions by value, but not locks, sockets, open files or threads)") from e
        raise TypeError(
            f"horovod.run: cannot pickle the call of {getattr(func, '__qualname__', func)!r}: {e}. "
            "Without cloudpickle (not importable here: install python3-cloudpickle or pip's cloudpickle), the "
            "standard library's pickle sends functions and classes by reference (module and name): "
            "define the function at the top level of a module the workers can import (lambdas and nested "
            "functions cannot be sent), and pass picklable arguments") from e
    if main_refs and serialize.main_source() is None:
        raise TypeError(
            f"horovod.run: {', '.join(main_refs)} is defined in __main__ of an interactive session (a notebook, "
            "the REPL or python -c), which workers cannot import: without cloudpickle (not importable here: "
            "install python3-cloudpickle or pip's cloudpickle, as Horovod requires) pickle sends functions and "
            "classes by reference. Install cloudpickle, or move it into a .py module on sys.path (e.g. a file "
            "next to the notebook) and import it from there")
    return data


def _forward(stream, dst_name, tail=None):
    """Copies hvdrun's output to sys.stdout / sys.stderr (a notebook shows
    those, not the process's file descriptors), keeping the last lines in
    ``tail``."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        if tail is not None:
            tail.append(line.rstrip("\n"))
        dst = getattr(sys, dst_name)
        if dst is not None:
            try:
                dst.write(line)
                dst.flush()
            except (OSError, ValueError):
                pass
    stream.close()


def _run_hvdrun(cmd, env):
    """Runs hvdrun; returns (exit status, last lines of its stderr). Ctrl-C
    (KeyboardInterrupt) is passed on to hvdrun as SIGINT -- it stops the
    workers -- and re-raised once hvdrun has exited; a second Ctrl-C kills
    hvdrun."""
    tail = collections.deque(maxlen=40)
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    threads = [threading.Thread(target=_forward, args=(proc.stdout, "stdout"), daemon=True),
               threading.Thread(target=_forward, args=(proc.stderr, "stderr", tail), daemon=True)]
    for t in threads:
        t.start()
    try:
        try:
            rc = proc.wait()
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait()
            except KeyboardInterrupt:
                proc.kill()
                proc.wait()
            raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in threads:
            # Bounded: a process hvdrun left behind may hold the pipes open.
            t.join(timeout=10)
    return rc, list(tail)


_HVDRUN_LOG_ERROR = re.compile(r"^\[[0-9:.]+\] \[hvdrun\] \[error\] ")
_WORKER_LINE = re.compile(r"^\[\d+\]<std(out|err)>:")


def _hvdrun_detail(tail):
    """What went wrong when no rank reported: hvdrun's first error lines (a
    usage error's "hvdrun: error: ..." line, or its log's errors without the
    worker output it quotes), else its last line of its own; then the first
    line a worker's task wrote about why it could not report."""
    own = [line.strip() for line in tail if line.strip() and not _WORKER_LINE.match(line)]
    errors = []
    for line in own:
        if line.startswith("hvdrun: error:"):
            errors.append(line)
        elif _HVDRUN_LOG_ERROR.match(line):
            text = _HVDRUN_LOG_ERROR.sub("", line)
            if not text.startswith((" ", "last ")):  # not the worker output it quotes
                errors.append(text)
    picked = errors[:3] or own[-1:]
    task = [line for line in tail if _WORKER_LINE.match(line) and "hvdcomm.runner.task: " in line]
    return "; ".join(picked + task[:1])


def _failure(rank, info):
    where = f"rank {rank} (host {info.get('host', '?')}, pid {info.get('pid', '?')})"
    message = info.get("message", "")
    return f"{where} raised {info.get('type', 'an exception')}" + (f": {message}" if message else "")


# Horovod's words for a job that a failed process ended (its gloo_run and
# mpi_run raise RuntimeErrors starting so); code that catches horovod.run's
# error may look for them.
HOROVOD_GLOO_FAILED = "Horovod detected that one or more processes exited with non-zero status, " \
                      "thus causing the job to be terminated"


def _collect(records, rc, tail, num_proc, elastic, use_mpi=False):
    """The return values in rank order, or the RunError to raise."""
    outcomes = {}
    failures = []
    for rank, raw in records:
        try:
            info = pickle.loads(raw)  # a dict of builtins; values are unpickled below
            if info.get("status") == "ok":
                value = serialize.loads(info["value"])
        except Exception as e:  # noqa: BLE001 -- any unpickling failure is reported as this rank's
            info = {"status": "error", "type": type(e).__name__, "traceback": "",
                    "message": f"its return value cannot be unpickled in the caller: {e}"}
        if info.get("status") == "ok":
            outcomes[rank] = value
            continue
        if elastic and rc == 0 and info.get("type") == "WorkerRemovedError":
            continue  # removed from an elastic job that went on without it
        failures.append((rank, info))
    if failures:
        rank, info = failures[0]
        tb = info.get("traceback", "")
        lead = f"mpirun failed with exit code {rc}" if use_mpi else HOROVOD_GLOO_FAILED
        message = f"horovod.run: {lead}: {_failure(rank, info)}"
        if tb:
            message += f"\n\nTraceback of rank {rank}:\n{tb.rstrip()}"
        others = [r for r, _ in failures[1:]]
        if others:
            message += f"\n\n(also failed: rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}; " \
                       "see .failures)"
        err = RunError(message, rank=rank, remote_traceback=tb,
                       failures={r: i.get("traceback", "") for r, i in failures}, exit_code=rc)
        cause = None
        if info.get("exception") is not None:
            try:
                cause = serialize.loads(info["exception"])
            except Exception:  # noqa: BLE001 -- the traceback text is what matters
                cause = None
        if isinstance(cause, BaseException):
            raise err from cause
        raise err
    if rc != 0:
        detail = _hvdrun_detail(tail)
        raise RunError(f"horovod.run: hvdrun exited with status {rc}" + (f": {detail}" if detail else ""),
                       exit_code=rc)
    count = num_proc if not elastic else (max(outcomes) + 1 if outcomes else 0)
    missing = [r for r in range(count) if r not in outcomes]
    if missing or not count:
        raise RunError(f"horovod.run: rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing)) or '0'} "
                       "finished without reporting a result", exit_code=rc)
    return [outcomes[r] for r in range(count)]


def run(func, args=(), kwargs=None, num_proc=1, min_num_proc=None, max_num_proc=None, slots=None,
        reset_limit=None, cooldown_range=None, hosts=None, hostfile=None, host_discovery_script=None,
        start_timeout=None, ssh_port=None, ssh_identity_file=None, disable_cache=None, output_filename=None,
        verbose=None, use_gloo=None, use_mpi=None, mpi_args=None, network_interface=None,
        network_interfaces=None, executable=None, np=None, min_np=None, max_np=None):
    """Horovod's ``horovod.run``: runs ``func(*args, **kwargs)`` on every
    rank of an hvdrun job and returns the list of the return values, in rank
    order. The parameters are horovodrun's (see hvdrun_args for the flag
    each one becomes); ``np``, ``min_np``, ``max_np`` and
    ``network_interface`` are its deprecated spellings (DeprecationWarning).
    ``executable`` is the workers' Python (default ``sys.executable``).

    Raises RunError (a RuntimeError) when a rank raised -- naming the rank,
    with its traceback -- or when hvdrun failed; TypeError / ValueError
    before anything starts for a parameter of the wrong type or value, or a
    call that cannot be pickled (serialize.py: by value with cloudpickle,
    else by reference)."""
    if _in_worker:
        if serialize.by_value():
            raise RuntimeError("horovod.run was called inside a horovod.run worker: a job cannot start "
                               "another job from its ranks")
        raise RuntimeError(
            "horovod.run was called inside a horovod.run worker. If the main script calls horovod.run at its "
            "top level, guard the call with `if __name__ == \"__main__\":` (without cloudpickle, workers "
            "import the main script to find functions defined there, as multiprocessing does)")
    if network_interface:
        warnings.warn("network_interface is deprecated, use network_interfaces instead", DeprecationWarning,
                      stacklevel=2)
        network_interfaces = _text("network_interface", network_interface).split(",")
    if np is not None:
        warnings.warn("np is deprecated, use num_proc instead", DeprecationWarning, stacklevel=2)
        num_proc = np
    if min_np is not None:
        warnings.warn("min_np is deprecated, use min_num_proc instead", DeprecationWarning, stacklevel=2)
        min_num_proc = min_np
    if max_np is not None:
        warnings.warn("max_np is deprecated, use max_num_proc instead", DeprecationWarning, stacklevel=2)
        max_num_proc = max_np
    if not callable(func):
        raise TypeError(f"horovod.run: func must be callable, got {func!r}")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"horovod.run: kwargs must be a dict, got {type(kwargs).__name__}")
    args = tuple(args)
    flags = hvdrun_args(num_proc=num_proc, min_num_proc=min_num_proc, max_num_proc=max_num_proc, slots=slots,
                        reset_limit=reset_limit, cooldown_range=cooldown_range, hosts=hosts, hostfile=hostfile,
                        host_discovery_script=host_discovery_script, start_timeout=start_timeout,
                        ssh_port=ssh_port, ssh_identity_file=ssh_identity_file, disable_cache=disable_cache,
                        output_filename=output_filename, verbose=verbose, use_gloo=use_gloo, use_mpi=use_mpi,
                        mpi_args=mpi_args, network_interfaces=network_interfaces)
    elastic = host_discovery_script is not None or min_num_proc is not None or max_num_proc is not None
    return run_with_flags(func, args, kwargs, flags, num_proc=num_proc, elastic=elastic, hosts=hosts,
                          hostfile=hostfile, host_discovery_script=host_discovery_script,
                          network_interfaces=network_interfaces, executable=executable, use_mpi=bool(use_mpi))


def run_with_flags(func, args, kwargs, flags, num_proc, elastic, hosts=None, hostfile=None,
                   host_discovery_script=None, network_interfaces=None, executable=None, use_mpi=False):
    """run()'s job, on hvdrun flags already made (``flags``, as hvdrun_args
    makes them); the other parameters are those the caller needs besides
    (where its channel listens, how many results to expect). For callers
    that map their own parameters to flags (horovod.runner.launch._run)."""
    python = _text("executable", executable) if executable is not None else sys.executable
    if not python:
        raise ValueError("horovod.run: sys.executable is empty; pass executable= (the workers' Python)")
    payload = pickle.dumps({
        "call": _pickle_call(func, args, kwargs),
        "main": serialize.main_source(),
        "sys_path": _worker_sys_path(),
        "sys_argv": list(sys.argv),
    }, protocol=serialize.PROTOCOL)
    hvdrun = find_hvdrun()

    key = channel.new_key()
    bind, why = _channel_address(hosts, hostfile, host_discovery_script, network_interfaces)
    if not bind:
        print(f"horovod.run: the result channel listens on every interface: {why}", file=sys.stderr, flush=True)
    server = channel.Server(key, payload, bind)
    env = dict(os.environ)
    env[SECRET_ENV] = key.hex()
    env[PORT_ENV] = str(server.port)
    env.pop(ADDR_ENV, None)
    if bind:
        env[ADDR_ENV] = bind
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cmd = [hvdrun] + flags + ["--", python, "-c", _BOOTSTRAP, package_parent]
    try:
        rc, tail = _run_hvdrun(cmd, env)
    finally:
        server.close()
    records, _ = server.snapshot()
    return _collect(records, rc, tail, num_proc, elastic, use_mpi)
