"""Run under hvdrun (python.sync_batch_norm: 2 ranks; python.sync_batch_norm_np3:
3 ranks on a heterogeneous layout), PYTHONPATH=<build>/python:<build>/python/compat.

Every rank builds the same global batches (seeded) and takes its own slice;
the per-rank batch sizes differ (rank r holds 1 + 3r samples, so rank 0 holds
a single one). hvd.SyncBatchNorm on the slices must match one torch
BatchNorm1d/2d on the whole batch, in float64 to 1e-10: the output slice, the
input gradient slice (loss = sum(output * fixed random weights)), the
weight/bias gradients summed over the ranks, running_mean/var and
num_batches_tracked after 2 steps (momentum 0.1 and None), and the eval-mode
output; plus affine=False, track_running_stats=False (global statistics in
eval mode too, as Horovod), and torch's errors
for a 1-D input and a wrong number of features."""
import sys

import torch

import horovod.torch as horovod_torch
import hvdcomm.torch as hvd
from horovod.torch.sync_batch_norm import SyncBatchNorm

TOL = 1e-10
hvd.init()
r, n = hvd.rank(), hvd.size()
assert n > 1, "run with more than one rank"
sizes = [1 + 3 * k for k in range(n)]
lo, hi = sum(sizes[:r]), sum(sizes[:r + 1])
N = sum(sizes)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"rank {r}: FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


def close(a, b, what):
    err = (a - b).abs().max().item() if a.numel() else 0.0
    check(a.shape == b.shape and err <= TOL, f"{what}: shapes {tuple(a.shape)} {tuple(b.shape)}, max error {err}")


assert SyncBatchNorm is hvd.SyncBatchNorm is horovod_torch.SyncBatchNorm
check(issubclass(SyncBatchNorm, torch.nn.modules.batchnorm._BatchNorm), "SyncBatchNorm is a _BatchNorm")


def compare(ref_cls, shape, momentum, affine=True, seed=0):
    """shape: the per-sample shape (C, ...). Two training steps, then eval."""
    C = shape[0]
    g = torch.Generator().manual_seed(seed)
    ref = ref_cls(C, momentum=momentum, affine=affine).double()
    sbn = SyncBatchNorm(C, momentum=momentum, affine=affine).double()
    if affine:
        with torch.no_grad():
            ref.weight.copy_(torch.rand(C, generator=g, dtype=torch.float64) + 0.5)
            ref.bias.copy_(torch.randn(C, generator=g, dtype=torch.float64))
            sbn.weight.copy_(ref.weight)
            sbn.bias.copy_(ref.bias)
    what = f"{ref_cls.__name__}{tuple(shape)} momentum={momentum} affine={affine}"
    for step in range(2):
        # channel means far from 0 and different scales: a naive sum of squares would lose digits
        x = (torch.randn(N, *shape, generator=g, dtype=torch.float64) * 3
             + torch.arange(C, dtype=torch.float64).reshape([1, C] + [1] * (len(shape) - 1)) * 10)
        w = torch.randn(N, *shape, generator=g, dtype=torch.float64)
        xr = x.clone().requires_grad_(True)
        out_ref = ref(xr)
        (out_ref * w).sum().backward()
        xs = x[lo:hi].clone().requires_grad_(True)
        out = sbn(xs)
        (out * w[lo:hi]).sum().backward()
        close(out.detach(), out_ref.detach()[lo:hi], f"{what} step {step}: output")
        close(xs.grad, xr.grad[lo:hi], f"{what} step {step}: input gradient")
        if affine:
            gw = hvd.allreduce(sbn.weight.grad, op=hvd.Sum)
            gb = hvd.allreduce(sbn.bias.grad, op=hvd.Sum)
            close(gw, ref.weight.grad, f"{what} step {step}: weight gradient summed over the ranks")
            close(gb, ref.bias.grad, f"{what} step {step}: bias gradient summed over the ranks")
            for m in (ref, sbn):
                m.weight.grad = m.bias.grad = None
        close(sbn.running_mean, ref.running_mean, f"{what} step {step}: running_mean")
        close(sbn.running_var, ref.running_var, f"{what} step {step}: running_var")
        check(sbn.num_batches_tracked.item() == ref.num_batches_tracked.item() == step + 1,
              f"{what}: num_batches_tracked")
    # eval: the running statistics, no exchange (ranks may even call it alone)
    ref.eval()
    sbn.eval()
    x = torch.randn(N, *shape, generator=g, dtype=torch.float64) + 1
    close(sbn(x[lo:hi]), ref(x)[lo:hi], f"{what}: eval output")
    if r == 0:
        close(sbn(x), ref(x), f"{what}: eval output of the whole batch on one rank")


compare(torch.nn.BatchNorm1d, (3,), 0.1)
compare(torch.nn.BatchNorm1d, (4, 5), 0.1, seed=1)
compare(torch.nn.BatchNorm2d, (3, 4, 2), 0.1, seed=2)
compare(torch.nn.BatchNorm2d, (2, 3, 3), None, seed=3)  # cumulative average
compare(torch.nn.BatchNorm1d, (3,), 0.3, affine=False, seed=4)
compare(torch.nn.BatchNorm3d, (2, 2, 3, 2), 0.1, seed=7)

# track_running_stats=False: training uses the global batch, and so does eval
# (Horovod's SyncBatchNorm synchronises whenever there are no running
# statistics; torch's BatchNorm would use this rank's batch).
g = torch.Generator().manual_seed(5)
ref = torch.nn.BatchNorm2d(2, track_running_stats=False).double()
sbn = SyncBatchNorm(2, track_running_stats=False).double()
check(sbn.running_mean is None and sbn.num_batches_tracked is None, "no running statistics")
x = torch.randn(N, 2, 3, 3, generator=g, dtype=torch.float64)
close(sbn(x[lo:hi]), ref(x)[lo:hi], "track_running_stats=False: training output")
sbn.eval()
close(sbn(x[lo:hi]), ref(x)[lo:hi], "track_running_stats=False: eval output (the global batch, as Horovod)")
xe = x[lo:hi].clone().requires_grad_(True)
xr = x.clone().requires_grad_(True)
(sbn(xe) * x[lo:hi]).sum().backward()
(ref(xr) * x).sum().backward()
close(xe.grad, xr.grad[lo:hi], "track_running_stats=False: eval input gradient (the global batch)")

# torch's errors, raised before any exchange
sbn = SyncBatchNorm(3).double()
try:
    sbn(torch.zeros(4, dtype=torch.float64))
    check(False, "a 1-D input must raise")
except ValueError as e:
    check(str(e) == "expected at least 2D input (got 1D input)", f"1-D input: {e}")
for bad in (torch.zeros(4, 5, dtype=torch.float64), torch.zeros(4, 2, 3, dtype=torch.float64)):
    errors = []
    for m in (torch.nn.BatchNorm1d(3).double(), sbn):
        try:
            m(bad)
            errors.append(None)
        except Exception as e:  # noqa: BLE001  (whatever torch raises)
            errors.append((type(e), str(e)))
    check(errors[0] is not None and errors[0] == errors[1], f"wrong number of features: {errors}")

# float32 input keeps its dtype (statistics in float32 too)
sbn32 = SyncBatchNorm(3)
ref32 = torch.nn.BatchNorm1d(3)
x = torch.randn(N, 3, generator=torch.Generator().manual_seed(6))
out = sbn32(x[lo:hi])
check(out.dtype == torch.float32 and torch.allclose(out, ref32(x)[lo:hi], atol=1e-5), "float32 output")

print(f"rank {r}: sync_batch_norm: {checks} checks passed on {n} ranks (batch sizes {sizes})")
