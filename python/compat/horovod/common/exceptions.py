"""horovod.common.exceptions: the exception classes scripts catch, from hvdcomm."""
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)
