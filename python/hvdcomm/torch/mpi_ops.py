"""hvdcomm.torch.mpi_ops: the collectives of horovod.torch.mpi_ops on
hvdrun's collective library -- init/shutdown and the topology calls, the
build facts (*_built() / *_enabled()), the reduce ops, handles
(poll/synchronize), allreduce/allgather/broadcast/alltoall/reducescatter
(async, in-place, grouped, differentiable), barrier and join.

Tensors are passed to the native core as raw buffers (data_ptr, shape,
dtype code, and for CUDA tensors the device and current stream); the
extension does not link libtorch. See docs/python.md."""
import collections
import os as _os
import weakref as _weakref

import torch

from hvdcomm import _core
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt, MismatchError,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
from hvdcomm.torch.compression import Compression


# ---------------------------------------------------------------- basics
_ISSUE = "issue 20 tracks it"


class ProcessSet:
    """Horovod's ProcessSet: a set of ranks that run collectives together
    (docs/python.md, "Process sets"). Built from a list of global ranks
    (sorted here, as Horovod does); registered by hvd.init(process_sets=[...])
    or hvd.add_process_set(), which set process_set_id. Ops take it as
    process_set=; a broadcast root stays a global rank. Sets from an MPI
    communicator raise NotImplementedError (hvdcomm has no MPI)."""
    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise NotImplementedError(f"hvdcomm: ProcessSet({ranks_or_comm!r}): process sets from an MPI "
                                      f"communicator are not implemented (hvdcomm has no MPI); {_ISSUE}") from None
        if any(not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None while not registered."""
        if self.process_set_id is None:
            return None
        return _core.process_set_size(self.process_set_id)

    def rank(self):
        """This process's rank within the set (its index in ranks), or None
        while not registered; ValueError when this process is not a member."""
        if self.process_set_id is None:
            return None
        return _core.process_set_rank(self.process_set_id)

    def included(self):
        """Whether this process is a member, or None without ranks."""
        if self.ranks is None:
            return None
        return rank() in self.ranks

    def __str__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks}, mpi_comm=None)"

    __repr__ = __str__


class _GlobalProcessSet(ProcessSet):
    """hvd.global_process_set: all ranks, id 0 (what every op does by default)."""
    process_set_id = 0

    def __init__(self):
        pass

    @property
    def ranks(self):
        return list(range(size())) if is_initialized() else None

    def _invalidate(self):
        pass  # the global set is never unregistered

    def size(self):
        return size() if is_initialized() else None

    def rank(self):
        return rank() if is_initialized() else None

    def included(self):
        return True if is_initialized() else None


global_process_set = _GlobalProcessSet()


def _check_process_set(process_set, where):
    """The library's id for `process_set`: 0 for None and
    hvd.global_process_set, else the registered set's id. A set that is not
    registered (never added, removed, or a duplicate that init invalidated)
    raises ValueError instead of running the op on all ranks."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"hvdcomm: {where}(process_set={process_set!r}): expected an hvd.ProcessSet")
    if process_set.process_set_id is None:
        raise ValueError(f"hvdcomm: {where}(process_set={process_set}): the process set is not registered; pass it "
                         f"to hvd.init(process_sets=[...]) or hvd.add_process_set() first")
    return process_set.process_set_id


def _set_rank_size(psid):
    """(rank, size) of this process within process set `psid`."""
    if psid == 0:
        return rank(), size()
    return _core.process_set_rank(psid), _core.process_set_size(psid)


def add_process_set(process_set):
    """Horovod's add_process_set: registers a ProcessSet (or a list of
    ranks) on every rank and returns it with its id. Collective: every rank
    calls it with the same ranks, in the same order. Needs
    HOROVOD_DYNAMIC_PROCESS_SETS=1 (or init(process_sets="dynamic")), else
    ValueError, as Horovod; a set with the ranks of a registered one raises
    ValueError ("Attempted to add a duplicate process set")."""
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    if not _core.dynamic_process_sets():
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after Horovod "
                         "initialization.")
    try:
        process_set.process_set_id = _core.add_process_set(list(process_set.ranks))
    except ValueError as e:
        if "duplicate process set" in str(e):
            raise ValueError(f"Attempted to add a duplicate process set: {process_set} ({e})") from None
        raise
    _dynamic_sets.add(process_set)
    _forget_names(process_set.process_set_id)  # an id may be reused: its unnamed ops count from 1 again
    return process_set


def remove_process_set(process_set):
    """Horovod's remove_process_set: unregisters the set on every rank
    (collective) and returns True; False for the global set or a set that
    is not registered (nothing is called then, as in Horovod). Needs
    HOROVOD_DYNAMIC_PROCESS_SETS=1, else ValueError."""
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"hvdcomm: remove_process_set({process_set!r}): expected an hvd.ProcessSet")
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    psid = process_set.process_set_id
    if psid is None or psid == 0:
        return False
    if not _core.dynamic_process_sets():
        raise ValueError("Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after Horovod "
                         "initialization.")
    if psid not in _core.process_set_ids():
        return False
    _core.remove_process_set(psid)
    process_set._invalidate()
    _dynamic_sets.discard(process_set)
    return True


_DYNAMIC = _core.dynamic_process_sets_var
_static_sets = []  # init(process_sets=[...])'s objects, re-bound after an elastic re-join
_dynamic_sets = _weakref.WeakSet()  # add_process_set()'s objects, invalidated by an elastic re-join


def _dynamic_sets_forget():
    for ps in list(_dynamic_sets):
        ps._invalidate()
    _dynamic_sets.clear()


def _bind_process_sets(process_sets):
    """Sets process_set_id of init()'s static sets: the library registers
    set i as id i + 1, unless this (elastic) world lacks one of its ranks."""
    ids = set(_core.process_set_ids())
    for i, ps in enumerate(process_sets):
        ps.process_set_id = i + 1 if i + 1 in ids else None


def _bind_again(process_sets):
    """init() called again (Horovod: the second call does nothing, on any
    subset of the ranks; nothing collective runs). Sets passed again get the
    ids of the registered sets with their ranks; a set that is not
    registered raises ValueError (add it with hvd.add_process_set())."""
    registered = {tuple(_core.process_set_ranks(i)): i for i in _core.process_set_ids() if i != 0}
    for i, ps in enumerate(process_sets):
        psid = registered.get(tuple(ps.ranks))
        if psid is None:
            raise ValueError(f"hvdcomm: init(process_sets=...) called again: entry number {i} ({ps}) is not a "
                             f"registered process set; hvd.init() already ran, so add it with "
                             f"hvd.add_process_set()")
        ps.process_set_id = psid


def init(comm=None, process_sets=None):
    """As Horovod's init. comm: None or the list of all ranks (a subset or an
    MPI communicator raises NotImplementedError). process_sets: None, a list
    of hvd.ProcessSet (static sets, ids 1..n in order; registered on every
    rank before init returns), or "dynamic" (sets HOROVOD_DYNAMIC_PROCESS_SETS=1:
    add_process_set/remove_process_set allowed). Called again while
    initialized, it does nothing (as Horovod's), on any subset of the ranks."""
    if comm is not None and not isinstance(comm, (list, tuple, range)):
        raise NotImplementedError(f"hvdcomm: init(comm={comm!r}): an MPI communicator is not supported (hvdcomm "
                                  f"has no MPI); pass comm=None ({_ISSUE})")
    if process_sets is None:
        process_sets = []
    elif isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(f"hvdcomm: init(process_sets={process_sets!r}): expected a list of hvd.ProcessSet "
                             f"or \"dynamic\"")
        process_sets = []
        _os.environ[_DYNAMIC] = "1"
    process_sets = [ps for ps in process_sets if ps is not global_process_set]
    for i, ps in enumerate(process_sets):
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"hvdcomm: init(process_sets=...): entry number {i} is not an hvd.ProcessSet: {ps!r}")
    seen = set()
    for i, ps in enumerate(process_sets):
        if tuple(ps.ranks) in seen:
            raise ValueError(f"Horovod could not be initialized because process_sets entry number {i} is a "
                             f"duplicate: {ps}")
        seen.add(tuple(ps.ranks))
    if _core.is_initialized():
        _bind_again(process_sets)
        return
    _core.init([list(ps.ranks) for ps in process_sets])
    if comm is not None and sorted(comm) != list(range(size())):
        n = size()
        _core.shutdown()
        raise NotImplementedError(
            f"hvdcomm: init(comm={list(comm)!r}): a communicator of a subset of the {n} ranks is not implemented "
            f"yet in hvdcomm; pass comm=None for all ranks and process_sets=[hvd.ProcessSet({list(comm)!r})] for "
            f"the subset ({_ISSUE})")
    _static_sets[:] = process_sets
    _forget_names()
    _bind_process_sets(process_sets)
    _join_world(rejoin=False)


def start_timeline(file_path, mark_cycles=False):
    """As Horovod's: creates a Chrome-trace timeline at file_path and records
    from now on (rank 0 writes it; the call does nothing on other ranks).
    mark_cycles adds CYCLE_START marks. An open timeline is closed first.
    ValueError if hvd.init() was not called; OSError if rank 0 cannot create
    the file."""
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    _core.start_timeline(_os.fspath(file_path), bool(mark_cycles))


def stop_timeline():
    """As Horovod's: flushes and closes the timeline (no-op if none is open)."""
    if not _core.is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")
    _core.stop_timeline()


def shutdown():
    _homogeneous[0] = None
    _core.shutdown()


is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size


_homogeneous = [None]  # this world's answer, learnt by every rank in init() / an elastic re-join


def _learn_topology():
    """Collective, run by every rank of a (new) world: an allgather of each
    rank's local_size, so is_homogeneous() is the same answer on every rank
    (a rank's own local_size and cross_size cannot tell: with hosts of 1, 2
    and 3 slots some ranks would compute True and others False)."""
    if size() == 1:
        _homogeneous[0] = True
        return
    sizes = allgather(torch.tensor([local_size()], dtype=torch.int64), name="hvdcomm.topology.local_size")
    _homogeneous[0] = bool((sizes == sizes[0]).all())


def is_homogeneous():
    """True when every host runs the same number of ranks; the same answer on
    every rank (computed collectively when this rank joined its world)."""
    if not is_initialized() or _homogeneous[0] is None:
        raise ValueError("hvdcomm has not been initialized; call hvd.init() first")
    return _homogeneous[0]


# Build facts: the data plane is a Gloo-style TCP controller; no MPI or NCCL.
# CUDA tensors (allreduce, broadcast) are reduced by the library's own CUDA
# component when it was built (docs/cuda.md).
def mpi_built(verbose=False):
    return False


def mpi_enabled():
    return False


def gloo_built(verbose=False):
    return True


def gloo_enabled():
    return True


def nccl_built(verbose=False):
    """Like Horovod: NCCL's version code (e.g. 22809 for 2.28.9) when CUDA
    tensors can be reduced through NCCL (the CUDA component is built and
    libnccl loads at run time), else 0."""
    if not _core.nccl_detected():
        return 0
    major, minor, patch = (int(x) for x in _core.nccl_version().split("."))
    return major * 10000 + minor * 100 + patch


def cuda_built(verbose=False):
    """True when the library has the CUDA component: CUDA tensors may then be
    passed to allreduce and broadcast."""
    return bool(_core.cuda_built())


def rocm_built(verbose=False):
    return False


def ddl_built(verbose=False):
    return False


def ccl_built(verbose=False):
    return False


def mpi_threads_supported():
    return False


# ---------------------------------------------------------------- worlds
# init() and an elastic re-join (hvdcomm.torch.elastic._elastic_reset) both
# come here: the handles and op-name counters of the old world are dropped
# and is_homogeneous() is learnt for the new one.
def _join_world(rejoin):
    """Re-joins the newest world when `rejoin`, then learns its topology
    (collective, on every member). In an elastic job a member that dies
    while the others learn the topology only means: join the next world."""
    while True:
        if rejoin:
            _core.elastic_reset()
            _handles.clear()
            _counter.clear()
            # The new world registered the static sets again (same ids,
            # those whose ranks it has); dynamic sets are gone (as after
            # Horovod's re-init): their objects are invalidated.
            _bind_process_sets(_static_sets)
            _dynamic_sets_forget()
        try:
            _learn_topology()
            return
        except PeerFailureError:
            if not _core.elastic_enabled():
                raise
            rejoin = True


# ---------------------------------------------------------------- ops
class ReduceOp(int):
    pass


Sum = ReduceOp(0)
Average = ReduceOp(1)
Min = ReduceOp(2)
Max = ReduceOp(3)
Product = ReduceOp(4)
# Horovod's Adasum (docs/python.md, "Adasum"): allreduce of float16/32/64 CPU
# tensors on a power-of-two number of ranks. The value is the library's op code.
Adasum = ReduceOp(5)

_DTYPES = {
    torch.uint8: 0, torch.int8: 1, torch.int32: 2, torch.int64: 3,
    torch.float16: 4, torch.bfloat16: 5, torch.float32: 6, torch.float64: 7,
    torch.bool: 8,  # allgather, broadcast, alltoall only (the library refuses to reduce it)
    torch.int16: 9,
}


def _dtype_code(t):
    try:
        return _DTYPES[t.dtype]
    except KeyError:
        raise ValueError(f"hvdcomm: dtype {t.dtype} is not supported (use one of "
                         f"{', '.join(str(d) for d in _DTYPES)})") from None


_DEVICE_OPS = ("allreduce", "broadcast", "allgather", "alltoall", "reducescatter")


def _check(t, op="this operation"):
    """The library's device value for `t`: -1 for a CPU tensor, the CUDA
    device index for a CUDA tensor passed to an op that accepts them in a
    build with the CUDA component; anything else raises ValueError."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"hvdcomm: expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type == "cpu":
        return -1
    if t.device.type != "cuda":
        raise ValueError(f"hvdcomm: {t.device.type} tensors are not supported (CPU and CUDA tensors are)")
    if op not in _DEVICE_OPS:
        raise ValueError(f"hvdcomm: {op} of CUDA tensors is not supported (only {', '.join(_DEVICE_OPS)} "
                         f"accept them); move the tensor to the CPU first")
    if not _core.cuda_built():
        raise ValueError("hvdcomm: a CUDA tensor was passed, but this hvdcomm's library was built without the CUDA "
                         "component (rebuild with nvcc available and -DHVD_WITH_CUDA=ON, or pass CPU tensors)")
    return t.device.index if t.device.index is not None else torch.cuda.current_device()


def _stream(t, device):
    """The stream the library orders the operation after: torch's current
    stream of the tensor's device (0, unused, for CPU tensors)."""
    return torch.cuda.current_stream(device).cuda_stream if device >= 0 else 0


def _op_code(op, average):
    if op is None:
        op = Average if (average is None or average) else Sum
    elif average is not None:
        raise ValueError("hvdcomm: pass either op or average, not both")
    if int(op) not in (0, 1, 2, 3, 4, 5):
        raise ValueError(f"hvdcomm: unknown reduce op {op}")
    return int(op)


def _check_adasum(tensor, device, psid, where):
    """Horovod's rules for op=Adasum, said before the library is asked:
    CPU tensors only, float16/32/64, a power-of-two number of ranks."""
    if device >= 0:
        raise NotImplementedError(f"hvdcomm: {where}(op=Adasum) of a CUDA tensor is not supported (hvdcomm's Adasum "
                                  f"runs on CPU tensors); reduce tensor.cpu() instead")
    if tensor.dtype not in (torch.float16, torch.float32, torch.float64):
        raise ValueError(f"hvdcomm: {where}(op=Adasum) needs a float16, float32 or float64 tensor (got {tensor.dtype})")
    n = _set_rank_size(psid)[1]
    if n & (n - 1):
        raise NotImplementedError(f"hvdcomm: Running Adasum with non-power of 2 ranks is not supported (as in "
                                  f"Horovod): the {'job' if psid == 0 else 'process set'} has {n} ranks")


_counter = collections.defaultdict(int)


def _forget_names(psid=None):
    """Restarts the automatic names of one process set (None: of every set
    but the global one) -- when its id is (re)registered on every rank."""
    for key in [k for k in _counter if (k[1] != 0 if psid is None else k[1] == psid)]:
        del _counter[key]


class _OpName(str):
    """A name `_name` has resolved: the inner calls an op makes pass it on
    unchanged."""
    __slots__ = ()


def _name(kind, name, process_set=None):
    """The op's name as Horovod forms it: `<kind>.<name>`, else the next
    automatic `<kind>.noname.<n>` on `process_set` (counted per set, since
    only a set's members submit its unnamed ops). The timeline shows these
    names; every rank forms the same ones."""
    if isinstance(name, _OpName):
        return name
    if name:
        return _OpName(f"{kind}.{name}")
    psid = _check_process_set(process_set, kind)
    _counter[kind, psid] += 1
    return _OpName(f"{kind}.noname.{_counter[kind, psid]}" if psid == 0
                   else f"{kind}.ps{psid}.noname.{_counter[kind, psid]}")


def _part(base, i, n):
    """The name of tensor i of a grouped op (Horovod: `<base>_<i+1>of<n>`)."""
    return _OpName(f"{base}_{i + 1}of{n}")


def _grad(name, what="grad"):
    """The name of the op a backward pass runs for the op `name`."""
    return _OpName(f"{name}.{what}")


class _Pending:
    """A native handle plus what keeps its buffers alive and turns it into a result."""

    def __init__(self, handle, keep, finish):
        self.handle, self.keep, self.finish = handle, keep, finish
        self.result, self.done = None, False


_handles = {}
_next_handle = [0]


def _register(p):
    _next_handle[0] += 1
    _handles[_next_handle[0]] = p
    return _next_handle[0]


def poll(handle):
    """True when the operation behind `handle` has finished."""
    if isinstance(handle, _SparseHandle):
        return handle.poll()
    return _handles[handle].handle.poll()


def synchronize(handle):
    """Waits for `handle` and returns its output tensor."""
    if isinstance(handle, _SparseHandle):
        return handle()
    p = _handles.get(handle)
    if p is None:
        raise ValueError(f"hvdcomm: unknown or already synchronized handle {handle}")
    try:
        p.handle.wait()
    except BaseException:
        # Interrupted (Ctrl-C) while still running: keep the entry, and with it
        # the buffers the library will still write; synchronize() may be retried.
        if p.handle.poll():
            del _handles[handle]
        raise
    del _handles[handle]
    return p.finish()


def _allreduce_into(tensor, output, name, op, prescale, postscale, device, psid=0):
    h = _core.allreduce_async(name, tensor.data_ptr(), output.data_ptr(), _dtype_code(tensor),
                              list(tensor.shape), op, float(prescale), float(postscale),
                              device, _stream(tensor, device), psid)
    return _register(_Pending(h, (tensor, output), lambda: output))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, compression=None, process_set=None):
    """`compression` (an hvdcomm extension; Horovod's allreduce_async has
    none) compresses the tensor sent and decompresses the result."""
    psid = _check_process_set(process_set, "allreduce_async")
    device = _check(tensor, "allreduce")
    opc = _op_code(op, average)
    compression = compression or Compression.none
    compressed, ctx = compression.compress(tensor)
    if opc == Adasum:
        _check_adasum(compressed, device, psid, "allreduce_async")
    src = compressed.detach().contiguous()
    out = torch.empty_like(src)
    h = _allreduce_into(src, out, _name("allreduce", name, process_set), opc, prescale_factor, postscale_factor, device, psid)
    if compression is not Compression.none:
        _handles[h].finish = lambda: compression.decompress(out, ctx)
    return h


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    psid = _check_process_set(process_set, "allreduce_async_")
    device = _check(tensor, "allreduce")
    opc = _op_code(op, average)
    if opc == Adasum:
        _check_adasum(tensor, device, psid, "allreduce_async_")
    if tensor.is_contiguous():
        return _allreduce_into(tensor, tensor, _name("allreduce", name, process_set), opc, prescale_factor, postscale_factor,
                               device, psid)
    buf = tensor.detach().contiguous()
    h = _core.allreduce_async(_name("allreduce", name, process_set), buf.data_ptr(), buf.data_ptr(), _dtype_code(buf),
                              list(buf.shape), opc, float(prescale_factor), float(postscale_factor),
                              device, _stream(buf, device), psid)

    def finish():
        tensor.data.copy_(buf)
        return tensor
    return _register(_Pending(h, (buf,), finish))


class _AllreduceFn(torch.autograd.Function):
    """allreduce as a differentiable op: for Sum/Average the gradient is the
    same allreduce of the incoming gradient (as in Horovod)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale, postscale, process_set):
        ctx.name, ctx.op, ctx.pre, ctx.post, ctx.ps = name, op, prescale, postscale, process_set
        return synchronize(allreduce_async(tensor, None, name, op, prescale, postscale, process_set=process_set))

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (Sum, Average):
            raise NotImplementedError("hvdcomm: allreduce gradient is only defined for Sum and Average")
        g = synchronize(allreduce_async(grad.contiguous(), None, _grad(ctx.name), ctx.op, ctx.pre, ctx.post,
                                        process_set=ctx.ps))
        return g, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=None, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    _check_process_set(process_set, "allreduce")
    compression = compression or Compression.none
    if _wants_grad(tensor):
        _check(tensor, "allreduce")
        opc = ReduceOp(_op_code(op, average))
        compressed, ctx = compression.compress(tensor)
        out = _AllreduceFn.apply(compressed, _name("allreduce", name, process_set), opc, float(prescale_factor),
                                 float(postscale_factor), process_set)
        return compression.decompress(out, ctx)
    compressed, ctx = compression.compress(tensor)
    out = synchronize(allreduce_async(compressed, average, name, op, prescale_factor, postscale_factor,
                                      process_set=process_set))
    return compression.decompress(out, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    _check_process_set(process_set, "allreduce_")
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None, compression=None):
    _check_process_set(process_set, "grouped_allreduce_async")
    base = _name("grouped_allreduce", name, process_set)
    hs = [allreduce_async(t, average, _part(base, i, len(tensors)), op, prescale_factor, postscale_factor,
                          compression, process_set)
          for i, t in enumerate(tensors)]
    return _register(_Pending(_Group(hs), (), lambda: [synchronize(h) for h in hs]))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    _check_process_set(process_set, "grouped_allreduce_async_")
    base = _name("grouped_allreduce", name, process_set)
    hs = [allreduce_async_(t, average, _part(base, i, len(tensors)), op, prescale_factor, postscale_factor, process_set)
          for i, t in enumerate(tensors)]
    return _register(_Pending(_Group(hs), (), lambda: [synchronize(h) for h in hs]))


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    _check_process_set(process_set, "grouped_allreduce")
    if any(_wants_grad(t) for t in tensors):
        # differentiable, as Horovod's: one differentiable allreduce per tensor
        base = _name("grouped_allreduce", name, process_set)
        return [allreduce(t, average, _part(base, i, len(tensors)), compression, op, prescale_factor, postscale_factor,
                          process_set)
                for i, t in enumerate(tensors)]
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                                               process_set, compression=compression))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    _check_process_set(process_set, "grouped_allreduce_")
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


class _Group:
    """Handle-like view of several registered handles."""

    def __init__(self, hs):
        self.hs = hs

    def poll(self):
        return all(_handles[h].handle.poll() for h in self.hs)

    def wait(self):
        for h in self.hs:
            _handles[h].handle.wait()


def _copy_out(h, dtype, shape, device=-1):
    """The handle's output as a new tensor: on the CPU, or for a device
    operation on that CUDA device (the library's copy runs on the legacy
    default stream, so torch's current stream is synchronised first: the
    new tensor's memory may still be in use by work queued there)."""
    if device < 0:
        out = torch.empty(shape, dtype=dtype)
    else:
        out = torch.empty(shape, dtype=dtype, device=torch.device("cuda", device))
        torch.cuda.current_stream(device).synchronize()
    h.copy_output(out.data_ptr(), out.numel() * out.element_size())
    return out


def allgather_async(tensor, name=None, process_set=None):
    psid = _check_process_set(process_set, "allgather_async")
    device = _check(tensor, "allgather")
    src = tensor.detach().contiguous()
    if src.dim() == 0:
        src = src.reshape(1)
    h = _core.allgather_async(_name("allgather", name, process_set), src.data_ptr(), _dtype_code(src), list(src.shape),
                              device, _stream(src, device), psid)
    return _register(_Pending(h, (src,), lambda: _copy_out(h, src.dtype, list(h.output_shape), device)))


def _wants_grad(tensor):
    return tensor.requires_grad and torch.is_grad_enabled()


class _AllgatherFn(torch.autograd.Function):
    """Horovod's gradient: the incoming gradients averaged over the ranks,
    then this rank's rows."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() > 0 else 1
        ctx.name, ctx.ps = name, process_set
        return synchronize(allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        ps = ctx.ps
        g = synchronize(allreduce_async(grad.contiguous(), None, _grad(ctx.name), Average, process_set=ps))
        rows = synchronize(allgather_async(torch.tensor([ctx.rows], dtype=torch.int64),
                                           _grad(ctx.name, "grad_rows"), ps))
        me, _ = _set_rank_size(_check_process_set(ps, "allgather"))
        offset = int(rows[:me].sum().item())
        return g.narrow(0, offset, ctx.rows), None, None


def allgather(tensor, name=None, process_set=None):
    _check_process_set(process_set, "allgather")
    if _wants_grad(tensor):
        _check(tensor, "allgather")
        return _AllgatherFn.apply(tensor, _name("allgather", name, process_set), process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    psid = _check_process_set(process_set, "broadcast_async")
    device = _check(tensor, "broadcast")
    src = tensor.detach().contiguous()
    out = torch.empty_like(src)
    h = _core.broadcast_async(_name("broadcast", name, process_set), src.data_ptr(), out.data_ptr(), _dtype_code(src),
                              list(src.shape), int(root_rank), device, _stream(src, device), psid)
    return _register(_Pending(h, (src, out), lambda: out))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    psid = _check_process_set(process_set, "broadcast_async_")
    device = _check(tensor, "broadcast")
    buf = tensor.data if tensor.is_contiguous() else tensor.detach().contiguous()
    h = _core.broadcast_async(_name("broadcast", name, process_set), buf.data_ptr(), buf.data_ptr(), _dtype_code(buf),
                              list(buf.shape), int(root_rank), device, _stream(buf, device), psid)

    def finish():
        if buf.data_ptr() != tensor.data_ptr():
            tensor.data.copy_(buf)
        return tensor
    return _register(_Pending(h, (buf,), finish))


class _BroadcastFn(torch.autograd.Function):
    """Horovod's gradient: the incoming gradients averaged over the ranks on
    the root, zero elsewhere."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root, ctx.name, ctx.ps = root_rank, name, process_set
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        g = synchronize(allreduce_async(grad.contiguous(), None, _grad(ctx.name), Average, process_set=ctx.ps))
        if rank() != ctx.root:  # the root is a global rank
            g.zero_()
        return g, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=None):
    _check_process_set(process_set, "broadcast")
    if _wants_grad(tensor):
        _check(tensor, "broadcast")
        return _BroadcastFn.apply(tensor, int(root_rank), _name("broadcast", name, process_set), process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    _check_process_set(process_set, "broadcast_")
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def _splits_list(splits):
    """alltoall's splits as a list of ints, with Horovod's rules: a tensor
    must hold 32-bit integers (ValueError otherwise: 1.5 rows is no count to
    truncate); a list or tuple is converted as torch.tensor(splits,
    dtype=torch.int32) converts it."""
    if splits is None:
        return []
    if not isinstance(splits, torch.Tensor):
        splits = torch.tensor(splits, dtype=torch.int32)
    elif splits.dtype != torch.int32:
        raise ValueError(f"hvdcomm: alltoall: splits must be a tensor of 32-bit integers (torch.int32), as in "
                         f"Horovod; got {splits.dtype}")
    return [int(x) for x in splits.reshape(-1).tolist()]


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """As Horovod's: synchronize() of the handle returns the tuple
    (output, received_splits) whether or not splits were given;
    received_splits is an int32 tensor. splits: a torch.int32 tensor or a
    list of ints (anything else raises ValueError, as Horovod)."""
    psid = _check_process_set(process_set, "alltoall_async")
    device = _check(tensor, "alltoall")
    src = tensor.detach().contiguous()
    sp = _splits_list(splits)
    h = _core.alltoall_async(_name("alltoall", name, process_set), src.data_ptr(), _dtype_code(src), list(src.shape), sp,
                             device, _stream(src, device), psid)

    def finish():
        out = _copy_out(h, src.dtype, list(h.output_shape), device)
        return out, torch.tensor(list(h.recv_splits), dtype=torch.int32)
    return _register(_Pending(h, (src,), finish))


class _AlltoallFn(torch.autograd.Function):
    """Horovod's gradient: the incoming gradient sent back with the received
    splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.name, ctx.ps = received_splits, name, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received_splits)
        return out, received_splits

    @staticmethod
    def backward(ctx, grad, *unused):
        g, _ = synchronize(alltoall_async(grad.contiguous(), ctx.received, _grad(ctx.name), ctx.ps))
        return g, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=None):
    """As horovod.torch.alltoall: the gathered tensor when splits is None
    (the first dimension split equally over the ranks), else the tuple
    (output, received_splits). Differentiable like Horovod's."""
    _check_process_set(process_set, "alltoall")
    if _wants_grad(tensor):
        return _AlltoallFn.apply(tensor, splits, _name("alltoall", name, process_set), process_set)
    out, received_splits = synchronize(alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, received_splits)


def _refuse_adasum(opc, where):
    """Adasum is an allreduce: Horovod fails a reducescatter with it with a
    RuntimeError; here NotImplementedError (a RuntimeError), on every rank
    before anything is submitted."""
    if opc == Adasum:
        raise NotImplementedError(f"hvdcomm: {where} does not support op=Adasum (Adasum is an allreduce-only "
                                  f"operation, as in Horovod); use hvd.allreduce(op=hvd.Adasum)")


def reducescatter_async(tensor, name=None, compression=None, op=Average, process_set=None,
                        prescale_factor=1.0, postscale_factor=1.0):
    """`compression` (hvdcomm's; Horovod's reducescatter_async has none)
    compresses the tensor sent and decompresses the result."""
    psid = _check_process_set(process_set, "reducescatter_async")
    device = _check(tensor, "reducescatter")
    opc = _op_code(op, None)
    _refuse_adasum(opc, "reducescatter")
    compression = compression or Compression.none
    compressed, cctx = compression.compress(tensor)
    src = compressed.detach().contiguous()
    h = _core.reducescatter_async(_name("reducescatter", name, process_set), src.data_ptr(), _dtype_code(src),
                                  list(src.shape), opc, float(prescale_factor), float(postscale_factor),
                                  device, _stream(src, device), psid)
    return _register(_Pending(h, (src,), lambda: compression.decompress(
        _copy_out(h, src.dtype, list(h.output_shape), device), cctx)))


class _ReducescatterFn(torch.autograd.Function):
    """Gradient of y_r = post * op_q(pre * x_q[rows of r]) for Sum/Average,
    as Horovod defines it (horovod.torch's HorovodReducescatter.backward):
    every rank's gradient gathered back into its rows, times pre * post, and
    times size() for Sum (Average: no further factor)."""

    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        ctx.name, ctx.op, ctx.scale, ctx.ps = name, op, pre * post, process_set
        return synchronize(reducescatter_async(tensor, name, None, op, process_set, pre, post))

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (Sum, Average):
            raise NotImplementedError("hvdcomm: reducescatter gradient is only defined for Sum and Average")
        g = synchronize(allgather_async(grad.contiguous(), _grad(ctx.name), ctx.ps))
        _, n = _set_rank_size(_check_process_set(ctx.ps, "reducescatter"))
        scale = ctx.scale * n if ctx.op == Sum else ctx.scale
        if scale != 1.0:
            g = g * scale
        return g, None, None, None, None, None


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    _check_process_set(process_set, "reducescatter")
    _refuse_adasum(_op_code(op, None), "reducescatter")
    if _wants_grad(tensor):
        _check(tensor, "reducescatter")
        compression = compression or Compression.none
        compressed, ctx = compression.compress(tensor)
        out = _ReducescatterFn.apply(compressed, _name("reducescatter", name, process_set), ReduceOp(_op_code(op, None)),
                                     float(prescale_factor), float(postscale_factor), process_set)
        return compression.decompress(out, ctx)
    return synchronize(reducescatter_async(tensor, name, compression, op, process_set,
                                           prescale_factor, postscale_factor))


def barrier(process_set=None):
    psid = _check_process_set(process_set, "barrier")
    h = _core.barrier_async(_name("barrier", None, process_set), psid)
    h.wait()


def join(device=-1):
    """Horovod's join: this rank has no more data. Until every rank joined,
    allreduces the other ranks submit (DistributedOptimizer's gradients
    included) complete with zeros from this rank; other collectives then
    fail with HorovodInternalError (as Horovod's). Returns the rank that
    joined last. `device` (-1, or a GPU index such as hvd.local_rank(), as
    Horovod's scripts pass it) is where Horovod allocates the joined rank's
    zeros; here the zeros are the library's host buffers whatever the device,
    so any device index is accepted and changes nothing (allreduces of CUDA
    tensors still fail while a rank has joined: docs/python.md, "join")."""
    if isinstance(device, bool) or not isinstance(device, int) or device < -1:
        raise ValueError(f"hvdcomm: join(device={device!r}): expected -1 or a device index (an int >= 0)")
    h = _core.join_async()
    h.wait()
    # Every rank is here now, and every op submitted before join() finished:
    # the automatic names start over on every rank. Without this a rank that
    # joined early skipped the unnamed ops the others ran (and failed), so its
    # next "allgather.noname.<n>" would pair with nothing and wait forever.
    _counter.clear()
    return int(_copy_out(h, torch.int32, []).item())


# ---------------------------------------------------------------- grouped allgather / reducescatter, sparse
# As grouped_allreduce: one named op per tensor (<base>_<i>of<n>), fused by the
# library, behind one handle whose synchronize() returns the list.
def grouped_allgather_async(tensors, name=None, process_set=None):
    """Horovod's grouped_allgather_async: synchronize() of the handle returns
    the list of gathered tensors, in the order of `tensors`."""
    _check_process_set(process_set, "grouped_allgather_async")
    base = _name("grouped_allgather", name, process_set)
    hs = [allgather_async(t, _part(base, i, len(tensors)), process_set=process_set) for i, t in enumerate(tensors)]
    return _register(_Pending(_Group(hs), (), lambda: [synchronize(h) for h in hs]))


def grouped_allgather(tensors, name=None, process_set=None):
    """Horovod's grouped_allgather; differentiable when a tensor requires grad
    (each tensor's gradient as allgather's: the incoming gradient averaged
    over the ranks, then this rank's rows)."""
    _check_process_set(process_set, "grouped_allgather")
    if any(_wants_grad(t) for t in tensors):
        base = _name("grouped_allgather", name, process_set)
        return [allgather(t, _part(base, i, len(tensors)), process_set=process_set) for i, t in enumerate(tensors)]
    return synchronize(grouped_allgather_async(tensors, name, process_set=process_set))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None, prescale_factor=1.0,
                                postscale_factor=1.0, compression=None):
    """Horovod's grouped_reducescatter_async (`compression` is hvdcomm's, as
    for reducescatter_async): synchronize() returns the list of this rank's
    slices."""
    _check_process_set(process_set, "grouped_reducescatter_async")
    base = _name("grouped_reducescatter", name, process_set)
    hs = [reducescatter_async(t, _part(base, i, len(tensors)), compression, op, process_set, prescale_factor,
                              postscale_factor)
          for i, t in enumerate(tensors)]
    return _register(_Pending(_Group(hs), (), lambda: [synchronize(h) for h in hs]))


def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Horovod's grouped_reducescatter; differentiable per tensor as reducescatter."""
    _check_process_set(process_set, "grouped_reducescatter")
    if any(_wants_grad(t) for t in tensors):
        base = _name("grouped_reducescatter", name, process_set)
        return [reducescatter(t, _part(base, i, len(tensors)), compression, op, process_set, prescale_factor,
                              postscale_factor)
                for i, t in enumerate(tensors)]
    return synchronize(grouped_reducescatter_async(tensors, name, op, process_set, prescale_factor,
                                                   postscale_factor, compression))


class _SparseHandle:
    """What sparse_allreduce_async returns: call it (as with Horovod) or pass
    it to synchronize() for the reduced sparse tensor; poll() works too."""

    def __init__(self, indices_handle, values_handle, finish):
        self._hs, self._finish, self._result = (values_handle, indices_handle), finish, None

    def poll(self):
        return self._result is not None or all(poll(h) for h in self._hs)

    def __call__(self):
        if self._result is None:
            values, indices = synchronize(self._hs[0]), synchronize(self._hs[1])
            self._result = self._finish(indices, values)
        return self._result


def sparse_allreduce_async(tensor, name=None, op=Average, process_set=None):
    """Horovod's sparse allreduce: every rank's (indices, values) of a sparse
    COO tensor are allgathered (`<name>.indices`, `<name>.values`) and form
    one uncoalesced sparse tensor of the same size (duplicate indices add up
    when it is coalesced or used); Average divides the values by size().
    Returns a callable handle (call it, or synchronize() it)."""
    psid = _check_process_set(process_set, "sparse_allreduce_async")
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("hvdcomm: sparse_allreduce_async expects a sparse COO tensor (tensor.is_sparse); "
                         "use allreduce_async for a dense one")
    if op not in (Sum, Average):
        raise ValueError(f"hvdcomm: sparse_allreduce_async supports op=Sum and op=Average, not {op!r}")
    name = _name("sparse_allreduce", name, process_set)
    t = tensor
    # allgather concatenates along dimension 0: indices go as [nnz, sparse_dim]
    ih = allgather_async(t._indices().transpose(0, 1).contiguous(), f"{name}.indices", process_set=process_set)
    vh = allgather_async(t._values().contiguous(), f"{name}.values", process_set=process_set)

    def finish(indices, values):
        if op == Average:
            values = values / _set_rank_size(psid)[1]  # the set's size
        return torch.sparse_coo_tensor(indices.transpose(0, 1), values, t.size(), dtype=t.dtype)
    return _SparseHandle(ih, vh, finish)
