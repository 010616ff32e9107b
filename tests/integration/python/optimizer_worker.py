"""Run under hvdrun -np 2: DistributedOptimizer == single-process training on the combined batch."""
import copy
import warnings

import torch
import hvdcomm.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
torch.manual_seed(1234 + r)  # ranks start different; broadcast must fix that
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).double()
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
# one local step so that the optimizer has momentum state to broadcast
model(torch.randn(2, 8, dtype=torch.float64)).sum().backward()
opt.step()
opt.zero_grad()
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
params = hvd.allgather_object([p.detach().clone() for p in model.parameters()])
assert all(torch.equal(a, b) for a, b in zip(params[0], params[1])), "broadcast_parameters left ranks different"
states = hvd.allgather_object(opt.state_dict())
for k, v in states[0]["state"].items():
    assert torch.equal(v["momentum_buffer"], states[1]["state"][k]["momentum_buffer"])

reference = copy.deepcopy(model)
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
ref_opt.load_state_dict(opt.state_dict())
dopt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
g = torch.Generator().manual_seed(7)
for step in range(5):
    xs = torch.randn(n, 4, 8, generator=g, dtype=torch.float64)
    ys = torch.randn(n, 4, 3, generator=g, dtype=torch.float64)
    dopt.zero_grad()
    torch.nn.functional.mse_loss(model(xs[r]), ys[r]).backward()
    dopt.step()
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(reference(xs.reshape(-1, 8)), ys.reshape(-1, 3)).backward()
    ref_opt.step()
for p, q in zip(model.parameters(), reference.parameters()):
    assert torch.allclose(p, q, atol=1e-5, rtol=0), (p - q).abs().max()
final = hvd.allgather_object([p.detach() for p in model.parameters()])
assert all(torch.equal(a, b) for a, b in zip(final[0], final[1])), "ranks diverged"

# fp16 compression and backward_passes_per_step=2 still keep ranks identical
m2 = torch.nn.Linear(4, 2)
hvd.broadcast_parameters(m2.state_dict(), 0)
o2 = hvd.DistributedOptimizer(torch.optim.SGD(m2.parameters(), lr=0.05), named_parameters=m2.named_parameters(),
                              compression=hvd.Compression.fp16, backward_passes_per_step=2)
for step in range(3):
    o2.zero_grad()
    for _ in range(2):
        m2(torch.randn(3, 4)).pow(2).sum().backward()
    o2.step()
final = hvd.allgather_object([p.detach() for p in m2.parameters()])
assert all(torch.equal(a, b) for a, b in zip(final[0], final[1])), "fp16 ranks diverged"

# Hand-computed gradients: for loss = (x @ w).sum() the gradient of w is x,
# so pass k on rank r yields exactly X[r][k] (small integers: exact).
X = torch.tensor([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
                  [[-3.0, 7.0, 0.0], [8.0, -1.0, 2.0]]], dtype=torch.float64)  # [rank][pass]
W0 = torch.tensor([[0.5, -0.25, 1.0]], dtype=torch.float64)


def linear():
    m = torch.nn.Linear(3, 1, bias=False).double()
    with torch.no_grad():
        m.weight.copy_(W0)
    return m


def backward(m, k):
    (m(X[r, k].unsqueeze(0))).sum().backward()


# backward_passes_per_step=2: the two local passes are summed (never divided
# by 2), then averaged over the ranks, as in Horovod.
m = linear()
o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.5), named_parameters=m.named_parameters(),
                             backward_passes_per_step=2)
for step in range(2):
    o.zero_grad()
    backward(m, 0)
    backward(m, 1)
    o.synchronize()
    expected = (X[0, 0] + X[0, 1] + X[1, 0] + X[1, 1]) / n
    assert torch.equal(m.weight.grad, expected.unsqueeze(0)), (step, m.weight.grad, expected)
    with o.skip_synchronize():
        o.step()
    assert torch.equal(m.weight.data, (W0 - 0.5 * (step + 1) * expected).reshape(1, 3)), (step, m.weight)

# skip_synchronize: after an explicit synchronize() (Sum, so a second
# reduction would double the gradient), step() uses the gradient as it is,
# here clipped by hand in between.
m = linear()
o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0), named_parameters=m.named_parameters(),
                             op=hvd.Sum)
backward(m, 0)
o.synchronize()
summed = X[0, 0] + X[1, 0]
assert torch.equal(m.weight.grad, summed.unsqueeze(0)), m.weight.grad
m.weight.grad.mul_(0.5)
with o.skip_synchronize():
    o.step()
assert torch.equal(m.weight.data, W0 - 0.5 * summed.unsqueeze(0)), m.weight
# without skip_synchronize() step() reduces again (Horovod warns): the sum doubles
o.zero_grad()
backward(m, 0)
o.synchronize()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    before = m.weight.data.clone()
    o.step()
assert any("skip_synchronize" in str(w.message) for w in caught), [str(w.message) for w in caught]
assert torch.equal(m.weight.data, before - n * summed.unsqueeze(0)), m.weight

# gradient_predivide_factor: Average as prescale 1/f before the sum and
# postscale f/size after it. The result is the average; the prescale is
# visible in float16, where the plain sum 2 * 40000 overflows (max 65504).
for f in (2.0, 4.0):
    m = linear()
    o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0), named_parameters=m.named_parameters(),
                                 gradient_predivide_factor=f)
    backward(m, 1)
    o.step()
    assert torch.equal(m.weight.grad, ((X[0, 1] + X[1, 1]) / n).unsqueeze(0)), (f, m.weight.grad)
big = torch.nn.Parameter(torch.zeros(2, dtype=torch.float16))
ob = hvd.DistributedOptimizer(torch.optim.SGD([big], lr=0.0), named_parameters=[("big", big)],
                              gradient_predivide_factor=2.0)
big.grad = torch.full((2,), 40000.0, dtype=torch.float16)  # set by hand: synchronize() reduces it
ob.synchronize()
assert big.grad.tolist() == [40000.0, 40000.0], big.grad
try:
    hvd.DistributedOptimizer(torch.optim.SGD(linear().parameters(), lr=0.1), op=hvd.Sum,
                             gradient_predivide_factor=2.0)
    raise SystemExit("gradient_predivide_factor with op=Sum did not raise")
except ValueError:
    pass

hvd.shutdown()
print(f"rank {r}: optimizer ok")
