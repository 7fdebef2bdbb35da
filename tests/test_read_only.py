"""The read-only commands never write: `status`, `pareto`, `export`, `resume` of an unknown
study and the dashboard leave whatever database they are pointed at as it was.

Each command runs on a study database, an empty file, a file that is not a database and a path
that does not exist; the folder holding the database is hashed file by file before and after.
A write-ahead-logged study database that nothing has open is a single file, and stays one (it is
read as ``immutable``); one a writer holds open is read through its ``-wal``, which the reader
leaves as it found it. A folder the reader may not write is tested for real: the commands run in
a subprocess without the capabilities that let root ignore permission bits (``setpriv``), so
the folder's mode 0555 binds them as it binds any other user.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import study_helpers as h
from optuna.trial import TrialState
from postgres_fixture import postgres_url

from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, load_existing
from studies.store import (
    Status,
    StorageError,
    TrialKey,
    UnknownStudyError,
    read_epochs,
    study_names,
)
from studies.store.storage import open_storage, write_epoch

__all__ = ["postgres_url"]  # a fixture, imported for this module's tests

ROOT = Path(__file__).resolve().parents[1]
N_TRIALS = 3


# ----------------------------------------------------------------------------- databases
def _write_study(url: str, name: str = "s") -> None:
    """Study ``name`` with ``N_TRIALS`` completed trials (architecture, status, one epoch each),
    written as the engine writes them; every connection closed afterwards."""
    run = create_study(StudySpec.from_dict(h.study_dict(name)), url, geometry=h.GEOMETRY)
    for i in range(N_TRIALS):
        trial = run.study.ask()
        config, overrides = run.space.suggest(trial)
        for key, value in {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                           TrialKey.TRAIN: {"epochs": 2, "seed": 0, **overrides},
                           TrialKey.STATUS: Status.COMPLETED}.items():
            trial.set_user_attr(key, value)
        write_epoch(run.storage, name, trial.number,
                    {"epoch": 1, "metric": "accuracy", "value": 0.5 + i / 10})
        run.study.tell(trial, [0.5 + i / 10, 1000.0 * (N_TRIALS - i)])
    _close(run.storage)


def _close(storage: optuna.storages.RDBStorage) -> None:
    storage.remove_session()
    storage.engine.dispose()


def _snapshot(folder: Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file of ``folder`` (recursively) and the SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(skip)}


@pytest.fixture(scope="module")
def study_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A study database made once; each test copies it into a folder of its own."""
    path = tmp_path_factory.mktemp("made") / "studies.db"
    _write_study(f"sqlite:///{path}")
    assert sorted(p.name for p in path.parent.iterdir()) == ["studies.db"]  # WAL, idle
    return path


KINDS = ("study", "empty", "garbage", "missing")


@pytest.fixture(params=KINDS)
def database(request: pytest.FixtureRequest, tmp_path: Path, study_file: Path) -> Path:
    """``db/studies.db`` of one kind: a study database, an empty file, random bytes, or a path
    that does not exist (in a folder that does)."""
    folder = tmp_path / "db"
    folder.mkdir()
    path = folder / "studies.db"
    if request.param == "study":
        shutil.copyfile(study_file, path)
    elif request.param == "empty":
        path.touch()
    elif request.param == "garbage":
        path.write_bytes(random.Random(0).randbytes(8192))
    return path


# ----------------------------------------------------------------------------- commands
def _nas(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = nas_main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


COMMANDS = {
    "status": ["status"],
    "status NAME": ["status", "s"],
    "pareto NAME": ["pareto", "s"],
    "export NAME": ["export", "s", "--trial", "0", "--format", "yaml", "--out", "{out}"],
    "resume MISSING": ["resume", "missing"],
}


def _expected_error(command: str, kind: str, url: str) -> str | None:
    """The stderr line expected, or a fragment of it for an unreadable file (None: exit 0)."""
    name = "missing" if command == "resume MISSING" else "s"
    if kind == "missing":
        return "the database file"  # ... does not exist
    if kind == "garbage":
        return "file is not a database"
    if command == "status" or (kind == "study" and name == "s"):
        return None
    there = "s" if kind == "study" else "none"
    return f"nas {COMMANDS[command][0]}: error: no study {name!r} in {url}; studies there: {there}"


@pytest.mark.parametrize("command", list(COMMANDS))
def test_read_only_commands_change_nothing(command: str, database: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    kind, url, out_dir = _kind(database), f"sqlite:///{database}", tmp_path / "out"
    argv = [a.format(out=out_dir) for a in COMMANDS[command]] + ["--storage", url]
    before = _snapshot(database.parent)

    code, out, err = _nas(argv, capsys)

    expected = _expected_error(command, kind, url)
    if expected is None:
        assert code == 0 and err == "", err
        if command == "export NAME":
            assert sorted(p.name for p in out_dir.iterdir()) == ["trial-0.yaml"]
        if command == "status" and kind == "empty":
            assert out == ""  # no studies, and no error
    else:
        line = _one_line(err)
        assert code == 2, err
        assert line == expected if expected.startswith("nas ") else expected in line, line
        if kind == "missing":
            assert line.endswith("does not exist."), line
        assert not out_dir.exists()
    assert _snapshot(database.parent) == before
    assert database.exists() == (kind != "missing")


def _kind(database: Path) -> str:
    if not database.exists():
        return "missing"
    data = database.read_bytes()
    if not data:
        return "empty"
    return "study" if data.startswith(b"SQLite format 3\x00") else "garbage"


def test_the_dashboard_changes_nothing(database: Path) -> None:
    from dashboard.data import list_studies, open_readonly, readonly_optuna_storage, study_info

    url = f"sqlite:///{database}"
    before = _snapshot(database.parent)
    kind = _kind(database)
    if kind == "study":
        engine = open_readonly(url)
        infos, frame = list_studies(engine)
        assert [i.name for i in infos] == ["s"] and int(frame.trials.sum()) == N_TRIALS
        assert study_info(engine, "s").name == "s"
        storage = readonly_optuna_storage(url)
        assert len(optuna.load_study(study_name="s", storage=storage).trials) == N_TRIALS
        engine.dispose()
        _close(storage)
    else:
        fragment = {"empty": "no Optuna studies", "garbage": "not a database",
                    "missing": "does not exist"}[kind]
        with pytest.raises(StorageError, match=fragment):
            open_readonly(url)
        with pytest.raises(StorageError, match=fragment):
            readonly_optuna_storage(url)
    assert _snapshot(database.parent) == before


def test_a_database_without_our_tables(tmp_path: Path) -> None:
    """Optuna's tables without ``nas_epochs`` (a study of plain Optuna): no epochs, nothing
    created; an empty file holds no studies and cannot be opened as a storage."""
    path = tmp_path / "plain.db"
    plain = optuna.storages.RDBStorage(f"sqlite:///{path}")
    optuna.create_study(study_name="plain", storage=plain)
    _close(plain)
    before = _snapshot(tmp_path)
    storage = open_storage(f"sqlite:///{path}", read_only=True)
    assert read_epochs(storage.engine, "plain") == []
    assert study_names(f"sqlite:///{path}") == ["plain"]
    _close(storage)
    empty = tmp_path / "empty.db"
    empty.touch()
    assert study_names(f"sqlite:///{empty}") == []
    with pytest.raises(StorageError, match="no Optuna studies"):
        open_storage(f"sqlite:///{empty}", read_only=True)
    assert _snapshot(tmp_path) == {**before, "empty.db": hashlib.sha256(b"").hexdigest()}
    with sa.create_engine(f"sqlite:///{path}").connect() as conn:
        assert not sa.inspect(conn).has_table("nas_epochs")


@pytest.mark.parametrize("revision", ["v3.0.0.d", "v99.9.9"])
def test_a_database_of_another_optuna_schema_is_refused_in_one_line(
        tmp_path: Path, study_file: Path, revision: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The schema check runs on every open, read-only or not, though the installed Optuna's
    newest revision is read once per process: an older schema asks for Optuna's upgrade
    command, an unknown one for a newer Optuna, in one line, and nothing is written."""
    path = tmp_path / "studies.db"
    shutil.copyfile(study_file, path)
    open_storage(f"sqlite:///{path}", read_only=True)  # the newest revision, read and kept
    h.edit_sqlite(path, [("UPDATE alembic_version SET version_num = ?", (revision,))])
    before = _snapshot(tmp_path)
    hint = "optuna storage upgrade" if revision == "v3.0.0.d" else "pip install -U optuna"
    with pytest.raises(StorageError, match="cannot be read") as refused:
        open_storage(f"sqlite:///{path}", read_only=True)
    assert hint in str(refused.value)
    for argv in (["status", "s", "--storage", f"sqlite:///{path}"],
                 ["pareto", "s", "--storage", f"sqlite:///{path}"]):
        try:
            code = nas_main(argv)
        except SystemExit as exc:
            code = int(exc.code or 0)
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1 and hint in err, (argv, err)
    assert _snapshot(tmp_path) == before
    with pytest.raises(StorageError, match="no longer compatible"):
        open_storage(f"sqlite:///{path}")  # the writable open (`nas run`): one line too


def test_a_read_only_storage_refuses_writes(tmp_path: Path, study_file: Path) -> None:
    path = tmp_path / "studies.db"
    shutil.copyfile(study_file, path)
    run = load_existing("s", f"sqlite:///{path}")
    with pytest.raises(optuna.exceptions.StorageInternalError) as refused:
        run.study.set_user_attr("x", 1)
    assert "readonly database" in str(refused.value.__cause__)
    _close(run.storage)
    assert _snapshot(tmp_path) == _snapshot(study_file.parent)


def test_reads_a_database_a_writer_has_open(tmp_path: Path, study_file: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """With a writer connected, the WAL holds its latest trial: the readers see it, and leave
    the database and the WAL as they were (the ``-shm`` index is shared memory that every
    connection updates, readers included)."""
    path = tmp_path / "studies.db"
    shutil.copyfile(study_file, path)
    url = f"sqlite:///{path}"
    writer = open_storage(url)
    study = optuna.load_study(study_name="s", storage=writer)
    study.tell(study.ask(), state=TrialState.FAIL)  # a commit that stays in the WAL
    assert {p.name for p in tmp_path.iterdir()} == {"studies.db", "studies.db-wal",
                                                    "studies.db-shm"}
    try:
        before = _snapshot(tmp_path, skip=("-shm",))
        code, out, _ = _nas(["status", "s", "--storage", url, "--json"], capsys)
        assert code == 0 and json.loads(out)["states"] == {"complete": N_TRIALS, "fail": 1}
        code, out, _ = _nas(["pareto", "s", "--storage", url, "--json"], capsys)
        assert code == 0 and len(json.loads(out)) >= 1
        assert _snapshot(tmp_path, skip=("-shm",)) == before
        assert {p.name for p in tmp_path.iterdir()} == {"studies.db", "studies.db-wal",
                                                        "studies.db-shm"}
    finally:
        _close(writer)
    assert [p.name for p in tmp_path.iterdir()] == ["studies.db"]  # the writer cleaned up


# ----------------------------------------------------------------------------- a read-only folder
_NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


def _unprivileged() -> list[str]:
    """The prefix that runs a command bound by permission bits: none for a user other than
    root; for root, ``setpriv`` dropping the capabilities that bypass them."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: root ignores a folder's mode 0555")
    return _NO_DAC


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "NAS_STORAGE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    return subprocess.run([*_unprivileged(), *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.fixture()
def read_only_folder(tmp_path: Path, study_file: Path) -> Iterator[Path]:
    """``ro/studies.db``: the study database in a folder of mode 0555, which the commands run
    by :func:`_run` cannot write (checked)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    shutil.copyfile(study_file, folder / "studies.db")
    (folder / "studies.db").chmod(0o444)
    folder.chmod(0o555)
    try:
        probe = _run([sys.executable, "-c", f"open({str(folder / 'probe')!r}, 'w')"], tmp_path)
        if probe.returncode == 0:
            pytest.skip("cannot make this process see a read-only folder")
        assert "Permission denied" in probe.stderr, probe.stderr
        yield folder
    finally:
        folder.chmod(0o755)


_DASHBOARD = """
import sys
from dashboard import create_app
from dashboard.data import list_studies, load_study, open_readonly, study_info
from studies.export import trial_record
from dashboard.data import readonly_optuna_storage
url = sys.argv[1]
create_app(url)
engine = open_readonly(url)
info = study_info(engine, "s")
print(len(list_studies(engine)[0]), len(load_study(engine, info).trials),
      trial_record("s", 0, readonly_optuna_storage(url)).number)
"""


def test_status_pareto_and_the_dashboard_in_a_read_only_folder(read_only_folder: Path,
                                                               tmp_path: Path) -> None:
    url = f"sqlite:///{read_only_folder / 'studies.db'}"
    before = _snapshot(read_only_folder)
    nas = [sys.executable, "-m", "nas_cli.main"]
    done = _run([*nas, "status", "--storage", url], tmp_path)
    assert done.returncode == 0 and done.stdout.split()[:3] == ["s", "digits", str(N_TRIALS)], (
        done.stderr)
    done = _run([*nas, "status", "s", "--storage", url, "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["states"] == {"complete": N_TRIALS}
    done = _run([*nas, "pareto", "s", "--storage", url, "--json"], tmp_path)
    assert done.returncode == 0 and len(json.loads(done.stdout)) >= 1, done.stderr
    done = _run([*nas, "export", "s", "--trial", "1", "--format", "yaml", "--out",
                 str(tmp_path / "out"), "--storage", url], tmp_path)
    assert done.returncode == 0 and (tmp_path / "out" / "trial-1.yaml").is_file(), done.stderr
    done = _run([*nas, "resume", "missing", "--storage", url], tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == (
        f"nas resume: error: no study 'missing' in {url}; studies there: s")
    done = _run([sys.executable, "-c", _DASHBOARD, url], tmp_path)
    assert done.returncode == 0 and done.stdout.split() == ["1", str(N_TRIALS), "0"], (
        done.stderr)
    assert _snapshot(read_only_folder) == before


# ----------------------------------------------------------------------------- PostgreSQL
@pytest.fixture()
def fresh_postgres(postgres_url: str) -> Iterator[str]:
    """A new empty database on the test server (with a password in its URL, which the server's
    trust authentication ignores and every message must hide)."""
    name = f"ro_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(sa.make_url(postgres_url).set(database="postgres"),
                             isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield (sa.make_url(postgres_url).set(database=name, password="s3cret")
               .render_as_string(hide_password=False))
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.dispose()


def _tables(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return sorted(sa.inspect(conn).get_table_names())
    finally:
        engine.dispose()


def test_postgresql_empty_database_gets_no_tables(fresh_postgres: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from dashboard.data import open_readonly, readonly_optuna_storage

    url = fresh_postgres
    shown = sa.make_url(url).render_as_string(hide_password=True)
    assert "s3cret" not in shown
    code, out, err = _nas(["status", "--storage", url], capsys)
    assert code == 0 and out == "" and err == ""
    for command, argv in COMMANDS.items():
        if command == "status":
            continue
        argv = [a.format(out=tmp_path / "out") for a in argv]
        code, _, err = _nas([*argv, "--storage", url], capsys)
        assert code == 2 and _one_line(err) == (
            f"nas {argv[0]}: error: no study {argv[1]!r} in {shown}; studies there: none")
    with pytest.raises(UnknownStudyError):
        load_existing("s", url, write=True)
    with pytest.raises(StorageError, match="no Optuna studies"):
        open_readonly(url)
    with pytest.raises(StorageError, match="no Optuna studies"):
        readonly_optuna_storage(url)
    assert _tables(url) == []
    assert not (tmp_path / "out").exists()


def test_postgresql_study_database_is_only_read(fresh_postgres: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    url = fresh_postgres
    _write_study(url)
    tables = _tables(url)
    assert "nas_epochs" in tables and "nas_leases" not in tables
    for argv in (["status"], ["status", "s"], ["pareto", "s"],
                 ["export", "s", "--trial", "0", "--format", "yaml", "--out",
                  str(tmp_path / "out")]):
        code, _, err = _nas([*argv, "--storage", url], capsys)
        assert code == 0 and err == "", err
    code, _, err = _nas(["resume", "missing", "--storage", url], capsys)
    assert code == 2 and "studies there: s" in _one_line(err)
    run = load_existing("s", url)
    assert len(read_epochs(run.storage.engine, "s")) == N_TRIALS
    with pytest.raises(optuna.exceptions.StorageInternalError) as refused:
        run.study.set_user_attr("x", 1)
    assert "read-only transaction" in str(refused.value.__cause__)
    _close(run.storage)
    assert _tables(url) == tables
