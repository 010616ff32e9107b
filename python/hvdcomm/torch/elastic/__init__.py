"""hvdcomm.torch.elastic: Horovod's horovod.torch.elastic (run, State,
ObjectState, TorchState, ElasticSampler) on hvdrun's elastic worlds.
Semantics and the deliberate differences: docs/python.md, "Elastic", and
hvdcomm/elastic.py."""
from hvdcomm import elastic as _elastic
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
from hvdcomm.elastic import enabled, hosts_updated, world_version  # noqa: F401
from hvdcomm.torch.elastic.sampler import ElasticSampler  # noqa: F401
from hvdcomm.torch.elastic.state import ObjectState, State, TorchState  # noqa: F401
from hvdcomm.torch.mpi_ops import _join_world
from hvdcomm.torch.optimizer import _optimizers


def _elastic_reset():
    """Re-joins the newest elastic world (hvd/collective/elastic.h reset())
    and drops what hvdcomm.torch cached about the old one: pending handles,
    the counters behind generated op names (a newcomer starts at zero, so
    survivors must too, or unnamed ops would never match across ranks), and
    each DistributedOptimizer's in-flight gradients; is_homogeneous() is
    learnt again for the new world. rank(), size() & co. are not cached:
    they ask the library each time."""
    _join_world(rejoin=True)
    for opt in list(_optimizers):
        opt._on_reset()


def run(func):
    """Decorator: ``@hvd.elastic.run def train(state, ...)``. See
    hvdcomm.elastic.run_fn for the recovery rules."""
    return _elastic.run_fn(func, _elastic_reset)
