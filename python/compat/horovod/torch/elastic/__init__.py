"""horovod.torch.elastic re-exported from hvdcomm.torch.elastic; its
submodules mirror hvdcomm.torch.elastic's (state, sampler)."""
import importlib as _importlib

from hvdcomm.torch.elastic import *  # noqa: F401,F403
from hvdcomm.torch.elastic import run, State, ObjectState, TorchState, ElasticSampler  # noqa: F401

# As in horovod.torch: the shim's own submodules, not hvdcomm's.
for _sub in ("sampler", "state"):
    globals()[_sub] = _importlib.import_module(f"{__name__}.{_sub}")
del _importlib, _sub
