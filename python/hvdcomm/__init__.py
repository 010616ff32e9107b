"""hvdcomm: Python binding of hvdrun's collective library (docs/python.md).

Use ``hvdcomm.torch`` (the horovod.torch-compatible API)."""
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt, MismatchError,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
# The launcher<->worker contract's variable names (hvd/common/job_env.h):
# hvdcomm.job_env.RANK == "HOROVOD_RANK"; job_env.groups: name -> group.
from hvdcomm._core import job_env  # noqa: F401
