"""horovod.torch.elastic.sampler re-exported from hvdcomm.torch.elastic.sampler."""
from hvdcomm.torch.elastic.sampler import *  # noqa: F401,F403
