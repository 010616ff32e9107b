"""TorchState and the torch-bound State/ObjectState (docs/python.md, "Elastic")."""
import copy

import torch

from hvdcomm import elastic as _elastic
from hvdcomm.torch.elastic.sampler import ElasticSampler
from hvdcomm.torch.functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                                     broadcast_parameters)
from hvdcomm.torch.mpi_ops import Max, allgather, allreduce, rank
from hvdcomm.torch.optimizer import _DistributedOptimizer


class _TorchCollectives(_elastic.Collectives):
    """The collectives a State needs, on hvdcomm.torch."""

    def rank(self):
        return rank()

    def allgather_int(self, name, value):
        return allgather(torch.tensor([int(value)], dtype=torch.int64), name=name).tolist()

    def any_true(self, name, flag):
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        return bool(allreduce(t, op=Max, name=name).item())

    def broadcast_object(self, obj, root, name):
        return broadcast_object(obj, root_rank=root, name=name)

    def allgather_object(self, obj, name):
        return allgather_object(obj, name=name)


COLLECTIVES = _TorchCollectives()


class State(_elastic.State):
    """Base class for custom states: implement save(), restore() and
    _sync_from(root) (collective: make the live state member root's)."""

    def __init__(self):
        super().__init__(COLLECTIVES)


class ObjectState(_elastic.ObjectState):
    """``ObjectState(epoch=0, batch=0)``: picklable attributes, broadcast by pickling."""

    def __init__(self, **kwargs):
        super().__init__(COLLECTIVES, **kwargs)


class _Handler:
    def __init__(self, value):
        self.value = value
        self.save()


class _ModelHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync_from(self, root, name):
        broadcast_parameters(self.value.state_dict(), root_rank=root)


class _OptimizerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        # torch's load_state_dict deep-copies, so the saved copy stays intact.
        self.value.load_state_dict(self._saved)

    def sync_from(self, root, name):
        broadcast_optimizer_state(self.value, root_rank=root)


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync_from(self, root, name):
        # Merge what other members recorded this epoch (record_indices is
        # local), from members at the root's epoch only: a newcomer's epoch 0
        # must not leak into the root's epoch.
        # processed_num (record_batch's count, the same on every member) is
        # the root's.
        mine = (self.value.epoch, self.value.processed_indices, self.value.processed_num)
        everyone = allgather_object(mine, name=f"hvdcomm.elastic.sampler.{name}.gather")
        epoch, _, num = everyone[root]
        merged = set()
        for e, processed, _ in everyone:
            if e == epoch:
                merged |= processed
        self.value.load_state_dict(dict(epoch=epoch, processed_num=num, processed_indices=merged))


def _handler_for(value):
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, (torch.optim.Optimizer, _DistributedOptimizer)):
        return _OptimizerHandler(value)
    return None


class TorchState(ObjectState):
    """Horovod's TorchState(model=None, optimizer=None, **kwargs).

    Models (nn.Module), optimizers (torch or DistributedOptimizer) and
    ElasticSamplers among the arguments are saved as deep copies of their
    state_dict() and synced by broadcasting (parameters in place, optimizer
    and sampler state by pickling); every other keyword is an ObjectState
    attribute. All of them are attributes: ``state.model``, ``state.epoch``."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        kwargs.update(model=model, optimizer=optimizer)
        self._handlers = {}
        plain = {}
        for k, v in kwargs.items():
            h = _handler_for(v)
            if h is None:
                plain[k] = v
            else:
                self._handlers[k] = h
        for k, h in self._handlers.items():
            setattr(self, k, h.value)
        super().__init__(**plain)

    def save(self):
        for h in self._handlers.values():
            h.save()
        super().save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()
        super().restore()

    def _sync_from(self, root):
        for k in sorted(self._handlers):
            self._handlers[k].sync_from(root, k)
        super()._sync_from(root)
