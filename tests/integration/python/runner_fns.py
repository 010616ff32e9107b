"""Functions runner_test.py hands to horovod.run. They live in a module of
their own, next to the test, so the workers import it by name through the
caller's sys.path (the test's directory is sys.path[0] there)."""
import os
import socket
import time

from hvdcomm import _core
from hvdcomm import job_env
from hvdcomm.runner import channel


def rank_and_size():
    """The launcher's rank, then the library's rank and size once it formed
    the job (a real rendezvous through hvdrun's store), and the pid."""
    env_rank = int(os.environ[job_env.RANK])
    _core.init()
    try:
        return env_rank, _core.rank(), _core.size(), os.getpid()
    finally:
        _core.shutdown()


def combine(a, b, *, scale=1, blob=b""):
    """Uses args and kwargs; a large ``blob`` exercises the framing."""
    return int(os.environ[job_env.RANK]), a + b * scale, len(blob), blob[:4] + blob[-4:]


def environment(names):
    return {n: os.environ.get(n) for n in names}


def _explode(rank):
    raise ValueError(f"boom on rank {rank}")


def fail_on(rank):
    me = int(os.environ[job_env.RANK])
    if me == rank:
        _explode(me)
    # The other rank waits until hvdrun stops it: only the failing rank reports.
    time.sleep(30)
    return me


def exit_without_report(rank, code):
    if int(os.environ[job_env.RANK]) == rank:
        os._exit(code)
    time.sleep(30)


def unpicklable_result():
    return (x for x in range(3))


def nested_run():
    import horovod
    return horovod.run(rank_and_size, num_proc=1)


def sleep_forever(marker):
    time.sleep(120)
    return marker


def print_and_return(text):
    print(f"{text} from rank {os.environ[job_env.RANK]}", flush=True)
    return text


def library_rank_and_size():
    """The library's rank once it joined (the task reports under it), and
    HOROVOD_RANK: under mpirun none, in an elastic job the rank the worker
    was started for."""
    _core.init()
    return _core.rank(), _core.size(), os.environ.get(job_env.RANK)


def _initial_environ():
    """This process's environment as it started (/proc/self/environ still
    has what the task removed from os.environ)."""
    with open("/proc/self/environ", "rb") as f:
        entries = f.read().split(b"\0")
    return dict(e.decode().split("=", 1) for e in entries if b"=" in e)


def _ancestor_cmdlines(depth):
    out = []
    pid = os.getpid()
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                out.append(f.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            break
    return out


def attack_then_return():
    """Rank 1 plays a process that learnt the channel's port but not its
    secret: it tries to fetch the call and to plant a result for rank 0,
    each with a wrong key. Returns what it saw; every rank also returns
    whether the secret is on its own or an ancestor's command line and
    whether the task removed it from os.environ."""
    from hvdcomm.runner import PORT_ENV, SECRET_ENV
    me = int(os.environ[job_env.RANK])
    initial = _initial_environ()
    secret, port = initial[SECRET_ENV], int(initial[PORT_ENV])
    seen = {"secret_in_os_environ": SECRET_ENV in os.environ or PORT_ENV in os.environ,
            "secret_on_a_command_line": any(secret in c for c in _ancestor_cmdlines(6)),
            "value": f"genuine {me}"}
    if me == 1:
        host = os.environ.get(job_env.RENDEZVOUS_ADDR) or "127.0.0.1"
        wrong = channel.new_key()
        for body in (b"get", b"put 0\n" + b"forged"):
            try:
                channel.request(host, port, wrong, body)
                seen[body[:3].decode()] = "served"
            except (OSError, channel.AuthenticationError) as e:
                seen[body[:3].decode()] = f"refused: {type(e).__name__}"
        # A raw peer that skips the handshake gets the nonce and nothing else.
        with socket.create_connection((host, port), timeout=10) as s:
            s.settimeout(10)
            s.sendall(b"\0" * 64)
            got = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            seen["raw_bytes_received"] = len(got)
            seen["raw_tail"] = got[32:]
    return seen


_held = []  # kept open until the worker exits (after it reported)


def flood_then_return(count):
    """Rank 0 plays anyone on the network: it opens ``count`` connections to
    the caller's channel and leaves them idle, held until it exits (after
    its own result went out). Returns the rank and how many it opened."""
    import resource
    from hvdcomm.runner import PORT_ENV
    me = int(os.environ[job_env.RANK])
    opened = 0
    if me == 0:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = count + 64 if hard == resource.RLIM_INFINITY else min(count + 64, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))
        port = int(_initial_environ()[PORT_ENV])
        for _ in range(count):
            try:
                _held.append(socket.create_connection(("127.0.0.1", port), timeout=10))
            except OSError:
                break
            opened += 1
    return me, opened
