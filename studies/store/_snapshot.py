"""One read of a study's trials per suggestion: an Optuna storage that serves a snapshot.

Asking Optuna for one trial reads all of the study's trials several times: ``Study.ask`` for
a waiting (enqueued) trial, and NSGA-II for the intersection search space, the trial's
generation and its parent population; on PostgreSQL each read is a round trip that loads every
unfinished trial again. Optuna's own loop shares one read between some of them (its
per-thread ``cached_all_trials``), not all. :class:`SnapshotStorage` wraps the study's storage
and, inside :meth:`SnapshotStorage.snapshot`, answers every ``get_all_trials`` of the study
from one read taken at the first, filtered by state as the storage would; outside it, and for
every other call, it is the storage it wraps. Writes are never cached: they go through at once.
A trial created or taken from the queue while the snapshot is open is read again by id and
put in it; parameters written later are not (as in Optuna's own ``cached_all_trials``, read
once after ``ask``).

It is built on Optuna's public ``BaseStorage`` interface only (every method delegated,
``get_all_trials`` answered from the snapshot); :func:`asking_study` gives the ``optuna.Study``
over it (the same sampler and pruner as the run's study), and :class:`Asking` the searcher's
handle on it (``StudyStore.asking``), each step retried as the store's writes are.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Container, Iterator
from typing import Any, TypeVar

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from studies.store.storage import retrying, session

__all__ = ["Asking", "SnapshotStorage", "asking_study"]

_T = TypeVar("_T")


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: SnapshotStorage, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.base, name)(*args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{name}`` of the wrapped storage."
    return method


class SnapshotStorage(BaseStorage):
    """``base`` with its ``get_all_trials`` answered from one read while a snapshot is open."""

    def __init__(self, base: BaseStorage) -> None:
        self.base = base
        self._snapshot: dict[int, list[FrozenTrial]] | None = None
        self.reads = 0  # reads of all trials that reached ``base`` (tests count them)

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[None]:
        """While open, the first ``get_all_trials`` of a study reads it; later ones reuse that
        read. Not reentrant: one suggestion at a time (the searcher runs in Tune's loop)."""
        self._snapshot = {}
        try:
            yield
        finally:
            self._snapshot = None

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

    def create_new_trial(self, study_id: int, template_trial: FrozenTrial | None = None) -> int:
        trial_id = self.base.create_new_trial(study_id, template_trial)
        self._refresh(study_id, trial_id)
        return trial_id

    def set_trial_state_values(self, trial_id: int, state: TrialState,
                               values: Any = None) -> bool:
        done = self.base.set_trial_state_values(trial_id, state, values)
        if self._snapshot:
            for study_id in self._snapshot:
                self._refresh(study_id, trial_id)
        return done

    def _refresh(self, study_id: int, trial_id: int) -> None:
        """A trial created or moved (a waiting one taken) while the snapshot is open: read it
        again by id, as Optuna's own cache, read after ``ask`` made the trial, would hold it."""
        trials = None if self._snapshot is None else self._snapshot.get(study_id)
        if trials is None:
            return
        fresh = self.base.get_trial(trial_id)
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
    set_trial_param = _delegate("set_trial_param")
    get_trial_id_from_study_id_trial_number = _delegate(
        "get_trial_id_from_study_id_trial_number")
    get_trial_number_from_id = _delegate("get_trial_number_from_id")
    get_trial_param = _delegate("get_trial_param")
    set_trial_intermediate_value = _delegate("set_trial_intermediate_value")
    set_trial_user_attr = _delegate("set_trial_user_attr")
    set_trial_system_attr = _delegate("set_trial_system_attr")
    get_trial = _delegate("get_trial")
    get_best_trial = _delegate("get_best_trial")
    remove_session = _delegate("remove_session")


def asking_study(study: optuna.Study, storage: BaseStorage) -> tuple[optuna.Study,
                                                                     SnapshotStorage]:
    """A second handle on ``study`` whose storage is a :class:`SnapshotStorage` over
    ``storage`` (the storage ``study`` was opened with, e.g. ``optuna.storages.get_storage``
    of the run's RDB storage), with ``study``'s own sampler and pruner."""
    wrapped = SnapshotStorage(storage)
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
            self.study, self.snapshots = asking_study(study,
                                                      optuna.storages.get_storage(storage))

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """One read of the study's trials for one suggestion (:meth:`SnapshotStorage.snapshot`)."""
        return self.snapshots.snapshot()

    def ask(self) -> optuna.trial.Trial:
        """A new trial (a waiting one taken first, as ``Study.ask`` does)."""
        return retrying(self.url, self.study.ask)

    def draw(self, call: Callable[[], _T]) -> _T:
        """``call()``: the space drawing an asked trial's parameters (the sampler reads the
        trials and writes each parameter)."""
        return retrying(self.url, call)
