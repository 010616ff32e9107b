"""hvdcomm: Python binding of hvdrun's collective library (docs/python.md).

Use ``hvdcomm.torch`` (the horovod.torch-compatible API); ``hvdcomm.runner.run``
is horovodrun's Python API (``horovod.run``)."""
from hvdcomm._build_info import VERSION as __version__  # noqa: F401  (the build's; hvdrun --version prints it)
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt, MismatchError,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
# The launcher<->worker contract's variable names (hvd/common/job_env.h):
# hvdcomm.job_env.RANK == "HOROVOD_RANK"; job_env.groups: name -> group.
from hvdcomm._core import job_env  # noqa: F401
