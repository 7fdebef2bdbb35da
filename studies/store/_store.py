"""The one object in front of a study database: :class:`StudyStore`.

A store is Optuna's RDB storage opened read-only or writable (``studies.store.storage``). It
creates a study, writes every study attribute and trial ending (the trial writes are
``studies.store.record``'s :class:`~studies.store.record.RecordWrites`), reads typed study and
trial records and epochs (parsed by ``studies.store.stored``, the trust boundary), takes a
study's lease (``studies.store.lease``) and hands the searcher its way of asking for trials
(``studies.store._snapshot``). Every call turns driver errors into one ``StorageError`` line;
every write of a run is retried while a database server's connection is lost.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState
from sqlalchemy.engine import Engine

from nas.errors import ConfigError
from studies.store import lease
from studies.store._listing import StudySummary
from studies.store._snapshot import Asking
from studies.store.record import RecordWrites, write_study
from studies.store.storage import (
    UnknownStudyError,
    names_in,
    open_storage,
    resolve_storage_url,
    session,
    study_names,
)
from studies.store.stored import StudyAttrs, guarded, parsed_trials, read_epochs, study_attrs

if TYPE_CHECKING:
    from nas.tasks import TaskGeometry
    from search_spaces import SearchSpace
    from studies.spec import StudySpec

__all__ = ["StudyExists", "StudyStore", "StudySummary"]


class StudyExists(ConfigError):
    """A study of that name is in the database already."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Study {name!r} already exists; continue it with `nas resume {name}` "
                         "or choose another --name.")


class StudyStore(RecordWrites):
    """One study database, through Optuna's RDB storage (``storage``).

    Open it with :meth:`open` (a URL, read-only or writable) or :meth:`open_study` (a URL that
    must hold a given study). A read-only store creates nothing and cannot write (see
    ``studies.store.storage.open_storage``).
    """

    def __init__(self, storage: optuna.storages.RDBStorage) -> None:
        self.storage = storage

    @classmethod
    def open(cls, url: str | None = None, *, read_only: bool = False) -> StudyStore:
        """The store at ``url`` (``--storage``, else ``$NAS_STORAGE``, else the embedded SQLite
        file). Writable: a missing SQLite file becomes a new database and the tables are
        created where missing."""
        return cls(open_storage(url, read_only=read_only))

    @classmethod
    def open_study(cls, name: str, url: str | None = None, *,
                   write: bool = False) -> StudyStore:
        """The store at ``url``, checked read-only to hold study ``name`` before it is opened
        (writable with ``write``), so an unknown name writes nothing.

        Raises:
            UnknownStudyError: no study ``name`` there (the message lists the studies there).
        """
        url = resolve_storage_url(url)
        names = study_names(url)
        if name not in names:
            raise UnknownStudyError(name, url, names)
        return cls.open(url, read_only=not write)

    @property
    def url(self) -> str:
        return str(self.storage.url)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine under Optuna's storage (read-only where the store is)."""
        return self.storage.engine

    # ------------------------------------------------------------------ studies
    def names(self) -> list[str]:
        """The names of the studies in the database, sorted."""
        with session(self.url), self.engine.connect() as conn:
            return names_in(conn)

    def _unknown(self, name: str) -> UnknownStudyError:
        return UnknownStudyError(name, self.url, self.names())

    def load(self, name: str) -> tuple[optuna.Study, StudyAttrs, list[FrozenTrial]]:
        """Study ``name``, its typed attributes (the search space parsed) and its trials, each
        trial's stored attributes checked to parse.

        Raises:
            UnknownStudyError: no study ``name`` in the database.
            StoredValueError: a stored value that does not parse, named.
        """
        def read() -> tuple[optuna.Study, dict[str, Any], list[FrozenTrial]]:
            study = optuna.load_study(study_name=name, storage=self.storage)
            return study, study.user_attrs, study.get_trials(deepcopy=False)

        try:
            with session(self.url):
                study, raw, trials = guarded(self.engine, name, read)
        except KeyError:
            raise self._unknown(name) from None
        attrs = study_attrs(name, raw, len(study.directions))
        parsed_trials(name, trials)  # every trial's stored attributes parse
        return study, attrs, trials

    def completed(self, name: str) -> tuple[StudyAttrs, list[str], list[FrozenTrial]]:
        """Study ``name``'s attributes as a listing parses them, its directions and its
        completed trials, read without loading the study.

        Raises:
            UnknownStudyError: no study ``name`` in the database (a promotion deleted since).
        """
        storage = self.storage

        def read() -> tuple[dict[str, Any], list[str], list[FrozenTrial]]:
            study_id = storage.get_study_id_from_name(name)
            return (storage.get_study_user_attrs(study_id),
                    [d.name.lower() for d in storage.get_study_directions(study_id)],
                    storage.get_all_trials(study_id, deepcopy=False,
                                           states=(TrialState.COMPLETE,)))

        try:
            with session(self.url):
                raw, directions, trials = guarded(self.engine, name, read)
        except KeyError:
            raise self._unknown(name) from None
        return study_attrs(name, raw, len(directions), full=False), directions, trials

    def create(self, spec: StudySpec, space: SearchSpace, geometry: TaskGeometry,
               reference: Sequence[float | None], *, sampler: optuna.samplers.BaseSampler,
               trials: Iterable[tuple[dict[str, Any], dict[str, Any]]] = (),
               attrs: Mapping[str, Any] | None = None) -> optuna.Study:
        """Create study ``spec.name`` with its record (``studies.store.record.write_study``:
        file, space, geometry, hypervolume ``reference``, then ``attrs``) and enqueue
        ``trials`` (trial parameters, user attributes), in that order.

        Raises:
            StudyExists: a study of that name is there (created by another process just now).
        """
        with session(self.url):
            try:
                study = optuna.create_study(storage=self.storage, study_name=spec.name,
                                            directions=spec.directions, sampler=sampler)
            except optuna.exceptions.DuplicatedStudyError:
                raise StudyExists(spec.name) from None
            write_study(study, spec, space, geometry, reference, attrs)
            for params, user_attrs in trials:
                study.enqueue_trial(params, user_attrs=user_attrs, skip_if_exists=False)
        return study

    def user_attrs(self, study: optuna.Study) -> dict[str, Any]:
        """The study's user attributes as stored (data: parse them before trusting them)."""
        with session(self.url):
            return dict(study.user_attrs)

    def set_study_attrs(self, study: optuna.Study, attrs: Mapping[str, Any]) -> None:
        """Store each of ``attrs`` (``StudyKey`` to value) as a study user attribute."""
        with session(self.url):
            for key, value in attrs.items():
                study.set_user_attr(key, value)

    # ------------------------------------------------------------------ trials
    def trials(self, study: optuna.Study, *,
               states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        """The study's trials (those in ``states``), a stored value Optuna cannot decode as the
        ``StoredValueError`` that names it."""
        with session(self.url):
            return guarded(self.engine, study.study_name,
                           lambda: study.get_trials(deepcopy=False, states=states))

    def best_trials(self, study: optuna.Study) -> list[FrozenTrial]:
        """The study's Pareto-optimal trials (Optuna's ``best_trials``)."""
        with session(self.url):
            return guarded(self.engine, study.study_name, lambda: study.best_trials)

    def epochs(self, name: str, trial: int | None = None) -> list[dict[str, Any]]:
        """The per-epoch rows of study ``name`` (or of one trial), each checked
        (``studies.store.stored.read_epochs``)."""
        return read_epochs(self.engine, name, trial)

    # ------------------------------------------------------------------ the lease, asking
    def owner(self, name: str) -> lease.Owner | None:
        """The process holding study ``name``'s lease, as its row records it (``None``: none)."""
        return lease.read_owner(self.engine, name)

    def acquire(self, name: str, *, stale_after: float) -> lease.Lease:
        """Take study ``name``'s lease (``studies.store.lease.acquire``), or ``StudyOwned``."""
        return lease.acquire(self.engine, name, stale_after=stale_after)

    def asking(self, study: optuna.Study) -> Asking:
        """The searcher's handle for drawing ``study``'s trials (``studies.store._snapshot``)."""
        return Asking(study, self.storage)
