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


def _reset():
    import hvdcomm.torch as hvd
    hvd._elastic_reset()


def run(func):
    """Decorator: ``@hvd.elastic.run def train(state, ...)``. See
    hvdcomm.elastic.run_fn for the recovery rules."""
    return _elastic.run_fn(func, _reset)
