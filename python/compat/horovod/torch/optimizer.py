"""horovod.torch.optimizer re-exported from hvdcomm.torch.optimizer."""
from hvdcomm.torch.optimizer import *  # noqa: F401,F403
from hvdcomm.torch.optimizer import _DistributedOptimizer  # noqa: F401
