"""A throwaway PostgreSQL server on loopback, for the tests that store studies in PostgreSQL.

``postgres_url`` (a session fixture; import it into a test module) finds ``initdb`` and
``pg_ctl`` (Debian's ``/usr/lib/postgresql/*/bin``, else ``PATH``), creates a cluster in a
fresh temporary folder (as the ``postgres`` system user when running as root: ``initdb``
refuses root), starts it on a free port with ``listen_addresses=127.0.0.1`` and its Unix socket
in that folder, creates the database ``nas`` and yields
``postgresql+psycopg://postgres@127.0.0.1:PORT/nas``; the server is stopped and the folder
removed afterwards. Without PostgreSQL installed, the tests using it are skipped with the reason
(``.ci/system-deps.sh`` installs it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port

__all__ = ["find_postgres_bin", "postgres_server", "postgres_url"]

_MISSING = ("PostgreSQL is not installed (no initdb/pg_ctl under /usr/lib/postgresql/*/bin or "
            "on PATH); .ci/system-deps.sh installs it (apt-get install postgresql)")


def find_postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` of the newest PostgreSQL installed."""
    def version(folder: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", folder)) or (0,)

    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if all(os.access(Path(folder) / tool, os.X_OK) for tool in ("initdb", "pg_ctl")):
            return Path(folder)
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl and Path(initdb).parent == Path(pg_ctl).parent:
        return Path(initdb).parent
    return None





@contextlib.contextmanager
def postgres_server(database: str = "nas") -> Iterator[str]:
    """Start a PostgreSQL server on loopback; yield the SQLAlchemy URL of ``database``."""
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip(_MISSING)
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root, and there is no `postgres` system user to run "
                        "initdb as (initdb refuses root)")
        user = "postgres"
    # Not under pytest's tmp_path: its parents are root-only, and the server runs as postgres.
    root = Path(tempfile.mkdtemp(prefix="nas-pg-"))
    data, log = root / "data", root / "server.log"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(root, entry.pw_uid, entry.pw_gid)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(args), cwd=root, user=user, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "LC_ALL": "C"})

    started = False
    try:
        done = run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
                   "-E", "UTF8", "--locale=C", "--no-sync")
        if done.returncode != 0:
            pytest.fail(f"initdb failed: {done.stderr.strip()[-500:]}")
        for _attempt in range(3):  # another process may take the free port in between
            port = free_port()
            options = (f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
                       "-c full_page_writes=off -c synchronous_commit=off")
            done = run(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-o", options,
                       "-w", "-t", "60", "start")
            if done.returncode == 0:
                started = True
                break
        if not started:
            tail = log.read_text()[-500:] if log.exists() else done.stderr
            pytest.fail(f"pg_ctl start failed: {tail.strip()}")
        _create_database(port, database)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/{database}"
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _create_database(port: int, database: str) -> None:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{database}"')


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a database ``nas`` on a PostgreSQL server this test session started."""
    with postgres_server() as url:
        yield url
