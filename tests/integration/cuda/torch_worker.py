"""Run under hvdrun (label gpu): CUDA tensors through hvdcomm.torch -- the
binding passes the device and torch's current stream, the library reduces
on the GPU (docs/cuda.md). Exits 77 when torch cannot use a CUDA device."""
import sys

try:
    import torch
except ImportError:
    print("SKIPPED: this python cannot import torch")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: torch sees no CUDA device (or was built without CUDA)")
    sys.exit(77)

import hvdcomm.torch as hvd  # noqa: E402

hvd.init()
if not hvd.cuda_built():
    print("SKIPPED: hvdcomm's library was built without the CUDA component")
    sys.exit(77)
r, n = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"rank {r} FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


# allreduce (out of place), every supported float and int type, small values
# so the float64 reference is exact for every dtype.
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8):
    for numel in (1, 1000, 100003):
        base = torch.arange(numel, dtype=torch.float64) % 7
        x = (base + r).to(dtype).to(dev)
        got = hvd.allreduce(x, op=hvd.Sum, name=f"sum.{dtype}.{numel}")
        want = sum(base + k for k in range(n))
        check(got.device == dev and got.dtype == dtype, f"allreduce output on {got.device} as {got.dtype}")
        check(torch.equal(got.cpu().double(), want), f"allreduce sum {dtype} numel {numel}")
        check(torch.equal(x.cpu().double(), base + r), f"allreduce left its input alone ({dtype})")

# In place, average, with work queued on the current stream just before.
y = torch.zeros(513, device=dev)
y.add_(float(r + 1))
hvd.allreduce_(y, op=hvd.Average, name="avg")
check(torch.all(y.cpu() == (n + 1) / 2), "in-place average")

# Several in flight (fused on the device), then synchronize.
hs = [hvd.allreduce_async(torch.full((k + 1,), float(r), device=dev), op=hvd.Sum, name=f"f.{k}") for k in range(12)]
for k, h in enumerate(hs):
    check(torch.all(hvd.synchronize(h).cpu() == n * (n - 1) / 2), f"fused allreduce {k}")

# Broadcast into a device tensor, and broadcast_parameters of a CUDA model.
z = torch.full((4099,), float(r), device=dev)
hvd.broadcast_(z, root_rank=n - 1, name="bcast")
check(torch.all(z.cpu() == n - 1), "broadcast_ from the last rank")
torch.manual_seed(r)
model = torch.nn.Linear(5, 3).to(dev)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
ws = hvd.allgather(model.weight.detach().cpu().reshape(1, -1))
check(all(torch.equal(ws[0], ws[k]) for k in range(n)), "broadcast_parameters made every rank's weights equal")

# Operations without a device path say so.
try:
    hvd.allgather(torch.zeros(3, device=dev))
    check(False, "allgather of a CUDA tensor did not raise")
except ValueError as e:
    check("allgather of CUDA tensors is not supported" in str(e), f"allgather error message: {e}")

hvd.shutdown()
print(f"rank {r}: OK {checks} torch CUDA checks passed")
