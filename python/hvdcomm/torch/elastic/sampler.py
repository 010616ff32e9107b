"""ElasticSampler: Horovod's horovod.torch.elastic.ElasticSampler on hvdcomm."""
import math
import random
import warnings

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

    ``record_batch(batch_idx, batch_size)`` records the next batch of
    *every* rank's partition (training is synchronous, so when one rank has
    finished a batch, all have): the next ``batch_size * size`` samples of
    the iteration, as Horovod (v0.28) counts them in ``processed_num``, its
    count of the samples processed this epoch (its processed samples are the
    first ``processed_num`` of the epoch's order; so are these, with
    record_batch alone). Every rank holds the same processed set and a
    worker that dies takes nothing with it. As in Horovod, ``batch_idx`` does
    not choose the batch: one warning when it is not the number of batches
    recorded since the iteration began (a reset begins a new one).
    ``record_indices`` (Horovod's older API) marks given indices, on this
    rank only; sync merges them (TorchState) and leaves ``processed_num``
    alone."""

    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.processed_num = 0
        self.num_replicas = 1
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.indices = []
        self._padded = []
        self._warned_batch_idx = False
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch ``epoch``: a new shuffle and no processed samples."""
        self.epoch = epoch
        self.processed_indices = set()
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Marks the next batch (``batch_size`` samples per rank) of the
        current iteration as processed on every rank; adds ``batch_size *
        size`` to ``processed_num``."""
        if batch_idx < 0 or batch_size <= 0:
            raise ValueError(f"hvdcomm ElasticSampler.record_batch: need batch_idx >= 0 and batch_size > 0, "
                             f"got {batch_idx}, {batch_size}")
        if batch_idx != self._recorded_batches and not self._warned_batch_idx:
            self._warned_batch_idx = True
            warnings.warn(f"hvdcomm ElasticSampler.record_batch: batch_idx {batch_idx} is not the number of "
                          f"batches recorded since the iteration began ({self._recorded_batches}); the next "
                          "batch is recorded, as Horovod does (batch_idx does not choose it). Warned once",
                          stacklevel=2)
        step = batch_size * self._iter_replicas
        self.processed_indices.update(self._padded[self._cursor:self._cursor + step])
        self._cursor += step
        self._recorded_batches += 1
        self.processed_num += step

    def record_indices(self, indices):
        """Marks these dataset indices as processed (this rank only)."""
        self.processed_indices.update(indices)

    def get_indices(self, batch_idx, batch_size):
        """This rank's dataset indices of batch ``batch_idx`` of the current iteration."""
        start = batch_idx * batch_size
        return self.indices[start:min(start + batch_size, len(self.indices))]

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num,
                    processed_indices=set(self.processed_indices))

    def load_state_dict(self, state_dict):
        """Loads ``state_dict()``'s dict, or Horovod's (``epoch`` and
        ``processed_num`` only: the processed samples are then the first
        ``processed_num`` of the epoch's order, as in Horovod)."""
        num = state_dict.get("processed_num")
        indices = state_dict.get("processed_indices")
        if "epoch" not in state_dict or (num is None and indices is None):
            raise KeyError("hvdcomm ElasticSampler.load_state_dict: needs 'epoch' and 'processed_num' "
                           f"or 'processed_indices', got keys {sorted(state_dict)}")
        self.epoch = state_dict["epoch"]
        self.processed_num = int(num) if num is not None else len(indices)
        self.processed_indices = set(indices) if indices is not None else set(self._order()[:self.processed_num])
        self.reset()

    def reset(self):
        """Re-partitions the samples not yet processed this epoch by the
        current rank and size."""
        self.num_replicas = size() if is_initialized() else 1
        self.rank = rank() if is_initialized() else 0
        self.remaining_indices = [i for i in self._order() if i not in self.processed_indices]
        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas
        self._prepare()

    def _order(self):
        """This epoch's order of every index."""
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def _prepare(self):
        padded = list(self.remaining_indices)
        while len(padded) < self.total_size:
            padded += self.remaining_indices[:self.total_size - len(padded)]
        self._padded = padded
        self._iter_replicas = self.num_replicas
        self._cursor = 0  # positions of _padded that record_batch has marked
        self._recorded_batches = 0
        self.indices = padded[self.rank:self.total_size:self.num_replicas]

    def __iter__(self):
        self._prepare()
        return iter(list(self.indices))

    def __len__(self):
        return self.num_samples
