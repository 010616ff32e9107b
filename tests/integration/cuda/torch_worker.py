"""Run under hvdrun (label gpu): CUDA tensors through hvdcomm.torch -- the
binding passes the device and torch's current stream, the library reduces
on the GPU and stages allgather/alltoall/reducescatter through host memory
(docs/cuda.md). Exits 77 when torch cannot use a CUDA device."""
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

# Allgather, alltoall and reducescatter of CUDA tensors (through host memory
# in the library): results on the input's device, against exact references;
# the input is written on the current stream just before the call.
for dtype in (torch.float32, torch.bfloat16, torch.int64):
    rows = r + 1  # a different first dimension on every rank
    x = torch.zeros(rows, 3, dtype=dtype, device=dev)
    x.add_(torch.arange(3, device=dev).to(dtype) + 10 * r)
    got = hvd.allgather(x, name=f"ag.{dtype}")
    want = torch.cat([torch.arange(3, dtype=torch.float64).repeat(k + 1, 1) + 10 * k for k in range(n)])
    check(got.device == dev and got.dtype == dtype, f"allgather output on {got.device} as {got.dtype}")
    check(torch.equal(got.cpu().double(), want), f"allgather {dtype}")

    a = (torch.arange(2 * n, dtype=torch.float64) + 100 * r).to(dtype).to(dev)
    got = hvd.alltoall(a, name=f"a2a.{dtype}")
    want = torch.cat([torch.tensor([2 * r, 2 * r + 1], dtype=torch.float64) + 100 * k for k in range(n)])
    check(got.device == dev, f"alltoall output on {got.device}")
    check(torch.equal(got.cpu().double(), want.to(dtype).double()), f"alltoall {dtype}")

    s_in = (torch.arange(4 * n, dtype=torch.float64) % 5 + r).to(dtype).to(dev)
    got = hvd.reducescatter(s_in, op=hvd.Sum, name=f"rs.{dtype}")
    full = sum(torch.arange(4 * n, dtype=torch.float64) % 5 + k for k in range(n))
    check(got.device == dev, f"reducescatter output on {got.device}")
    check(torch.equal(got.cpu().double(), full[4 * r:4 * r + 4]), f"reducescatter {dtype}")

# Uneven alltoall with splits, and an async allgather beside an allreduce.
splits = torch.tensor([k % 2 + 1 for k in range(n)], dtype=torch.int32)
src = torch.full((int(splits.sum()),), float(r), device=dev)
out, received = hvd.alltoall(src, splits=splits, name="a2a.splits")
check(out.device == dev and received.tolist() == [r % 2 + 1] * n, f"alltoall splits received {received.tolist()}")
check(torch.equal(out.cpu(), torch.cat([torch.full((r % 2 + 1,), float(k)) for k in range(n)])), "alltoall splits")
hg = hvd.allgather_async(torch.full((2,), float(r), device=dev), name="ag.async")
hr = hvd.allreduce_async(torch.ones(5, device=dev), op=hvd.Sum, name="ar.beside")
check(torch.equal(hvd.synchronize(hg).cpu(), torch.arange(n, dtype=torch.float32).repeat_interleave(2)),
      "async allgather")
check(torch.all(hvd.synchronize(hr).cpu() == n), "allreduce beside an allgather")
obj = hvd.allgather_object({"rank": r})
check([o["rank"] for o in obj] == list(range(n)), "allgather_object")

hvd.shutdown()
print(f"rank {r}: OK {checks} torch CUDA checks passed")
