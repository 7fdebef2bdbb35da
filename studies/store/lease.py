"""One owner per study: a lease row in ``nas_leases``, beside Optuna's tables.

A study may be run (``nas run`` / ``nas resume``) by one process at a time. The owner holds a row
keyed by the study's name, renews its heartbeat from a daemon thread, and deletes the row when it
ends. A second process finds the row and is refused with one line naming the owner, unless the
owner is gone: on this host, a pid that is dead or was reused (its ``/proc`` start time differs)
is taken over at once, so a SIGKILLed run does not block its resume; on another host, where a pid
cannot be checked, a heartbeat older than ``stale_after`` seconds is.

Every write is one statement that the database arbitrates: a new lease is an INSERT that the
primary key lets only one process win, a takeover an UPDATE conditioned on the stale holder's
token, a renewal and a release are conditioned on our own token. Times are stored in UTC.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from nas.errors import NasError
from studies.store.storage import retrying, session
from studies.store.stored import StoredValueError

__all__ = [
    "Lease",
    "Owner",
    "StudyOwned",
    "acquire",
    "is_stale",
    "leases_table",
    "read_owner",
]

_metadata = sa.MetaData()
leases_table = sa.Table(
    "nas_leases", _metadata,
    sa.Column("study_name", sa.String(512), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("process_start", sa.String(64), nullable=False),
    sa.Column("started", sa.DateTime(timezone=True), nullable=False),
    sa.Column("heartbeat", sa.DateTime(timezone=True), nullable=False),
    sa.Column("token", sa.String(64), nullable=False),
)

# An INSERT lost to a release, or a takeover lost to another process, is retried this often
# before the caller is told the study is owned.
_ATTEMPTS = 5
# How long stop_heartbeat() waits for a renewal in flight (the thread is a daemon regardless).
_JOIN_TIMEOUT = 5.0


class StudyOwned(NasError):
    """Another live process owns the study."""

    #: The lease row that refused us (None where it vanished in between).
    owner: Owner | None = None


@dataclass(frozen=True)
class Owner:
    """The process holding a study's lease, as recorded in its row."""

    study_name: str
    host: str
    pid: int
    started: datetime
    heartbeat: datetime
    token: str
    process_start: str

    def __post_init__(self) -> None:
        for name in ("started", "heartbeat"):
            value = getattr(self, name)
            if value.tzinfo is None:
                raise ValueError(f"`Owner.{name}` must be timezone-aware, but got {value!r}.")

    def describe(self, now: datetime | None = None) -> str:
        """One phrase: ``pid 4242 on host-a since 2026-11-24 10:51:02 UTC, last heartbeat 3 s
        ago``."""
        return (f"pid {self.pid} on {self.host} since {_format_time(self.started)}, "
                f"last heartbeat {_format_age(self.heartbeat, now)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (ISO 8601 times), as ``nas status --json`` prints them."""
        row = dataclasses.asdict(self)
        row["started"] = self.started.isoformat()
        row["heartbeat"] = self.heartbeat.isoformat()
        return row


def read_owner(engine: Engine, study_name: str) -> Owner | None:
    """The study's current lease, or None.

    Read-only: a database without the ``nas_leases`` table (one no run has used yet, or one
    opened by the dashboard) answers None and is left as it is.
    """
    with session(str(engine.url)), engine.connect() as conn:
        if not sa.inspect(conn).has_table(leases_table.name):
            return None
        return _select(conn, study_name)


def is_stale(owner: Owner, *, stale_after: float, now: datetime | None = None) -> bool:
    """Whether the owner is gone and its lease may be taken over.

    On this host: its pid is not alive, or belongs to another process than the one that took
    the lease (``/proc`` start time differs). On another host: its heartbeat is older than
    ``stale_after`` seconds.
    """
    _check_stale_after(stale_after)
    if owner.host == socket.gethostname():
        if not _pid_alive(owner.pid):
            return True
        return bool(owner.process_start) and _process_start(owner.pid) != owner.process_start
    return _age(owner.heartbeat, now) > stale_after


class Lease:
    """A held lease on one study.

    As a context manager it starts the heartbeat on entry (every ``min(10, stale_after / 4)``
    seconds) and stops it and releases the lease on exit. ``lost`` turns True when a renewal
    finds the row taken over by another process; ``last_error`` is the error of the latest
    renewal by the heartbeat thread (None after a successful one).
    """

    def __init__(self, engine: Engine, owner: Owner, *, stale_after: float = 60.0,
                 took_over: Owner | None = None) -> None:
        self.engine = engine
        self.owner = owner
        self.stale_after = stale_after
        self.took_over = took_over
        self.lost = False
        self.last_error: Exception | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def renew(self) -> None:
        """Move our heartbeat forward; set ``lost`` if another process took the lease over."""
        if self.lost:
            return
        now = _utcnow()
        with session(str(self.engine.url)), self.engine.begin() as conn:
            updated = conn.execute(leases_table.update().where(
                leases_table.c.study_name == self.owner.study_name,
                leases_table.c.token == self.owner.token).values(heartbeat=now)).rowcount
        if updated:
            self.owner = dataclasses.replace(self.owner, heartbeat=now)
        else:
            self.lost = True

    def release(self) -> None:
        """Stop the heartbeat and delete our row (a missing or taken-over row is left alone)."""
        self.stop_heartbeat()

        def delete() -> None:
            with self.engine.begin() as conn:
                conn.execute(leases_table.delete().where(
                    leases_table.c.study_name == self.owner.study_name,
                    leases_table.c.token == self.owner.token))

        retrying(str(self.engine.url), delete)

    def start_heartbeat(self, interval: float = 10.0) -> None:
        """Renew from a daemon thread every ``interval`` seconds until stopped or lost."""
        if not interval > 0:
            raise ValueError(f"`interval > 0` must hold, but got {interval=}.")
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError(f"The heartbeat of study {self.owner.study_name!r} is running.")
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._beat, args=(interval,), daemon=True,
            name=f"nas-lease-{self.owner.study_name}")
        self._thread.start()

    def stop_heartbeat(self) -> None:
        """Stop the heartbeat thread (returns at once unless a renewal is in flight)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_TIMEOUT)

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval) and not self.lost:
            try:
                self.renew()
            except Exception as exc:  # a database hiccup must not end the run
                self.last_error = exc
            else:
                self.last_error = None

    def __enter__(self) -> Lease:
        self.start_heartbeat(min(10.0, self.stale_after / 4))
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.release()
            return
        # Do not mask the error that ends the run; an unreleased lease is taken over later.
        with contextlib.suppress(NasError):
            self.release()


def acquire(engine: Engine, study_name: str, *, stale_after: float = 60.0) -> Lease:
    """Take the study's lease, or raise :class:`StudyOwned` naming its live owner.

    Creates ``nas_leases`` where it is missing. A stale owner (see :func:`is_stale`) is replaced
    atomically and reported as ``Lease.took_over``; of several processes acquiring a free study,
    or taking over the same stale one, exactly one wins.
    """
    _check_stale_after(stale_after)
    url = str(engine.url)
    with session(url):
        _create_table(engine)
        current: Owner | None = None
        for _attempt in range(_ATTEMPTS):
            mine = _new_owner(study_name)
            try:
                with engine.begin() as conn:
                    conn.execute(leases_table.insert().values(**_row(mine)))
                return Lease(engine, mine, stale_after=stale_after)
            except IntegrityError:
                pass  # the study has a lease: see whose
            with engine.connect() as conn:
                current = _select(conn, study_name)
            if current is None:
                continue  # released in between: insert again
            if not is_stale(current, stale_after=stale_after):
                break
            with engine.begin() as conn:
                replaced = conn.execute(leases_table.update().where(
                    leases_table.c.study_name == study_name,
                    leases_table.c.token == current.token).values(**_row(mine))).rowcount
            if replaced:
                return Lease(engine, mine, stale_after=stale_after, took_over=current)
            # Another process took it over first, or it was renewed or released: look again.
    raise _owned(study_name, current, stale_after)


def _owned(study_name: str, owner: Owner | None, stale_after: float) -> StudyOwned:
    if owner is None:  # only after _ATTEMPTS rounds of rows appearing and vanishing
        error = StudyOwned(f"Study {study_name!r} is being taken by other processes; "
                           "try again.")
    else:
        if owner.host == socket.gethostname():
            rule = "its lease is taken over as soon as that process exits"
        else:
            rule = f"a lease whose heartbeat is older than {stale_after:g} s is taken over"
        error = StudyOwned(
            f"Study {study_name!r} is being run by pid {owner.pid} on {owner.host} since "
            f"{_format_time(owner.started)} (last heartbeat {_format_age(owner.heartbeat)}); "
            f"wait for it to end, or stop that process ({rule}).")
    error.owner = owner
    return error


# ----------------------------------------------------------------------------- rows
def _create_table(engine: Engine) -> None:
    try:
        _metadata.create_all(engine, checkfirst=True)
    except SQLAlchemyError:
        # Two processes may both find the table missing and create it; one of them fails.
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table(leases_table.name):
                raise


#: The largest pid Linux gives (``/proc/sys/kernel/pid_max`` is at most 2**22).
_PID_MAX = 2**22


def _select(conn: sa.Connection, study_name: str) -> Owner | None:
    """The study's lease row as an ``Owner``; a row no nas process wrote (another tool's, or
    edited by hand) is a ``StoredValueError`` naming the column, never a traceback."""
    try:
        row = conn.execute(sa.select(leases_table).where(
            leases_table.c.study_name == study_name)).first()
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a time that is not a time
        raise _unreadable(study_name, "started/heartbeat", f"cannot be read ({exc})") from None
    if row is None:
        return None
    values = dict(row._mapping)
    for column in ("host", "process_start", "token"):
        if not isinstance(values[column], str) or len(values[column]) > 255:
            raise _unreadable(study_name, column, "must be a string of at most 255 characters")
    pid = values["pid"]
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= _PID_MAX:
        raise _unreadable(study_name, "pid", f"must be a process id in 1..{_PID_MAX}")
    for column in ("started", "heartbeat"):
        if not isinstance(values[column], datetime):
            raise _unreadable(study_name, column, "must be a time")
        try:
            values[column] = _as_utc(values[column])
        except (ValueError, OverflowError) as exc:
            raise _unreadable(study_name, column, f"cannot be read ({exc})") from None
    return Owner(**values)


def _unreadable(study_name: str, column: str, problem: str) -> StoredValueError:
    return StoredValueError(study_name, f"nas_leases.{column}",
                            f"{problem}; no nas process wrote this lease row (if no run of the "
                            "study is alive, delete the row)")


def _row(owner: Owner) -> dict[str, Any]:
    return dataclasses.asdict(owner)


def _new_owner(study_name: str) -> Owner:
    now = _utcnow()
    pid = os.getpid()
    return Owner(study_name=study_name, host=socket.gethostname(), pid=pid, started=now,
                 heartbeat=now, token=uuid.uuid4().hex, process_start=_process_start(pid))


# ----------------------------------------------------------------------------- processes
def _proc_stat(pid: int) -> list[str] | None:
    """Fields 3 onwards of ``/proc/<pid>/stat`` (after the command name), or None."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces and parentheses.
    return text[text.rfind(")") + 1:].split()


def _process_start(pid: int) -> str:
    """The process's start time in clock ticks since boot (field 22), or "" without /proc."""
    fields = _proc_stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else ""


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, under another user
    fields = _proc_stat(pid)
    return not (fields and fields[0] == "Z")  # a zombie has exited, unreaped by its parent


# ----------------------------------------------------------------------------- times
def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _as_utc(value: datetime) -> datetime:
    # SQLite keeps no time zone: what we wrote was UTC.
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(
        timezone.utc)


def _age(then: datetime, now: datetime | None = None) -> float:
    return ((now or _utcnow()) - then).total_seconds()


def _format_time(value: datetime) -> str:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _format_age(then: datetime, now: datetime | None = None) -> str:
    seconds = max(0, round(_age(then, now)))  # clocks of two hosts may disagree a little
    if seconds < 120:
        return f"{seconds} s ago"
    if seconds < 2 * 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


def _check_stale_after(stale_after: float) -> None:
    if not stale_after > 0:
        raise ValueError(f"`stale_after > 0` must hold, but got {stale_after=}.")
