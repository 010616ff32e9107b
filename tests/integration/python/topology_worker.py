"""Run under hvdrun -np 6 -H localhost:1,127.0.0.1:2,127.0.0.2:3 (three local
"hosts" of 1, 2 and 3 slots): topology calls against the layout, and
is_homogeneous() False on every rank. A rank's own view cannot tell: with
this layout local_size() * cross_size() == size() on some ranks (the host
of 3, local ranks 0 and 1: 3 * 2 == 6) and not on others."""
import torch
import hvdcomm.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 6, n
slots = [1, 2, 3]
host = 0 if r < 1 else 1 if r < 3 else 2
first = sum(slots[:host])
assert hvd.local_size() == slots[host] and hvd.local_rank() == r - first, (r, hvd.local_rank(), hvd.local_size())
# Horovod's cross communicator: the ranks with this local_rank, one per host that has it.
lr = hvd.local_rank()
assert hvd.cross_size() == sum(1 for s in slots if s > lr), (r, hvd.cross_size())
assert hvd.cross_rank() == sum(1 for s in slots[:host] if s > lr), (r, hvd.cross_rank())
answers = hvd.allgather_object(hvd.is_homogeneous())
assert answers == [False] * n, answers
# the local view disagrees between ranks here, so it could not have been used
local_views = hvd.allgather_object(hvd.local_size() * hvd.cross_size() == n)
assert len(set(local_views)) == 2, local_views
assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="t").item() == n
hvd.shutdown()
print(f"rank {r}: topology ok")
