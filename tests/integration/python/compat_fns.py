"""What compat_test.py runs on 2 ranks through horovod.run (needs torch):
horovod.common.elastic's Horovod-signature states on a real job."""


def common_elastic_state():
    import horovod.torch as hvd
    from horovod.common.elastic import ObjectState, State, run_fn

    hvd.init()
    r = hvd.rank()
    state = ObjectState(hvd.broadcast_object, hvd.rank, epoch=10 * r, names=[r])
    if r == 1:  # the member with the most commits is the one every member adopts
        state.epoch = 11
        state.commit()
        state.commit()
    state.sync()
    after_sync = (state.epoch, state.names, state.commits)
    state.epoch = 99
    state.restore()
    after_restore = state.epoch

    class Counter(State):
        """Written against Horovod's State: overrides sync() with _bcast_object."""

        def __init__(self):
            super().__init__(hvd.broadcast_object, hvd.rank)
            self.value = self._saved = 100 + self._rank()

        def save(self):
            self._saved = self.value

        def restore(self):
            self.value = self._saved

        def sync(self):
            self.value = self._bcast_object(self.value, root_rank=0)

    counter = Counter()
    calls, resets = [], []

    def train(s, x):
        calls.append(x)
        return s.value + x

    out = run_fn(train, lambda: resets.append(1))(counter, 5)
    hvd.shutdown()
    return after_sync, after_restore, out, calls, resets
