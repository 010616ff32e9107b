"""hvdcomm.torch.optimizer: horovod.torch's DistributedOptimizer, which
allreduces each gradient as backward produces it (docs/python.md, "Design")."""
import contextlib
import warnings
import weakref

from hvdcomm.torch.compression import Compression
import torch

from hvdcomm.torch.mpi_ops import (Adasum, Average, Sum, _check_process_set, allreduce_async, allreduce_async_,
                                   global_process_set, size, sparse_allreduce_async, synchronize)


class _DistributedOptimizer:
    """Wraps a torch optimizer: a hook on each parameter's gradient
    accumulator starts an async allreduce of the gradient as soon as backward
    produces it; step() waits for all of them first (synchronize())."""

    def __init__(self, optimizer, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense=False, process_set=None):
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
        self.sparse_as_dense = bool(sparse_as_dense)
        self._sparse_dims = {}  # id(p) -> sparse_dim of the sparse gradients p had (see _zero_grad_for)
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(np_, tuple) or len(np_) != 2 for np_ in named):
                raise ValueError("hvdcomm: named_parameters should be a sequence of tuples (name, parameter), "
                                 "usually produced by model.named_parameters()")
            seen, dups = set(), []
            for n, _ in named:
                if n in seen and n not in dups:
                    dups.append(n)
                seen.add(n)
            if dups:
                # Two parameters under one name would share one allreduce name (Horovod: ValueError).
                raise ValueError(f"hvdcomm: parameter names in named_parameters must be unique; found duplicates: "
                                 f"{', '.join(map(str, dups))}")
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
    def _parameter_names(self):
        """Horovod's attribute: {parameter: the name its gradient is reduced
        under}, the same names on every rank (code that inspects or logs a
        DistributedOptimizer reads it)."""
        return {p: self._names[id(p)] for p in self._params}

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

    def _zero_grad_for(self, p):
        """The gradient a rank submits for a parameter that got none in this
        step (another rank may have one, e.g. a branch taken there only):
        zeros, as Horovod. A parameter seen with a sparse gradient before
        (and reduced sparse, without sparse_as_dense) gets an empty sparse
        gradient, so that its allgathers pair with the other ranks'."""
        sparse_dim = self._sparse_dims.get(id(p))
        if sparse_dim is None or self.sparse_as_dense:
            return torch.zeros_like(p.data, memory_format=torch.contiguous_format)
        indices = torch.zeros((sparse_dim, 0), dtype=torch.int64, device=p.device)
        values = p.data.new_zeros((0,) + tuple(p.shape[sparse_dim:]))
        return torch.sparse_coo_tensor(indices, values, p.shape)

    def _allreduce_grad(self, p):
        """Starts the reduction of p's gradient; returns (handle, finish):
        finish(output) puts the result into p.grad (None: reduced in place)."""
        name = "grad." + self._names[id(p)]
        if p.grad is None:
            p.grad = self._zero_grad_for(p)
        grad = p.grad
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
        if grad.is_sparse:
            self._sparse_dims[id(p)] = grad.sparse_dim()
            if not self.sparse_as_dense:
                # Horovod's sparse path: indices and values allgathered, Average
                # divides by size() (no compression, no predivide factor).
                return sparse_allreduce_async(grad, name=name, op=self._op, process_set=self._process_set), \
                    self._set_sparse(p)
            dense, cctx = self._compression.compress(grad.to_dense())
            h = allreduce_async(dense, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                                process_set=self._process_set)

            def finish_dense_to_sparse(out):
                self._set_sparse(p)(self._compression.decompress(out, cctx).to_sparse(grad.sparse_dim()))
            return h, finish_dense_to_sparse
        compressed, ctx = self._compression.compress(grad)
        h = allreduce_async_(compressed, name=name, op=op, prescale_factor=pre, postscale_factor=post,
                             process_set=self._process_set)
        if compressed is grad:
            return h, None
        return h, lambda out: p.grad.copy_(self._compression.decompress(out, ctx))

    @staticmethod
    def _set_sparse(p):
        def finish(out):
            # sparse tensors have no set_/copy_ from another layout: replace the values
            p.grad.zero_().add_(out)
        return finish

    def synchronize(self):
        if size() == 1 or not self._included():
            self._synchronized = True
            return
        # Every parameter that requires grad is reduced, with or without a
        # hook having fired: a parameter that got no gradient on this rank
        # (grad None) submits zeros, as Horovod does, so that ranks where it
        # did get one do not wait for this rank until the stall shutdown.
        for p in self._params:
            if p.requires_grad and id(p) not in self._handles:
                self._handles[id(p)] = self._allreduce_grad(p)
        for p in self._params:
            entry = self._handles.get(id(p))
            if entry is None:
                continue
            handle, finish = entry
            if handle is None:
                handle, finish = self._allreduce_grad(p)
            out = synchronize(handle)
            if finish is not None:
                finish(out)
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


class _DistributedAdasumOptimizer(_DistributedOptimizer):
    """Horovod's DistributedOptimizer(op=hvd.Adasum) on more than one rank
    (docs/python.md, "Adasum"): a delta optimizer. When backward has
    produced a parameter's gradient (backward_passes_per_step times), the
    wrapped optimizer steps that parameter alone, the change it made (the
    delta, -lr * f(grad)) is combined across ranks with an Adasum allreduce
    while backward goes on, and step() adds the combined delta to the weights
    from before the local step. Adasum then sees whole updates, momentum and
    all, as Horovod's does; learning rates are not scaled by size().
    A _DistributedOptimizer for isinstance checks (broadcast_optimizer_state,
    elastic state), which overrides every method it uses."""

    def __init__(self, optimizer, named_parameters, compression, backward_passes_per_step):
        self._opt = optimizer
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            if any(not isinstance(x, tuple) for x in named):
                raise ValueError("hvdcomm: named_parameters should be a sequence of (name, parameter) tuples, "
                                 "usually model.named_parameters()")
            names = {id(p): n for n, p in named}
            if len(set(names.values())) != len(named):
                raise ValueError("hvdcomm: parameter names in named_parameters must be unique")
            if any(id(p) not in names for p in params):
                raise ValueError("hvdcomm: named_parameters does not cover every parameter of the optimizer")
        else:
            names = {id(p): f"param.{i}" for i, p in enumerate(params)}
        self._names = names
        self._params = params
        self._by_id = {id(p): p for p in params}
        self._handles = {}
        self._delay = {id(p): backward_passes_per_step for p in params}
        self._starts = {id(p): torch.zeros_like(p, requires_grad=False) for p in params}
        self._requires_update = []
        self._hooks = []
        for p in params:
            if p.requires_grad:
                # As Horovod: a gradient exists from the start, so a parameter
                # that gets none in a step still steps (on zeros) and is reduced.
                p.grad = p.data.new(p.size()).zero_()
                self._requires_update.append(p)
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                acc.register_hook(self._make_hook(p))
                self._hooks.append(acc)
        _optimizers.add(self)

    def _on_reset(self):
        """After an elastic re-join: the old world's handles are gone."""
        self._handles.clear()
        self._delay = {id(p): self.backward_passes_per_step for p in self._params}

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        self._delay = {id(p): passes for p in self._params}

    def _make_hook(self, p):
        def hook(*ignore):
            if id(p) in self._handles and self._handles[id(p)][0] is not None and self._delay[id(p)] <= 0:
                raise AssertionError("hvdcomm: gradients computed more than backward_passes_per_step times "
                                     "before step(); raise backward_passes_per_step")
            self._delay[id(p)] -= 1
            handle, ctx = None, None
            if self._delay[id(p)] == 0:
                handle, ctx = self._allreduce_delta(p)
            self._handles[id(p)] = (handle, ctx)
        return hook

    def _allreduce_delta(self, p):
        """Steps the wrapped optimizer on p alone, leaves the delta in p and
        starts its Adasum allreduce; returns (handle, compression ctx)."""
        start = self._starts[id(p)]
        stashed = [g["params"] for g in self._opt.param_groups]
        for g in self._opt.param_groups:
            g["params"] = [p] if any(p is v for v in g["params"]) else []
        try:
            start.data.copy_(p.data)
            self._opt.step()
        finally:
            for g, ps in zip(self._opt.param_groups, stashed):
                g["params"] = ps
        p.data.sub_(start)
        compressed, ctx = self._compression.compress(p.data)
        return allreduce_async_(compressed, name="adasum." + self._names[id(p)], op=Adasum), ctx

    def synchronize(self):
        """Nothing to do: step() completes the reductions (as Horovod's)."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        raise AssertionError("hvdcomm: skipping synchronization is not supported with the Adasum optimizer "
                             "(as in Horovod)")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update:
            if id(p) not in self._handles:
                self._handles[id(p)] = self._allreduce_delta(p)
        for pid, (handle, ctx) in list(self._handles.items()):
            p = self._by_id[pid]
            if handle is None:  # step() before backward_passes_per_step passes: reduce what there is
                handle, ctx = self._allreduce_delta(p)
            delta = self._compression.decompress(synchronize(handle), ctx)
            start = self._starts[pid]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._delay[pid] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("hvdcomm: zero_grad() called after backward() but before step(); this is "
                                 "prohibited (the Adasum reductions are still pending)")
        return self._opt.zero_grad(*args, **kwargs)


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
    only (ranks outside it step on their own gradients). Sparse
    gradients (nn.Embedding(sparse=True)) are reduced as Horovod does: with
    sparse_as_dense=True densified and allreduced, then made sparse again;
    otherwise through sparse_allreduce_async (allgather of indices and values).
    A parameter that gets no gradient on some rank in a step is reduced with
    zeros from that rank.

    op=hvd.Adasum on more than one rank gives Horovod's Adasum delta
    optimizer (_DistributedAdasumOptimizer; docs/python.md, "Adasum"): the
    learning rate is not scaled by size(); a power-of-two number of ranks,
    the global process set and CPU parameters are needed, as in Horovod."""
    _check_process_set(process_set, "DistributedOptimizer")
    if op == Adasum and size() > 1:
        if backward_passes_per_step <= 0:
            raise ValueError("hvdcomm: backward_passes_per_step must be > 0")
        if gradient_predivide_factor != 1.0:
            raise ValueError("hvdcomm: gradient_predivide_factor requires op=Average")
        if process_set is not None and process_set is not global_process_set:
            raise NotImplementedError("hvdcomm: Adasum does not support non-global process sets yet (as in Horovod)")
        n = size()
        if n & (n - 1):
            raise NotImplementedError(f"hvdcomm: Running Adasum with non-power of 2 ranks is not supported (as in "
                                      f"Horovod): the job has {n} ranks")
        if num_groups or groups is not None or sparse_as_dense:
            warnings.warn("hvdcomm: DistributedOptimizer(op=hvd.Adasum): num_groups, groups and sparse_as_dense are "
                          "ignored, as in Horovod (the Adasum optimizer reduces each parameter's dense delta on its "
                          "own)", stacklevel=2)
        return _DistributedAdasumOptimizer(optimizer, named_parameters, compression, backward_passes_per_step)
    if num_groups or groups is not None:
        warnings.warn(f"hvdcomm: DistributedOptimizer(num_groups={num_groups!r}, groups=...) is ignored: hvdcomm "
                      f"fuses the gradient allreduces by its own fusion threshold and cycle time; the result is "
                      f"the same (issue 20)", stacklevel=2)
    return _DistributedOptimizer(optimizer, named_parameters, compression, backward_passes_per_step, op,
                                 gradient_predivide_factor, sparse_as_dense, process_set)
