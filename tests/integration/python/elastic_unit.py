"""Single-process tests of the pure-Python elastic logic (hvdcomm.elastic,
hvdcomm.torch.elastic): State/ObjectState/TorchState commit/restore/sync,
the run() retry loop (with a fake reset and a faked "elastic" flag), the
sync-root rule, and ElasticSampler (with faked rank/size for re-partitioning).
Run with plain python3 (size 1, not elastic)."""
import sys
import warnings

try:
    import torch
except ImportError:
    print("SKIP: this python cannot import torch (install python3-torch)")
    sys.exit(77)

import hvdcomm.elastic as E
import hvdcomm.torch as hvd
from hvdcomm.torch.elastic import state as torch_state

hvd.init()
assert hvd.size() == 1 and not hvd.elastic.enabled() and hvd.elastic.world_version() == 0
assert not hvd.elastic.hosts_updated()
checks = 0


def check(cond, what):
    global checks
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    checks += 1


# size()/rank() live in hvdcomm.torch.mpi_ops; the package and its other
# modules (optimizer, elastic.sampler, ...) import them by name, so a fake
# must replace every binding of the real function.
REAL = {"size": hvd.size, "rank": hvd.rank}
BINDERS = {a: [m for n, m in sorted(sys.modules.items())
               if (n == "hvdcomm.torch" or n.startswith("hvdcomm.torch.")) and getattr(m, a, None) is f]
           for a, f in REAL.items()}


def fake_world(**fns):
    """fake_world(size=lambda: 2): the function(s) every module of
    hvdcomm.torch calls from now on; fake_world(**REAL) undoes it."""
    for a, f in fns.items():
        for m in BINDERS[a]:
            setattr(m, a, f)


def raises(exc, fn, what):
    try:
        fn()
    except exc as e:
        check(True, what)
        return e
    check(False, f"{what}: no {exc.__name__}")


# --- exceptions: classes, hierarchy, library messages
check(issubclass(hvd.HorovodInternalError, RuntimeError), "HorovodInternalError is a RuntimeError")
check(issubclass(hvd.HostsUpdatedInterrupt, RuntimeError), "HostsUpdatedInterrupt is a RuntimeError")
check(hvd.HostsUpdatedInterrupt.skip_sync is False, "HostsUpdatedInterrupt.skip_sync is False")
check(hvd.elastic.HorovodInternalError is hvd.HorovodInternalError, "elastic re-exports HorovodInternalError")
check(hvd.elastic.WorkerRemovedError is hvd.WorkerRemovedError, "elastic re-exports WorkerRemovedError")
check(issubclass(hvd.PeerFailureError, hvd.HorovodInternalError), "PeerFailureError is a HorovodInternalError")
for kind, cls in [("peer_failure", hvd.PeerFailureError), ("hosts_updated", hvd.HostsUpdatedInterrupt),
                  ("worker_removed", hvd.WorkerRemovedError), ("io", hvd.HorovodInternalError)]:
    e = raises(cls, lambda: hvd._core._throw_for_test(kind, f"library says {kind}"), f"{kind} translated")
    check(str(e) == f"library says {kind}", f"{kind} carries the library's message: {e}")
check(type(raises(hvd.HorovodInternalError, lambda: hvd._core._throw_for_test("io", "x"), "io")) is
      hvd.HorovodInternalError, "a plain IoError is not a PeerFailureError")
e = raises(ValueError, hvd._elastic_reset, "reset outside an elastic job")
check("not an elastic job" in str(e), f"reset error carries the library message: {e}")

# --- sync root: most commits, lowest rank on ties
check(E.choose_sync_root([0]) == 0, "root of one")
check(E.choose_sync_root([3, 5, 5, 1]) == 1, "most commits, lowest rank on tie")
check(E.choose_sync_root([0, 0, 0]) == 0, "all tied -> rank 0")
check(E.choose_sync_root([0, 0, 7]) == 2, "newcomers on low ranks do not win")
raises(ValueError, lambda: E.choose_sync_root([]), "empty counts")


class FakeCollectives(E.Collectives):
    """Pretends to be rank `me` of a world whose other members report `others`."""

    def __init__(self, me, counts, root_objects):
        self.me, self.counts, self.root_objects, self.calls = me, counts, root_objects, []

    def rank(self):
        return self.me

    def allgather_int(self, name, value):
        self.calls.append(("allgather_int", name))
        out = list(self.counts)
        out[self.me] = value
        return out

    def any_true(self, name, flag):
        self.calls.append(("any_true", name))
        return flag

    def broadcast_object(self, obj, root, name):
        self.calls.append(("broadcast_object", root))
        return obj if root == self.me else self.root_objects[root]


# --- ObjectState: commit/restore are deep copies; sync adopts the root's live values
fake = FakeCollectives(0, [0, 4], {1: {"epoch": 9, "items": [1, 2]}})
s = E.ObjectState(fake, epoch=0, items=[])
s.epoch = 1
s.items.append("a")
s.commit()
check(s.commits == 1, "commit counts")
s.items.append("b")
s.epoch = 2
s.restore()
check(s.epoch == 1 and s.items == ["a"], f"restore returns to the commit (deep copy): {s.epoch} {s.items}")
s.items.append("c")
s.restore()
check(s.items == ["a"], "restore twice: live mutations never reach the saved copy")
s.sync()  # member 1 has 4 commits > our 1
check(s.epoch == 9 and s.items == [1, 2] and s.commits == 4, "sync adopts the root's state and commit count")
check(("broadcast_object", 1) in fake.calls, "broadcast from the member with most commits")
s.epoch = 100
s.restore()
check(s.epoch == 9, "sync saves what it adopted")

# --- a user attribute named commits (Horovod's State has no counter; its own
# elastic tests pass ObjectState(..., commits=0) and do state.commits += 1)
fake = FakeCollectives(0, [0, 3], {1: {"epoch": 4, "commits": 40}})
s = E.ObjectState(fake, epoch=0, commits=0)
check(s.commits == 0, "a commits keyword is the user's attribute")
s.commits += 1
s.commit()
s.commits += 5
check(s.commits == 6 and s._commits == 1, f"user attribute and counter apart: {s.commits} {s._commits}")
s.restore()
check(s.commits == 1, f"the user's commits is saved and restored: {s.commits}")
s.sync()  # member 1 has 3 commits (the counter) > our 1
check(s.epoch == 4 and s.commits == 40 and s._commits == 3,
      f"sync chooses by the counter and adopts the user's attribute: {s.epoch} {s.commits} {s._commits}")

# --- Horovod's private State names: _host_messages follows hosts_updated()
check(s._host_messages.empty() == (not E.hosts_updated()) and s._host_messages.qsize() in (0, 1),
      "_host_messages is a view of hosts_updated()")
orig_hosts_updated = E.hosts_updated
E.hosts_updated = lambda: True
check(not s._host_messages.empty() and s._host_messages.qsize() == 1, "a newer world: _host_messages not empty")
E.hosts_updated = orig_hosts_updated
s._last_updated_timestamp = 0  # Horovod's elastic test script resets it; allowed

# --- run(): outside elastic, errors propagate after one try
calls = []


@hvd.elastic.run
def once(state, x):
    calls.append(x)
    return x * 2


st = hvd.elastic.ObjectState(v=1)
check(once(st, 21) == 42 and calls == [21], "run outside elastic: sync + one call")


@hvd.elastic.run
def fails(state):
    raise hvd.PeerFailureError("peer gone")


raises(hvd.PeerFailureError, lambda: fails(st), "outside elastic PeerFailureError propagates")


@hvd.elastic.run
def interrupted(state):
    raise hvd.HostsUpdatedInterrupt("hosts")


raises(hvd.HostsUpdatedInterrupt, lambda: interrupted(st), "outside elastic HostsUpdatedInterrupt propagates")

# --- run(): the elastic retry loop with a fake reset
real_enabled, real_hosts_updated = E.enabled, E.hosts_updated
E.enabled = lambda: True  # pretend; hosts_updated() stays False so commit does not interrupt
real_state_synced = E._core.elastic_state_synced
synced_reports = []
E._core.elastic_state_synced = lambda: synced_reports.append(1)  # hvdrun's synced_key, faked
log = []
resets = []
fake = FakeCollectives(0, [0], {})
st = E.ObjectState(fake, step=0)
st.register_reset_callbacks([lambda: log.append("cb1"), lambda: log.append("cb2")])
script = ["fail", "interrupt", "ok"]


def body(state):
    log.append(f"start step={state.step}")
    state.step += 1
    state.commit()  # step 1 committed
    state.step += 1  # uncommitted progress
    what = script.pop(0)
    if what == "fail":
        raise hvd.PeerFailureError("peer failed")
    if what == "internal":
        raise hvd.HorovodInternalError("stall timeout")
    if what == "interrupt":
        raise hvd.HostsUpdatedInterrupt("new world")
    return state.step


wrapped = E.run_fn(body, lambda: resets.append(1) or log.append("reset"))
result = wrapped(st)
check(result == 5, f"run returns func's result: {result}")
check(log == ["start step=0", "reset", "cb1", "cb2",  # failure: restored to commit (step 1)
              "start step=1", "reset", "cb1", "cb2",  # interrupt: live state kept (step 3 -> sync saves 3)
              "start step=3"], f"run loop order: {log}")
check(len(resets) == 2, "reset once per recovery")
syncs = [c for c in fake.calls if c[0] == "allgather_int"]
check(len(syncs) == 3, f"sync after every (re-)join, never skipped: {len(syncs)}")
check(len(synced_reports) == 3, f"every finished sync tells hvdrun this worker holds the state: {synced_reports}")


class OwnSync(E.ObjectState):
    """Horovod's way: a subclass that overrides sync() itself."""

    def sync(self):
        log.append("own sync")


synced_reports.clear()
log.clear()
script[:] = ["ok"]
E.run_fn(body, lambda: None)(OwnSync(fake, step=0))
check(log[0] == "own sync" and len(synced_reports) == 1, f"an overridden sync() is reported too: {log} {synced_reports}")


def removed():
    raise hvd.WorkerRemovedError("worker removed from the job")


script[:] = ["fail"]
st2 = E.ObjectState(fake, step=0)
raises(hvd.WorkerRemovedError, lambda: E.run_fn(body, removed)(st2), "WorkerRemovedError from reset propagates")


script[:] = ["internal"]
st3 = E.ObjectState(fake, step=0)
resets.clear()
raises(hvd.HorovodInternalError, lambda: wrapped(st3), "other HorovodInternalErrors propagate in elastic mode")
check(not resets, "no re-join for a non-peer failure")


class Boom(Exception):
    pass


def other(state):
    raise Boom()


raises(Boom, lambda: E.run_fn(other, removed)(st2), "other exceptions propagate without reset")

# check_host_updates: collective, raises on every rank when any rank saw an update
E.hosts_updated = lambda: True
fake.calls.clear()
before = st2.commits
e = raises(hvd.HostsUpdatedInterrupt, st2.commit, "commit raises HostsUpdatedInterrupt when hosts changed")
check(("any_true", "hvdcomm.elastic.check_host_updates") in fake.calls, "check_host_updates is a collective")
check(st2.commits == before + 1 and "hosts changed" in str(e), "the commit before the interrupt is kept")
E.enabled, E.hosts_updated = real_enabled, real_hosts_updated
synced_reports.clear()
script[:] = ["ok"]
E.run_fn(body, lambda: None)(E.ObjectState(fake, step=0))
check(not synced_reports, "outside an elastic job run() reports nothing")
E._core.elastic_state_synced = real_state_synced
E._core.elastic_state_synced()  # the real one: a no-op outside an elastic job

# --- TorchState: model, optimizer (with momentum), sampler and extra attributes
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters())
data = list(range(20))
sampler = hvd.elastic.ElasticSampler(data, shuffle=False)
ts = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=0)
check(ts.model is model and ts.optimizer is opt and ts.sampler is sampler, "handled values are attributes")
check(set(ts._handlers) == {"model", "optimizer", "sampler"}, f"handlers: {sorted(ts._handlers)}")


def train_step():
    opt.zero_grad()
    model(torch.randn(8, 4)).pow(2).sum().backward()
    opt.step()


def snapshot():
    return ({k: v.clone() for k, v in model.state_dict().items()},
            {k: v["momentum_buffer"].clone() for k, v in opt.state_dict()["state"].items()})


def same(a, b):
    return all(torch.equal(a[0][k], b[0][k]) for k in a[0]) and a[1].keys() == b[1].keys() and \
        all(torch.equal(a[1][k], b[1][k]) for k in a[1])


train_step()
ts.epoch, ts.batch = 1, 5
sampler.record_indices([0, 1, 2])
ts.commit()
committed = snapshot()
train_step()
train_step()
ts.epoch, ts.batch = 1, 7
sampler.record_indices([3, 4])
check(not same(snapshot(), committed), "training changed the model")
ts.restore()
check(same(snapshot(), committed), "restore brings back parameters, BatchNorm buffers and momentum")
check(ts.epoch == 1 and ts.batch == 5, "restore brings back extra attributes")
check(sampler.processed_indices == {0, 1, 2}, f"restore brings back the sampler: {sampler.processed_indices}")
ts.sync()  # size 1: root is us
check(same(snapshot(), committed) and ts.commits == 1, "sync at size 1 keeps the state")
# restoring an optimizer with no state yet (commit before the first step)
m2 = torch.nn.Linear(2, 2)
o2 = torch.optim.Adam(m2.parameters())
ts2 = hvd.elastic.TorchState(model=m2, optimizer=o2)
o2.zero_grad()
m2(torch.ones(1, 2)).sum().backward()
o2.step()
ts2.restore()
check(len(o2.state_dict()["state"]) == 0, "restore to an empty optimizer state")
check(ts2.model is m2, "TorchState(model=...) keyword form")

# --- ElasticSampler
ds = list(range(10))
a = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
b = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
check(list(a) == list(b) and sorted(a) == ds, "same seed, same permutation of all samples")
check(list(a) != ds, "shuffled")
b.set_epoch(1)
check(list(b) != list(a) and sorted(b) == ds, "set_epoch reshuffles with seed + epoch")
check(len(a) == 10, "len at size 1")
order = list(a)
a.record_batch(0, 3)
check(a.processed_indices == set(order[:3]), "record_batch records the batch")
check(a.get_indices(1, 3) == order[3:6], "get_indices")
sd = a.state_dict()
c = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
c.load_state_dict(sd)
check(list(c) == order[3:], "load_state_dict skips processed samples, keeps the order")
check(len(c) == 7, "len counts only remaining samples")
sd["processed_indices"].add(99)
check(99 not in a.processed_indices, "state_dict is a copy")
a.set_epoch(0)
check(a.processed_indices == set() and list(a) == order, "set_epoch clears processed samples")
raises(ValueError, lambda: a.record_batch(-1, 2), "bad record_batch arguments")

# Horovod's (v0.28) processed_num: record_batch counts batch_size * size;
# the processed samples are the first processed_num of the epoch's order
h = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
check(h.processed_num == 0 and h.state_dict()["processed_num"] == 0, "processed_num starts at 0")
list(h)
h.record_batch(0, 2)
h.record_batch(1, 2)
check(h.processed_num == 4 and h.processed_indices == set(order[:4]), "processed_num counts record_batch's samples")
hsd = h.state_dict()
h.record_batch(2, 2)
h.load_state_dict(hsd)  # as TorchState.restore does: a new iteration over the rest
check(h.processed_num == 4 and list(h) == order[4:], "load_state_dict restores processed_num and the rest")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    h.record_batch(2, 2)  # Horovod's own test: batch_idx 2 after a restore is the next batch
    h.record_batch(5, 2)
check(h.processed_indices == set(order[:8]) and h.processed_num == 8,
      f"record_batch records the next batch whatever batch_idx says: {h.processed_indices}")
check(len(caught) == 1 and "batch_idx 2 is not the number of batches recorded" in str(caught[0].message),
      f"one warning for a batch_idx that does not match: {[str(w.message) for w in caught]}")
g = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
g.load_state_dict({"epoch": 0, "processed_num": 3})  # Horovod's state_dict: no processed_indices
check(g.processed_indices == set(order[:3]) and list(g) == order[3:], "Horovod's state_dict loads as its prefix")
raises(KeyError, lambda: g.load_state_dict({"epoch": 0}), "a state_dict without processed samples is refused")
g.set_epoch(1)
check(g.processed_num == 0 and not g.processed_indices, "set_epoch clears processed_num")
g.record_indices([order[0]])
check(g.processed_num == 0, "record_indices leaves processed_num alone")
check(list(hvd.elastic.ElasticSampler([], shuffle=True)) == [], "empty dataset")

# re-partitioning: pretend to be rank r of 3 (size/rank faked for the sampler only)
bound = {m.__name__ for m in BINDERS["size"]} & {m.__name__ for m in BINDERS["rank"]}
check({"hvdcomm.torch", "hvdcomm.torch.mpi_ops", "hvdcomm.torch.elastic.sampler"} <= bound,
      f"size/rank fakes reach the sampler: {sorted(bound)}")
parts = []
try:
    fake_world(size=lambda: 3)
    for r in range(3):
        fake_world(rank=lambda r=r: r)
        s3 = hvd.elastic.ElasticSampler(ds, shuffle=True, seed=3)
        s3.record_indices(order[:4])
        s3.reset()
        parts.append(list(s3))
        check(len(s3) == 2, f"rank {r} of 3 gets ceil(6/3) samples")
    check(sorted(sum(parts, [])) == sorted(order[4:]), f"partitions cover the remaining samples once: {parts}")
    # record_batch records the batch on every rank, so all ranks agree
    fake_world(rank=lambda: 1)
    s3 = hvd.elastic.ElasticSampler(ds, shuffle=False)
    it = list(s3)  # 10 samples over 3 ranks -> padded to 12, 4 each
    check(it == [1, 4, 7, 0], f"padding repeats the head: {it}")
    s3.record_batch(0, 2)
    check(s3.processed_indices == {0, 3, 1, 4, 2, 5}, f"batch 0 of every rank recorded: {s3.processed_indices}")
    fake_world(size=lambda: 2, rank=lambda: 0)
    s3.reset()
    check(list(s3) == [6, 8] and len(s3) == 2, f"re-partitioned over the new size: {list(s3)}")
finally:
    fake_world(**REAL)

# --- DistributedOptimizer across a re-join: built at size 2 (hooks registered), trains at size 1
check("hvdcomm.torch.optimizer" in {m.__name__ for m in BINDERS["size"]}, "size fakes reach the optimizer")
try:
    fake_world(size=lambda: 2)
    m3 = torch.nn.Linear(3, 1)
    o3 = hvd.DistributedOptimizer(torch.optim.SGD(m3.parameters(), lr=0.1), named_parameters=m3.named_parameters())
    check(len(o3._hooks) == 2, "hooks registered at size 2")
finally:
    fake_world(**REAL)
for _ in range(3):  # a shrink to one rank: hooks fire but reduce nothing, steps keep working
    o3.zero_grad()
    m3(torch.ones(2, 3)).sum().backward()
    o3.step()
check(not o3._handles, "no pending gradient handles at size 1")
check(torch.allclose(m3.weight.grad, torch.full((1, 3), 2.0)), "gradients untouched at size 1")
o4 = hvd.DistributedOptimizer(torch.optim.SGD(m3.parameters(), lr=0.1), named_parameters=m3.named_parameters())
o4._handles[0] = ("stale", None)
hvd._name("allreduce", None)
hvd._handles[12345] = "stale"
real_reset = hvd._core.elastic_reset
rejoined = []
try:
    fake_world(size=lambda: 2)
    hvd._core.elastic_reset = lambda: rejoined.append(1)  # the library's re-join, faked
    hvd._elastic_reset()
    check(rejoined == [1], "the library re-join is called")
    check(not o4._handles and len(o4._hooks) == 2, "re-join drops stale optimizer handles, adds hooks at size 2")
    check(12345 not in hvd._handles, "re-join drops pending handles")
    check(hvd._name("allreduce", None) == "allreduce.noname.1", "generated names restart after a re-join")
finally:
    fake_world(**REAL)
    hvd._core.elastic_reset = real_reset

# --- the torch collectives adapter at size 1
tc = torch_state.COLLECTIVES
check(tc.allgather_int("t.ag", 5) == [5], "allgather_int")
check(tc.any_true("t.any1", True) is True and tc.any_true("t.any0", False) is False, "any_true")
check(tc.broadcast_object({"a": 1}, 0, "t.bo") == {"a": 1}, "broadcast_object")
hvd.shutdown()
print(f"elastic_unit: {checks} checks passed")
