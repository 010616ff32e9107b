"""Run under hvdrun -np 2: Ctrl-C (SIGINT) interrupts a blocked synchronize()."""
import os
import signal
import threading
import time
import torch
import hvdcomm.torch as hvd

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
hvd.shutdown()
print(f"rank {r}: interrupt ok")
