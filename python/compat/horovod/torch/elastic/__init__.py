"""horovod.torch.elastic re-exported from hvdcomm.torch.elastic."""
from hvdcomm.torch.elastic import *  # noqa: F401,F403
from hvdcomm.torch.elastic import run, State, ObjectState, TorchState, ElasticSampler  # noqa: F401
