"""horovod.common.elastic: the framework-neutral elastic pieces Horovod's
framework modules build on -- ``run_fn``, ``State``, ``ObjectState`` -- on
hvdcomm.elastic (docs/python.md, "Elastic" and "The horovod package").

``State(bcast_object, get_rank)`` and ``ObjectState(bcast_object, get_rank,
**kwargs)`` take Horovod's arguments: ``bcast_object(obj, root_rank=r)``
(every Horovod ``broadcast_object`` has that signature) and ``get_rank()``,
kept as Horovod's ``_bcast_object`` and ``_rank`` for subclasses.
They behave as hvdcomm.elastic's (sync from the member with the most
commits, a collective ``check_host_updates``); the gathers those need are
made of ``size()`` broadcasts, one from each rank. ``run_fn(func, reset)``
is hvdcomm.elastic.run_fn. Left out: ``notification_manager`` (hvdcomm
learns of new hosts from hvdrun's published worlds, not from a
notification service)."""
from hvdcomm import _core
from hvdcomm import elastic as _elastic
from hvdcomm.elastic import run_fn  # noqa: F401
from hvdcomm._core import HorovodInternalError, HostsUpdatedInterrupt  # noqa: F401


class _BroadcastCollectives(_elastic.Collectives):
    """hvdcomm.elastic's Collectives from a Horovod ``bcast_object``."""

    def __init__(self, bcast_object, get_rank):
        self._bcast = bcast_object
        self._get_rank = get_rank

    def rank(self):
        return int(self._get_rank())

    def broadcast_object(self, obj, root, name):
        return self._bcast(obj, root_rank=root)

    def allgather_object(self, obj, name):
        me = self.rank()
        return [self._bcast(obj if r == me else None, root_rank=r) for r in range(_core.size())]

    def allgather_int(self, name, value):
        return [int(v) for v in self.allgather_object(int(value), name)]

    def any_true(self, name, flag):
        return any(self.allgather_object(bool(flag), name))


class State(_elastic.State):
    """Horovod's ``State(bcast_object, get_rank)``: subclasses implement
    ``save()``, ``restore()`` and either ``sync()`` (Horovod's way) or
    ``_sync_from(root)`` (hvdcomm's: adopt member ``root``'s state)."""

    def __init__(self, bcast_object, get_rank):
        super().__init__(_BroadcastCollectives(bcast_object, get_rank))
        # Horovod's attribute names, which its subclasses' sync() uses.
        self._bcast_object = bcast_object
        self._rank = get_rank


class ObjectState(_elastic.ObjectState):
    """Horovod's ``ObjectState(bcast_object, get_rank, **kwargs)``: the
    keyword arguments become attributes, saved, restored and synced."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        super().__init__(_BroadcastCollectives(bcast_object, get_rank), **kwargs)
        self._bcast_object = bcast_object
        self._rank = get_rank
