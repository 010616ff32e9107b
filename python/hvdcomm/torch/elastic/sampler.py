"""ElasticSampler: Horovod's horovod.torch.elastic.ElasticSampler on hvdcomm."""
import math
import random

import torch.utils.data

from hvdcomm.torch.mpi_ops import is_initialized, rank, size


class ElasticSampler(torch.utils.data.Sampler):
    """Partitions a dataset across the current ranks and remembers which
    samples this epoch has already processed, so training resumes after a
    re-join without repeating or skipping committed samples.

    Each epoch the indices are shuffled with ``random.Random(seed + epoch)``
    (when ``shuffle``), the processed ones are dropped, the rest padded (by
    repeating its head) to a multiple of the size and dealt round-robin:
    rank r gets positions r, r + size, ... Re-partitioning by the current
    rank/size happens in reset(), which load_state_dict() and set_epoch()
    call (TorchState's sync does, after every re-join).

    ``record_batch(batch_idx, batch_size)`` records batch ``batch_idx`` of
    *every* rank's partition (training is synchronous, so when one rank has
    finished a batch, all have): every rank holds the same processed set
    and a worker that dies takes nothing with it. Horovod records only the
    local rank's batch and merges at the next sync. ``record_indices`` stays
    local, as in Horovod; sync merges it (TorchState)."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self._padded = []
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch``: a new shuffle and no processed samples."""
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks batch ``batch_idx`` (of ``batch_size`` samples per rank) of the
        current iteration as processed on every rank."""
        if batch_idx < 0 or batch_size <= 0:
            raise ValueError(f"hvdcomm ElasticSampler.record_batch: need batch_idx >= 0 and batch_size > 0, "
                             f"got {batch_idx}, {batch_size}")
        lo, hi = batch_idx * batch_size, (batch_idx + 1) * batch_size
        for r in range(self._iter_replicas):
            self.processed_indices.update(self._padded[r::self._iter_replicas][lo:hi])

    def record_indices(self, indices):
        """Marks these dataset indices as processed (this rank only)."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's dataset indices of batch ``batch_idx`` of the current iteration."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return dict(epoch=self.epoch, processed_indices=set(self.processed_indices))

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def reset(self):
        """Re-partitions the samples not yet processed this epoch by the
        current rank and size."""
        self.num_replicas = size() if is_initialized() else 1
        self.rank = rank() if is_initialized() else 0
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = [i for i in order if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self._prepare()

    def _prepare(self):
        padded = list(self.remaining_indices)
        while len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self._padded = padded
        self._iter_replicas = self.num_replicas
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self._prepare()
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
