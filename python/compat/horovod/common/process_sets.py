"""horovod.common.process_sets: hvdcomm's process sets (docs/python.md, "Process sets")."""
from hvdcomm.torch.mpi_ops import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
