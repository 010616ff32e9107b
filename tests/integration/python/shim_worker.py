"""Run under hvdrun -np 2 with PYTHONPATH=<build>/python:<build>/python/compat: unmodified horovod script."""
import torch
import horovod.torch as hvd

hvd.init()
x = hvd.allreduce(torch.tensor([float(hvd.rank())]), name="shim")
assert x.item() == 0.5, x
assert hvd.size() == 2
print(f"rank {hvd.rank()}: shim ok")
hvd.shutdown()
