"""horovod.torch.sync_batch_norm re-exported from hvdcomm.torch.sync_batch_norm."""
from hvdcomm.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401
