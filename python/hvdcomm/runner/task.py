"""The worker side of ``hvdcomm.runner.run`` (started by hvdrun through the
bootstrap in hvdcomm/runner/__init__.py; not meant to be run by hand).

Fetches the call from the caller, sets up sys.path / sys.argv as the
caller's, calls it, and reports the outcome -- ``{"status": "ok", "value":
<pickle>}`` or ``{"status": "error", "type", "message", "traceback",
"exception": <pickle or None>}`` -- under this process's rank. Exits 0 after
a reported success, non-zero after a failure (so hvdrun stops the job, as
horovodrun does)."""
import os
import pickle
import socket
import sys
import traceback

import hvdcomm.runner as runner
from hvdcomm import _core
from hvdcomm._core import job_env
from hvdcomm.runner import channel, serialize

_LOAD_HINT = ("Functions and classes are sent by reference (module and name): define them at the top level of a "
              "module the workers can import -- or of the main script, outside `if __name__ == \"__main__\":` -- "
              "and make sure that module is on the workers' sys.path")
_LOAD_HINT_BY_VALUE = ("Functions of __main__, lambdas and closures travel by value (cloudpickle); functions and "
                       "classes of other modules by reference: make sure those modules are importable here (on "
                       "the workers' sys.path)")


def _rank():
    """This process's rank: the library's once initialized (an elastic
    worker's HOROVOD_RANK is only the rank it was started for), else the
    launcher's (static jobs, mpirun; elastic: the start rank)."""
    if _core.is_initialized():
        return int(_core.rank())
    for name in (job_env.RANK, job_env.OMPI_RANK, job_env.PMI_RANK, job_env.PMIX_RANK):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def _error(e, message=None, own_frame=True):
    tb = e.__traceback__ if own_frame or e.__traceback__ is None else e.__traceback__.tb_next
    try:
        exception = serialize.dumps(e)[0]
        pickle.loads(exception)  # only send what unpickles without the worker's state
    except Exception:  # noqa: BLE001 -- the type, message and traceback still go
        exception = None
    return {"status": "error", "type": type(e).__name__, "message": message if message is not None else str(e),
            "traceback": "".join(traceback.format_exception(type(e), e, tb)), "exception": exception}


def _fail(text):
    print(f"hvdcomm.runner.task: {text}", file=sys.stderr, flush=True)
    sys.exit(1)


def main():
    runner._in_worker = True
    # Taken out of the environment before fn runs: neither fn nor anything
    # it starts sees the secret.
    secret = os.environ.pop(runner.SECRET_ENV, "")
    port = os.environ.pop(runner.PORT_ENV, "")
    addr = os.environ.pop(runner.ADDR_ENV, "")
    try:
        key = bytes.fromhex(secret)
        port = int(port)
        if len(key) != channel.KEY_BYTES:
            raise ValueError
    except ValueError:
        _fail(f"started without horovod.run's channel ({runner.SECRET_ENV} / {runner.PORT_ENV} missing or malformed)")
    host = addr or os.environ.get(job_env.RENDEZVOUS_ADDR, "").strip("[]") or "127.0.0.1"
    try:
        setup = pickle.loads(channel.request(host, port, key, b"get"))
    except (OSError, channel.AuthenticationError) as e:
        _fail(f"cannot fetch the function from horovod.run's caller at {host}:{port}: {e}")

    caller_path = setup["sys_path"]
    sys.path[:] = caller_path + [p for p in sys.path if p not in caller_path]
    sys.argv[:] = setup["sys_argv"]

    outcome = None
    code = 0
    try:
        func, args, kwargs = serialize.loads(setup["call"], serialize.MainLoader(setup["main"]))
    except BaseException as e:  # noqa: BLE001 -- reported to the caller
        hint = _LOAD_HINT_BY_VALUE if serialize.by_value() else _LOAD_HINT
        if isinstance(e, ImportError) and getattr(e, "name", None) == "cloudpickle":
            hint = ("The caller sent it with cloudpickle, which this worker's Python cannot import: install "
                    "python3-cloudpickle (or pip's cloudpickle) for the workers' interpreter too")
        outcome = _error(e, f"cannot load the function in this worker: {e}. {hint}")
        code = 1
    if outcome is None:
        try:
            value = func(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- reported to the caller, as horovodrun's task does
            outcome = _error(e, own_frame=False)  # the traceback starts in fn
            if isinstance(e, SystemExit):
                outcome["message"] = f"fn called sys.exit({e.code!r}) instead of returning"
                code = e.code if isinstance(e.code, int) and e.code != 0 else 1
            else:
                code = 130 if isinstance(e, KeyboardInterrupt) else 1
        else:
            try:
                outcome = {"status": "ok", "value": serialize.dumps(value)[0]}
            except Exception as e:  # noqa: BLE001 -- an unpicklable return value
                outcome = _error(e, f"the return value of fn cannot be pickled: {e}", own_frame=False)
                code = 1
    outcome.update(host=os.environ.get(job_env.HOSTNAME) or socket.gethostname(), pid=os.getpid())

    rank = _rank()
    if outcome["status"] == "error":
        # The caller raises with the whole traceback; the job's output says
        # what happened in one line (all of it when it cannot be reported).
        first = (outcome["message"].splitlines() or [""])[0]
        print(f"hvdcomm.runner.task: rank {rank}: {outcome['type']}: {first} "
              "(traceback sent to horovod.run's caller)", file=sys.stderr, flush=True)
    if rank is None:
        if outcome["status"] == "error":
            print(outcome["traceback"], file=sys.stderr, end="", flush=True)
        _fail("cannot tell this worker's rank (no launcher rank variable, and fn returned with hvdcomm not "
              "initialized); its outcome is not reported")
    record = pickle.dumps(outcome, protocol=serialize.PROTOCOL)
    try:
        reply = channel.request(host, port, key, b"put %d\n" % rank + record)
    except (OSError, channel.AuthenticationError) as e:
        if outcome["status"] == "error":
            print(outcome["traceback"], file=sys.stderr, end="", flush=True)
        _fail(f"cannot report rank {rank}'s outcome to horovod.run's caller at {host}:{port}: {e}")
    if reply != b"ok":
        _fail(f"horovod.run's caller refused rank {rank}'s outcome")
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(code)
