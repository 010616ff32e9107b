"""Framework-neutral elastic training: Horovod's ``horovod.common.elastic``
(State, ObjectState, run_fn) on hvdrun's elastic worlds (docs/python.md,
"Elastic"; the library side is hvd/collective/elastic.h).

Differences from Horovod, on purpose:

* ``State.sync()`` runs after every (re-)join on every member, newcomers
  and survivors alike; it is never skipped, so members can never disagree on
  whether a broadcast happens (the horovodrun hang).
* ``sync()`` broadcasts from the member with the most commits (ties: the
  lowest rank), not always rank 0, so a newcomer that landed on rank 0 never
  overwrites trained state, and a member that finished one more commit than
  another before a peer died wins.
* ``run()`` recovers from PeerFailureError (a HorovodInternalError
  subclass: a peer died or a link dropped), not from every
  HorovodInternalError: a stall timeout or a shutdown gets no new world from
  hvdrun, so re-joining would wait for one in vain.
* ``check_host_updates()`` is collective: an allreduce MAX of each rank's
  local "a newer world exists" flag, so every rank raises
  HostsUpdatedInterrupt at the same commit.

A framework binding (hvdcomm.torch.elastic) supplies the few collectives a
State needs through a ``Collectives`` object, which keeps this module free of
any tensor library and lets tests drive it with fakes.
"""
import copy
import functools
import logging

from hvdcomm import _core
from hvdcomm._core import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                           PeerFailureError, WorkerRemovedError)

log = logging.getLogger("hvdcomm.elastic")


def enabled():
    """True when this process runs in an elastic hvdrun job (HOROVOD_ELASTIC=1)."""
    return bool(_core.elastic_enabled())


def world_version():
    """The membership version this process belongs to (0 when not elastic)."""
    return int(_core.world_version())


def hosts_updated():
    """Local, non-blocking: whether hvdrun has published a newer world."""
    return bool(_core.hosts_updated())


class Collectives:
    """What a State needs from a framework binding. Every method except
    rank() is collective: all members call it in the same order."""

    def rank(self):
        raise NotImplementedError

    def allgather_int(self, name, value):
        """Every member's ``value``, as a list indexed by rank."""
        raise NotImplementedError

    def any_true(self, name, flag):
        """True when ``flag`` is true on any member."""
        raise NotImplementedError

    def broadcast_object(self, obj, root, name):
        """``obj`` of member ``root``, on every member (picklable objects)."""
        raise NotImplementedError

    def allgather_object(self, obj, name):
        """Every member's ``obj``, as a list indexed by rank."""
        raise NotImplementedError


def choose_sync_root(commit_counts):
    """The member whose state everyone adopts: most commits, lowest rank on ties."""
    if not commit_counts:
        raise ValueError("hvdcomm elastic: no commit counts to choose a sync root from")
    return max(range(len(commit_counts)), key=lambda r: (commit_counts[r], -r))


class _HostMessages:
    """What Horovod keeps as ``State._host_messages`` (a queue its driver's
    notifications fill), for code that reads it -- Horovod's own elastic
    test script waits for ``not state._host_messages.empty()``. Here it is a
    view, not a queue: non-empty while hvdrun has published a world newer
    than this worker's (hosts_updated()); check_host_updates() is what acts
    on it."""

    def empty(self):
        return not hosts_updated()

    def qsize(self):
        return 0 if self.empty() else 1


class State:
    """User state that survives peer failures and membership changes.

    Subclasses implement save() (copy live state aside), restore() (return to
    the copy) and _sync_from(root) (collective: make the live state root's).
    """

    def __init__(self, collectives):
        self._collectives = collectives
        self._commits = 0
        self._reset_callbacks = []
        # Horovod's private names, read by code written against Horovod's
        # State: the pending host notifications (a view, _HostMessages) and
        # the last notification's time, which Horovod compares timestamps
        # with. hvdrun's worlds are numbered, so no timestamp is needed and
        # assigning this one changes nothing.
        self._host_messages = _HostMessages()
        self._last_updated_timestamp = 0

    @property
    def commits(self):
        """Commits so far, carried over from the sync root -- unless the state
        has an attribute of its own named ``commits`` (Horovod's State has no
        such counter, so ``ObjectState(..., commits=0)`` is a user attribute
        there, as in Horovod's own elastic tests): once one is set, this name
        is that attribute, saved, restored and synced like any other, and the
        counter stays ``_commits``."""
        return self.__dict__["commits"] if "commits" in self.__dict__ else self._commits

    @commits.setter
    def commits(self, value):
        self.__dict__["commits"] = value

    def register_reset_callbacks(self, callbacks):
        """Callables run, in order, after every re-join (e.g. rescale the
        learning rate to the new size)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """Hook for subclasses: called after every re-join, before the callbacks."""

    def commit(self):
        """Saves the state, counts the commit, then check_host_updates()."""
        self.save()
        self._commits += 1
        self.check_host_updates()

    def check_host_updates(self):
        """Collective in an elastic job: raises HostsUpdatedInterrupt on every
        rank when any rank has seen a newer world. A no-op otherwise (the
        answer is the same on every rank, so skipping it is consistent)."""
        if not enabled():
            return
        if self._collectives.any_true("hvdcomm.elastic.check_host_updates", hosts_updated()):
            raise HostsUpdatedInterrupt(
                f"hvdcomm elastic: hosts changed (this worker is in world {world_version()}); re-forming")

    def sync(self):
        """Collective: every member adopts the state of the member with the
        most commits (lowest rank on ties), then saves it."""
        counts = self._collectives.allgather_int("hvdcomm.elastic.sync.commits", self._commits)
        root = choose_sync_root(counts)
        self._sync_from(root)
        self._commits = int(counts[root])
        self.save()

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def _sync_from(self, root):
        raise NotImplementedError


class ObjectState(State):
    """State made of plain picklable attributes: ``ObjectState(coll, epoch=0,
    batch=0)`` makes ``state.epoch`` and ``state.batch`` live attributes.
    Unlike Horovod, saved values are deep copies, so mutating a list in place
    after a commit does not change what restore() returns to."""

    def __init__(self, collectives, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(collectives)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def _sync_from(self, root):
        if not self._saved_state:
            return
        live = {k: getattr(self, k) for k in self._saved_state}
        live = self._collectives.broadcast_object(live, root, "hvdcomm.elastic.object_state")
        for k, v in live.items():
            setattr(self, k, v)

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))


def run_fn(func, reset):
    """Horovod's run wrapper: ``wrapper(state, *args)`` syncs the state,
    tells hvdrun that this worker holds it (an elastic job only), and calls
    ``func(state, *args)``. In an elastic job, on PeerFailureError (the
    HorovodInternalError of a peer that died or a dropped link) it restores
    the last commit, re-joins (``reset()``), runs the reset callbacks and
    tries again; on HostsUpdatedInterrupt it re-joins keeping the live state
    (it was just committed). Other errors propagate -- also other
    HorovodInternalErrors (a stall timeout, a shutdown): hvdrun publishes no
    new world for them, so a re-join would only wait for one in vain.
    Outside an elastic job nothing is caught: sync() and one call of func.
    WorkerRemovedError (this worker is no longer in the job) propagates."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        elastic = enabled()
        while True:
            try:
                state.sync()
                if elastic:
                    # hvdrun now counts this worker as holding the state it
                    # synced (docs/elastic.md, rule 5, "Who holds the state").
                    # Here, not in State.sync: Horovod-style subclasses
                    # override sync() itself.
                    _core.elastic_state_synced()
                return func(state, *args, **kwargs)
            except PeerFailureError as e:
                if not elastic:
                    raise
                log.warning("hvdcomm elastic: %s; restoring the last commit (%d) and re-joining",
                            str(e).splitlines()[0] if str(e) else type(e).__name__, state._commits)
                state.restore()
            except HostsUpdatedInterrupt:
                if not elastic:
                    raise
                log.info("hvdcomm elastic: hosts changed at commit %d; re-joining", state._commits)
            reset()
            state.on_reset()

    return wrapper
