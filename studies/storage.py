"""Where studies live: Optuna's RDB storage plus one table of our own for per-epoch curves.

Optuna's storage is the source of truth: studies, trials, parameters, objective values and the
architecture / cost / reason of each trial (as trial user attributes). What Optuna lacks is a
per-epoch table with several metrics per epoch; ``nas_epochs`` holds it, beside Optuna's tables
in the same database. ``session()`` is the one place that turns driver errors into ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from nas.errors import NasError

__all__ = [
    "DEFAULT_STORAGE",
    "StorageError",
    "epochs_table",
    "open_storage",
    "read_epochs",
    "resolve_storage_url",
    "session",
    "set_trial_user_attrs",
    "write_epoch",
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
    """The database cannot be reached or read."""


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
    except (SQLAlchemyError, sqlite3.Error, optuna.exceptions.StorageInternalError) as exc:
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = first[0] if first else type(exc).__name__
        raise StorageError(f"Storage {_redact(url)!r} cannot be used: {reason}") from None


def _redact(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


def open_storage(url: str | None = None, *, create: bool = True) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage for ``url`` (resolved as in :func:`resolve_storage_url`).

    With ``create=False`` a missing SQLite file is an error instead of a new empty database.
    """
    url = resolve_storage_url(url)
    parsed = make_url(url)
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        if not create and parsed.database and not Path(parsed.database).exists():
            raise StorageError(f"Storage {url!r}: the database file does not exist.")
        engine_kwargs["connect_args"] = {"timeout": 60}
    else:
        engine_kwargs["pool_pre_ping"] = True
    with session(url):
        if parsed.get_backend_name() == "sqlite":
            _sqlite_wal(url)
        storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
        _metadata.create_all(_engine(storage))
    return storage


def _engine(storage: optuna.storages.RDBStorage) -> Engine:
    return storage.engine


def set_trial_user_attrs(storage: optuna.storages.RDBStorage, trial_id: int,
                         attrs: dict[str, Any]) -> None:
    """Set several user attributes of one unfinished trial in one transaction.

    Optuna's public ``set_trial_user_attr`` commits once per attribute; the engine writes about
    five per trial, so it uses the storage's own per-attribute step inside one session, and
    falls back to the public call where an Optuna version lacks that step.
    """
    if not attrs:
        return
    with session(storage.url):
        setter = getattr(storage, "_set_trial_attr_without_commit", None)
        if setter is None:
            for key, value in attrs.items():
                storage.set_trial_user_attr(trial_id, key, value)
            return
        from optuna.storages._rdb import models
        from optuna.storages._rdb.storage import _create_scoped_session

        with _create_scoped_session(storage.scoped_session, True) as db:
            for key, value in attrs.items():
                setter(db, models.TrialUserAttributeModel, trial_id, key, value)


def write_epoch(storage: optuna.storages.RDBStorage, study_name: str, trial_number: int,
                report: dict[str, Any]) -> None:
    """Record one epoch of a trial (idempotent: a re-sent epoch replaces nothing)."""
    row = {
        "study_name": study_name, "trial_number": trial_number, "epoch": int(report["epoch"]),
        "train_loss": report.get("train_loss"), "metric": report.get("metric"),
        "value": report.get("value"), "seconds": report.get("seconds"),
        "extra": json.dumps(report.get("extra") or {}),
    }
    with session(storage.url), _engine(storage).begin() as conn:
        exists = conn.execute(sa.select(epochs_table.c.id).where(
            epochs_table.c.study_name == study_name,
            epochs_table.c.trial_number == trial_number,
            epochs_table.c.epoch == row["epoch"])).first()
        if exists is None:
            conn.execute(epochs_table.insert().values(**row))


def read_epochs(engine: Engine, study_name: str, trial_number: int | None = None) -> list[
    dict[str, Any]
]:
    """Per-epoch rows of a study (or of one trial), ordered by trial and epoch."""
    query = sa.select(epochs_table).where(epochs_table.c.study_name == study_name)
    if trial_number is not None:
        query = query.where(epochs_table.c.trial_number == trial_number)
    query = query.order_by(epochs_table.c.trial_number, epochs_table.c.epoch)
    with engine.connect() as conn:
        rows = [dict(r._mapping) for r in conn.execute(query)]
    for r in rows:
        r["extra"] = json.loads(r["extra"] or "{}")
        r.pop("id", None)
    return rows
