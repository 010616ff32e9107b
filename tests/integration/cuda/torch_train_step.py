"""Run under hvdrun (label gpu): a few training steps of an unmodified
`horovod.torch` script on CUDA tensors -- broadcast_parameters,
broadcast_optimizer_state, DistributedOptimizer (gradients averaged on the
GPU during backward) -- then two checks on every rank:

* the parameters are bit-identical on every rank (allgathered);
* they equal a single-process reference that trains a copy of the same
  initial model on the same per-rank batches with the mean of the per-rank
  gradients (float64 comparison, relative 1e-5): a wrong or missing
  average fails here even when every rank is wrong alike.

Exits 77 when torch cannot use a CUDA device."""
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: this python cannot import torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: torch sees no CUDA device (or was built without CUDA)")
    sys.exit(77)

import copy  # noqa: E402

import horovod.torch as hvd  # noqa: E402
import torch.nn.functional as F  # noqa: E402

STEPS, BATCH, LR, MOMENTUM = 6, 16, 0.05, 0.9

hvd.init()
r, n = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
if not hvd.cuda_built():
    print("FAIL: horovod.torch reports a library built without CUDA", file=sys.stderr)
    sys.exit(1)


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(BATCH, 32, generator=g)
    y = torch.randint(0, 10, (BATCH,), generator=g)
    return x.to(dev), y.to(dev)


torch.manual_seed(100 + r)  # every rank starts from other weights: the broadcast must fix that
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(opt, root_rank=0)
reference = copy.deepcopy(model)
start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
ref_opt = torch.optim.SGD(reference.parameters(), lr=LR, momentum=MOMENTUM)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

for step in range(STEPS):
    x, y = batch(step, r)
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    # The reference: every rank's gradient, computed here, averaged.
    grads = None
    for k in range(n):
        reference.zero_grad()
        xk, yk = batch(step, k)
        F.cross_entropy(reference(xk), yk).backward()
        g = [p.grad.detach().double().clone() for p in reference.parameters()]
        grads = g if grads is None else [a + b for a, b in zip(grads, g)]
    for p, g in zip(reference.parameters(), grads):
        p.grad = (g / n).to(p.dtype)
    ref_opt.step()

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
everyone = hvd.allgather(flat.reshape(1, -1))
same = all(torch.equal(everyone[0], everyone[k]) for k in range(n))
ref = torch.cat([p.detach().reshape(-1) for p in reference.parameters()]).double()
err = float((flat.double() - ref).norm() / ref.norm())
moved = float((flat.double() - start.double()).norm())
hvd.shutdown()
if not same:
    print(f"rank {r} FAIL: parameters differ between ranks after {STEPS} steps", file=sys.stderr)
    sys.exit(1)
if not moved > 0:
    print(f"rank {r} FAIL: the parameters did not change in {STEPS} steps", file=sys.stderr)
    sys.exit(1)
if not err < 1e-5:
    print(f"rank {r} FAIL: parameters differ from the averaged-gradient reference (relative error {err:.3e})",
          file=sys.stderr)
    sys.exit(1)
print(f"rank {r}: OK {STEPS} horovod.torch CUDA steps on {torch.cuda.get_device_name(dev)} (torch {torch.__version__}): "
      f"parameters identical on {n} ranks, relative error vs reference {err:.2e}, last loss {loss.item():.4f}")
