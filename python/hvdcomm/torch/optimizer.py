"""hvdcomm.torch.optimizer: horovod.torch's DistributedOptimizer, which
allreduces each gradient as backward produces it (docs/python.md, "Design")."""
import contextlib
import warnings
import weakref

from hvdcomm.torch.compression import Compression
from hvdcomm.torch.mpi_ops import Adasum, Average, Sum, _check_process_set, allreduce_async_, size, synchronize


class _DistributedOptimizer:
    """Wraps a torch optimizer: a hook on each parameter's gradient
    accumulator starts an async allreduce of the gradient as soon as backward
    produces it; step() waits for all of them first (synchronize())."""

    def __init__(self, optimizer, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, process_set=None):
        if op == Adasum:
            raise NotImplementedError("hvdcomm: Adasum is not supported by this library; use Average or Sum")
        if gradient_predivide_factor != 1.0 and op != Average:
            raise ValueError("hvdcomm: gradient_predivide_factor requires op=Average")
        self._opt = optimizer
        # Gradients are reduced over this set only; ranks outside it step on
        # their own gradients (as Horovod's).
        self._process_set = process_set
        _check_process_set(process_set, "DistributedOptimizer")
        self._compression = compression
        self._op = op
        self._predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = {id(p): n for n, p in named}
            if len(names) != len(named):
                raise ValueError("hvdcomm: named_parameters contains duplicate parameters")
            missing = [p for p in params if id(p) not in names]
            if missing:
                raise ValueError("hvdcomm: named_parameters does not cover every parameter of the optimizer")
        else:
            names = {id(p): f"param.{i}" for i, p in enumerate(params)}
        self._names = names
        self._params = params
        self._handles = {}
        self._delay = {id(p): backward_passes_per_step for p in params}
        self._hooks = []
        self._synchronized = False
        if size() > 1 and self._included():
            self._register_hooks()
        _optimizers.add(self)

    def _included(self):
        return self._process_set is None or bool(self._process_set.included())

    def _on_reset(self):
        """After an elastic re-join: handles of the old world are gone, the
        delay counters start over, and hooks exist if the new size needs them."""
        self._handles.clear()
        self._delay = {id(p): self.backward_passes_per_step for p in self._params}
        self._synchronized = False
        if size() > 1 and not self._hooks and self._included():
            self._register_hooks()

    def __getattr__(self, item):
        return getattr(self.__dict__["_opt"], item)

    @property
    def param_groups(self):
        return self._opt.param_groups

    @property
    def state(self):
        return self._opt.state

    def state_dict(self):
        return self._opt.state_dict()

    def load_state_dict(self, sd):
        return self._opt.load_state_dict(sd)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("hvdcomm: zero_grad() called while gradient allreduces are pending; "
                                 "call step() or synchronize() first")
        return self._opt.zero_grad(*args, **kwargs)

    def _register_hooks(self):
        for p in self._params:
            if p.requires_grad:
                p_tmp = p.expand_as(p)
                acc = p_tmp.grad_fn.next_functions[0][0]
                acc.register_hook(self._make_hook(p))
                self._hooks.append(acc)  # keep the accumulator alive

    def _make_hook(self, p):
        def hook(*ignore):
            if size() == 1:
                return  # hooks outlive a shrink to one rank (elastic): nothing to reduce
            if id(p) in self._handles and self._handles[id(p)][0] is not None:
                raise AssertionError("hvdcomm: gradients computed more than backward_passes_per_step times "
                                     "before step(); raise backward_passes_per_step")
            self._delay[id(p)] -= 1
            handle, ctx = None, None
            if self._delay[id(p)] == 0:
                handle, ctx = self._allreduce_grad(p)
            self._handles[id(p)] = (handle, ctx)
        return hook

    def _allreduce_grad(self, p):
        name = "grad." + self._names[id(p)]
        grad = p.grad
        if grad.is_sparse:
            raise NotImplementedError(
                f"hvdcomm: parameter {self._names[id(p)]} has a sparse gradient: sparse allreduce and "
                f"DistributedOptimizer(sparse_as_dense=True) are not implemented yet in hvdcomm (issue 20); "
                f"use a dense gradient (e.g. nn.Embedding(sparse=False))")
        # As Horovod: the gradient accumulated over backward_passes_per_step
        # local passes is reduced as it is (a sum over the passes, never
        # divided by their number); Average splits its 1/size() into a
        # prescale 1/gradient_predivide_factor and a postscale
        # gradient_predivide_factor/size().
        if self._op == Average:
            n = size() if self._process_set is None else self._process_set.size()
            pre, post = 1.0 / self._predivide, self._predivide / n
            op = Sum
        else:
            pre, post, op = 1.0, 1.0, self._op
        compressed, ctx = self._compression.compress(grad)
        if compressed is grad:
            return allreduce_async_(grad, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                                    process_set=self._process_set), None
        return allreduce_async_(compressed, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                                process_set=self._process_set), (compressed, ctx)

    def synchronize(self):
        if size() == 1 or not self._included():
            self._synchronized = True
            return
        for p in self._params:
            if p.requires_grad and p.grad is not None and id(p) not in self._handles:
                # no hook fired (e.g. grad set by hand): reduce it now
                self._handles[id(p)] = self._allreduce_grad(p)
        for p in self._params:
            entry = self._handles.get(id(p))
            if entry is None:
                continue
            handle, ctx = entry
            if handle is None:
                handle, ctx = self._allreduce_grad(p)
            out = synchronize(handle)
            if ctx is not None:
                compressed, orig = ctx
                p.grad.copy_(self._compression.decompress(out, orig))
            self._delay[id(p)] = self.backward_passes_per_step
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """``optimizer.synchronize(); with optimizer.skip_synchronize():
        optimizer.step()`` -- step() then uses the gradients as they are
        (e.g. after clipping the reduced gradients)."""
        self._skip = True
        try:
            yield
        finally:
            self._skip = False

    def step(self, closure=None):
        if not self.__dict__.get("_skip", False):
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() after "
                              "optimizer.synchronize(): the gradients are reduced again")
            self.synchronize()
        self._synchronized = False
        return self._opt.step(closure)


# Every live _DistributedOptimizer: an elastic re-join resets their in-flight
# state (hvdcomm.torch.elastic._elastic_reset).
_optimizers = weakref.WeakSet()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Horovod's DistributedOptimizer: averages gradients across ranks during backward().
    num_groups/groups only change how Horovod batches the allreduces (the
    result is the same): hvdcomm fuses them itself and says once that they
    are ignored. process_set: gradients are averaged over that set's ranks
    only (ranks outside it step on their own gradients); a sparse
    gradient raises (sparse_as_dense is not implemented yet, issue 20)."""
    _check_process_set(process_set, "DistributedOptimizer")
    if num_groups or groups is not None:
        warnings.warn(f"hvdcomm: DistributedOptimizer(num_groups={num_groups!r}, groups=...) is ignored: hvdcomm "
                      f"fuses the gradient allreduces by its own fusion threshold and cycle time; the result is "
                      f"the same (issue 20)", stacklevel=2)
    return _DistributedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
                                 gradient_predivide_factor, process_set)
