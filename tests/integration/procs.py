"""Finding a test's processes through /proc, for "nothing is left behind"
checks. Tests tag what they start with HVD_TEST_TOKEN=<uuid> in the
environment; every process of the job inherits it (hvdrun, agents,
workers, scripts), wherever it was reparented to.

    sys.path.insert(0, <tests/integration>)
    from procs import processes_with_token, token_processes, processes_mentioning
    from procs import kill_token_processes, wait_token_processes_gone
"""
import os


def token_processes(token, exclude=()):
    """(pid, environ entries, argv) of every live (not zombie) process whose
    environment holds HVD_TEST_TOKEN=token, except this process and `exclude`."""
    needle = ("HVD_TEST_TOKEN=" + token).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid() or int(name) in exclude:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
            if needle not in env:
                continue
            with open(f"/proc/{name}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[-1].split()[0] == b"Z":
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        found.append((int(name), env, cmd))
    return found


def processes_with_token(token, exclude=()):
    """The pids of token_processes()."""
    return [pid for pid, _, _ in token_processes(token, exclude)]


def processes_mentioning(text):
    """(pid, command line) of every process but this one whose command line contains `text`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append((int(name), cmd.strip()))
    return found


def read_lines_timed(proc):
    """Starts one daemon thread per pipe of `proc` (stdout, stderr) that
    appends (arrival time, line) to a list and notifies a condition.
    Returns (out, err, cv, readers); hold cv to read the lists."""
    import threading
    import time
    out, err = [], []
    cv = threading.Condition()

    def read(stream, sink):
        for raw in iter(stream.readline, b""):
            with cv:
                sink.append((time.monotonic(), raw.decode(errors="replace").rstrip("\n")))
                cv.notify_all()
        with cv:
            cv.notify_all()

    readers = [threading.Thread(target=read, args=(s, sink), daemon=True)
               for s, sink in ((proc.stdout, out), (proc.stderr, err))]
    for t in readers:
        t.start()
    return out, err, cv, readers


def kill_token_processes(token):
    """SIGKILL to every process token_processes() finds (a test's clean-up)."""
    import signal
    for pid in processes_with_token(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def wait_token_processes_gone(token, seconds=5.0):
    """The pids still holding the token after waiting up to `seconds` for
    them to go ([] once none is left)."""
    import time
    deadline = time.monotonic() + seconds
    while True:
        left = processes_with_token(token)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)
