"""horovod.torch.compression re-exported from hvdcomm.torch.compression."""
from hvdcomm.torch.compression import *  # noqa: F401,F403
