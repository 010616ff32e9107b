"""horovod.torch re-exported from hvdcomm.torch; its submodules mirror
hvdcomm.torch's (mpi_ops, compression, functions, optimizer, sync_batch_norm, elastic)."""
import importlib as _importlib

from hvdcomm.torch import *  # noqa: F401,F403
from hvdcomm.torch import _DistributedOptimizer  # noqa: F401

# The star import bound hvdcomm.torch's submodules (elastic, mpi_ops, ...):
# bind the shim's own instead, so that hvd.mpi_ops is horovod.torch.mpi_ops.
for _sub in ("compression", "elastic", "functions", "mpi_ops", "optimizer", "sync_batch_norm"):
    globals()[_sub] = _importlib.import_module(f"{__name__}.{_sub}")
del _importlib, _sub
