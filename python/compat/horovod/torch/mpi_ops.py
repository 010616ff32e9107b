"""horovod.torch.mpi_ops re-exported from hvdcomm.torch.mpi_ops."""
from hvdcomm.torch.mpi_ops import *  # noqa: F401,F403
