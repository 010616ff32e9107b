"""Worker of timeline_test.py (run under hvdrun). argv[1] is the mode:
steps N: N steps of two allreduces (grad.w, grad.b, submitted together so
they may fuse) and one broadcast; startstop DIR: hvd.start_timeline /
stop_timeline at run time; forever DIR: writes DIR/rank.R.pid, then
allreduces until killed."""
import os
import sys
import time

import torch
import hvdcomm.torch as hvd

mode = sys.argv[1]
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
