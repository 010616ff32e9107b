"""horovod.torch.functions re-exported from hvdcomm.torch.functions."""
from hvdcomm.torch.functions import *  # noqa: F401,F403
