"""horovod.common.process_sets: only the global set exists in hvdcomm (issue 20)."""
from hvdcomm.torch.mpi_ops import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
