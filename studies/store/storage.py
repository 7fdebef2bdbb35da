"""Where studies live: Optuna's RDB storage plus one table of our own for per-epoch curves.

Optuna's storage is the source of truth: studies, trials, parameters, objective values and the
architecture / cost / reason of each trial (as trial user attributes). What Optuna lacks is a
per-epoch table with several metrics per epoch; ``nas_epochs`` holds it, beside Optuna's tables
in the same database. ``session()`` is the one place that turns driver errors into ours, and
``retrying()`` retries a call while a database server's connection is lost; both are used inside
``studies.store`` only (callers go through ``StudyStore``).

Writers (``nas run``, ``nas resume``) open the storage as Optuna does, creating what is missing.
Readers (``status``, ``pareto``, ``export``, the dashboard) open it with ``read_only=True``: the
database refuses writes (SQLite opened read-only, PostgreSQL and MySQL sessions read-only) and
nothing is created, so pointing a reader at the wrong file leaves that file as it was.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import optuna
import sqlalchemy as sa
from optuna.distributions import BaseDistribution
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.pool import NullPool

from nas.errors import NasError, first_line

__all__ = [
    "DEFAULT_STORAGE",
    "RETRY_SECONDS",
    "EpochWrite",
    "StorageError",
    "UnknownStudyError",
    "epochs_table",
    "names_in",
    "open_storage",
    "read_only_engine",
    "read_only_engine_kwargs",
    "reading",
    "resolve_storage_url",
    "retrying",
    "session",
    "set_trial_params",
    "set_trial_system_attrs",
    "set_trial_user_attrs",
    "study_names",
    "tell",
    "write_epoch",
    "write_epochs",
]

DEFAULT_STORAGE = "sqlite:///nas_studies.db"

_metadata = sa.MetaData()
epochs_table = sa.Table(
    "nas_epochs", _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("study_name", sa.String(512), nullable=False, index=True),
    sa.Column("trial_number", sa.Integer, nullable=False),
    sa.Column("epoch", sa.Integer, nullable=False),
    sa.Column("train_loss", sa.Float),
    sa.Column("metric", sa.String(64)),
    sa.Column("value", sa.Float),
    sa.Column("seconds", sa.Float),
    sa.Column("extra", sa.Text),
    sa.UniqueConstraint("study_name", "trial_number", "epoch", name="uq_nas_epoch"),
)


class StorageError(NasError):
    """The database cannot be reached or read. ``transient``: the connection to a database
    server was lost or refused (worth retrying, see :func:`retrying`)."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class UnknownStudyError(NasError):
    """No study of that name in the database; the message lists the studies there."""

    def __init__(self, name: str, url: str, names: Iterable[str]) -> None:
        there = ", ".join(sorted(names)) or "none"
        super().__init__(f"no study {name!r} in {_redact(url)}; studies there: {there}")
        self.name = name


def resolve_storage_url(url: str | None = None) -> str:
    """``--storage``, else ``$NAS_STORAGE``, else the embedded SQLite file; validated."""
    url = url or os.environ.get("NAS_STORAGE") or DEFAULT_STORAGE
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StorageError(
            f"Storage {url!r} is not an SQLAlchemy URL (e.g. sqlite:///nas.db or "
            "postgresql+psycopg://user@host/db)."
        ) from None
    try:  # the dialect and its driver: a URL naming one not installed is one line here
        parsed.get_dialect().import_dbapi()
    except ImportError as exc:
        package = getattr(exc, "name", None) or parsed.get_driver_name()
        raise StorageError(f"Storage {_redact(url)!r} needs the database driver {package!r}, "
                           f"which is not installed (pip install {package}).") from None
    except Exception:  # an unknown dialect: SQLAlchemy says so when the engine is made
        pass
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        parent = Path(parsed.database).expanduser().resolve().parent
        if not parent.is_dir():
            raise StorageError(f"Storage {url!r}: folder {str(parent)!r} does not exist.")
    return url


def _sqlite_wal(url: str) -> None:
    """Write-ahead logging: readers (the dashboard) never block the writer, nor it them."""
    database = make_url(url).database
    if not database or database == ":memory:":
        return
    with contextlib.closing(sqlite3.connect(database, timeout=60)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


@contextlib.contextmanager
def session(url: str) -> Iterator[None]:
    """Turn driver and Optuna storage errors into a one-line ``StorageError``."""
    try:
        yield
    except json.JSONDecodeError as exc:  # a stored attribute edited or damaged by hand
        raise StorageError(f"Storage {_redact(url)!r} holds a value that is not valid JSON "
                           f"({exc.msg} at char {exc.pos}); it was changed outside nas.") from None
    except (SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError) as exc:
        cause: BaseException = exc
        if isinstance(exc, optuna.exceptions.StorageInternalError) and exc.__cause__:
            cause = exc.__cause__  # Optuna's words are generic; the driver's say what failed
        reason = first_line(getattr(cause, "orig", None) or cause, default=type(cause).__name__)
        raise StorageError(f"Storage {_redact(url)!r} cannot be used: {reason}",
                           transient=_connection_lost(url, cause)) from None


#: Seconds, in all, that :func:`retrying` retries a call while the database server cannot be
#: reached, before the error stands (tests lower it).
RETRY_SECONDS = 60.0
_FIRST_DELAY, _MAX_DELAY = 0.25, 8.0
_T = TypeVar("_T")
_given_up = False  # a retried call gave up on a lost connection, and none has succeeded since


def _connection_lost(url: str, cause: BaseException) -> bool:
    """A database server's connection lost, refused or reset. SQLite has no connection to
    lose (a locked file is waited for by its busy timeout; a full disk is no transient)."""
    if make_url(url).get_backend_name() == "sqlite":
        return False
    if isinstance(cause, DBAPIError) and cause.connection_invalidated:
        return True
    return isinstance(cause, (OperationalError, InterfaceError, DisconnectionError))


def retrying(url: str, call: Callable[[], _T], *,
             again: Callable[[], _T] | None = None) -> _T:
    """``call()`` inside :func:`session`, retried with exponential backoff for up to
    :data:`RETRY_SECONDS` while the database server's connection is lost (SQLAlchemy discards
    the pool's connections when one is found dead: the next try connects afresh); then, or at
    once for any other error, the ``StorageError`` stands. ``again`` (default ``call``) makes
    each retry: a call whose first try may have committed before its connection broke says
    there how to finish it.

    Once a call has given up, later ones in this process are tried once (the run is stopping:
    closing its trials must not wait out the bound for each) until one succeeds again."""
    global _given_up
    started = time.monotonic()
    give_up = started + RETRY_SECONDS
    delay, attempt, lost = _FIRST_DELAY, call, False
    while True:
        try:
            with session(url):
                out = attempt()
        except StorageError as exc:
            if not exc.transient:
                raise
            if _given_up or time.monotonic() + delay > give_up:
                _given_up = True
                raise
            if not lost:  # said once per call: what the run is waiting for
                lost = True
                print(f"nas: {exc}; retrying for up to {RETRY_SECONDS:g} s", file=sys.stderr,
                      flush=True)
        else:
            _given_up = False
            if lost:
                print(f"nas: the database is back after {time.monotonic() - started:.1f} s",
                      file=sys.stderr, flush=True)
            return out
        time.sleep(delay)
        delay, attempt = min(2 * delay, _MAX_DELAY), again or call


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def open_storage(url: str | None = None, *,
                 read_only: bool = False) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for ``url`` (resolved as in :func:`resolve_storage_url`).

    Writable (the default, for ``nas run`` and ``nas resume``): a missing SQLite file becomes a
    new database in write-ahead-logging mode, and Optuna's tables and ``nas_epochs`` are created
    where missing.

    With ``read_only=True`` nothing is created and nothing can be written: see
    :func:`read_only_engine_kwargs`. The database must hold Optuna's tables (:func:`study_names`
    answers without that requirement); a missing SQLite file, a file that is not a database, or
    one without Optuna's tables is a ``StorageError``.
    """
    url = resolve_storage_url(url)
    if read_only:
        return _open_read_only(url)
    parsed = make_url(url)
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        engine_kwargs["connect_args"] = {"timeout": 60}
    # No ``pool_pre_ping`` (a round trip before each use of a pooled connection, about 15 a
    # trial): a connection the server dropped fails its first statement instead, SQLAlchemy
    # then discards the pool's connections, and :func:`retrying`, which every write of a run
    # goes through, tries again on a fresh one.
    with session(url):
        if parsed.get_backend_name() == "sqlite":
            _sqlite_wal(url)
        storage = _rdb_storage(url, engine_kwargs=engine_kwargs)
        _metadata.create_all(_engine(storage))
    return storage


_SCHEMA_HEAD: list[str] = []  # the installed Optuna's schema revision, read once per process


def _rdb_storage(url: str, **kwargs: Any) -> optuna.storages.RDBStorage:
    """``RDBStorage(url, **kwargs)`` with Optuna's schema check done once per process.

    Optuna's check compares the database's schema revision with the newest one its migration
    scripts name, and loads those scripts from disk on every open (about 65 ms, a third of a
    `nas status` on a small study). The newest revision belongs to the installed Optuna, so it
    is read once; a database at another revision gets Optuna's own check, its message in one
    line (a ``StorageError``).
    """
    storage = optuna.storages.RDBStorage(url, skip_compatibility_check=True, **kwargs)
    if not _SCHEMA_HEAD:
        _SCHEMA_HEAD.append(storage.get_head_version())
    if storage.get_current_version() == _SCHEMA_HEAD[0]:
        return storage
    storage.engine.dispose()
    try:  # Optuna's own check, for its message (upgrade the database, or Optuna)
        storage = optuna.storages.RDBStorage(url, **kwargs)
    except RuntimeError as exc:
        storage.engine.dispose()
        raise StorageError(f"Storage {_redact(url)!r} cannot be read: "
                           f"{first_line(exc)}") from None
    return storage


# Optuna's tables that ``RDBStorage`` reads when it opens (it writes them where they are empty).
_OPTUNA_TABLES = ("studies", "version_info", "alembic_version")


def _open_read_only(url: str) -> optuna.storages.RDBStorage:
    kwargs = read_only_engine_kwargs(url)
    with session(url), _read_only_connection(url) as conn:
        inspector = sa.inspect(conn)
        missing = [t for t in _OPTUNA_TABLES if not inspector.has_table(t)]
    if missing:
        raise StorageError(f"Storage {_redact(url)!r} holds no Optuna studies (no "
                           f"`{missing[0]}` table); point --storage at a study database.")
    with session(url):
        return _rdb_storage(url, engine_kwargs=kwargs, skip_table_creation=True)


def read_only_engine_kwargs(url: str) -> dict[str, Any]:
    """``create_engine`` keyword arguments whose connections to ``url`` cannot write.

    SQLite: the file is opened read-only (``mode=ro``, ``PRAGMA query_only``), and must exist.
    A write-ahead-logged database that no connection has open (no ``-wal`` file beside it: SQLite
    removes it when the last connection closes) holds everything in its main file and is read
    with ``immutable=1``: a plain read-only connection would have to create ``-wal`` and ``-shm``,
    which it cannot remove afterwards and cannot create at all in a folder it may not write.
    Connections are not pooled, so each read decides afresh and sees a writer that started
    since (a read already under way keeps its snapshot; only that writer's checkpoint into the
    main file, at its close or after 1,000 pages of WAL, could disturb it before it ends).
    PostgreSQL and MySQL: sessions set read-only.
    """
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        return {"creator": _sqlite_reader(_sqlite_file(url)), "poolclass": NullPool}
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if backend == "postgresql":
        kwargs["connect_args"] = {"options": "-c default_transaction_read_only=on"}
    elif backend == "mysql":
        kwargs["connect_args"] = {"init_command": "SET SESSION TRANSACTION READ ONLY"}
    return kwargs


def _sqlite_file(url: str) -> Path:
    database = make_url(url).database
    if not database or database == ":memory:":
        raise StorageError(f"Storage {_redact(url)!r}: an in-memory database holds no studies.")
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise StorageError(f"Storage {_redact(url)!r}: the database file {str(path)!r} does "
                           "not exist.")
    return path


def _idle_wal_database(path: Path) -> bool:
    """A write-ahead-logged SQLite database (header bytes 18 and 19 are 2) with no ``-wal``
    file: no connection has it open, so its main file is the whole database."""
    try:
        with path.open("rb") as f:
            header = f.read(20)
    except OSError:
        return False
    return (header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"
            and not path.with_name(path.name + "-wal").exists())


def _sqlite_reader(path: Path) -> Callable[[], sqlite3.Connection]:
    base = f"file:{urllib.parse.quote(str(path))}?mode=ro"

    def connect() -> sqlite3.Connection:
        uri = f"{base}&immutable=1" if _idle_wal_database(path) else base
        # The busy timeout covers the instant a non-WAL database is locked by a committing
        # writer; check_same_thread: the dashboard's server threads share the engine.
        conn = sqlite3.connect(uri, uri=True, timeout=60, check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
        return conn

    return connect


@contextlib.contextmanager
def _read_only_connection(url: str) -> Iterator[sa.Connection]:
    engine = sa.create_engine(url, **read_only_engine_kwargs(url))
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def read_only_engine(url: str | None = None) -> Engine:
    """A bare SQLAlchemy engine on the study database that cannot write (see
    :func:`read_only_engine_kwargs`), for readers with SQL of their own (the dashboard).

    Raises:
        StorageError: the URL is malformed, the SQLite file is missing, the server cannot be
            reached, or the database holds no Optuna tables.
    """
    url = resolve_storage_url(url)
    with session(url):
        engine = sa.create_engine(url, **read_only_engine_kwargs(url))
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("studies"):
                raise StorageError(f"Storage {_redact(url)!r} holds no Optuna studies (no "
                                   "`studies` table); point --storage at a study database.")
    return engine


@contextlib.contextmanager
def reading(engine: Engine) -> Iterator[sa.Connection]:
    """One consistent snapshot for several queries (one SQLite read transaction, or
    PostgreSQL's repeatable read); driver errors become ``StorageError``."""
    with session(engine.url.render_as_string(hide_password=True)), engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN")  # a read transaction: one WAL snapshot
        elif engine.dialect.name == "postgresql":
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
        yield conn


def study_names(url: str | None = None) -> list[str]:
    """The names of the studies in the database, sorted, read without writing anything.

    A database without Optuna's tables (an empty SQLite file, another program's database)
    holds none. Raises ``StorageError`` where it cannot be read (a missing SQLite file, a file
    that is not a database, a server that cannot be reached).
    """
    url = resolve_storage_url(url)
    with session(url), _read_only_connection(url) as conn:
        return names_in(conn)


def names_in(conn: sa.Connection) -> list[str]:
    """The names of the studies a connection's database holds, sorted (none without Optuna's
    tables)."""
    if not sa.inspect(conn).has_table("studies"):
        return []
    return sorted(conn.execute(sa.text("SELECT study_name FROM studies")).scalars())


def _engine(storage: optuna.storages.RDBStorage) -> Engine:
    return storage.engine


@contextlib.contextmanager
def _optuna_transaction(storage: optuna.storages.RDBStorage) -> Iterator[Any]:
    """One transaction of Optuna's RDB storage: its ORM session, committed at the end; or
    None where this Optuna lacks the private steps used with it (the callers then fall back to
    Optuna's public calls, one commit each).

    Optuna's private API is used here and nowhere else: ``_create_scoped_session`` and the
    storage's ``_set_trial_attr_without_commit``, ``_set_trial_intermediate_value_without_commit``
    and ``_set_trial_param_without_commit``, and ``optuna.study._tell._tell_with_warning`` in
    :func:`tell` (Optuna 5.0; ``tests/test_driver_writes.py`` fails where they go)."""
    try:
        from optuna.storages._rdb.storage import _create_scoped_session
    except ImportError:
        yield None
        return
    if not all(hasattr(storage, step) for step in _OPTUNA_STEPS):
        yield None
        return
    with _create_scoped_session(storage.scoped_session, True) as db:
        yield db


#: The storage's steps that write without committing (see :func:`_optuna_transaction`).
_OPTUNA_STEPS = ("_set_trial_attr_without_commit", "_set_trial_intermediate_value_without_commit",
                 "_set_trial_param_without_commit")


def set_trial_user_attrs(storage: optuna.storages.RDBStorage, trial_id: int,
                         attrs: dict[str, Any]) -> None:
    """Set several user attributes of one unfinished trial in one transaction.

    Optuna's public ``set_trial_user_attr`` commits once per attribute; the engine writes about
    five per trial, so it uses the storage's own per-attribute step inside one transaction
    (:func:`_optuna_transaction`), and the public call where an Optuna version lacks it.
    """
    _set_trial_attrs(storage, trial_id, attrs, system=False)


def set_trial_system_attrs(storage: optuna.storages.RDBStorage, trial_id: int,
                           attrs: dict[str, Any]) -> None:
    """:func:`set_trial_user_attrs` for system attributes (what a sampler records with the
    trial it chose: the default sampler's gain, noise and seconds)."""
    _set_trial_attrs(storage, trial_id, attrs, system=True)


def _set_trial_attrs(storage: optuna.storages.RDBStorage, trial_id: int, attrs: dict[str, Any],
                     *, system: bool) -> None:
    if not attrs:
        return
    with session(storage.url), _optuna_transaction(storage) as db:
        if db is None:
            setter = storage.set_trial_system_attr if system else storage.set_trial_user_attr
            for key, value in attrs.items():
                setter(trial_id, key, value)
            return
        _attrs_without_commit(storage, db, trial_id, attrs, system=system)


def _attrs_without_commit(storage: optuna.storages.RDBStorage, db: Any, trial_id: int,
                          attrs: dict[str, Any] | None, *, system: bool) -> None:
    """Set ``attrs`` of the trial inside the transaction ``db`` (:func:`_optuna_transaction`)."""
    from optuna.storages._rdb import models

    model = models.TrialSystemAttributeModel if system else models.TrialUserAttributeModel
    for key, value in (attrs or {}).items():
        storage._set_trial_attr_without_commit(db, model, trial_id, key, value)


#: One drawn parameter: its name, internal value, distribution, and the distribution the
#: study's earlier trials hold under that name (None: unknown, read from the database).
ParamWrite = tuple[str, float, BaseDistribution, BaseDistribution | None]


def set_trial_params(storage: optuna.storages.RDBStorage, trial_id: int,
                     params: Sequence[ParamWrite], *,
                     system_attrs: dict[str, Any] | None = None) -> None:
    """Write the parameters drawn for one unfinished trial in one transaction, each checked
    against the distribution the study holds under its name as Optuna checks it, and with
    ``system_attrs`` (what its sampler recorded when it chose them) in the same one.

    Optuna's ``set_trial_param`` commits once per parameter (ten a trial in the quickstart
    space); this uses the storage's own step without the commit
    (``_set_trial_param_without_commit``) inside one transaction, and the public call where an
    Optuna version lacks it.
    """
    if not params and not system_attrs:
        return
    with session(storage.url), _optuna_transaction(storage) as db:
        if db is None:
            for name, value, distribution, _ in params:
                storage.set_trial_param(trial_id, name, value, distribution)
            for key, attr in (system_attrs or {}).items():
                storage.set_trial_system_attr(trial_id, key, attr)
            return
        for name, value, distribution, previous in params:
            storage._set_trial_param_without_commit(db, trial_id, name, value, distribution,
                                                    previous)
        _attrs_without_commit(storage, db, trial_id, system_attrs, system=True)


#: One epoch report to write: the trial's number, its Optuna trial id (None: no intermediate
#: value is written with it) and the report (``epoch``, ``train_loss``, ``metric``, ``value``,
#: ``seconds``, ``extra``).
EpochWrite = tuple[int, int | None, Mapping[str, Any]]


def write_epoch(storage: optuna.storages.RDBStorage, study_name: str, trial_number: int,
                report: dict[str, Any], *, trial_id: int | None = None) -> bool:
    """Record one epoch of a trial (idempotent: a re-sent epoch replaces nothing); True when
    the row is new. With ``trial_id``, a new row's ``value``, when a finite number, is also the
    Optuna trial's intermediate value at that step, written in the same transaction."""
    return write_epochs(storage, study_name, [(trial_number, trial_id, report)]) == 1


def write_epochs(storage: optuna.storages.RDBStorage, study_name: str,
                 epochs: Sequence[EpochWrite], *, trial_id: int | None = None,
                 attrs: dict[str, Any] | None = None) -> int:
    """Record several epochs (of any of the study's trials) as :func:`write_epoch` records
    one, and with ``trial_id`` and ``attrs`` user attributes of that unfinished trial, all in one
    transaction; returns how many epoch rows are new. Where this Optuna lacks the private steps,
    each is written as Optuna's public calls write it (one commit each)."""
    rows = [(number, tid, _epoch_row(study_name, number, report), _step(tid, report))
            for number, tid, report in epochs]
    new = 0
    with session(storage.url), _optuna_transaction(storage) as db:
        if db is not None:
            for number, tid, row, step in rows:
                if db.execute(_exists(study_name, number, row["epoch"])).first() is None:
                    new += 1
                    db.execute(epochs_table.insert().values(**row))
                    if step is not None and tid is not None:
                        storage._set_trial_intermediate_value_without_commit(
                            db, tid, row["epoch"], step)
            if trial_id is not None:
                _attrs_without_commit(storage, db, trial_id, attrs, system=False)
            return new
    for number, tid, row, step in rows:
        with session(storage.url), _engine(storage).begin() as conn:
            exists = conn.execute(_exists(study_name, number, row["epoch"])).first()
            if exists is None:
                conn.execute(epochs_table.insert().values(**row))
        if exists is None:
            new += 1
            if step is not None and tid is not None:
                with session(storage.url):
                    storage.set_trial_intermediate_value(tid, row["epoch"], step)
    if attrs and trial_id is not None:
        set_trial_user_attrs(storage, trial_id, attrs)
    return new


def _epoch_row(study_name: str, trial_number: int, report: Mapping[str, Any]
               ) -> dict[str, Any]:
    return {
        "study_name": study_name, "trial_number": trial_number, "epoch": int(report["epoch"]),
        "train_loss": report.get("train_loss"), "metric": report.get("metric"),
        "value": report.get("value"), "seconds": report.get("seconds"),
        "extra": json.dumps(report.get("extra") or {}),
    }


def _step(trial_id: int | None, report: Mapping[str, Any]) -> float | None:
    """The intermediate value to write with a new row: its value, when a finite number."""
    value = report.get("value")
    if (trial_id is not None and isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value)):
        return float(value)
    return None


def _exists(study_name: str, trial_number: int, epoch: int) -> sa.Select[Any]:
    return sa.select(epochs_table.c.id).where(
        epochs_table.c.study_name == study_name, epochs_table.c.trial_number == trial_number,
        epochs_table.c.epoch == epoch)


def tell(study: optuna.Study, trial: optuna.trial.Trial | int, values: Sequence[float] | None,
         state: optuna.trial.TrialState) -> None:
    """``study.tell(trial, values, state=state)`` without the read of the finished trial that
    ``Study.tell`` returns (a trial with its parameters and attributes: six queries on an RDB
    storage, unused here): Optuna's own ``_tell_with_warning``, which ``Study.tell`` calls, where
    this Optuna has it, else ``Study.tell``."""
    try:
        from optuna.study._tell import _tell_with_warning
    except ImportError:
        study.tell(trial, values, state=state)
        return
    _tell_with_warning(study, trial, values, state)
