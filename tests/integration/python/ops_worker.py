"""Run under hvdrun -np 2: checks every hvdcomm.torch collective against expected values."""
import os
import torch
import hvdcomm.torch as hvd

assert hvd.is_initialized() is False
try:
    hvd.is_homogeneous()
    raise SystemExit("is_homogeneous() before init() did not raise")
except ValueError:
    pass
hvd.init()
assert hvd.is_initialized() is True
r, n = hvd.rank(), hvd.size()
assert n == 2, n
# hvdrun -np 2 -H localhost:2: one host, so one rank per cross communicator
assert hvd.local_rank() == r and hvd.local_size() == 2
assert hvd.cross_rank() == 0 and hvd.cross_size() == 1, (hvd.cross_rank(), hvd.cross_size())
assert hvd.is_homogeneous() is True
assert hvd.gloo_built() and not hvd.mpi_built()
# nccl_built() against what CMake found (a CUDA build with libnccl present).
expect_nccl = os.environ.get("HVD_TEST_EXPECT_NCCL_BUILT")
assert expect_nccl in ("0", "1"), "run through ctest: HVD_TEST_EXPECT_NCCL_BUILT is not set"
assert isinstance(hvd.nccl_built(), int)
assert (hvd.nccl_built() >= 21000) if expect_nccl == "1" else (hvd.nccl_built() == 0), (hvd.nccl_built(), expect_nccl)
# cuda_built() against the build configuration CMake passes in (HVD_CUDA_ENABLED).
expect_cuda = os.environ.get("HVD_TEST_EXPECT_CUDA_BUILT")
assert expect_cuda in ("0", "1"), "run through ctest: HVD_TEST_EXPECT_CUDA_BUILT is not set"
assert hvd.cuda_built() is (expect_cuda == "1"), (hvd.cuda_built(), expect_cuda)

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
# grouped: results in input order, inputs untouched by the out-of-place forms
ins = [torch.ones(2) * r, torch.full((3,), 2.0), torch.arange(4, dtype=torch.int32) * (r + 1)]
outs = hvd.grouped_allreduce(ins, op=hvd.Sum, name="g")
assert len(outs) == 3 and torch.equal(outs[0], torch.ones(2)) and torch.equal(outs[1], torch.full((3,), 4.0))
assert torch.equal(outs[2], torch.arange(4, dtype=torch.int32) * 3) and outs[2].dtype == torch.int32
assert torch.equal(ins[0], torch.ones(2) * r), "grouped_allreduce modified its input"
avg = hvd.grouped_allreduce([torch.full((2,), float(2 * r)), torch.full((1,), float(4 * r))], name="gavg")
assert torch.equal(avg[0], torch.ones(2)) and torch.equal(avg[1], torch.full((1,), 2.0)), avg
ts = [torch.ones(2), torch.full((1,), float(r))]
res = hvd.grouped_allreduce_(ts, name="g_")
assert torch.equal(ts[0], torch.ones(2)) and torch.equal(ts[1], torch.full((1,), 0.5)), ts
assert res[0] is ts[0] and res[1] is ts[1]
# grouped async: out of place (scaled), then in place
ga_in = [torch.full((3,), float(r + 1)), torch.full((2, 2), 10.0 * (r + 1))]
h = hvd.grouped_allreduce_async(ga_in, op=hvd.Sum, name="ga", prescale_factor=2.0, postscale_factor=0.5)
ga = hvd.synchronize(h)
assert torch.equal(ga[0], torch.full((3,), 3.0)) and torch.equal(ga[1], torch.full((2, 2), 30.0)), ga
assert torch.equal(ga_in[0], torch.full((3,), float(r + 1)))
gi = [torch.full((2,), float(r)), (torch.ones(3, 2) * r).t()]  # the second one non-contiguous
h = hvd.grouped_allreduce_async_(gi, op=hvd.Max, name="gi")
while not hvd.poll(h):
    pass
gout = hvd.synchronize(h)
assert torch.equal(gi[0], torch.ones(2)) and torch.equal(gi[1], torch.ones(2, 3)), gi
assert gout[0] is gi[0] and gout[1] is gi[1]
# Adasum runs (python.adasum checks it against a reference): orthogonal
# tensors add up, integer tensors are refused
orth = torch.zeros(2, dtype=torch.float64)
orth[r % 2] = r + 1.0
assert torch.equal(hvd.allreduce(orth, op=hvd.Adasum, name="adasum"), torch.tensor([1.0, 2.0], dtype=torch.float64))
try:
    hvd.allreduce(torch.ones(1, dtype=torch.int32), op=hvd.Adasum)
    raise SystemExit("Adasum of an int32 tensor did not raise")
except ValueError as e:
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
# alltoall with splits: rank r sends (k+1) rows of value 10r+k to rank k;
# the result is (output, received_splits) as in horovod.torch
rows = [torch.full((k + 1, 2), 10 * r + k) for k in range(n)]
res = hvd.alltoall(torch.cat(rows), splits=[1, 2], name="a2a")
assert isinstance(res, tuple) and len(res) == 2, type(res)
out, rs = res
assert rs.tolist() == [r + 1, r + 1] and rs.dtype == torch.int32, rs
exp = torch.cat([torch.full((r + 1, 2), 10 * s + r) for s in range(n)])
assert torch.equal(out, exp), out
# splits as a tensor: int32 (Horovod's rule; other dtypes raise ValueError)
out, rs = hvd.alltoall(torch.cat(rows), splits=torch.tensor([1, 2], dtype=torch.int32), name="a2at")
assert torch.equal(out, exp) and rs.dtype == torch.int32 and rs.tolist() == [r + 1, r + 1], rs
# without splits: the first dimension split equally, and only the tensor comes back
x = torch.tensor([[10 * r + 0.0], [10 * r + 1.0]])  # row k goes to rank k
out = hvd.alltoall(x, name="a2a_eq")
assert isinstance(out, torch.Tensor), type(out)
assert torch.equal(out, torch.tensor([[0.0 + r], [10.0 + r]])), out
# alltoall_async + synchronize: always (output, received_splits), as Horovod's
out, rs = hvd.synchronize(hvd.alltoall_async(x, name="a2a_async"))
assert torch.equal(out, torch.tensor([[0.0 + r], [10.0 + r]])) and rs.tolist() == [1, 1], (out, rs)
# reducescatter: 5 rows -> rank0 gets 3, rank1 2
x = torch.arange(10, dtype=torch.float32).reshape(5, 2)
rsout = hvd.reducescatter(x, op=hvd.Sum, name="rs")
full = x * 2
assert torch.equal(rsout, full[:3] if r == 0 else full[3:]), rsout
rsavg = hvd.reducescatter(x, name="rsavg")
assert torch.equal(rsavg, x[:3] if r == 0 else x[3:])
hvd.barrier()
# both join at about the same time: either may be last, but both agree
j = hvd.join()
assert j in (0, 1) and hvd.allgather_object(j) == [j, j], j
# objects
o = hvd.broadcast_object({"r": r, "l": [1, 2]} if r == 1 else None, root_rank=1)
assert o == {"r": 1, "l": [1, 2]}, o
assert hvd.allgather_object(("x", r)) == [("x", 0), ("x", 1)]
# Gradients through the collectives, as Horovod defines them (2 ranks).
# allgather: rank r has r+1 rows; d/dy = (r+1)*(row+1), averaged over ranks
# = 1.5*(row+1); each rank gets its own rows back.
xg = torch.full((r + 1, 3), float(r + 1), requires_grad=True)
yg = hvd.allgather(xg, name="g_allgather")
assert yg.shape == (3, 3) and yg.requires_grad
w = (r + 1) * torch.arange(1.0, 4.0).reshape(3, 1).expand(3, 3)
(yg * w).sum().backward()
rows = [1.0] if r == 0 else [2.0, 3.0]
assert torch.allclose(xg.grad, 1.5 * torch.tensor(rows).reshape(-1, 1).expand(-1, 3)), xg.grad
# broadcast from rank 1: the averaged gradient on the root, zero elsewhere.
xb = torch.full((4,), float(r + 1), requires_grad=True)
yb = hvd.broadcast(xb, root_rank=1, name="g_bcast")
assert torch.equal(yb.detach(), torch.full((4,), 2.0))
(yb * (r + 1)).sum().backward()
assert torch.equal(xb.grad, torch.full((4,), 1.5 if r == 1 else 0.0)), xb.grad
# alltoall (even splits): the gradient travels back to the rows' owners.
xa = (torch.arange(4.0) + 10 * r).requires_grad_()
ya = hvd.alltoall(xa, name="g_a2a")
assert isinstance(ya, torch.Tensor) and ya.requires_grad
(ya * (torch.arange(1.0, 5.0) * (r + 1))).sum().backward()
assert torch.equal(xa.grad, torch.tensor([1.0, 2.0, 2.0, 4.0] if r == 0 else [3.0, 4.0, 6.0, 8.0])), xa.grad
ya2, rs2 = hvd.alltoall(xa.detach().clone().requires_grad_(), splits=[2, 2], name="g_a2a_splits")
assert ya2.requires_grad and not rs2.requires_grad
# reducescatter: each rank's gradient gathered back, times size() for Sum
# and as is for Average -- Horovod's definition (HorovodReducescatter.backward).
for op, scale in ((hvd.Sum, float(hvd.size())), (hvd.Average, 1.0)):
    xr = torch.full((4,), float(r + 1), requires_grad=True)
    yr = hvd.reducescatter(xr, op=op, name=f"g_rs{int(op)}")
    (yr * (r + 1)).sum().backward()
    assert torch.allclose(xr.grad, scale * torch.tensor([1.0, 1.0, 2.0, 2.0])), (op, xr.grad)
# Without requires_grad nothing changes (no autograd graph).
assert not hvd.allgather(torch.ones(1), name="g_plain").requires_grad

# mismatch raises on both ranks with the library's message
try:
    hvd.allreduce(torch.ones(2 + r), op=hvd.Sum, name="bad")
    raise SystemExit("mismatch did not raise")
except hvd.MismatchError as e:
    assert "bad" in str(e), str(e)
    print(f"rank {r}: mismatch ok: {e}")
# Horovod raises HorovodInternalError (a RuntimeError) for a mismatch.
assert isinstance(hvd.MismatchError("x"), hvd.HorovodInternalError) and not isinstance(hvd.MismatchError("x"), ValueError)
# still usable after a mismatch
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after"), torch.full((1,), 2.0))
try:
    hvd.allreduce(torch.ones(1, dtype=torch.complex64))
    raise SystemExit("complex did not raise")
except ValueError as e:
    assert "dtype" in str(e)
# join (Horovod's): rank 1 has no more data. Rank 0's allreduces -- plain and
# through DistributedOptimizer -- complete with zeros from rank 1 (Average
# still divides by 2); join() returns the rank that joined last.
if r == 1:
    last = hvd.join()
else:
    s = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="join_sum")
    assert torch.equal(s, torch.ones(3)), s
    lin = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        lin.weight.fill_(1.0)
    jopt = hvd.DistributedOptimizer(torch.optim.SGD(lin.parameters(), lr=1.0),
                                    named_parameters=lin.named_parameters())
    lin(torch.tensor([[2.0, 4.0]])).sum().backward()  # local gradient [2, 4]
    jopt.step()  # averaged with rank 1's zeros: [1, 2]
    assert torch.allclose(lin.weight.detach(), torch.tensor([[0.0, -1.0]])), lin.weight
    last = hvd.join()
assert last == 0, last
# Collectives work normally after everyone joined.
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after_join"), torch.full((1,), 2.0))

hvd.shutdown()
assert hvd.is_initialized() is False
print(f"rank {r}: ops ok")
