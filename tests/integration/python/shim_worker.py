"""Run under hvdrun -np 2 with PYTHONPATH=<build>/python:<build>/python/compat: unmodified horovod script."""
import torch
import horovod.torch as hvd
import horovod.torch.elastic
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt

hvd.init()
x = hvd.allreduce(torch.tensor([float(hvd.rank())]), name="shim")
assert x.item() == 0.5, x
assert hvd.size() == 2
# the elastic surface scripts use
assert hvd.elastic.run is horovod.torch.elastic.run
assert issubclass(HorovodInternalError, RuntimeError) and issubclass(HostsUpdatedInterrupt, RuntimeError)
assert HorovodInternalError is hvd.HorovodInternalError
model = torch.nn.Linear(2, 1)
torch.nn.init.constant_(model.weight, float(hvd.rank()))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, sampler=hvd.elastic.ElasticSampler(list(range(8))), epoch=0)


@hvd.elastic.run
def train(state):
    state.epoch += 1
    state.commit()
    return float(model.weight.sum())


assert train(state) == 0.0  # synced from rank 0 (tie on commits)
assert state.epoch == 1 and len(state.sampler) == 4
print(f"rank {hvd.rank()}: shim ok")
hvd.shutdown()
