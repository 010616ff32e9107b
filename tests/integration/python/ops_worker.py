"""Run under hvdrun -np 2: checks every hvdcomm.torch collective against expected values."""
import sys
import torch
import hvdcomm.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, n
assert hvd.local_rank() == r and hvd.local_size() == 2 and hvd.cross_size() == 1 and hvd.is_homogeneous()
assert hvd.gloo_built() and not hvd.mpi_built() and hvd.nccl_built() == 0
# cuda_built() reports the library's CUDA component (docs/cuda.md).
from hvdcomm import _core  # noqa: E402
assert hvd.cuda_built() is bool(_core.cuda_built())

ALL = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]

# allreduce: sum/min/max/product over every dtype, average over floats
for dt in ALL:
    x = (torch.arange(6).reshape(2, 3) + r + 1).to(dt)
    a = (torch.arange(6).reshape(2, 3) + 1).to(torch.float64)
    b = a + 1
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, name=f"s{dt}").double(), (a + b).to(dt).double()), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Min, name=f"mi{dt}").double(), a), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Max, name=f"ma{dt}").double(), b), dt
    assert torch.equal(hvd.allreduce(x, op=hvd.Product, name=f"p{dt}").double(), (a * b).to(dt).double()), dt
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, name=f"ip{dt}")
    assert torch.equal(y.double(), (a + b).to(dt).double()), dt
for dt in FLOATS:
    x = torch.full((5,), float(r * 2), dtype=dt)
    assert torch.equal(hvd.allreduce(x, name=f"avg{dt}"), torch.ones(5, dtype=dt)), dt
# async, prescale/postscale, non-contiguous in-place
h1 = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="as1")
h2 = hvd.allreduce_async(torch.ones(3), op=hvd.Sum, name="as2", prescale_factor=2.0, postscale_factor=0.5)
assert torch.equal(hvd.synchronize(h2), torch.full((3,), 2.0))
assert torch.equal(hvd.synchronize(h1), torch.full((3,), 2.0))
nc = torch.ones(4, 4).t()[1:3]
h = hvd.allreduce_async_(nc, op=hvd.Sum, name="nc")
while not hvd.poll(h):
    pass
hvd.synchronize(h)
assert torch.equal(nc, torch.full((2, 4), 2.0))
# fp16 compression keeps the dtype
out = hvd.allreduce(torch.full((4,), 1.5), op=hvd.Sum, compression=hvd.Compression.fp16, name="c16")
assert out.dtype == torch.float32 and torch.equal(out, torch.full((4,), 3.0))
# autograd through allreduce (Sum): d/dx sum(allreduce(x) * w_r) = sum over ranks of w
w = torch.tensor([1.0, 2.0]) * (r + 1)
xg = torch.ones(2, requires_grad=True)
(hvd.allreduce(xg, op=hvd.Sum, name="grad_ar") * w).sum().backward()
assert torch.equal(xg.grad, torch.tensor([3.0, 6.0])), xg.grad
# grouped
outs = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(3) * 2], op=hvd.Sum, name="g")
assert torch.equal(outs[0], torch.ones(2)) and torch.equal(outs[1], torch.full((3,), 4.0))
ts = [torch.ones(2), torch.ones(1)]
hvd.grouped_allreduce_(ts, name="g_")
assert torch.equal(ts[0], torch.ones(2))
# Adasum is refused clearly
try:
    hvd.allreduce(torch.ones(1), op=hvd.Adasum)
    raise SystemExit("Adasum did not raise")
except NotImplementedError as e:
    assert "Adasum" in str(e)
# allgather with different first dims, all dtypes
for dt in ALL:
    x = torch.full((r + 1, 2), r + 1).to(dt)
    g = hvd.allgather(x, name=f"ag{dt}")
    assert g.shape == (3, 2) and g.dtype == dt, g.shape
    assert torch.equal(g.double(), torch.tensor([[1, 1], [2, 2], [2, 2]], dtype=torch.float64)), dt
g = hvd.synchronize(hvd.allgather_async(torch.tensor([r]), name="aga"))
assert g.tolist() == [0, 1]
# broadcast from root 1
for dt in ALL:
    x = torch.full((3,), r + 5).to(dt)
    assert torch.equal(hvd.broadcast(x, 1, name=f"b{dt}").double(), torch.full((3,), 6.0)), dt
    assert torch.equal(x.double(), torch.full((3,), float(r + 5)))
    hvd.broadcast_(x, 1, name=f"b_{dt}")
    assert torch.equal(x.double(), torch.full((3,), 6.0))
x = torch.full((2,), float(r))
hvd.synchronize(hvd.broadcast_async_(x, 0, name="ba_"))
assert torch.equal(x, torch.zeros(2))
# alltoall with splits: rank r sends (k+1) rows of value 10r+k to rank k
rows = [torch.full((k + 1, 2), 10 * r + k) for k in range(n)]
out, rs = hvd.alltoall(torch.cat(rows), splits=[1, 2], name="a2a")
assert rs.tolist() == [r + 1, r + 1], rs
exp = torch.cat([torch.full((r + 1, 2), 10 * s + r) for s in range(n)])
assert torch.equal(out, exp), out
# reducescatter: 5 rows -> rank0 gets 3, rank1 2
x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
rsout = hvd.reducescatter(x, op=hvd.Sum, name="rs")
full = x * 2
assert torch.equal(rsout, full[:3] if r == 0 else full[3:]), rsout
rsavg = hvd.reducescatter(x, name="rsavg")
assert torch.equal(rsavg, x[:3] if r == 0 else x[3:])
hvd.barrier()
assert hvd.join() == -1
# objects
o = hvd.broadcast_object({"r": r, "l": [1, 2]} if r == 1 else None, root_rank=1)
assert o == {"r": 1, "l": [1, 2]}, o
assert hvd.allgather_object(("x", r)) == [("x", 0), ("x", 1)]
# mismatch raises on both ranks with the library's message
try:
    hvd.allreduce(torch.ones(2 + r), op=hvd.Sum, name="bad")
    raise SystemExit("mismatch did not raise")
except hvd.MismatchError as e:
    assert "bad" in str(e), str(e)
    print(f"rank {r}: mismatch ok: {e}")
assert isinstance(hvd.MismatchError("x"), ValueError)
# still usable after a mismatch
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after"), torch.full((1,), 2.0))
try:
    hvd.allreduce(torch.ones(1, dtype=torch.complex64))
    raise SystemExit("complex did not raise")
except ValueError as e:
    assert "dtype" in str(e)
hvd.shutdown()
print(f"rank {r}: ops ok")
