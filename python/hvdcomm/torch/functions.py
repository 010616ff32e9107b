"""hvdcomm.torch.functions: horovod.torch.functions -- picklable objects
(broadcast_object, allgather_object) and model/optimizer state
(broadcast_parameters, broadcast_optimizer_state) on the collectives of
hvdcomm.torch.mpi_ops."""
import io
import pickle

import torch

from hvdcomm.torch.mpi_ops import _check_process_set, _name, allgather, broadcast_, broadcast_async_, rank, synchronize
from hvdcomm.torch.optimizer import _DistributedOptimizer


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    _check_process_set(process_set, "broadcast_object")
    name = _name("broadcast_object", name, process_set)
    if rank() == root_rank:
        buf = io.BytesIO()
        pickle.dump(obj, buf)
        payload = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
        sz = torch.tensor([payload.numel()], dtype=torch.int64)
        broadcast_(sz, root_rank, name + ".sz", process_set)
        broadcast_(payload, root_rank, name + ".data", process_set)
        return obj
    sz = torch.zeros(1, dtype=torch.int64)
    broadcast_(sz, root_rank, name + ".sz", process_set)
    payload = torch.zeros(int(sz.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name + ".data", process_set)
    return pickle.loads(payload.numpy().tobytes())


def allgather_object(obj, name=None, process_set=None):
    _check_process_set(process_set, "allgather_object")
    name = _name("allgather_object", name, process_set)
    data = pickle.dumps(obj)
    payload = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.zeros(0, dtype=torch.uint8)
    sizes = allgather(torch.tensor([len(data)], dtype=torch.int64), name + ".sz", process_set).tolist()
    everything = allgather(payload, name + ".data", process_set).numpy().tobytes()
    out, off = [], 0
    for s in sizes:
        out.append(pickle.loads(everything[off:off + s]))
        off += s
    return out


def broadcast_parameters(params, root_rank):
    """Broadcasts a state_dict or a list of (name, tensor) from root_rank, in place."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list):
        items = [p if isinstance(p, tuple) else (str(i), p) for i, p in enumerate(params)]
    else:
        raise ValueError("hvdcomm: broadcast_parameters expects a dict or a list of (name, tensor)")
    handles = []
    for n, p in items:
        if p is None:
            continue
        t = p.data if isinstance(p, torch.nn.Parameter) else p
        if not isinstance(t, torch.Tensor):
            # not skipped silently: this entry would stay different on each rank
            raise ValueError(f"hvdcomm: broadcast_parameters: entry {n!r} is a {type(t).__name__}, not a tensor; "
                             f"broadcast it with broadcast_object()")
        handles.append(broadcast_async_(t, root_rank, name=str(n)))  # Horovod: broadcast.<name>
    for h in handles:
        synchronize(h)


def _initialize_state(optimizer, model):
    """Horovod's initialising step for an optimizer without state (none
    stepped yet): every parameter that requires grad gets a zero gradient
    (sparse for SparseAdam, and for SGD on a sparse Embedding of `model`)
    and the wrapped torch optimizer steps once on this rank (never the
    DistributedOptimizer: that would allreduce). So every rank has state of
    the right structure and the gradients exist afterwards, as with Horovod.
    The step only creates state: every parameter it stepped is put back
    as it was (a copy in host memory meanwhile). Horovod leaves the step's
    change -- weight decay moves parameters even with a zero gradient, as
    ASGD does always -- so a rank joining an elastic job, the one rank whose
    optimizer had no state, ended with parameters off the others' after they
    had just been broadcast. LBFGS is left out (its step needs a closure):
    its state is broadcast as is."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    saved = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                saved.append((p, p.detach().to("cpu", copy=True)))
                p.grad = torch.zeros_like(p.data)
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    optimizer.step()
    with torch.no_grad():
        for p, before in saved:
            p.copy_(before)


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Makes every rank's optimizer state and hyper-parameters equal root's.
    State is pickled (broadcast_object) and tensors copied in place, so ranks
    whose state is still empty (no step yet) receive root's. `model` is
    Horovod's way to find sparse parameters; the pickled state carries
    sparse and dense tensors alike; it is used, as Horovod uses it, to give
    sparse Embedding parameters sparse zero gradients in the initialising
    step an optimizer without state takes first (_initialize_state)."""
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"hvdcomm: broadcast_optimizer_state(model=...) expects a torch.nn.Module, got "
                        f"{type(model).__name__}")
    if isinstance(optimizer, _DistributedOptimizer):
        optimizer = optimizer._opt
    if not optimizer.state_dict()["state"] and not isinstance(optimizer, torch.optim.LBFGS):
        _initialize_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict(), root_rank, name="broadcast_optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)
