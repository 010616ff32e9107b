"""op=hvd.Adasum (docs/python.md, "Adasum") under the real hvdrun, against a
reference computed here: Horovod's pairwise formula
    (1 - a.b / 2|a|^2) a + (1 - a.b / 2|b|^2) b
applied per tensor in the tree order (ranks 2k, 2k+1 first, then pairs of
pairs), in float64, from every rank's input (each rank regenerates them all).

On a power-of-two size: allreduce (sync, async, in place, scaled, float16/32/64),
grouped_allreduce (each tensor with its own coefficients), results
bit-identical across ranks, the refusal of integer tensors, and two steps of
DistributedOptimizer(op=hvd.Adasum) over momentum SGD against per-rank
reference optimizers whose deltas are combined by the reference Adasum.
On 3 ranks: Horovod's NotImplementedError for non-power-of-two sizes (op and
optimizer), and Adasum on the process set {0, 2}.

Registered as python.adasum (2 ranks), python.adasum_np4 and python.adasum_np3."""
import copy
import math
import sys

import torch

import horovod.torch as hvd

torch.set_num_threads(1)
n = int(__import__("os").environ.get("HVD_TEST_NP", "2"))
pow2 = n & (n - 1) == 0
ps02 = hvd.ProcessSet([0, 2])
hvd.init(process_sets=None if pow2 else [ps02])
r, n = hvd.rank(), hvd.size()
TINY = math.sqrt(sys.float_info.min)


def pair(a, b):
    dot, aa, bb = (a * b).sum().item(), (a * a).sum().item(), (b * b).sum().item()
    ca = 1.0 - dot / (2 * aa) if aa >= TINY else 1.0
    cb = 1.0 - dot / (2 * bb) if bb >= TINY else 1.0
    return ca * a + cb * b


def tree(vs):
    if len(vs) == 1:
        return vs[0]
    h = len(vs) // 2
    return pair(tree(vs[:h]), tree(vs[h:]))


def data(q, k, shape, dtype=torch.float64):
    """Rank q's tensor k: partly shared direction, partly noise."""
    g = torch.Generator().manual_seed(1000 * q + k)
    base = torch.linspace(-1, 1, max(1, math.prod(shape)), dtype=torch.float64).reshape(shape)
    return ((1 + 0.5 * (q % 2)) * base + 0.6 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


def expected(k, shape, dtype=torch.float64, members=None):
    members = list(range(n)) if members is None else members
    return tree([data(q, k, shape, dtype).double() for q in members])


def close(got, want, tol, what):
    err = (got.double() - want).abs().max().item()
    scale = max(want.abs().max().item(), 1e-30)
    assert err <= tol * scale, f"rank {r}: {what}: max error {err} (scale {scale}, tolerance {tol})"


def expect(exc, text, fn):
    try:
        fn()
    except exc as e:
        assert text in str(e), f"{exc.__name__} without {text!r}: {e}"
        return
    raise AssertionError(f"rank {r}: expected {exc.__name__} ({text})")


if not pow2:
    # Horovod's rule: a non-power-of-two number of ranks is refused, clearly.
    expect(NotImplementedError, "non-power of 2 ranks", lambda: hvd.allreduce(data(r, 0, (4,)), op=hvd.Adasum))
    expect(NotImplementedError, "non-power of 2 ranks",
           lambda: hvd.DistributedOptimizer(torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1),
                                            op=hvd.Adasum))
    if r in (0, 2):  # a two-rank set runs Adasum
        got = hvd.allreduce(data(r, 1, (5, 3)), op=hvd.Adasum, name="ps", process_set=ps02)
        close(got, expected(1, (5, 3), members=[0, 2]), 1e-12, "Adasum on the process set {0, 2}")
        assert not torch.allclose(got.double(), expected(1, (5, 3))), "the set's result equals the global one"
    hvd.barrier()
    print(f"rank {r}: adasum checks passed on {n} ranks (refusals, process set)")
    hvd.shutdown()
    sys.exit(0)

# allreduce: shapes (a scalar, odd sizes, larger than one fusion), dtypes.
for k, shape in enumerate([(), (1,), (7,), (33, 5), (70001,)]):
    close(hvd.allreduce(data(r, k, shape), op=hvd.Adasum, name=f"a{k}"), expected(k, shape), 1e-12, f"float64 {shape}")
for dtype, tol in ((torch.float32, 1e-5), (torch.float16, 1e-2)):
    got = hvd.allreduce(data(r, 9, (300,), dtype), op=hvd.Adasum, name=f"d{dtype}")
    assert got.dtype == dtype
    close(got, expected(9, (300,), dtype), tol, str(dtype))
# async, in place, scaled
h = hvd.allreduce_async(data(r, 10, (64,)), op=hvd.Adasum, name="async")
close(hvd.synchronize(h), expected(10, (64,)), 1e-12, "allreduce_async")
t = data(r, 11, (8, 8)).t()  # non-contiguous, in place
out = hvd.allreduce_(t, op=hvd.Adasum, name="inplace")
assert out is t
close(t, expected(11, (8, 8)).t(), 1e-12, "allreduce_ (non-contiguous)")
close(hvd.allreduce(data(r, 12, (40,)), op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0, name="scaled"),
      expected(12, (40,)) * 1.5, 1e-12, "prescale/postscale")
# grouped: each tensor with its own coefficients (the tree of the
# concatenation would differ)
shapes = [(3,), (10, 2), (1,), (129,)]
outs = hvd.grouped_allreduce([data(r, 20 + i, s) for i, s in enumerate(shapes)], op=hvd.Adasum, name="grp")
for i, (o, s) in enumerate(zip(outs, shapes)):
    close(o, expected(20 + i, s), 1e-12, f"grouped tensor {i}")
cat = tree([torch.cat([data(q, 20 + i, s).flatten() for i, s in enumerate(shapes)]) for q in range(n)])
assert not torch.allclose(torch.cat([o.flatten() for o in outs]), cat), "grouped tensors were combined as one"
# bit-identical on every rank
mine = hvd.allreduce(data(r, 30, (1000,), torch.float32), op=hvd.Adasum, name="bits")
assert all(torch.equal(mine, x) for x in hvd.allgather_object(mine)), "ranks got different bits"
expect(ValueError, "float16, float32 or float64", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32),
                                                                         op=hvd.Adasum))

# DistributedOptimizer(op=hvd.Adasum): Horovod's delta optimizer. Rank q's
# delta is what its own optimizer (momentum SGD, its own momentum) does to the
# shared weights on its own batch; the new weights are the old plus the
# Adasum of the deltas. `extra` gets a gradient on rank 0 only.
torch.manual_seed(5)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
extra = torch.nn.Linear(4, 2)
params = list(model.parameters()) + list(extra.parameters())
init = [p.detach().clone() for p in params]


def batch(q, step):
    g = torch.Generator().manual_seed(77 + 10 * q + step)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


def loss_of(m, e, q, step):
    x, y = batch(q, step)
    out = m(x) + (e(x) if q == 0 else 0)
    return ((out - y) ** 2).mean()


opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1, momentum=0.9),
                               named_parameters=[(f"m.{k}", v) for k, v in model.named_parameters()] +
                               [(f"e.{k}", v) for k, v in extra.named_parameters()], op=hvd.Adasum)
refs = []  # per rank: (model, extra, optimizer)
for q in range(n):
    m, e = copy.deepcopy(model), copy.deepcopy(extra)
    refs.append((m, e, torch.optim.SGD(list(m.parameters()) + list(e.parameters()), lr=0.1, momentum=0.9)))
shared = [p.clone() for p in init]
for step in range(2):
    opt.zero_grad()
    loss_of(model, extra, r, step).backward()
    opt.step()
    deltas = []
    for q, (m, e, o) in enumerate(refs):
        ps = list(m.parameters()) + list(e.parameters())
        with torch.no_grad():
            for p, s in zip(ps, shared):
                p.copy_(s)
        o.zero_grad()
        loss_of(m, e, q, step).backward()
        o.step()
        deltas.append([(p.detach() - s).double() for p, s in zip(ps, shared)])
    shared = [(s.double() + tree([d[i] for d in deltas])).float() for i, s in enumerate(shared)]
    for i, (p, s) in enumerate(zip(params, shared)):
        close(p.detach(), s.double(), 1e-5, f"optimizer step {step} parameter {i}")
moved = max((p.detach() - p0).abs().max().item() for p, p0 in zip(params, init))
assert moved > 1e-3, f"the optimizer did not move the parameters ({moved})"
everyone = hvd.allgather_object([p.detach() for p in params])
assert all(torch.equal(a, b) for q in range(n) for a, b in zip(everyone[0], everyone[q])), "parameters differ"
expect(AssertionError, "not supported", lambda: opt.skip_synchronize().__enter__())
hvd.barrier()
print(f"rank {r}: adasum checks passed on {n} ranks")
hvd.shutdown()
