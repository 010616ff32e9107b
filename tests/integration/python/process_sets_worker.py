"""Run under hvdrun -np 3 (and -np 2): Horovod's process sets (issue 20,
docs/python.md "Process sets"). With 3 ranks the sets are A = {0, 2} and
B = {1, 2}; with 2 ranks A = {0} and B = {1}. Every op on a set gives the
set's result, which differs from the global one; a rank outside the set
gets ValueError; both sets run at once; DistributedOptimizer(process_set=)
averages over the set only; then dynamic sets (init(process_sets="dynamic"))
are added, used, removed and their ids reused. Loads through the horovod
shim, as a Horovod script would."""
import os

import torch
import horovod.torch as hvd


def expect_error(exc, fn, *needles):
    try:
        fn()
    except exc as e:
        missing = [n for n in needles if n not in str(e)]
        assert not missing, f"{exc.__name__} {str(e)!r} lacks {missing}"
        return
    raise AssertionError(f"did not raise {exc.__name__} (expected {needles})")


assert os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS") is None
# ---- static sets
probe = hvd.ProcessSet([2, 0])
assert probe.ranks == [0, 2] and probe.size() is None and probe.rank() is None
hvd_size = int(os.environ["HOROVOD_SIZE"])
A = hvd.ProcessSet([0, 2] if hvd_size == 3 else [0])
B = hvd.ProcessSet([1, 2] if hvd_size == 3 else [1])
expect_error(ValueError, lambda: hvd.init(process_sets=[A, hvd.ProcessSet(list(A.ranks))]),
             "process_sets entry number 1 is a duplicate")
assert not hvd.is_initialized()
hvd.init(process_sets=[A, B])
r, n = hvd.rank(), hvd.size()
assert n == hvd_size
assert (A.process_set_id, B.process_set_id) == (1, 2)
assert str(A) == f"ProcessSet(process_set_id=1, ranks={A.ranks}, mpi_comm=None)"
assert hvd.global_process_set.ranks == list(range(n))
assert A.size() == len(A.ranks) and A.included() == (r in A.ranks)
if r in A.ranks:
    assert A.rank() == A.ranks.index(r)
else:
    expect_error(ValueError, A.rank, f"rank {r} is not a member of process set 1")


def check_set(S, tag):
    """Every op on S, from a member; results computed from S's ranks."""
    me, k = S.ranks.index(r), len(S.ranks)
    x = torch.tensor([1.0 + r, 10.0 * (r + 1)])
    total = sum(torch.tensor([1.0 + q, 10.0 * (q + 1)]) for q in S.ranks)
    everyone = sum(torch.tensor([1.0 + q, 10.0 * (q + 1)]) for q in range(n))
    got = hvd.allreduce(x, op=hvd.Sum, process_set=S, name=f"{tag}.sum")
    assert torch.equal(got, total) and not torch.equal(got, everyone), (got, total, everyone)
    assert torch.allclose(hvd.allreduce(x, process_set=S, name=f"{tag}.avg"), total / k)
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, process_set=S, name=f"{tag}.inplace")
    assert torch.equal(y, total)
    outs = hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=S, name=f"{tag}.grouped")
    assert torch.equal(outs[0], total) and torch.equal(outs[1], 2 * total)
    gathered = hvd.allgather(torch.full((me + 1, 2), float(r)), process_set=S, name=f"{tag}.gather")
    assert torch.equal(gathered, torch.cat([torch.full((i + 1, 2), float(q)) for i, q in enumerate(S.ranks)]))
    root = S.ranks[-1]  # a global rank
    assert torch.equal(hvd.broadcast(x, root, process_set=S, name=f"{tag}.bcast"),
                       torch.tensor([1.0 + root, 10.0 * (root + 1)]))
    # alltoall: member i sends row j to member j.
    rows = torch.arange(k, dtype=torch.float32) + 100 * r
    assert torch.equal(hvd.alltoall(rows, process_set=S, name=f"{tag}.a2a"),
                       torch.tensor([100.0 * q + me for q in S.ranks]))
    rs = hvd.reducescatter(torch.ones(2 * k, 3) * (r + 1), op=hvd.Sum, process_set=S, name=f"{tag}.rs")
    assert torch.equal(rs, torch.full((2, 3), float(sum(q + 1 for q in S.ranks))))
    hvd.barrier(process_set=S)
    g2 = hvd.grouped_allgather([torch.full((1,), float(r)), torch.full((2,), float(r))], process_set=S)
    assert torch.equal(g2[0], torch.tensor([float(q) for q in S.ranks])), g2
    assert torch.equal(g2[1], torch.tensor([float(q) for q in S.ranks for _ in range(2)])), g2
    rs2 = hvd.grouped_reducescatter([torch.ones(k) * (r + 1)], op=hvd.Sum, process_set=S)
    assert torch.equal(rs2[0], torch.full((1,), float(sum(q + 1 for q in S.ranks)))), rs2
    sp = torch.sparse_coo_tensor(torch.tensor([[r]]), torch.tensor([1.0]), (n,))
    dense = hvd.synchronize(hvd.sparse_allreduce_async(sp, name=f"{tag}.sparse", op=hvd.Average,
                                                        process_set=S)).to_dense()
    assert torch.equal(dense, torch.tensor([1.0 / k if q in S.ranks else 0.0 for q in range(n)])), dense
    assert hvd.broadcast_object({"from": r}, root, process_set=S) == {"from": root}
    assert hvd.allgather_object(r, process_set=S) == S.ranks
    # differentiable allgather: this member's rows of the averaged gradient
    w = torch.ones(1, 2, requires_grad=True)
    (hvd.allgather(w * (r + 1), process_set=S, name=f"{tag}.grad").sum() * (r + 1)).backward()
    avg = sum(q + 1 for q in S.ranks) / k
    assert torch.allclose(w.grad, torch.full((1, 2), avg * (r + 1))), w.grad


for S, tag in ((A, "A"), (B, "B")):
    if S.included():
        check_set(S, tag)
    else:
        # an op on a set this rank is not in: a clear error, nothing sent
        x = torch.ones(2)
        expect_error(ValueError, lambda: hvd.allreduce(x, process_set=S, name=f"{tag}.foreign"),
                     f"rank {r} is not a member of process set {S.process_set_id}")
        expect_error(ValueError, lambda: hvd.barrier(process_set=S), "not a member")
        expect_error(ValueError, lambda: hvd.broadcast_object(1, S.ranks[0], process_set=S), "not a member")

# both sets at once: rank 2 (in both with 3 ranks) has an op pending on each
handles = [(S, hvd.allreduce_async(torch.tensor([float(r + 1)]), op=hvd.Sum, name="both", process_set=S))
           for S in (A, B) if S.included()]
for S, h in handles:
    assert hvd.synchronize(h).item() == sum(q + 1 for q in S.ranks)

# DistributedOptimizer(process_set=A): members average their gradients over
# A; the others step on their own gradient.
model = torch.nn.Linear(2, 1, bias=False)
with torch.no_grad():
    model.weight.fill_(1.0)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                               named_parameters=model.named_parameters(), process_set=A)
model(torch.full((1, 2), float(r + 1))).sum().backward()  # gradient [r+1, r+1]
opt.step()
g = sum(q + 1 for q in A.ranks) / len(A.ranks) if A.included() else r + 1
assert torch.allclose(model.weight.detach(), torch.full((1, 2), 1.0 - g)), (model.weight, g)

# no dynamic sets without HOROVOD_DYNAMIC_PROCESS_SETS, as Horovod
expect_error(ValueError, lambda: hvd.add_process_set([0]), "HOROVOD_DYNAMIC_PROCESS_SETS=1")
assert hvd.remove_process_set(hvd.global_process_set) is False
hvd.shutdown()

# ---- dynamic sets
hvd.init(process_sets="dynamic")
assert os.environ["HOROVOD_DYNAMIC_PROCESS_SETS"] == "1"
C = hvd.add_process_set([n - 1, 0] if n > 2 else [0])
assert C.ranks == ([0, n - 1] if n > 2 else [0]) and C.process_set_id == 1
expect_error(ValueError, lambda: hvd.add_process_set(hvd.ProcessSet(list(C.ranks))),
             "Attempted to add a duplicate process set")
expect_error(ValueError, lambda: hvd.add_process_set([0, n]), f"rank {n} is out of range")
# ranks that call differently all fail (none is left waiting)
expect_error(ValueError, lambda: hvd.add_process_set([r]), "same arguments", "rank 0 called add_process_set([0])")
D = hvd.add_process_set(hvd.ProcessSet([1]))
assert D.process_set_id == 2
if C.included():
    x = torch.tensor([float(r + 1)])
    assert hvd.allreduce(x, op=hvd.Sum, process_set=C).item() == sum(q + 1 for q in C.ranks)
if D.included():
    assert hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=D).item() == 5.0
assert hvd.remove_process_set(C) is True and C.process_set_id is None
assert hvd.remove_process_set(C) is False  # no longer registered
expect_error(ValueError, lambda: hvd.allreduce(torch.ones(1), process_set=C), "not registered")
E = hvd.add_process_set([0, 1] if n > 2 else [0])  # the freed id first, as Horovod
assert E.process_set_id == 1, E
if E.included():
    assert hvd.allreduce(torch.tensor([float(r + 1)]), op=hvd.Sum, process_set=E).item() == \
        sum(q + 1 for q in E.ranks)
assert hvd.remove_process_set(D) and hvd.remove_process_set(E)
hvd.barrier()
print(f"rank {r}: process sets of {n} ranks OK")
hvd.shutdown()
