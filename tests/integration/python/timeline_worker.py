"""Worker of timeline_test.py (run under hvdrun). argv[1] is the mode:
steps N: N steps of two allreduces (grad.w, grad.b, submitted together so
they may fuse) and one broadcast; startstop DIR: hvd.start_timeline /
stop_timeline at run time; forever DIR: writes DIR/rank.R.pid, then
allreduces until killed; killloop DIR N SEED: see kill_loop (not under
hvdrun)."""
import ctypes
import json
import os
import random
import signal
import sys
import time

import torch
import hvdcomm.torch as hvd

PR_SET_CHILD_SUBREAPER = 36


def comm_and_ppid(pid):
    """(comm, ppid, state) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2:].split()
    return comm, int(fields[1]), fields[0]


def writer_children(rank_pid):
    """Pids of the processes named hvd-timeline whose parent is rank_pid."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            info = comm_and_ppid(int(d))
            if info and info[0] == "hvd-timeline" and info[1] == rank_pid:
                out.append(int(d))
    return out


def rank_forever(path):
    """A size-1 rank (forked from this process, torch already imported)
    recording as fast as it can: small named allreduces, cycle marks."""
    os.environ["HOROVOD_TIMELINE"] = path
    os.environ["HOROVOD_TIMELINE_MARK_CYCLES"] = "1"
    hvd.init()
    w = torch.ones(4)
    i = 0
    give_up = time.monotonic() + 20  # bounded even if the killer failed
    while time.monotonic() < give_up:
        hvd.allreduce(w, name=f"tensor.{i % 64}")
        i += 1
    os._exit(3)


def kill_loop(d, n, seed):
    """N times: fork a rank that records as fast as it can, SIGKILL it at a
    random moment once its file has grown past 64 KiB, wait until its
    timeline writer process (if any) is gone, then load the file. One JSON
    line per kill on stdout. This process is a subreaper, so the writer
    process, orphaned by the kill, becomes its child and is reaped here."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    rnd = random.Random(seed)
    for i in range(n):
        path = os.path.join(d, f"kill.{i}.json")
        pid = os.fork()
        if pid == 0:
            try:
                rank_forever(path)
            finally:
                os._exit(4)
        result = {"i": i}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(path) and os.path.getsize(path) > 65536:
                break
            time.sleep(0.005)
        result["writers"] = writers = writer_children(pid)
        time.sleep(rnd.uniform(0, 0.1))
        os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        os.waitpid(pid, 0)
        # Orphaned writer processes are ours now: each must exit within 1 s.
        gone_ms = 0.0
        for w in writers:
            while True:
                got, _ = os.waitpid(w, os.WNOHANG)
                if got == w or time.monotonic() > killed + 1:
                    break
                time.sleep(0.002)
            gone_ms = max(gone_ms, (time.monotonic() - killed) * 1000)
            if got != w:
                result["orphan"] = w
                os.kill(w, signal.SIGKILL)
                os.waitpid(w, 0)
        result["writer_gone_ms"] = round(gone_ms, 1)
        try:
            with open(path) as f:
                result["events"] = len(json.load(f))
        except ValueError as e:
            with open(path, "rb") as f:
                f.seek(max(0, os.path.getsize(path) - 120))
                result["error"] = f"{e}; tail: {f.read()!r}"
        os.unlink(path)
        print(json.dumps(result), flush=True)


mode = sys.argv[1]
if mode == "killloop":
    kill_loop(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    sys.exit(0)
hvd.init()
r = hvd.rank()
w = torch.ones(64) * (r + 1)
b = torch.ones(8)

if mode == "steps":
    for i in range(int(sys.argv[2])):
        hs = [hvd.allreduce_async(w, name="grad.w", op=hvd.Sum), hvd.allreduce_async(b, name="grad.b", op=hvd.Sum)]
        out = [hvd.synchronize(h) for h in hs]
        n = hvd.size()
        assert out[0][0].item() == n * (n + 1) / 2, out[0]
    hvd.broadcast(torch.arange(4.0), root_rank=0, name="bc")
elif mode == "startstop":
    d = sys.argv[2]
    hvd.start_timeline(os.path.join(d, "a.json"))
    hvd.allreduce(w, name="during")
    hvd.stop_timeline()
    # The other ranks announce "after" only once rank 0 has stopped (else
    # rank 0 may record their announcement: it is still recording then).
    stopped = os.path.join(d, "stopped")
    if r == 0:
        open(stopped, "w").close()
    else:
        deadline = time.monotonic() + 20
        while not os.path.exists(stopped) and time.monotonic() < deadline:
            time.sleep(0.005)
    hvd.allreduce(w, name="after")
    hvd.start_timeline(os.path.join(d, "b.json"), mark_cycles=True)
    for _ in range(3):
        hvd.allreduce(w, name="again")
    # no stop_timeline(): shutdown flushes and closes it
elif mode == "forever":
    with open(os.path.join(sys.argv[2], f"rank.{r}.pid.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(sys.argv[2], f"rank.{r}.pid.tmp"), os.path.join(sys.argv[2], f"rank.{r}.pid"))
    i = 0
    while True:
        hvd.allreduce(w, name=f"loop.{i % 4}")
        i += 1
        time.sleep(0.002)
hvd.shutdown()
print(f"rank {r} done")
