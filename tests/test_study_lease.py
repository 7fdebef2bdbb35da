"""One owner per study: the lease in ``nas_leases``, on SQLite and on PostgreSQL."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa
from postgres_fixture import postgres_url
from sqlalchemy.engine import Engine, make_url

from studies.store import Lease, Owner, StudyOwned, is_stale
from studies.store.lease import acquire, leases_table, read_owner
from studies.store.storage import open_storage

__all__ = ["postgres_url"]  # a fixture, imported for this module's tests

STUDY = "quickstart"
HOST = socket.gethostname()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a file on SQLite, a new database on the PostgreSQL server."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'leases.db'}"
        return
    server = make_url(request.getfixturevalue("postgres_url"))
    name = f"lease_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        yield server.set(database=name).render_as_string(hide_password=False)
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    """The engine of an Optuna storage on ``url``, as ``nas run`` passes it."""
    storage = open_storage(url)
    yield storage.engine
    storage.engine.dispose()


def write_row(engine: Engine, *, host: str = HOST, pid: int = 1, process_start: str = "",
              age: float = 0.0, token: str = "theirs") -> Owner:
    """Put another holder's lease row in place, as a process elsewhere would have."""
    leases_table.metadata.create_all(engine)
    beat = datetime.now(timezone.utc) - timedelta(seconds=age)
    row = {"study_name": STUDY, "host": host, "pid": pid, "process_start": process_start,
           "started": beat - timedelta(seconds=5), "heartbeat": beat, "token": token}
    with engine.begin() as conn:
        conn.execute(leases_table.delete().where(leases_table.c.study_name == STUDY))
        conn.execute(leases_table.insert().values(**row))
    owner = read_owner(engine, STUDY)
    assert owner is not None
    return owner


def dead_pid() -> int:
    """The pid of a process of this host that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_free_study_is_acquired_and_released(engine: Engine) -> None:
    lease = acquire(engine, STUDY)
    owner = read_owner(engine, STUDY)
    assert owner == lease.owner and lease.took_over is None and not lease.lost
    assert (owner.host, owner.pid, owner.study_name) == (HOST, os.getpid(), STUDY)
    assert owner.started.tzinfo is not None and owner.started == owner.heartbeat
    assert abs((datetime.now(timezone.utc) - owner.heartbeat).total_seconds()) < 5
    if Path("/proc/self/stat").exists():
        assert owner.process_start.isdigit()
    assert f"pid {os.getpid()} on {HOST} since " in owner.describe()
    shown = json.loads(json.dumps(owner.to_dict()))
    assert datetime.fromisoformat(shown["heartbeat"]) == owner.heartbeat
    assert shown["token"] == lease.owner.token

    lease.release()
    assert read_owner(engine, STUDY) is None
    lease.release()  # idempotent
    assert acquire(engine, STUDY).owner.token != lease.owner.token  # free again


def test_a_live_lease_refuses_a_second_run(engine: Engine) -> None:
    lease = acquire(engine, STUDY)
    before = read_owner(engine, STUDY)
    with pytest.raises(StudyOwned) as refused:
        acquire(engine, STUDY)
    message = str(refused.value)
    assert "\n" not in message and f"Study {STUDY!r} is being run by" in message
    assert f"pid {os.getpid()} on {HOST}" in message and "last heartbeat" in message
    assert refused.value.owner == before
    assert read_owner(engine, STUDY) == before  # nothing written
    assert acquire(engine, "another-study").owner.study_name == "another-study"
    lease.release()


def test_a_dead_owner_on_this_host_is_taken_over_at_once(engine: Engine) -> None:
    gone = write_row(engine, pid=dead_pid(), age=0.0)  # a fresh heartbeat: SIGKILLed just now
    assert is_stale(gone, stale_after=3600)
    lease = acquire(engine, STUDY, stale_after=3600)
    assert lease.took_over == gone
    assert read_owner(engine, STUDY) == lease.owner and lease.owner.pid == os.getpid()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_reused_pid_on_this_host_is_taken_over(engine: Engine) -> None:
    # Our own pid is alive, but it was not this process that took the lease.
    reused = write_row(engine, pid=os.getpid(), process_start="1")
    lease = acquire(engine, STUDY)
    assert lease.took_over == reused


def test_an_owner_on_another_host_is_judged_by_its_heartbeat(engine: Engine) -> None:
    live = write_row(engine, host="elsewhere", pid=4242, age=5.0)
    assert not is_stale(live, stale_after=60)
    with pytest.raises(StudyOwned, match=r"pid 4242 on elsewhere .*older than 60 s") as refused:
        acquire(engine, STUDY, stale_after=60)
    assert "\n" not in str(refused.value)
    assert read_owner(engine, STUDY) == live

    old = write_row(engine, host="elsewhere", pid=4242, age=120.0)
    lease = acquire(engine, STUDY, stale_after=60)
    assert lease.took_over == old and read_owner(engine, STUDY) == lease.owner


def test_renew_moves_the_heartbeat_and_notices_a_takeover(engine: Engine) -> None:
    lease = acquire(engine, STUDY)
    first = lease.owner.heartbeat
    time.sleep(0.01)
    lease.renew()
    renewed = read_owner(engine, STUDY)
    assert renewed is not None and renewed.heartbeat > first and not lease.lost
    assert renewed == lease.owner

    with engine.begin() as conn:  # another process took the lease over
        conn.execute(leases_table.update().values(token="theirs"))
    lease.renew()
    assert lease.lost
    after = read_owner(engine, STUDY)
    assert after is not None and after.token == "theirs" and after.heartbeat == renewed.heartbeat
    lease.release()  # leaves the new owner's row alone
    assert read_owner(engine, STUDY) == after


def test_the_heartbeat_thread_renews_until_stopped(engine: Engine) -> None:
    lease = acquire(engine, STUDY)
    first = lease.owner.heartbeat
    lease.start_heartbeat(interval=0.05)
    deadline = time.monotonic() + 5
    while (owner := read_owner(engine, STUDY)) is not None and owner.heartbeat == first:
        assert time.monotonic() < deadline, "the heartbeat never renewed"
        time.sleep(0.02)
    started = time.monotonic()
    lease.stop_heartbeat()
    assert time.monotonic() - started < 1
    assert not [t for t in threading.enumerate() if t.name == f"nas-lease-{STUDY}"]
    stopped = read_owner(engine, STUDY)
    time.sleep(0.2)
    assert read_owner(engine, STUDY) == stopped and lease.last_error is None
    lease.release()


def test_the_context_manager_beats_and_releases(engine: Engine) -> None:
    with acquire(engine, STUDY) as lease:
        assert isinstance(lease, Lease) and read_owner(engine, STUDY) == lease.owner
        assert [t for t in threading.enumerate() if t.name == f"nas-lease-{STUDY}"]
    assert read_owner(engine, STUDY) is None
    assert not [t for t in threading.enumerate() if t.name == f"nas-lease-{STUDY}"]


def test_read_owner_never_creates_the_table(url: str) -> None:
    storage = open_storage(url)  # Optuna's tables and ours, but no lease yet
    try:
        assert read_owner(storage.engine, STUDY) is None
        assert not sa.inspect(storage.engine).has_table("nas_leases")
    finally:
        storage.engine.dispose()


def test_two_runs_racing_for_a_free_study(engine: Engine) -> None:
    barrier = threading.Barrier(2)
    leases: list[Lease] = []
    refusals: list[StudyOwned] = []

    def run() -> None:
        barrier.wait()
        try:
            leases.append(acquire(engine, STUDY))
        except StudyOwned as exc:
            refusals.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(leases) == 1 and len(refusals) == 1, (leases, refusals)
    assert read_owner(engine, STUDY) == leases[0].owner
