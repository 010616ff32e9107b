"""horovod.torch-compatible API on hvdrun's collective library.

Split as horovod.torch is (docs/python.md, "Package layout"):
mpi_ops (init, topology, build facts, collectives, handles), compression,
functions (objects, parameters, optimizer state), optimizer
(DistributedOptimizer), sync_batch_norm (SyncBatchNorm) and elastic; this module re-exports them."""
from hvdcomm import _core  # noqa: F401  (tests fake library calls through hvd._core)
from hvdcomm.torch import elastic  # noqa: F401  (hvd.elastic.run etc.)
from hvdcomm.torch.compression import Compression  # noqa: F401
from hvdcomm.torch.elastic import _elastic_reset  # noqa: F401
from hvdcomm.torch.functions import (allgather_object, broadcast_object,  # noqa: F401
                                     broadcast_optimizer_state, broadcast_parameters)
from hvdcomm.torch.mpi_ops import (allreduce, allreduce_, allreduce_async, allreduce_async_,  # noqa: F401
                                   grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                                   grouped_allreduce_async_)
from hvdcomm.torch.mpi_ops import allgather, allgather_async, grouped_allgather, grouped_allgather_async  # noqa: F401
from hvdcomm.torch.mpi_ops import grouped_reducescatter, grouped_reducescatter_async  # noqa: F401
from hvdcomm.torch.mpi_ops import sparse_allreduce_async  # noqa: F401
from hvdcomm.torch.mpi_ops import broadcast, broadcast_, broadcast_async, broadcast_async_  # noqa: F401
from hvdcomm.torch.mpi_ops import alltoall, alltoall_async  # noqa: F401
from hvdcomm.torch.mpi_ops import reducescatter, reducescatter_async  # noqa: F401
from hvdcomm.torch.mpi_ops import barrier, join  # noqa: F401
from hvdcomm.torch.mpi_ops import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                                   remove_process_set, start_timeline, stop_timeline)
from hvdcomm.torch.mpi_ops import poll, synchronize  # noqa: F401
from hvdcomm.torch.mpi_ops import init, is_initialized, shutdown  # noqa: F401
from hvdcomm.torch.mpi_ops import (cross_rank, cross_size, is_homogeneous, local_rank,  # noqa: F401
                                   local_size, rank, size)
from hvdcomm.torch.mpi_ops import mpi_built, mpi_enabled, mpi_threads_supported  # noqa: F401
from hvdcomm.torch.mpi_ops import gloo_built, gloo_enabled  # noqa: F401
from hvdcomm.torch.mpi_ops import ccl_built, cuda_built, ddl_built, nccl_built, rocm_built  # noqa: F401
from hvdcomm.torch.mpi_ops import Adasum, Average, Max, Min, Product, ReduceOp, Sum  # noqa: F401
from hvdcomm.torch.mpi_ops import (HorovodInternalError, HostsUpdatedInterrupt, MismatchError,  # noqa: F401
                                   PeerFailureError, WorkerRemovedError)
from hvdcomm.torch.mpi_ops import _handles, _join_world, _name  # noqa: F401  (elastic glue, tests)
from hvdcomm.torch.optimizer import DistributedOptimizer, _DistributedOptimizer  # noqa: F401
from hvdcomm.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
