"""One read of a study's trials per suggestion: an Optuna storage that serves a snapshot.

Asking Optuna for one trial reads all of the study's trials several times: ``Study.ask`` for
a waiting (enqueued) trial, and NSGA-II for the intersection search space, the trial's
generation and its parent population; on PostgreSQL each read is a round trip that loads every
unfinished trial again. Optuna's own loop shares one read between some of them (its
per-thread ``cached_all_trials``), not all. :class:`SnapshotStorage` wraps the study's storage
and, inside :meth:`SnapshotStorage.snapshot`, answers every ``get_all_trials`` of the study
from one read taken at the first, filtered by state as the storage would; outside it, and for
every other call, it is the storage it wraps. Writes are never cached: they reach the database
at once (a draw's parameters at its end, below). A trial created or taken from the queue while
the snapshot is open is read again by id and put in it; parameters written later are not (as
in Optuna's own ``cached_all_trials``, read once after ``ask``). That read also answers the
``get_trial`` with which ``optuna.Trial`` opens it, when nothing else reached the storage in
between.

Two kinds of writes are gathered into one transaction where the wrapped storage is an RDB
storage (``rdb``): inside :meth:`SnapshotStorage.drawing`, the parameters Optuna writes one
commit each are written together at its end (``studies.store.storage.set_trial_params``), and
:meth:`SnapshotStorage.set_trial_system_attrs` sets several system attributes at once (a
sampler finds it on its study's storage). Those a sampler sets while a snapshot is open (the
default sampler's gain, noise and seconds, chosen in ``ask``) are written with the
parameters, in the same transaction, or when the snapshot closes where nothing was drawn;
until then the database does not hold them.

It is built on Optuna's public ``BaseStorage`` interface (every method delegated,
``get_all_trials`` answered from the snapshot), and the batched writes on the store's helpers
(``studies.store.storage``); :func:`asking_study` gives the ``optuna.Study`` over it (the same
sampler and pruner as the run's study), and :class:`Asking` the searcher's handle on it
(``StudyStore.asking``), each step retried as the store's writes are.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Container, Iterator
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from studies.store.storage import (
    ParamWrite,
    retrying,
    session,
    set_trial_params,
    set_trial_system_attrs,
)

__all__ = ["Asking", "SnapshotStorage", "asking_study"]

_T = TypeVar("_T")


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: SnapshotStorage, *args: Any, **kwargs: Any) -> Any:
        self._fresh.clear()  # the storage may change under a trial read before
        return getattr(self.base, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of the wrapped storage."
    return method


class SnapshotStorage(BaseStorage):
    """``base`` with its ``get_all_trials`` answered from one read while a snapshot is open;
    ``rdb``, the RDB storage ``base`` wraps (or is), writes what is batched in one
    transaction (without it, each write is ``base``'s own)."""

    def __init__(self, base: BaseStorage, rdb: RDBStorage | None = None) -> None:
        self.base, self.rdb = base, rdb
        self._snapshot: dict[int, list[FrozenTrial]] | None = None
        self._fresh: dict[int, FrozenTrial] = {}  # read by _refresh, unchanged since
        self._params: list[tuple[int, ParamWrite]] | None = None  # gathered while drawing
        #: System attributes set while the snapshot is open, by trial id, not yet written.
        self._system: dict[int, dict[str, Any]] = {}
        self.reads = 0  # reads of all trials that reached ``base`` (tests count them)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """While open, the first ``get_all_trials`` of a study reads it; later ones reuse that
        read. Not reentrant: one suggestion at a time (the searcher runs in Tune's loop).
        System attributes set while it is open and not written with a draw's parameters are
        written when it closes (dropped where its block raised: the trial is given up)."""
        self._snapshot = {}
        try:
            yield
            for trial_id in list(self._system):  # retried as the draw's write is
                if self.rdb is not None:
                    retrying(self.rdb.url, functools.partial(
                        set_trial_system_attrs, self.rdb, trial_id, self._system[trial_id]))
                del self._system[trial_id]
        finally:
            self._snapshot = None
            self._system = {}

    def get_all_trials(self, study_id: int, deepcopy: bool = True,
                       states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        if self._snapshot is None:
            self.reads += 1
            return self.base.get_all_trials(study_id, deepcopy=deepcopy, states=states)
        trials = self._snapshot.get(study_id)
        if trials is None:
            self.reads += 1
            trials = self._snapshot[study_id] = self.base.get_all_trials(study_id,
                                                                        deepcopy=False)
        out = trials if states is None else [t for t in trials if t.state in states]
        return copy.deepcopy(out) if deepcopy else list(out)

    def get_trial(self, trial_id: int) -> FrozenTrial:
        fresh = self._fresh.pop(trial_id, None)  # read a moment ago, nothing written since
        trial = copy.deepcopy(fresh) if fresh is not None else self.base.get_trial(trial_id)
        if trial_id in self._system:  # set and not yet written: read as if they were
            trial = copy.copy(trial)
            trial.system_attrs = {**trial.system_attrs, **self._system[trial_id]}
        return trial

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        self._fresh.clear()
        trial_id = self.base.create_new_trial(study_id, template_trial)
        self._refresh(study_id, trial_id)
        return trial_id

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Any = None) -> bool:
        self._fresh.clear()
        done = self.base.set_trial_state_values(trial_id, state, values)
        if self._snapshot:
            for study_id in self._snapshot:
                self._refresh(study_id, trial_id)
        return done

    # ------------------------------------------------------------------ batched writes
    @contextlib.contextmanager
    def drawing(self, pending: list[tuple[int, ParamWrite]]) -> Iterator[None]:
        """While open, ``set_trial_param`` gathers into ``pending``; at its end (also where the
        block raised) they are written in one transaction and ``pending`` emptied. Where that
        write fails, ``pending`` keeps them: a retried block (whose trial returns the values
        it drew without writing them again) passes the same list. Without ``rdb``, each
        parameter is written as it is drawn."""
        if self.rdb is None:
            yield
            return
        self._params = pending
        try:
            yield
        finally:
            self._params = None
            by_trial: dict[int, list[ParamWrite]] = {}
            for trial_id, write in pending:
                by_trial.setdefault(trial_id, []).append(write)
            for trial_id, writes in by_trial.items():  # the sampler's attributes with them
                set_trial_params(self.rdb, trial_id, writes,
                                 system_attrs=self._system.get(trial_id))
                self._system.pop(trial_id, None)
            pending.clear()

    def set_trial_param(self, trial_id: int, param_name: str, param_value_internal: float,
                        distribution: BaseDistribution) -> None:
        self._fresh.clear()
        if self._params is None:
            self.base.set_trial_param(trial_id, param_name, param_value_internal, distribution)
            return
        self._params.append((trial_id, (param_name, param_value_internal, distribution,
                                        self._held(param_name))))

    def _held(self, name: str) -> BaseDistribution | None:
        """The distribution an earlier trial in the snapshot holds under ``name`` (what
        Optuna checks a new parameter against), or None (the database is asked)."""
        for trials in (self._snapshot or {}).values():
            for trial in trials:
                if name in trial.distributions:
                    return trial.distributions[name]
        return None

    def set_trial_system_attrs(self, trial_id: int, attrs: dict[str, Any]) -> None:
        """Several system attributes of one trial, in one transaction where ``rdb`` is set:
        while a snapshot is open, with the parameters drawn next (or when it closes)."""
        self._fresh.clear()
        if self.rdb is not None and self._snapshot is not None:
            self._system.setdefault(trial_id, {}).update(attrs)
            return
        if self.rdb is not None:
            set_trial_system_attrs(self.rdb, trial_id, attrs)
            return
        for key, value in attrs.items():
            self.base.set_trial_system_attr(trial_id, key, value)

    def _refresh(self, study_id: int, trial_id: int) -> None:
        """A trial created or moved (a waiting one taken) while the snapshot is open: read it
        again by id, as Optuna's own cache, read after ``ask`` made the trial, would hold it."""
        trials = None if self._snapshot is None else self._snapshot.get(study_id)
        if trials is None:
            return
        fresh = self._fresh[trial_id] = self.base.get_trial(trial_id)
        at = next((i for i, t in enumerate(trials) if t._trial_id == trial_id), None)
        if at is None:
            trials.append(fresh)
            trials.sort(key=lambda t: t.number)
        else:
            trials[at] = fresh

    # Every other method of the interface, and the ones BaseStorage implements through
    # get_all_trials where the wrapped storage has its own (cheaper) version: delegated.
    create_new_study = _delegate("create_new_study")
    delete_study = _delegate("delete_study")
    set_study_user_attr = _delegate("set_study_user_attr")
    set_study_system_attr = _delegate("set_study_system_attr")
    get_study_id_from_name = _delegate("get_study_id_from_name")
    get_study_name_from_id = _delegate("get_study_name_from_id")
    get_study_directions = _delegate("get_study_directions")
    get_study_user_attrs = _delegate("get_study_user_attrs")
    get_study_system_attrs = _delegate("get_study_system_attrs")
    get_all_studies = _delegate("get_all_studies")
    get_trial_id_from_study_id_trial_number = _delegate(
        "get_trial_id_from_study_id_trial_number")
    get_trial_number_from_id = _delegate("get_trial_number_from_id")
    get_trial_param = _delegate("get_trial_param")
    set_trial_intermediate_value = _delegate("set_trial_intermediate_value")
    set_trial_user_attr = _delegate("set_trial_user_attr")
    set_trial_system_attr = _delegate("set_trial_system_attr")
    get_best_trial = _delegate("get_best_trial")
    remove_session = _delegate("remove_session")


def asking_study(study: optuna.Study, storage: BaseStorage, rdb: RDBStorage | None = None
                 ) -> tuple[optuna.Study, SnapshotStorage]:
    """A second handle on ``study`` whose storage is a :class:`SnapshotStorage` over
    ``storage`` (the storage ``study`` was opened with, e.g. ``optuna.storages.get_storage``
    of the run's RDB storage ``rdb``), with ``study``'s own sampler and pruner."""
    wrapped = SnapshotStorage(storage, rdb)
    return optuna.Study(study_name=study.study_name, storage=wrapped, sampler=study.sampler,
                        pruner=study.pruner), wrapped


class Asking:
    """How the searcher draws trials from ``study``: its own sampler, asked through a second
    handle (:func:`asking_study` over ``storage``, the storage ``study`` was opened with) whose
    trials are read once per :meth:`snapshot`; told through ``study`` itself. Each step reads
    and writes the database, and is retried as a write is (``studies.store.storage.retrying``)."""

    def __init__(self, study: optuna.Study, storage: optuna.storages.RDBStorage) -> None:
        self.url = storage.url
        with session(self.url):
            self.study, self.snapshots = asking_study(
                study, optuna.storages.get_storage(storage), storage)

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """One read of the study's trials for one suggestion (:meth:`SnapshotStorage.snapshot`)."""
        return self.snapshots.snapshot()

    def ask(self) -> optuna.trial.Trial:
        """A new trial (a waiting one taken first, as ``Study.ask`` does)."""
        return retrying(self.url, self.study.ask)

    def draw(self, call: Callable[[], _T]) -> _T:
        """``call()``: the space drawing an asked trial's parameters (the sampler reads the
        trials; the parameters are written together at the end, in one transaction:
        :meth:`SnapshotStorage.drawing`)."""
        pending: list[tuple[int, ParamWrite]] = []  # kept across the retries of one draw

        def attempt() -> _T:
            with self.snapshots.drawing(pending):
                return call()

        return retrying(self.url, attempt)
