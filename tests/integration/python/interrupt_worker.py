"""Run under hvdrun -np 2: Ctrl-C (SIGINT) interrupts a blocked synchronize(),
and a signal handler that raises interrupts add_process_set() and
remove_process_set() waiting for the other rank (issue 27: they waited in
native code until the call returned); the calls then complete in the
background and the job goes on and shuts down cleanly."""
import os
import signal
import threading
import time
import torch
import hvdcomm.torch as hvd

os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] = "1"
hvd.init()
r = hvd.rank()
if r == 0:
    threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    h = hvd.allreduce_async(torch.ones(2), op=hvd.Sum, name="late")
    try:
        hvd.synchronize(h)
        raise SystemExit("synchronize returned although rank 1 had not submitted")
    except KeyboardInterrupt:
        assert time.monotonic() - t0 < 1.5, "interrupt took too long"
        print("rank 0: interrupted ok")
    # the op stays pending; once rank 1 submits, synchronize() completes it
    assert torch.equal(hvd.synchronize(h), torch.full((2,), 2.0))
else:
    time.sleep(1.5)
    hvd.allreduce(torch.ones(2), op=hvd.Sum, name="late")
hvd.barrier()


class Alarm(Exception):
    pass


def on_alarm(signum, frame):
    raise Alarm()


signal.signal(signal.SIGALRM, on_alarm)
from hvdcomm import _core  # noqa: E402


def interrupted(call, what):
    """Rank 0 calls `call` with a SIGALRM handler raising after 0.3 s while
    rank 1 joins it 1.5 s later."""
    if r != 0:
        time.sleep(1.5)
        return call()
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    t0 = time.monotonic()
    try:
        call()
        raise SystemExit(f"{what} returned although rank 1 had not called it")
    except Alarm:
        waited = time.monotonic() - t0
        assert waited < 1.0, f"{what}: the SIGALRM handler ran only after {waited:.2f} s"
        print(f"rank 0: {what} interrupted after {waited:.2f} s")


def wait_for_ids(want):
    deadline = time.monotonic() + 20
    while sorted(_core.process_set_ids()) != want:
        assert time.monotonic() < deadline, f"process sets {_core.process_set_ids()}, expected {want}"
        time.sleep(0.05)


ps = hvd.add_process_set([0])  # every rank calls it; [0, 1] is the global set
assert ps.process_set_id == 1, ps
interrupted(lambda: hvd.remove_process_set(ps), "remove_process_set")
wait_for_ids([0])  # rank 0: the interrupted removal completed in the background
interrupted(lambda: hvd.add_process_set([1]), "add_process_set")
wait_for_ids([0, 1])  # and so did the addition
assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == 2.0
hvd.shutdown()
print(f"rank {r}: interrupt ok")
