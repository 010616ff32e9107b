"""horovod.torch re-exported from hvdcomm.torch."""
from hvdcomm.torch import *  # noqa: F401,F403
from hvdcomm.torch import _DistributedOptimizer  # noqa: F401
