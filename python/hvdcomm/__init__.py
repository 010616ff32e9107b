"""hvdcomm: Python binding of hvdrun's collective library (docs/python.md).

Use ``hvdcomm.torch`` (the horovod.torch-compatible API)."""
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt, MismatchError,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
