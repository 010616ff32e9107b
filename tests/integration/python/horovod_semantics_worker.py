"""Issue 27: Horovod's semantics where hvdcomm differed, each pinned as
Horovod's own test suite (test/parallel/test_torch.py) relies on it; run on
2 ranks and on 3 (python.horovod_semantics, python.horovod_semantics_np3).
Each block names the cause it pins (docs/python.md, "Horovod's test suite")."""
import threading

import torch

import horovod.torch as hvd


def raises(exc, fn, what, not_exc=None):
    try:
        fn()
    except exc as e:
        if not_exc is not None and isinstance(e, not_exc):
            raise SystemExit(f"{what}: raised {type(e).__name__}, which is also a {not_exc.__name__}: {e}")
        return e
    except Exception as e:  # noqa: BLE001 -- the wrong type is the failure reported
        raise SystemExit(f"{what}: expected {exc.__name__}, got {type(e).__name__}: {e}")
    raise SystemExit(f"{what}: expected {exc.__name__}, nothing raised")


# 1. horovod.runner.util.threads (Horovod's test utilities import in_thread).
from horovod.runner.util.threads import in_thread, on_event  # noqa: E402

box = []
t = in_thread(lambda x: box.append(x), (7,))
t.join()
assert box == [7] and t.daemon, box
raises(ValueError, lambda: in_thread(print, args=[1]), "in_thread(args=list)")
ev = threading.Event()
t = on_event(ev, box.append, (8,))
ev.set()
t.join(10)
assert box == [7, 8], box

# 2. Before init(): ValueError (Horovod's), not HorovodInternalError.
raises(ValueError, hvd.size, "size() before init()", not_exc=RuntimeError)
raises(ValueError, hvd.rank, "rank() before init()", not_exc=RuntimeError)

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n >= 2, n

# 3. A second init() does nothing -- here on rank 0 only: it must not wait
# for the others (it ran a collective topology exchange and hung).
if r == 0:
    hvd.init()
assert hvd.is_initialized() and hvd.size() == n
assert torch.equal(hvd.allreduce(torch.ones(1), op=hvd.Sum, name="after_reinit"), torch.full((1,), float(n)))

# 4. Ranks that disagree raise HorovodInternalError (a RuntimeError, not a ValueError).
for what, fn in [
        ("shape", lambda: hvd.allreduce(torch.ones(2 + r), name="mm_shape")),
        ("dtype", lambda: hvd.allgather(torch.ones(2, dtype=torch.int32 if r % 2 else torch.float32),
                                        name="mm_dtype")),
        ("root", lambda: hvd.broadcast(torch.ones(2), r, name="mm_root"))]:
    e = raises(hvd.HorovodInternalError, fn, f"mismatched {what}", not_exc=ValueError)
    assert isinstance(e, hvd.MismatchError) and isinstance(e, RuntimeError), type(e)

# 5. int16 on every op (allgather, broadcast, alltoall, allreduce, reducescatter).
x16 = torch.arange(2 * n, dtype=torch.int16) + 100 * r
g = hvd.allgather(x16, name="i16_gather")
assert g.dtype == torch.int16 and torch.equal(g, torch.cat([torch.arange(2 * n, dtype=torch.int16) + 100 * q
                                                            for q in range(n)])), g
b = hvd.broadcast(x16, 0, name="i16_bcast")
assert torch.equal(b, torch.arange(2 * n, dtype=torch.int16)), b
a = hvd.alltoall(x16, name="i16_a2a")
assert a.dtype == torch.int16 and torch.equal(a, torch.tensor([v for q in range(n) for v in (2 * r + 100 * q,
                                                                                              2 * r + 1 + 100 * q)],
                                                              dtype=torch.int16)), a
s = hvd.allreduce(x16, op=hvd.Sum, name="i16_sum")
assert s.dtype == torch.int16 and torch.equal(s, n * torch.arange(2 * n, dtype=torch.int16) + 100 * n * (n - 1) // 2), s
rs = hvd.reducescatter(x16, op=hvd.Sum, name="i16_rs")
assert torch.equal(rs, s[2 * r:2 * r + 2]), rs

# 6. prescale/postscale on integer tensors: scaled in float64, truncated
# toward zero (Horovod's rule), then summed / after the sum.
xi = torch.tensor([7, -7, 3, 10], dtype=torch.int32)
out = hvd.allreduce(xi, op=hvd.Sum, prescale_factor=0.5, name="int_pre")
assert torch.equal(out, n * torch.tensor([3, -3, 1, 5], dtype=torch.int32)), out
out = hvd.allreduce(torch.tensor([7, -7], dtype=torch.int64), op=hvd.Sum, postscale_factor=0.5, name="int_post")
assert torch.equal(out, torch.tensor([int(7 * n * 0.5), int(-7 * n * 0.5)], dtype=torch.int64)), out
out = hvd.reducescatter(xi.repeat(n), op=hvd.Sum, prescale_factor=0.5, name="int_rs_pre")
assert torch.equal(out, n * torch.tensor([3, -3, 1, 5], dtype=torch.int32)), out

# 7. Average is a true division by size() after the sum (Horovod's CPU
# path; x * (1/3) differs from x / 3 in float32's last bit).
torch.manual_seed(1234)
xf = torch.FloatTensor(64).random_(-100, 100) * 0.1915
avg = hvd.allreduce(xf, op=hvd.Average, name="avg_div")
ref = xf.clone()
for _ in range(n - 1):
    ref = ref + xf
assert torch.equal(avg, ref / n), (avg - ref / n).abs().max()

# 8. alltoall splits: int32 only (Horovod's); a float tensor is refused, not truncated.
raises(ValueError, lambda: hvd.alltoall(torch.ones(n), torch.full((n,), 1.0)), "float splits")
raises(ValueError, lambda: hvd.alltoall(torch.ones(n), torch.ones(n, dtype=torch.int64)), "int64 splits")
out, rsp = hvd.alltoall(torch.ones(n), torch.ones(n, dtype=torch.int32), name="a2a_i32")
assert rsp.dtype == torch.int32 and rsp.tolist() == [1] * n, rsp

# 9. reducescatter with Adasum: a RuntimeError (NotImplementedError), on every rank.
raises(NotImplementedError, lambda: hvd.reducescatter(torch.ones(n), op=hvd.Adasum), "reducescatter Adasum")

# 10. DistributedOptimizer: duplicate names refused at construction
# (ValueError); _parameter_names maps every parameter to one name.
n1, n2 = torch.nn.Linear(1, 1), torch.nn.Linear(1, 1)
opt = torch.optim.SGD(list(n1.parameters()) + list(n2.parameters()), lr=0.1)
e = raises(ValueError, lambda: hvd.DistributedOptimizer(opt, named_parameters=list(n1.named_parameters()) +
                                                        list(n2.named_parameters())), "duplicate names")
assert "weight" in str(e), e
model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
dopt = hvd.DistributedOptimizer(torch.optim.SGD([{"params": model[0].parameters()},
                                                 {"params": model[1].parameters()}], lr=0.1))
names = dopt._parameter_names
assert len(names) == 4 and len(set(names.values())) == 4, names
everyone = hvd.allgather_object(sorted(names.values()))
assert all(v == everyone[0] for v in everyone), everyone

# 11. broadcast_optimizer_state on an optimizer without state: Horovod's
# initialising step (zero gradients, one local step), so the gradients
# exist afterwards and the momentum state is root's on every rank.
class NoGrad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
        self.b = torch.nn.Parameter(torch.rand(4) + r)


m = NoGrad()
o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.001, momentum=0.9), named_parameters=m.named_parameters())
hvd.broadcast_parameters(m.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(o, root_rank=0)
assert m.a.grad is None and m.b.grad is not None and torch.equal(m.b.grad, torch.zeros(4)), (m.a.grad, m.b.grad)
assert len(o.state_dict()["state"]) == 1, o.state_dict()
# ... and the step leaves the parameters as they were: an elastic newcomer
# (the one rank without state) must end with the others' parameters, weight
# decay (SGD, AdamW) or ASGD's decay notwithstanding.
for make in (lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.5),
             lambda ps: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.5),
             lambda ps: torch.optim.ASGD(ps, lr=0.1, lambd=0.5)):
    m = torch.nn.Linear(3, 2)
    o = make(m.parameters())  # a torch optimizer: rank 0's step below allreduces nothing
    if r == 0:  # the members: trained, with state
        m(torch.rand(4, 3)).sum().backward()
        o.step()
    hvd.broadcast_parameters(m.state_dict(), root_rank=0)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    hvd.broadcast_optimizer_state(o, root_rank=0)
    after = m.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), (type(o).__name__, before, after)
    everyone = hvd.allgather_object({k: v.tolist() for k, v in after.items()})
    assert all(e == everyone[0] for e in everyone), (type(o).__name__, everyone)

# 12. join: join(device) as Horovod's scripts call it (hvd.local_rank());
# a barrier completes while a rank has joined (the joined rank takes part,
# as in Horovod), an allreduce gets zeros from it, and any other op raises
# HorovodInternalError; the joined rank is not left waiting, also when
# unnamed ops ran on some ranks only (their automatic names start over).
for first in range(n):
    if r == first:
        ret = hvd.join(hvd.local_rank())
    else:
        hvd.barrier()
        assert hvd.allreduce(torch.ones(3), op=hvd.Sum).tolist() == [n - 1.0] * 3
        e = raises(hvd.HorovodInternalError, lambda: hvd.allgather(torch.ones(2)), "allgather while joined",
                   not_exc=ValueError)
        assert "joined" in str(e), e
        ret = hvd.join()
    assert ret != first, (ret, first)
    assert hvd.allgather_object(ret) == [ret] * n
raises(ValueError, lambda: hvd.join(device=-2), "join(device=-2)")

hvd.shutdown()
print(f"rank {r}: horovod semantics ok")
