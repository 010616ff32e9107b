"""Run under hvdrun (python.optimizer_semantics: 2 ranks; python.optimizer_semantics_np3:
3 ranks), PYTHONPATH=<build>/python:<build>/python/compat. Issue 20 item 3,
checked against references every rank computes itself from every rank's data:

* DistributedOptimizer with parameters that get no gradient on some ranks in
  a step (grad None): zeros are submitted, as Horovod does (no hang), and the
  result is the average with zeros for the ranks that had none;
* sparse gradients (nn.Embedding(sparse=True)): through sparse_allreduce_async
  (allgather of indices and values) and with sparse_as_dense=True, against
  a dense embedding trained on every rank's batch; an embedding unused on
  one rank in a later step; fp16 compression with sparse_as_dense;
* sparse_allreduce_async itself (Sum, Average, a rank with no entries);
* grouped_allgather / grouped_reducescatter (and _async, differentiable);
* bool tensors: allgather, broadcast, alltoall, grouped_allgather,
  broadcast_parameters of a bool buffer; allreduce/reducescatter refuse them;
* broadcast_optimizer_state(optimizer, root_rank, model=) with a sparse
  embedding, to ranks whose optimizer has no state yet."""
import sys

import torch

import horovod.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n > 1, "run with more than one rank"
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"rank {r}: FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def close(a, b, what, tol=1e-10):
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    err = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    check(a.shape == b.shape and err <= tol, f"{what}: shapes {tuple(a.shape)} {tuple(b.shape)}, max error {err}")


def same_on_all_ranks(tensors, what):
    everyone = hvd.allgather_object([t.detach().clone() for t in tensors])
    for q in range(1, n):
        check(all(torch.equal(a, b) for a, b in zip(everyone[0], everyone[q])), f"{what}: rank {q} differs from 0")


# ------------------------------------------------ parameters without gradients on some ranks
class Branchy(torch.nn.Module):
    """Rank-dependent forward: `use` says which heads this rank runs."""

    def __init__(self):
        super().__init__()
        self.trunk = torch.nn.Linear(4, 3)
        self.a = torch.nn.Linear(3, 1)
        self.b = torch.nn.Linear(3, 1)
        self.never = torch.nn.Linear(3, 1)  # used by no rank

    def forward(self, x, use):
        h = torch.tanh(self.trunk(x))
        out = 0
        if "a" in use:
            out = out + self.a(h)
        if "b" in use:
            out = out + self.b(h)
        return out


def uses(q, step):
    # step 0: rank 0 runs head a only, the others a and b; step 1: the last
    # rank runs b only, the others both; step 2: rank 1 runs a, the others b.
    if step == 0:
        return {"a"} if q == 0 else {"a", "b"}
    if step == 1:
        return {"b"} if q == n - 1 else {"a", "b"}
    return {"a"} if q == 1 else {"b"}


torch.manual_seed(11)
model = Branchy().double()
ref = Branchy().double()
ref.load_state_dict(model.state_dict())
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.3), named_parameters=model.named_parameters())
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.3)
g = torch.Generator().manual_seed(3)
for step in range(3):
    xs = torch.randn(n, 5, 4, generator=g, dtype=torch.float64)
    opt.zero_grad(set_to_none=True)
    model(xs[r], uses(r, step)).pow(2).mean().backward()
    check(model.never.weight.grad is None, "a parameter no rank uses has no gradient before step()")
    opt.step()
    check(torch.equal(model.never.weight.grad, torch.zeros_like(model.never.weight)),
          "a parameter no rank used gets a zero gradient (Horovod zero-fills it)")
    # reference: the average over ranks of each rank's gradient, zeros where it had none
    grads = {k: torch.zeros_like(p) for k, p in ref.named_parameters()}
    for q in range(n):
        ref.zero_grad(set_to_none=True)
        ref(xs[q], uses(q, step)).pow(2).mean().backward()
        for k, p in ref.named_parameters():
            if p.grad is not None:
                grads[k] += p.grad
    for k, p in ref.named_parameters():
        p.grad = grads[k] / n
    ref_opt.step()
    for (k, p), q in zip(model.named_parameters(), ref.parameters()):
        close(p, q, f"missing gradients, step {step}: {k}")
same_on_all_ranks(list(model.parameters()), "missing gradients")


# Horovod's test_force_allreduce: every torch optimizer (but L-BFGS and
# SparseAdam), rank 0's loss from a head the others do not use; step()
# completes and every rank ends with the same parameters.
import inspect  # noqa: E402

D_in, H, D_out = 20, 6, 4


class TwoHeads(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(D_in, H)
        self.fc2 = torch.nn.Linear(H, D_out)
        self.fc3 = torch.nn.Linear(D_out, D_out)

    def forward(self, x_):
        x1 = self.fc2(torch.relu(self.fc1(x_)))
        return x1, self.fc3(torch.relu(x1))


optimizers = sorted(((c.__name__, c) for c in torch.optim.Optimizer.__subclasses__()
                     if c.__module__.startswith("torch.optim") and c not in (torch.optim.LBFGS, torch.optim.SparseAdam)),
                    key=lambda t: t[0])
check(len(optimizers) >= 8, f"torch's optimizers found: {[o for o, _ in optimizers]}")
xf = torch.randn(8, D_in, generator=torch.Generator().manual_seed(r))
yf = torch.randn(8, D_out, generator=torch.Generator().manual_seed(50 + r))
for (oname, ocls), oparams in ((o, p) for o in optimizers for p in (
        dict(lr=0.2, momentum=0.9, weight_decay=0.1, centered=True), dict(lr=0.2))):
    net = TwoHeads()
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    kw = {k: v for k, v in oparams.items() if k in inspect.signature(ocls.__init__).parameters}
    fopt = hvd.DistributedOptimizer(ocls(net.parameters(), **kw), named_parameters=net.named_parameters())
    y1, y2 = net(xf)
    fopt.zero_grad()
    torch.nn.functional.mse_loss(y1 if r == 0 else y2, yf, reduction="sum").backward()
    fopt.step()
    same_on_all_ranks(list(net.parameters()), f"force allreduce with {oname} {kw}")


# ------------------------------------------------ sparse gradients
class EmbNet(torch.nn.Module):
    def __init__(self, sparse):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 3, sparse=sparse)
        self.head = torch.nn.Linear(3, 1)

    def forward(self, idx):
        return self.head(self.emb(idx)).squeeze(-1)


def sparse_run(sparse_as_dense, compression=hvd.Compression.none, steps=3, tol=1e-10, skip=None):
    """Trains EmbNet(sparse=True) with DistributedOptimizer and a dense
    EmbNet on every rank's batch in-process; `skip` = (step, rank): that
    rank does not use the embedding in that step."""
    torch.manual_seed(5)
    m = EmbNet(sparse=True).double()
    dense = EmbNet(sparse=False).double()
    dense.load_state_dict(m.state_dict())
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5), named_parameters=m.named_parameters(),
                                 sparse_as_dense=sparse_as_dense, compression=compression)
    ro = torch.optim.SGD(dense.parameters(), lr=0.5)
    gen = torch.Generator().manual_seed(9)
    for step in range(steps):
        # rank q looks up 2 + q indices (repeats included), targets random
        idx = [torch.randint(0, 10, (2 + q,), generator=gen) for q in range(n)]
        ys = [torch.randn(2 + q, generator=gen, dtype=torch.float64) for q in range(n)]

        def loss_of(net, q):
            if skip == (step, q):  # this rank's loss does not touch the embedding
                return (net.head(torch.ones(1, 3, dtype=torch.float64)).sum() - ys[q][0]) ** 2
            return torch.nn.functional.mse_loss(net(idx[q]), ys[q])
        o.zero_grad(set_to_none=True)
        loss_of(m, r).backward()
        check(skip == (step, r) or m.emb.weight.grad.is_sparse, "nn.Embedding(sparse=True) gives a sparse gradient")
        o.step()
        # (a rank that had no gradient with sparse_as_dense submitted dense zeros: its gradient stays dense)
        check(m.emb.weight.grad.is_sparse or (sparse_as_dense and skip == (step, r)),
              f"sparse_as_dense={sparse_as_dense}: the reduced gradient is sparse again")
        ro.zero_grad()
        (sum(loss_of(dense, q) for q in range(n)) / n).backward()
        ro.step()
        what = f"sparse_as_dense={sparse_as_dense} {compression.__name__} skip={skip} step {step}"
        close(m.emb.weight, dense.emb.weight, f"{what}: embedding", tol)
        close(m.head.weight, dense.head.weight, f"{what}: head", tol)
    same_on_all_ranks(list(m.parameters()), f"sparse_as_dense={sparse_as_dense} {compression.__name__}")


sparse_run(sparse_as_dense=False)
sparse_run(sparse_as_dense=True)
# the embedding unused on rank 1 in step 1 (after a step with sparse gradients)
sparse_run(sparse_as_dense=False, skip=(1, 1))
sparse_run(sparse_as_dense=True, skip=(1, n - 1))
sparse_run(sparse_as_dense=True, compression=hvd.Compression.fp16, steps=2, tol=2e-3)

# Horovod's test_sparse_embeddings: SparseAdam (which takes only sparse
# gradients, so sparse_as_dense must give them back sparse), no named_parameters
for as_dense in (False, True):
    torch.manual_seed(2)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    hvd.broadcast_parameters(emb.state_dict(), 0)
    sa = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1), sparse_as_dense=as_dense)
    inp = torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]]) if r == 0 else torch.LongTensor([[1, 3, 4], [4, 7, 9]])
    sa.zero_grad()
    emb(inp).sum().backward()
    sa.step()
    same_on_all_ranks([emb.weight], f"SparseAdam, sparse_as_dense={as_dense}")

# sparse_allreduce_async itself: rank q holds entries at rows q and q+1 (none on the last rank)
vals = torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * r
if r == n - 1:
    st = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.int64), torch.zeros(0, 3), (n + 1, 3))
else:
    st = torch.sparse_coo_tensor(torch.tensor([[r, r + 1]]), vals, (n + 1, 3))
expect = torch.zeros(n + 1, 3)
for q in range(n - 1):
    expect[q:q + 2] += torch.arange(6, dtype=torch.float32).reshape(2, 3) + 10 * q
h = hvd.sparse_allreduce_async(st, name="sparse.sum", op=hvd.Sum)
out = h()
check(out.is_sparse and out.shape == st.shape and out._nnz() == 2 * (n - 1), f"sparse Sum: {out}")
close(out.to_dense(), expect, "sparse_allreduce_async Sum")
h = hvd.sparse_allreduce_async(st, name="sparse.avg", op=hvd.Average)
close(hvd.synchronize(h).to_dense(), expect / n, "sparse_allreduce_async Average through synchronize()", 1e-5)
check(hvd.poll(h), "poll() of a finished sparse handle")
try:
    hvd.sparse_allreduce_async(st.to_dense(), name="sparse.dense", op=hvd.Sum)
    check(False, "sparse_allreduce_async of a dense tensor must raise")
except ValueError as e:
    check("sparse" in str(e), f"dense input: {e}")

# ------------------------------------------------ grouped allgather / reducescatter
ts = [torch.full((r + 1, 2), float(r)), torch.arange(3, dtype=torch.int64).reshape(1, 3) + 100 * r,
      torch.tensor([r % 2 == 0] * (2 - r % 2), dtype=torch.bool)]
want = [torch.cat([torch.full((q + 1, 2), float(q)) for q in range(n)]),
        torch.cat([torch.arange(3, dtype=torch.int64).reshape(1, 3) + 100 * q for q in range(n)]),
        torch.tensor(sum(([q % 2 == 0] * (2 - q % 2) for q in range(n)), []), dtype=torch.bool)]
for outs, how in ((hvd.grouped_allgather(ts, name="ga"), "grouped_allgather"),
                  (hvd.synchronize(hvd.grouped_allgather_async(ts)), "grouped_allgather_async")):
    check(isinstance(outs, list) and len(outs) == 3, f"{how} returns a list")
    for i, (o, w) in enumerate(zip(outs, want)):
        check(o.dtype == w.dtype and torch.equal(o, w), f"{how} tensor {i}: {o} != {w}")
# differentiable: d/dx sum(allgather(x) * w) with w equal on every rank is w's rows of this rank
xs = [torch.full((r + 1, 2), 1.0 + r, requires_grad=True), torch.ones(2, 1, requires_grad=True)]
ws = [torch.arange(2.0 * sum(q + 1 for q in range(n))).reshape(-1, 2), torch.arange(2.0 * n).reshape(-1, 1) + 7]
outs = hvd.grouped_allgather(xs, name="ga.grad")
sum((o * w).sum() for o, w in zip(outs, ws)).backward()
off = sum(q + 1 for q in range(r))
close(xs[0].grad, ws[0][off:off + r + 1], "grouped_allgather gradient 0")
close(xs[1].grad, ws[1][2 * r:2 * r + 2], "grouped_allgather gradient 1")

rows = 2 * n
ts = [torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) * (r + 1),
      torch.full((n, 3), float(r), dtype=torch.float32)]
sums = [torch.arange(rows * 2, dtype=torch.float64).reshape(rows, 2) * sum(q + 1 for q in range(n)),
        torch.full((n, 3), float(sum(range(n))), dtype=torch.float32)]
mine = [s[2 * r:2 * r + 2] for s in sums[:1]] + [sums[1][r:r + 1]]
outs = hvd.grouped_reducescatter(ts, name="grs", op=hvd.Sum)
for i, (o, w) in enumerate(zip(outs, mine)):
    check(o.dtype == w.dtype, f"grouped_reducescatter dtype {i}")
    close(o, w, f"grouped_reducescatter Sum tensor {i}")
outs = hvd.synchronize(hvd.grouped_reducescatter_async(ts, op=hvd.Average, prescale_factor=2.0))
for i, (o, w) in enumerate(zip(outs, mine)):
    close(o, w * 2 / n, f"grouped_reducescatter_async Average, prescale 2, tensor {i}", 1e-6)
outs = hvd.grouped_reducescatter(ts, op=hvd.Sum, compression=hvd.Compression.fp16)
for i, (o, w) in enumerate(zip(outs, mine)):
    check(o.dtype == w.dtype, f"grouped_reducescatter fp16 keeps dtype {i}")
    close(o, w, f"grouped_reducescatter fp16 tensor {i}", 1e-9)  # small integers: exact in fp16
# differentiable, as Horovod defines it: the gradient of sum(reducescatter_Sum(x) * w)
# is allgather(w) * size() (every rank's rows), of sum(reducescatter_Average(x) * w) allgather(w)
x = torch.ones(rows, 2, requires_grad=True)
w = torch.arange(4.0).reshape(2, 2) + 10 * r
(hvd.grouped_reducescatter([x], op=hvd.Sum)[0] * w).sum().backward()
close(x.grad, n * torch.cat([torch.arange(4.0).reshape(2, 2) + 10 * q for q in range(n)]), "grouped_reducescatter grad")
x = torch.ones(rows, 2, requires_grad=True)
(hvd.grouped_reducescatter([x], op=hvd.Average, prescale_factor=0.5)[0] * w).sum().backward()
close(x.grad, 0.5 * torch.cat([torch.arange(4.0).reshape(2, 2) + 10 * q for q in range(n)]),
      "grouped_reducescatter Average grad (prescale 0.5)")

# ------------------------------------------------ bool tensors
b = torch.tensor([[r % 2 == 1, True], [False, r == 0]])
gathered = hvd.allgather(b)
check(gathered.dtype == torch.bool and torch.equal(
    gathered, torch.cat([torch.tensor([[q % 2 == 1, True], [False, q == 0]]) for q in range(n)])), "bool allgather")
check(torch.equal(hvd.broadcast(b, n - 1), torch.tensor([[(n - 1) % 2 == 1, True], [False, n == 1]])),
      "bool broadcast")
bb = torch.tensor([r == 0, r != 0, True])
hvd.broadcast_(bb, 0)
check(torch.equal(bb, torch.tensor([True, False, True])), "bool broadcast_ in place")
a2a = hvd.alltoall(torch.tensor([q == r for q in range(n)]))
check(a2a.dtype == torch.bool and torch.equal(a2a, torch.tensor([q == r for q in range(n)])), f"bool alltoall {a2a}")
# a module with a bool buffer: broadcast_parameters of its state_dict
mod = torch.nn.Module()
mod.register_buffer("mask", torch.tensor([r == 0, r == 1, False]))
hvd.broadcast_parameters(mod.state_dict(), root_rank=1)
check(torch.equal(mod.mask, torch.tensor([False, True, False])), "broadcast_parameters of a bool buffer")
for how, fn in (("allreduce", lambda: hvd.allreduce(b)), ("allreduce_", lambda: hvd.allreduce_(b.clone())),
                ("grouped_allreduce", lambda: hvd.grouped_allreduce([b])),
                ("reducescatter", lambda: hvd.reducescatter(torch.ones(n, dtype=torch.bool), op=hvd.Sum))):
    try:
        fn()
        check(False, f"{how} of a bool tensor must raise")
    except ValueError as e:
        check("bool tensors cannot be reduced" in str(e), f"{how} of bool: {e}")
hvd.barrier()  # the refused ops left nothing pending

# ------------------------------------------------ broadcast_optimizer_state(model=)
torch.manual_seed(21 + r)  # ranks start different
m = EmbNet(sparse=True).double()
hvd.broadcast_parameters(m.state_dict(), root_rank=0)
o = torch.optim.SGD(m.parameters(), lr=0.1 * (r + 1), momentum=0.9)
if r == 0:  # only the root has state (momentum buffers, one of them from a sparse gradient)
    m(torch.tensor([1, 2, 2])).sum().backward()
    o.step()
hvd.broadcast_optimizer_state(o, root_rank=0, model=m)
check(o.param_groups[0]["lr"] == 0.1, "broadcast_optimizer_state(model=): root's learning rate")
st = o.state_dict()["state"]
check(len(st) == 3, f"broadcast_optimizer_state(model=): state of the 3 parameters on rank {r}: {list(st)}")
check(st[0]["momentum_buffer"].is_sparse, "the embedding's momentum buffer is sparse (root's, broadcast)")
same_on_all_ranks([st[k]["momentum_buffer"].to_dense() if st[k]["momentum_buffer"].is_sparse
                   else st[k]["momentum_buffer"] for k in sorted(st)], "broadcast_optimizer_state(model=)")
do = hvd.DistributedOptimizer(torch.optim.Adam(m.head.parameters(), lr=1e-3 * (r + 1)),
                              named_parameters=m.head.named_parameters())
hvd.broadcast_optimizer_state(do, 0, model=m)
check(do.param_groups[0]["lr"] == 1e-3, "broadcast_optimizer_state of a DistributedOptimizer with model=")
try:
    hvd.broadcast_optimizer_state(o, 0, model="not a module")
    check(False, "model= of another type must raise")
except TypeError as e:
    check("torch.nn.Module" in str(e), f"model=str: {e}")

print(f"rank {r}: optimizer_semantics: {checks} checks passed on {n} ranks")
hvd.shutdown()
