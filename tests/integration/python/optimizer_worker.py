"""Run under hvdrun -np 2: DistributedOptimizer == single-process training on the combined batch."""
import copy
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
hvd.shutdown()
print(f"rank {r}: optimizer ok")
