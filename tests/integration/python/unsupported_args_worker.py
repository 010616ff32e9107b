"""Run under hvdrun -np 2 (issue 20, "nothing is silently ignored"): every
argument hvdcomm.torch accepts but does not implement either means the
default (None, hvd.global_process_set, ...), and then gives the right
answer, or raises NotImplementedError naming the argument and issue 20 --
never runs the op on all ranks as if it had not been passed. A process set
that is not registered raises ValueError on every op (process sets
themselves: process_sets_worker.py). Loads through the horovod shim, as a
Horovod script would."""
import warnings

import torch
import horovod.torch as hvd
from horovod.common.process_sets import ProcessSet as ShimProcessSet

failures = []


def raises(what, fn, *needles):
    """fn() must raise NotImplementedError whose message names every needle and issue 20."""
    try:
        fn()
    except NotImplementedError as e:
        msg = str(e)
        missing = [n for n in needles + ("issue 20",) if n not in msg]
        if missing:
            failures.append(f"{what}: message {msg!r} lacks {missing}")
        return msg
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: raised {type(e).__name__}: {e} instead of NotImplementedError")
        return None
    failures.append(f"{what}: did not raise")
    return None


def raises_other(what, fn, exc, *needles):
    """fn() must raise `exc` whose message names every needle."""
    try:
        fn()
    except exc as e:
        missing = [n for n in needles if n not in str(e)]
        if missing:
            failures.append(f"{what}: message {str(e)!r} lacks {missing}")
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: raised {type(e).__name__}: {e} instead of {exc.__name__}")
        return
    failures.append(f"{what}: did not raise")


# ---- init: a non-default comm raises before anything starts
assert ShimProcessSet is hvd.ProcessSet
sub = hvd.ProcessSet([1, 0])
assert sub.ranks == [0, 1] and sub.size() is None and sub.process_set_id is None
assert str(sub) == "ProcessSet(process_set_id=None, ranks=[0, 1], mpi_comm=None)", str(sub)
raises("init(comm=object)", lambda: hvd.init(comm=object()), "comm=", "MPI communicator")
assert not hvd.is_initialized()
raises("init(comm=[0])", lambda: hvd.init(comm=[0]), "comm=[0]", "subset")
assert not hvd.is_initialized(), "init(comm=[0]) left hvdcomm initialized"
# the defaults: comm = all ranks, process_sets = [] / [global]
hvd.init(comm=[0, 1], process_sets=[hvd.global_process_set])
r, n = hvd.rank(), hvd.size()
assert n == 2, n
G = hvd.global_process_set
assert G.ranks == [0, 1] and G.size() == 2 and G.rank() == r and G.included() is True and G.process_set_id == 0
assert sub.included() is True

# ---- process_set= on every op: None and the global set give the answer,
# an unregistered set raises (and the op is not run: the next op still pairs up)
x = torch.tensor([1.0 + r, 10.0 * (r + 1)])
total = torch.tensor([3.0, 30.0])
for ps in (None, G):
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total)
    assert torch.equal(hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, process_set=ps)), total)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, process_set=ps)
    assert torch.equal(y, total)
    y = x.clone()
    assert torch.equal(hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Sum, process_set=ps)), total)
    assert all(torch.equal(t, total) for t in hvd.grouped_allreduce([x, x], op=hvd.Sum, process_set=ps))
    assert all(torch.equal(t, total)
               for t in hvd.synchronize(hvd.grouped_allreduce_async([x], op=hvd.Sum, process_set=ps)))
    ys = [x.clone()]
    hvd.grouped_allreduce_(ys, op=hvd.Sum, process_set=ps)
    assert torch.equal(ys[0], total)
    ys = [x.clone()]
    hvd.synchronize(hvd.grouped_allreduce_async_(ys, op=hvd.Sum, process_set=ps))
    assert torch.equal(ys[0], total)
    gathered = torch.tensor([[1.0, 10.0], [2.0, 20.0]])
    assert torch.equal(hvd.allgather(x.reshape(1, 2), process_set=ps), gathered)
    assert torch.equal(hvd.synchronize(hvd.allgather_async(x.reshape(1, 2), process_set=ps)), gathered)
    assert torch.equal(hvd.broadcast(x, 1, process_set=ps), torch.tensor([2.0, 20.0]))
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(x, 1, process_set=ps)), torch.tensor([2.0, 20.0]))
    y = x.clone()
    hvd.broadcast_(y, 0, process_set=ps)
    assert torch.equal(y, torch.tensor([1.0, 10.0]))
    y = x.clone()
    hvd.synchronize(hvd.broadcast_async_(y, 0, process_set=ps))
    assert torch.equal(y, torch.tensor([1.0, 10.0]))
    # alltoall: rank r sends element j to rank j
    assert torch.equal(hvd.alltoall(x, process_set=ps), torch.tensor([1.0, 2.0]) * (10.0 if r else 1.0))
    out, rs = hvd.synchronize(hvd.alltoall_async(x, splits=[1, 1], process_set=ps))
    assert torch.equal(out, torch.tensor([1.0, 2.0]) * (10.0 if r else 1.0)) and rs.tolist() == [1, 1]
    assert torch.equal(hvd.reducescatter(x, op=hvd.Sum, process_set=ps), total[r:r + 1])
    assert torch.equal(hvd.synchronize(hvd.reducescatter_async(x, op=hvd.Sum, process_set=ps)), total[r:r + 1])
    hvd.barrier(process_set=ps)
    assert torch.equal(hvd.grouped_allgather([x.reshape(1, 2)], process_set=ps)[0], gathered)
    assert torch.equal(hvd.synchronize(hvd.grouped_allgather_async([x.reshape(1, 2)], process_set=ps))[0], gathered)
    assert torch.equal(hvd.grouped_reducescatter([x], op=hvd.Sum, process_set=ps)[0], total[r:r + 1])
    assert torch.equal(hvd.synchronize(hvd.grouped_reducescatter_async([x], op=hvd.Sum, process_set=ps))[0],
                       total[r:r + 1])
    assert torch.equal(hvd.sparse_allreduce_async(x.to_sparse(), "sparse", hvd.Sum, process_set=ps)().to_dense(),
                       total)
    assert hvd.broadcast_object({"r": r}, 1, process_set=ps) == {"r": 1}
    assert hvd.allgather_object(r, process_set=ps) == [0, 1]

OPS = {
    "allreduce": lambda ps: hvd.allreduce(x, process_set=ps),
    "allreduce_async": lambda ps: hvd.allreduce_async(x, process_set=ps),
    "allreduce_": lambda ps: hvd.allreduce_(x.clone(), process_set=ps),
    "allreduce_async_": lambda ps: hvd.allreduce_async_(x.clone(), process_set=ps),
    "grouped_allreduce": lambda ps: hvd.grouped_allreduce([x], process_set=ps),
    "grouped_allreduce_async": lambda ps: hvd.grouped_allreduce_async([x], process_set=ps),
    "grouped_allreduce_": lambda ps: hvd.grouped_allreduce_([x.clone()], process_set=ps),
    "grouped_allreduce_async_": lambda ps: hvd.grouped_allreduce_async_([x.clone()], process_set=ps),
    "allgather": lambda ps: hvd.allgather(x, process_set=ps),
    "allgather_async": lambda ps: hvd.allgather_async(x, process_set=ps),
    "broadcast": lambda ps: hvd.broadcast(x, 0, process_set=ps),
    "broadcast_async": lambda ps: hvd.broadcast_async(x, 0, process_set=ps),
    "broadcast_": lambda ps: hvd.broadcast_(x.clone(), 0, process_set=ps),
    "broadcast_async_": lambda ps: hvd.broadcast_async_(x.clone(), 0, process_set=ps),
    "alltoall": lambda ps: hvd.alltoall(x, process_set=ps),
    "alltoall_async": lambda ps: hvd.alltoall_async(x, process_set=ps),
    "reducescatter": lambda ps: hvd.reducescatter(x, process_set=ps),
    "reducescatter_async": lambda ps: hvd.reducescatter_async(x, process_set=ps),
    "barrier": lambda ps: hvd.barrier(process_set=ps),
    "grouped_allgather": lambda ps: hvd.grouped_allgather([x], process_set=ps),
    "grouped_allgather_async": lambda ps: hvd.grouped_allgather_async([x], process_set=ps),
    "grouped_reducescatter": lambda ps: hvd.grouped_reducescatter([x], process_set=ps),
    "grouped_reducescatter_async": lambda ps: hvd.grouped_reducescatter_async([x], process_set=ps),
    "sparse_allreduce_async": lambda ps: hvd.sparse_allreduce_async(x.to_sparse(), "s", hvd.Sum, process_set=ps),
    "broadcast_object": lambda ps: hvd.broadcast_object(1, 0, process_set=ps),
    "allgather_object": lambda ps: hvd.allgather_object(1, process_set=ps),
    "DistributedOptimizer": lambda ps: hvd.DistributedOptimizer(
        torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1), process_set=ps),
}
for name, fn in OPS.items():
    for bad in (hvd.ProcessSet([0]), hvd.ProcessSet([0, 1])):
        raises_other(f"{name}(process_set={bad!r})", lambda: fn(bad), ValueError, f"process_set={bad}",
                     "not registered")
    raises_other(f"{name}(process_set=1)", lambda: fn(1), TypeError, "expected an hvd.ProcessSet")
# the rank-{0} set gives a different answer than the global one: a silent
# fallback would have returned the global sum, so the raise above matters.
# Without HOROVOD_DYNAMIC_PROCESS_SETS, adding and removing raise as in Horovod;
# the global set is never removed (False, as Horovod).
raises_other("add_process_set", lambda: hvd.add_process_set([0]), ValueError, "HOROVOD_DYNAMIC_PROCESS_SETS=1")
assert hvd.remove_process_set(G) is False and hvd.remove_process_set(sub) is False
# The timeline is implemented (timeline_test.py): rank 0 writes it, so an
# unwritable path raises there; other ranks do nothing, as in Horovod.
if hvd.rank() == 0:
    raises_other("start_timeline(unwritable)", lambda: hvd.start_timeline("/nonexistent/t.json"), OSError,
                 "/nonexistent/t.json")
else:
    hvd.start_timeline("/nonexistent/t.json")
hvd.stop_timeline()
raises("ProcessSet(comm)", lambda: hvd.ProcessSet(object()), "MPI communicator")

# ---- compression= is applied (not dropped) on every op that takes it
class Tagging(hvd.Compression.none):
    """Counts compress/decompress calls and doubles on decompress, so a
    dropped compression shows in the result."""
    calls = []

    @staticmethod
    def compress(tensor):
        Tagging.calls.append("c")
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        Tagging.calls.append("d")
        return tensor * 2


assert torch.equal(hvd.allreduce(x, op=hvd.Sum, compression=Tagging), total * 2)
assert torch.equal(hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, compression=Tagging)), total * 2)
w = x.clone().requires_grad_()
assert torch.equal(hvd.allreduce(w, op=hvd.Sum, compression=Tagging).detach(), total * 2)
assert all(torch.equal(t, total * 2) for t in hvd.grouped_allreduce([x, x], op=hvd.Sum, compression=Tagging))
assert torch.equal(hvd.reducescatter(x, op=hvd.Sum, compression=Tagging), total[r:r + 1] * 2)
assert torch.equal(hvd.reducescatter(w, op=hvd.Sum, compression=Tagging).detach(), total[r:r + 1] * 2)
assert Tagging.calls.count("c") == 7 and Tagging.calls.count("d") == 7, Tagging.calls
assert torch.equal(hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16), total)
# op=hvd.Adasum no longer raises (python.adasum checks it against a
# reference): on 2 ranks the Adasum of equal tensors is that tensor, of
# orthogonal ones their sum; compression= is applied to it too.
same = torch.tensor([3.0, -4.0])
assert torch.equal(hvd.allreduce(same, op=hvd.Adasum), same)
orth = torch.tensor([1.0, 0.0]) if r == 0 else torch.tensor([0.0, 2.0])
assert torch.equal(hvd.allreduce(orth, op=hvd.Adasum), torch.tensor([1.0, 2.0]))
assert torch.equal(hvd.allreduce(orth, op=hvd.Adasum, compression=Tagging), torch.tensor([2.0, 4.0]))
# grouped_allreduce of tensors that require grad is differentiable (as Horovod's)
outs = hvd.grouped_allreduce([w, w * 2], op=hvd.Sum)
(outs[0].sum() + outs[1].sum()).backward()
assert torch.equal(w.grad, torch.full((2,), 2.0 * 3)), w.grad  # d/dw of sum(allreduce(w) + allreduce(2w)), Sum over 2

# prescale/postscale on every op that takes them
assert torch.equal(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5), total)
assert torch.equal(hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0), total * 3)
assert torch.equal(hvd.grouped_allreduce([x], op=hvd.Sum, postscale_factor=4.0)[0], total * 4)
assert torch.equal(hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0), total[r:r + 1] * 2)

# ---- DistributedOptimizer: num_groups/groups warn (same result); sparse gradients work
model = torch.nn.Linear(2, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(1.0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), num_groups=2)
assert any("num_groups=2" in str(c.message) and "ignored" in str(c.message) for c in caught), \
    [str(c.message) for c in caught]
model(torch.full((1, 2), float(r + 1))).sum().backward()  # grad = [r+1, r+1], averaged = 1.5
opt.step()
assert torch.allclose(model.weight.detach(), torch.full((1, 2), 1.0 - 1.5)), model.weight
# sparse gradients no longer raise: sparse_as_dense=True and the sparse path
# (allgather) both give the averaged gradient, sparse again (the numbers are
# checked against a reference by python.optimizer_semantics)
for as_dense in (True, False):
    emb = torch.nn.Embedding(4, 2, sparse=True)
    with torch.no_grad():
        emb.weight.fill_(1.0)
    sopt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                    named_parameters=emb.named_parameters(), sparse_as_dense=as_dense)
    emb(torch.tensor([r])).sum().backward()  # gradient 1 in row r, averaged: 1/2 in rows 0 and 1
    sopt.step()
    want = torch.tensor([[0.5, 0.5], [0.5, 0.5], [1.0, 1.0], [1.0, 1.0]])
    if not (emb.weight.grad.is_sparse and torch.equal(emb.weight.detach(), want)):
        failures.append(f"sparse gradient (sparse_as_dense={as_dense}): weight {emb.weight.detach().tolist()}")
# broadcast_optimizer_state(model=...) is accepted (the pickled state needs no help)
bopt = torch.optim.SGD(model.parameters(), lr=0.5 if r == 0 else 9.0)
hvd.broadcast_optimizer_state(bopt, 0, model=model)
assert bopt.param_groups[0]["lr"] == 0.5

# broadcast_parameters: a non-tensor entry is an error, not skipped
try:
    hvd.broadcast_parameters({"w": torch.zeros(1), "step": 3}, 0)
    failures.append("broadcast_parameters with a non-tensor entry: did not raise")
except ValueError as e:
    if "'step'" not in str(e) or "broadcast_object" not in str(e):
        failures.append(f"broadcast_parameters: message {e}")
hvd.barrier()
if failures:
    raise SystemExit(f"rank {r}: " + "\n".join(failures))
print(f"rank {r}: every unsupported argument raised, every default worked")
hvd.shutdown()
