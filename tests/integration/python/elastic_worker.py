"""Run under hvdrun -np 2 (not elastic): the collective parts of
hvdcomm.torch.elastic -- sync from the member with the most commits (lowest
rank on ties), TorchState sync of model/optimizer/sampler/attributes,
ElasticSampler partitions, and run() = sync + one call outside elastic."""
import sys

import torch

import hvdcomm.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, n
assert not hvd.elastic.enabled()


def fail(what):
    print(f"FAIL rank {r}: {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def params(model):
    return torch.cat([p.detach().flatten() for p in model.state_dict().values()])


def make(seed):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    return m, o


def step(m, o, seed):
    torch.manual_seed(seed)
    o.zero_grad()
    m(torch.randn(8, 4)).pow(2).sum().backward()
    o.step()


# 1) ties -> rank 0's state wins (Horovod's behaviour at the first sync)
m, o = make(seed=100 + r)  # different weights per rank
sampler = hvd.elastic.ElasticSampler(list(range(11)), shuffle=True, seed=5)
st = hvd.elastic.TorchState(m, o, sampler=sampler, epoch=r, tag=f"rank{r}")
root_params = hvd.broadcast(params(m), 0, name="expect0")
st.sync()
if not torch.equal(params(m), root_params):
    fail("tie: model is not rank 0's")
if st.epoch != 0 or st.tag != "rank0" or st.commits != 0:
    fail(f"tie: attributes not rank 0's: {st.epoch} {st.tag} {st.commits}")

# 2) the member with more commits wins, even if it is not rank 0; momentum follows
step(m, o, seed=1)  # same data on both ranks: states stay equal
if r == 1:
    step(m, o, seed=2)  # rank 1 trains further and commits twice (local when not elastic)
    st.epoch, st.tag = 7, "trained"
    sampler.set_epoch(7)
    sampler.record_indices([0, 1, 2])
    st.commit()
    st.commit()
else:
    sampler.record_indices([3])  # a local record at another epoch: must not leak into rank 1's
expect = hvd.broadcast(params(m), 1, name="expect1")
mom = hvd.broadcast(o.state_dict()["state"][0]["momentum_buffer"], 1, name="expect_mom")
st.sync()
if not torch.equal(params(m), expect):
    fail("most commits: model is not rank 1's")
if not torch.equal(o.state_dict()["state"][0]["momentum_buffer"], mom):
    fail("most commits: momentum is not rank 1's")
if (st.epoch, st.tag, st.commits) != (7, "trained", 2):
    fail(f"most commits: attributes {(st.epoch, st.tag, st.commits)}")
if sampler.epoch != 7 or sampler.processed_indices != {0, 1, 2}:
    fail(f"sampler not rank 1's: {sampler.epoch} {sampler.processed_indices}")
# sync saved the adopted state: restore returns to it
step(m, o, seed=3)
st.restore()
if not torch.equal(params(m), expect):
    fail("restore after sync")

# 3) local record_indices of members at the root's epoch are merged
sampler.record_indices([4 + r])
st.sync()
if sampler.processed_indices != {0, 1, 2, 4, 5}:
    fail(f"merged processed indices: {sampler.processed_indices}")
mine = list(sampler)
both = hvd.allgather_object(mine, name="parts")
if sorted(both[0] + both[1]) != sorted(set(range(11)) - {0, 1, 2, 4, 5}) or len(mine) != 3:
    fail(f"partitions: {both}")

# 4) record_batch keeps every rank's processed set identical without communication
sampler.record_batch(0, 2)
sets = hvd.allgather_object(sampler.processed_indices, name="sets")
if sets[0] != sets[1] or len(sets[0]) != 9:
    fail(f"record_batch sets differ: {sets}")

# 5) run() outside elastic: sync (commits 2 on both -> rank 0) then one call
calls = []


@hvd.elastic.run
def train(state, k):
    calls.append(k)
    state.epoch += 1
    state.commit()
    return hvd.allreduce(torch.tensor([float(state.epoch)]), op=hvd.Sum, name="train").item()


if st.commits != 2:
    fail(f"commits {st.commits}")
total = train(st, 5)
if calls != [5] or total != 16.0 or st.commits != 3:
    fail(f"run: calls {calls} total {total} commits {st.commits}")

# 6) ObjectState alone, and check_host_updates outside elastic is a no-op
os_ = hvd.elastic.ObjectState(value=[r])
os_.sync()
if os_.value != [0]:
    fail(f"ObjectState sync: {os_.value}")
os_.check_host_updates()

hvd.shutdown()
print(f"rank {r}: elastic_worker ok", flush=True)
