"""horovod.torch.elastic.state re-exported from hvdcomm.torch.elastic.state."""
from hvdcomm.torch.elastic.state import *  # noqa: F401,F403
