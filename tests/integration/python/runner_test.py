"""python.runner: horovod.run (hvdcomm.runner.run) end to end, as a caller
would use it (docs/python.md, "horovod.run"). One process, the caller; each
run() starts the build's hvdrun with 2 local ranks. Needs no torch.

PYTHONPATH=<build>/python:<build>/python/compat; usage: runner_test.py HVDRUN

* rank-dependent return values in rank order, from a module function,
  from functions and classes of this script's __main__ and of a
  `python -m` main module, lambdas, closures, a function defined under
  the main guard, a `python -c` function and a script calling run() at its
  top level without a guard (cloudpickle: by value, as Horovod); the same
  script without cloudpickle (stdlib pickle, by reference: a guarded
  script works, an unguarded or interactive one gets the reason); args and kwargs
  (with a 4 MiB argument); the caller's environment reaches the workers;
* a raising rank -> RunError naming it, with its traceback (and the
  exception as __cause__); a rank that exits without reporting, an
  unpicklable return value, a function the workers cannot load, a nested
  run() -> RunError with the reason;
* parameter validation before anything starts; every parameter's hvdrun
  flag, and hvdrun accepting them; hvdrun's own error surfacing;
* the secret: no result or call for a peer without it (channel level and
  against the live server of a run), never on a command line, not left in
  a worker's os.environ;
* output forwarded to sys.stdout, --output-filename, executable=, Ctrl-C
  (KeyboardInterrupt stops the job, no process left), elastic and mpirun
  jobs (ranks from the library), find_hvdrun.
"""
import contextlib
import io
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import horovod
import horovod.runner
import hvdcomm.runner as runner
from hvdcomm import _build_info, job_env
from hvdcomm.runner import RunError, channel

import runner_fns

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


# --- functions and a class of __main__: cloudpickle sends them by value
# (without it the workers would run this script as __mp_main__).
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


def in_main(factor):
    return Point(int(os.environ[job_env.RANK]) * factor, factor)


def section(name):
    print(f"--- {name}", flush=True)


def main():
    check(horovod.run is runner.run and horovod.runner.run is runner.run, "horovod.run is hvdcomm.runner.run")
    check(runner.find_hvdrun() == _build_info.HVDRUN == HVDRUN, f"run() starts this build's hvdrun: "
          f"{runner.find_hvdrun()} / {_build_info.HVDRUN} / {HVDRUN}")

    section("rank-dependent values, args, kwargs, environment")
    out = horovod.run(runner_fns.rank_and_size, num_proc=2)
    check([o[:3] for o in out] == [(0, 0, 2), (1, 1, 2)], f"rank_and_size in rank order: {out}")
    check(len({o[3] for o in out} | {os.getpid()}) == 3, f"two worker processes: {out}")
    blob = os.urandom(4 << 20)
    out = horovod.run(runner_fns.combine, args=(1, 2), kwargs={"scale": 10, "blob": blob}, num_proc=2,
                      hosts="localhost:2")
    check(out == [(0, 21, len(blob), blob[:4] + blob[-4:]), (1, 21, len(blob), blob[:4] + blob[-4:])],
          f"args and kwargs (4 MiB blob) reach every rank: {[o[:3] for o in out]}")
    out = horovod.run(in_main, args=(7,), num_proc=2)
    check([type(p) for p in out] == [Point, Point] and [(p.x, p.y) for p in out] == [(0, 7), (7, 7)],
          "a function of __main__ runs; a __main__ class comes back as this __main__'s")
    with tempfile.TemporaryDirectory(prefix="hvd-runner-m-") as d:  # python -m pkg.mod: its __main__ by name
        os.mkdir(os.path.join(d, "pk"))
        open(os.path.join(d, "pk", "__init__.py"), "w").close()
        with open(os.path.join(d, "pk", "train.py"), "w") as f:
            f.write("import horovod, os\ndef f(x):\n    return (int(os.environ['HOROVOD_RANK']), x, __name__)\n"
                    "if __name__ == '__main__':\n    print('RESULT', horovod.run(f, args=(5,), num_proc=2))\n")
        p = subprocess.run([sys.executable, "-m", "pk.train"], cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60)
        check("RESULT [(0, 5, '__main__'), (1, 5, '__main__')]" in p.stdout,
              f"a function of a `python -m` main module (by value: its globals are the caller's): {p.stdout}")
        no_cloudpickle = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [os.path.join(d, "hide")] + os.environ.get("PYTHONPATH", "").split(os.pathsep)))
        os.mkdir(os.path.join(d, "hide"))
        with open(os.path.join(d, "hide", "cloudpickle.py"), "w") as f:
            f.write("raise ImportError('hidden by runner_test.py', name='cloudpickle')\n")
        p = subprocess.run([sys.executable, "-m", "pk.train"], cwd=d, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=60, env=no_cloudpickle)
        check("RESULT [(0, 5, '__mp_main__'), (1, 5, '__mp_main__')]" in p.stdout,
              f"without cloudpickle: by reference, the workers run the main module as __mp_main__: {p.stdout}")
        unguarded = os.path.join(d, "unguarded.py")
        with open(unguarded, "w") as f:
            f.write("import horovod, os\nscale = 3\ndef f(x):\n    return int(os.environ['HOROVOD_RANK']) * x * scale\n"
                    "print('RESULT', horovod.run(f, args=(2,), num_proc=2), flush=True)\n")
        p = subprocess.run([sys.executable, unguarded], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60)
        check(p.returncode == 0 and p.stdout.count("RESULT") == 1 and "RESULT [0, 6]" in p.stdout,
              f"run() at a script's top level, unguarded (Horovod's docs' form): {p.stdout}")
        p = subprocess.run([sys.executable, unguarded], cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60, env=no_cloudpickle)
        check(p.returncode != 0 and "inside a horovod.run worker" in p.stdout and "if __name__" in p.stdout
              and "cloudpickle" in p.stdout, f"the same without cloudpickle: the reason, naming it: {p.stdout}")
        p = subprocess.run([sys.executable, "-c", "import horovod\ndef f():\n    return 1\n"
                            "horovod.run(f, num_proc=2)"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=60, env=dict(no_cloudpickle, **{runner.HVDRUN_ENV: "/nonexistent/x"}))
        check(p.returncode == 1 and "TypeError: horovod.run: f is defined in __main__ of an interactive session"
              in p.stdout and "install python3-cloudpickle" in p.stdout,
              f"without cloudpickle, an interactive __main__ function is refused before anything starts: {p.stdout}")

    section("by value: lambdas, closures, interactive and guarded functions")
    offset = 40
    out = horovod.run(lambda: int(os.environ[job_env.RANK]) + offset, num_proc=2)
    check(out == [40, 41], f"a lambda and the variable it closes over: {out}")

    def make_counter(start):
        seen = [start]

        def counter(step):
            seen.append(step)
            return sum(seen) + int(os.environ[job_env.RANK])
        return counter
    out = horovod.run(make_counter(10), args=(5,), num_proc=2)
    check(out == [15, 16], f"a closure with its own state: {out}")
    guarded = globals()["defined_under_the_guard"]
    out = horovod.run(guarded, num_proc=1)
    check(out == [1], f"a function defined under the main guard: {out}")
    p = subprocess.run([sys.executable, "-c", "import horovod, os\ndef f():\n    return os.environ['HOROVOD_RANK']\n"
                        "print('RESULT', horovod.run(f, num_proc=2))"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    check("RESULT ['0', '1']" in p.stdout, f"a function defined in python -c (a notebook's case): {p.stdout}")
    marker = f"value-{os.getpid()}-{time.time()}"
    os.environ["HVD_RUNNER_TEST_ENV"] = marker
    try:
        out = horovod.run(runner_fns.environment, args=(["HVD_RUNNER_TEST_ENV", runner.SECRET_ENV,
                                                          runner.PORT_ENV],), num_proc=2)
    finally:
        del os.environ["HVD_RUNNER_TEST_ENV"]
    expect = {"HVD_RUNNER_TEST_ENV": marker, runner.SECRET_ENV: None, runner.PORT_ENV: None}
    check(out == [expect, expect], f"the caller's environment reaches fn, the channel's does not: {out}")
    check(runner.SECRET_ENV not in os.environ, "the caller's own environment never gets the secret")

    section("failures")
    e = raises(RunError, horovod.run, runner_fns.fail_on, args=(1,), num_proc=2)
    check(isinstance(e, RuntimeError) and e.rank == 1 and e.exit_code not in (0, None), f"rank 1 named: {e!r}")
    check("rank 1" in str(e) and "ValueError: boom on rank 1" in str(e), f"message: {e}")
    check('in _explode' in e.remote_traceback and 'in fail_on' in e.remote_traceback
          and "runner_fns.py" in e.remote_traceback and e.remote_traceback.rstrip() in str(e),
          f"the remote traceback, in the message: {e.remote_traceback}")
    check("task.py" not in e.remote_traceback, "the traceback starts in fn")
    check(isinstance(e.__cause__, ValueError) and str(e.__cause__) == "boom on rank 1", f"cause: {e.__cause__!r}")
    check(e.failures == {1: e.remote_traceback}, f"failures: {e.failures}")

    e = raises(RunError, horovod.run, runner_fns.exit_without_report, args=(1, 3), num_proc=2)
    check(e.rank is None and e.exit_code not in (0, None) and "exited with code 3" in str(e)
          and "[hvdrun]" not in str(e), f"a rank that dies without reporting: hvdrun's reason: {e}")
    tail = ["[0]<stdout>:an error in the output", "[12:00:00.000] [hvdrun] [info] started",
            "[12:00:00.100] [hvdrun] [error] rank 0 on localhost: exited with code 1",
            "[12:00:00.100] [hvdrun] [error] last 1 line of rank 0's stderr:",
            "[12:00:00.100] [hvdrun] [error]   [0] quoted worker line",
            "[0]<stderr>:hvdcomm.runner.task: cannot fetch the function from horovod.run's caller at h:1: refused"]
    check(runner._hvdrun_detail(tail) == "rank 0 on localhost: exited with code 1; [0]<stderr>:hvdcomm.runner.task: "
          "cannot fetch the function from horovod.run's caller at h:1: refused", runner._hvdrun_detail(tail))
    check(runner._hvdrun_detail(["hvdrun: error: -np: bad", "usage"]) == "hvdrun: error: -np: bad", "usage error")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(runner.__file__)))
    p = subprocess.run([HVDRUN, "-np", "1", "-H", "localhost:1", "--", sys.executable, "-c", runner._BOOTSTRAP,
                        package_parent], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    check(p.returncode != 0 and "hvdcomm.runner.task: started without horovod.run's channel" in p.stdout,
          f"the task alone refuses to run: {p.stdout}")
    e = raises(RunError, horovod.run, runner_fns.unpicklable_result, num_proc=2)
    check(e.rank in (0, 1) and "cannot be pickled" in str(e), f"an unpicklable return value: {e}")
    e = raises(RunError, horovod.run, runner_fns.nested_run, num_proc=1)
    check("inside a horovod.run worker" in str(e), f"a nested run() is refused: {e}")
    with tempfile.TemporaryDirectory(prefix="hvd-runner-gone-") as d:  # a module only the caller can import
        with open(os.path.join(d, "caller_only_mod.py"), "w") as f:
            f.write("def g():\n    return 1\n")
        sys.path.insert(0, d)
        try:
            import caller_only_mod
            payload = runner._pickle_call(caller_only_mod.g, (), {})
        finally:
            sys.path.remove(d)
    p = subprocess.run([sys.executable, "-c", "import pickle, sys\nfrom hvdcomm.runner import serialize, task\n"
                        "try:\n    serialize.loads(sys.stdin.buffer.read(), serialize.MainLoader(None))\n"
                        "except ImportError as e:\n    print('LOAD', type(e).__name__, e)"],
                       input=payload, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    check(b"LOAD ModuleNotFoundError No module named 'caller_only_mod'" in p.stdout,
          f"a module function goes by reference, so a worker without the module cannot load it: {p.stdout}")

    section("validation")
    os.environ[runner.HVDRUN_ENV] = "/nonexistent/hvdrun"  # reached only if validation let a call through
    try:
        for kw, exc in [(dict(hosts="localhost:2", hostfile="/etc/hosts"), ValueError),
                        (dict(use_gloo=True, use_mpi=True), ValueError),
                        (dict(num_proc=0), ValueError), (dict(num_proc="2"), TypeError),
                        (dict(num_proc=True), TypeError), (dict(num_proc=None), ValueError),
                        (dict(cooldown_range=(1,)), ValueError), (dict(ssh_port=70000), ValueError),
                        (dict(kwargs=[1]), TypeError), (dict(hosts=""), TypeError),
                        (dict(start_timeout=0), ValueError), (dict(executable=""), TypeError)]:
            e = raises(exc, horovod.run, runner_fns.rank_and_size, **kw)
            check(str(e).startswith("horovod.run: "), f"{kw}: {e}")
        raises(TypeError, horovod.run, 3)
        lock = threading.Lock()
        e = raises(TypeError, horovod.run, lambda: lock.locked(), num_proc=2)
        check("cannot pickle" in str(e) and "lock" in str(e), f"a lambda holding a lock: {e}")
        e = raises(FileNotFoundError, horovod.run, runner_fns.rank_and_size, num_proc=1)
        check(runner.HVDRUN_ENV in str(e), f"a wrong {runner.HVDRUN_ENV}: {e}")
    finally:
        del os.environ[runner.HVDRUN_ENV]
    e = raises(RunError, horovod.run, runner_fns.rank_and_size, num_proc=2, hosts="bad host:2")
    check(e.exit_code == 2 and "hvdrun: error:" in str(e) and "bad host" in str(e), f"hvdrun's error: {e}")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = horovod.run(runner_fns.rank_and_size, np=2)
    check([o[1] for o in out] == [0, 1] and any(issubclass(x.category, DeprecationWarning) and "np is deprecated"
                                                in str(x.message) for x in w), "np= works, deprecated")

    section("parameters -> hvdrun flags")
    ident = tempfile.NamedTemporaryFile(prefix="hvd-runner-key-")
    args = runner.hvdrun_args(num_proc=2, hosts=["localhost:1", "127.0.0.1:1"], start_timeout=20, ssh_port=2222,
                              ssh_identity_file=ident.name, disable_cache=True, output_filename="/tmp/o",
                              verbose=2, use_gloo=True, network_interfaces=["lo"])
    check(args == ["-np", "2", "-H", "localhost:1,127.0.0.1:1", "--start-timeout", "20", "-p", "2222",
                   "-i", ident.name, "--disable-cache", "--output-filename", "/tmp/o", "--verbose", "--gloo",
                   "--network-interface", "lo"], f"static flags: {args}")
    p = subprocess.run([HVDRUN] + args + ["--dry-run", "--", "true"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    check(p.returncode == 0, f"hvdrun accepts them: {p.stdout}")
    args = runner.hvdrun_args(num_proc=2, min_num_proc=1, max_num_proc=4, slots=2, reset_limit=3,
                              cooldown_range=(5, 10), host_discovery_script="/bin/d.sh", use_mpi=True,
                              mpi_args="--bind-to none", hosts=None)
    check(args == ["-np", "2", "--host-discovery-script", "/bin/d.sh", "--min-np", "1", "--max-np", "4",
                   "--slots-per-host", "2", "--reset-limit", "3", "--blacklist-cooldown-range", "5", "10",
                   "--mpi", "--mpi-args=--bind-to none"], f"elastic and MPI flags: {args}")
    check(runner.hvdrun_args(num_proc=3) == ["-np", "3", "-H", "localhost:3"], "default hosts: localhost:num_proc")
    check(runner.hvdrun_args(num_proc=2, hostfile="/h") == ["-np", "2", "--hostfile", "/h"], "hostfile")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        e = raises(RunError, horovod.run, runner_fns.rank_and_size, num_proc=1, network_interface="nosuchnic0")
    check("nosuchnic0" in str(e) and any("network_interface is deprecated" in str(x.message) for x in w),
          f"network_interface= (deprecated) reaches hvdrun: {e}")

    section("the secret")
    key, wrong = channel.new_key(), channel.new_key()
    server = channel.Server(key, b"the call", "127.0.0.1")
    try:
        check(channel.request("127.0.0.1", server.port, key, b"get") == b"the call", "the key fetches the call")
        for body in (b"get", b"put 0\nforged"):
            raises((channel.AuthenticationError, ConnectionError), channel.request, "127.0.0.1", server.port,
                   wrong, body)
        check(channel.request("127.0.0.1", server.port, key, b"put 1\ngenuine") == b"ok", "a keyed put")
        time.sleep(0.2)
        records, rejected = server.snapshot()
        check(records == [(1, b"genuine")] and rejected == 2, f"wrong-key requests change nothing: {records}, "
              f"{rejected}")
        # A peer that passes the handshake but sends a message with a bad MAC.
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            session = channel.client_handshake(s, key)
            session._key = wrong  # what tampering on the wire amounts to
            session.send(b"put 0\ntampered")
            raises(ConnectionError, session.recv)
        time.sleep(0.2)
        check(server.snapshot() == ([(1, b"genuine")], 3), f"a tampered message is dropped: {server.snapshot()}")
    finally:
        server.close()
    # A fake server without the key never gets a request out of a worker.
    fake = socket.create_server(("127.0.0.1", 0))
    got = []

    def fake_server():
        c, _ = fake.accept()
        c.settimeout(10)
        c.sendall(os.urandom(32))  # a nonce
        data = b""
        with contextlib.suppress(OSError):
            while len(data) < 64:
                data += c.recv(64 - len(data))
            c.sendall(os.urandom(32))  # a proof made without the key
            while chunk := c.recv(65536):
                data += chunk
        got.append(data)
        c.close()

    t = threading.Thread(target=fake_server)
    t.start()
    raises(channel.AuthenticationError, channel.request, "127.0.0.1", fake.getsockname()[1], key,
           b"put 0\n" + pickle.dumps("a result"))
    t.join()
    fake.close()
    check(len(got[0]) == 64 and b"a result" not in got[0], f"the client only sent its proof: {len(got[0])} bytes")
    # Against a live run: rank 1 attacks the server with a wrong key.
    out = horovod.run(runner_fns.attack_then_return, num_proc=2)
    check([o["value"] for o in out] == ["genuine 0", "genuine 1"], f"the forged result did not land: {out}")
    check(out[1]["get"].startswith("refused") and out[1]["put"].startswith("refused"),
          f"the live server refused the wrong key: {out[1]}")
    check(out[1]["raw_bytes_received"] == 32 + len(channel.REFUSAL) and out[1]["raw_tail"] == channel.REFUSAL,
          f"a raw peer gets the nonce and the refusal only: {out[1]}")
    check(not any(o["secret_on_a_command_line"] or o["secret_in_os_environ"] for o in out),
          f"the secret is on no command line and gone from os.environ: {out}")

    section("output, executable, Ctrl-C, elastic")
    buf = io.StringIO()
    real = sys.stdout
    sys.stdout = buf
    try:
        out = horovod.run(runner_fns.print_and_return, args=("hello",), num_proc=2)
    finally:
        sys.stdout = real
    check(out == ["hello", "hello"] and "hello from rank 0" in buf.getvalue() and "hello from rank 1"
          in buf.getvalue(), f"worker output reaches sys.stdout (a notebook's): {buf.getvalue()!r}")
    with tempfile.TemporaryDirectory(prefix="hvd-runner-test-") as d:
        horovod.run(runner_fns.print_and_return, args=("filed",), num_proc=2,
                    output_filename=os.path.join(d, "logs"))
        written = ""
        for root, _, files in os.walk(os.path.join(d, "logs")):
            for f in files:
                with open(os.path.join(root, f)) as fh:
                    written += fh.read()
        check("filed from rank 0" in written and "filed from rank 1" in written,
              f"output_filename: {written!r}")
        wrapper = os.path.join(d, "py-wrapper")
        with open(wrapper, "w") as f:
            f.write(f"#!/bin/sh\nHVD_RUNNER_VIA_WRAPPER=yes exec {sys.executable} \"$@\"\n")
        os.chmod(wrapper, 0o755)
        out = horovod.run(runner_fns.environment, args=(["HVD_RUNNER_VIA_WRAPPER"],), num_proc=2,
                          executable=wrapper, start_timeout=30, disable_cache=True, use_gloo=True)
        check(out == [{"HVD_RUNNER_VIA_WRAPPER": "yes"}] * 2, f"executable= runs the workers: {out}")

        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if our parent ignores SIGINT
        marker = f"hvd-runner-ctrl-c-{os.getpid()}"
        timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        raises(KeyboardInterrupt, horovod.run, runner_fns.sleep_forever, args=(marker,), num_proc=2)
        took = time.monotonic() - t0
        left = subprocess.run(["pgrep", "-f", marker], stdout=subprocess.PIPE, text=True).stdout.split()
        check(took < 20 and not left, f"Ctrl-C stops the job ({took:.1f} s; left: {left})")

        discover = os.path.join(d, "discover.sh")
        with open(discover, "w") as f:
            f.write("#!/bin/sh\necho localhost:2\n")
        os.chmod(discover, 0o755)
        probe = subprocess.run([HVDRUN, "--host-discovery-script", discover, "-np", "1", "true"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        if probe.returncode != 0:
            print(f"note: no elastic check, hvdrun has no elastic mode: {probe.stdout.strip()}")
        else:
            out = horovod.run(runner_fns.library_rank_and_size, num_proc=2, min_num_proc=1, max_num_proc=2,
                              host_discovery_script=discover)
            # HOROVOD_RANK: the rank each worker was started for (horovodrun's rule).
            check(out == [(0, 2, "0"), (1, 2, "1")], f"elastic: ranks from the library's world: {out}")
    if shutil.which("mpirun"):
        out = horovod.run(runner_fns.library_rank_and_size, num_proc=2, use_mpi=True)
        check(out == [(0, 2, None), (1, 2, None)], f"use_mpi: ranks from mpirun: {out}")
    else:
        print("note: no mpirun; use_mpi not run")

    section("find_hvdrun")
    with tempfile.TemporaryDirectory(prefix="hvd-runner-path-") as d:
        os.symlink(HVDRUN, os.path.join(d, "hvdrun"))
        saved, path = _build_info.HVDRUN, os.environ["PATH"]
        _build_info.HVDRUN = "/nonexistent/build/hvdrun"
        os.environ["PATH"] = d + os.pathsep + path
        try:
            check(runner.find_hvdrun() == os.path.join(d, "hvdrun"), "hvdrun on PATH when the build's is gone")
            os.environ["PATH"] = "/nonexistent"
            e = raises(FileNotFoundError, runner.find_hvdrun)
            check("/nonexistent/build/hvdrun" in str(e) and "PATH" in str(e), f"what was tried: {e}")
        finally:
            _build_info.HVDRUN, os.environ["PATH"] = saved, path
    print(f"runner: {checks} checks passed")


if __name__ == "__main__":
    def defined_under_the_guard():
        return 1

    main()
