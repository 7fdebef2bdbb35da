"""Faults that end cleanly and recover by themselves where they can (issue 22, item 3).

A database error while a trial's parameters are drawn is handled like any other database fault;
a dropped connection is retried with backoff for a bounded time; whatever is left RUNNING is
closed by the end of the run or by the next `nas resume`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
import sqlalchemy.exc as sa_exc
import study_helpers as h
from optuna.trial import TrialState
from postgres_fixture import find_postgres_bin, postgres_server
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

import studies.store.storage as storage
from nas_cli.main import main as nas_main
from studies import counted_trials
from studies.store import StorageError
from studies.store.lease import read_owner
from studies.store.storage import open_storage, retrying

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(600)]
ray_local = h.ray_local

def _fail_param_write(monkeypatch: pytest.MonkeyPatch, make: Callable[[], Exception], *,
                      at: int, times: int = 1) -> dict[str, int]:
    """Make the driver fail inside Optuna's write of a drawn parameter (from the ``at``-th
    write, ``times`` times in a row); Optuna turns it into its ``StorageInternalError``."""
    real = optuna.storages.RDBStorage._set_trial_param_without_commit
    calls = {"n": 0, "failed": 0}

    def write(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] >= at and calls["failed"] < times:
            calls["failed"] += 1
            raise make()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(optuna.storages.RDBStorage, "_set_trial_param_without_commit", write)
    return calls


def _running(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return [t for t in h.load(url, name) if t.state == TrialState.RUNNING]


def test_a_database_error_while_drawing_parameters_stops_the_run_cleanly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sampler's write fails (not a lost connection): the run stops with one line naming
    the driver's error, the trial being drawn is closed (not RUNNING, not counted), the lease is
    released, and `nas resume` finishes the study."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = h.write_study(tmp_path / "draw.yaml", "draw", budget={"trials": 4},
                         evaluator="study_helpers:instant")
    calls = _fail_param_write(
        monkeypatch, lambda: sa_exc.DatabaseError("INSERT", {}, Exception("value too long")),
        at=4)
    assert nas_main(["run", str(path), "--storage", url]) == 1
    assert calls["failed"] == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "value too long" in err[-1] and "nas resume draw" in err[-1], err
    assert "invalid data in the commit" not in err[-1]
    assert "Its running trials were closed as interrupted" in err[-1]
    assert not any("Traceback" in line for line in err)
    trials = h.load(url, "draw")
    assert not _running(url, "draw")
    drawn = [t for t in trials if "drawn" in str(t.user_attrs.get("nas.reason"))]
    assert len(drawn) == 1 and drawn[0].user_attrs["nas.status"] == "interrupted"
    assert read_owner(open_storage(url).engine, "draw") is None
    monkeypatch.undo()
    h.start_ray()
    assert nas_main(["resume", "draw", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 0
    assert counted_trials(h.load(url, "draw")) == 4
    assert not _running(url, "draw")


# ----------------------------------------------------------------------------- lost connections
def _lost() -> Exception:
    return sa_exc.OperationalError("SELECT 1", {}, Exception(
        "server closed the connection unexpectedly"))


def test_retrying_waits_out_a_lost_connection_for_a_bounded_time(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A lost connection is retried with backoff until the call succeeds, or until
    RETRY_SECONDS pass (then the driver's error stands, one line); any other error, and any
    error of SQLite (no connection to lose), is not retried."""
    monkeypatch.setattr(storage, "RETRY_SECONDS", 1.0)
    monkeypatch.setattr(storage, "_FIRST_DELAY", 0.01)
    url = "postgresql+psycopg://postgres@127.0.0.1:9/nas"
    calls: list[str] = []

    def flaky() -> str:
        calls.append("flaky")
        if len(calls) < 3:
            raise _lost()
        return "written"

    assert retrying(url, flaky) == "written" and len(calls) == 3
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and "server closed the connection" in said[0], said
    assert "retrying for up to 1 s" in said[0] and "the database is back" in said[1]

    def down() -> None:
        calls.append("down")
        raise _lost()

    calls.clear()
    with pytest.raises(StorageError, match="server closed the connection") as info:
        retrying(url, down)
    assert info.value.transient and len(calls) > 3
    # Given up: the next calls (closing the run's trials) are tried once, until one succeeds.
    calls.clear()
    with pytest.raises(StorageError):
        retrying(url, down)
    assert len(calls) == 1
    assert retrying(url, lambda: "back") == "back"
    calls.clear()
    assert retrying(url, flaky) == "written" and len(calls) == 3  # retried again

    def bad() -> None:
        calls.append("bad")
        raise sa_exc.DatabaseError("INSERT", {}, Exception("value too long"))

    for target, failing in ((url, bad), (f"sqlite:///{Path('x.db').absolute()}", down)):
        calls.clear()
        with pytest.raises(StorageError):
            retrying(target, failing)
        assert len(calls) == 1

    # A retry whose first try may have committed runs `again` instead.
    calls.clear()

    def first() -> str:
        calls.append("first")
        raise _lost()

    assert retrying(url, first, again=lambda: "finished") == "finished" and calls == ["first"]


class _Server:
    """The PostgreSQL server of :func:`postgres_server` behind ``url``, stopped and started as
    an administrator would (same data folder, same port)."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url, self.port = url, make_url(url).port
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            row = conn.execute("SHOW data_directory").fetchone()
        assert row is not None
        self.data = Path(row[0])
        self.root = self.data.parent
        self.bin = find_postgres_bin()
        assert self.bin is not None

    def _pg_ctl(self, *args: str) -> None:
        user = "postgres" if os.geteuid() == 0 else None
        done = subprocess.run([str(self.bin / "pg_ctl"), "-D", str(self.data), *args],
                              cwd=self.root, user=user, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "LC_ALL": "C"})
        assert done.returncode == 0, done.stderr

    def restart(self) -> None:
        self._pg_ctl("-l", str(self.root / "server.log"), "-m", "fast", "-w", "-t", "60",
                     "restart")

    def stop(self) -> None:
        self._pg_ctl("-m", "fast", "-w", "stop")

    def start(self) -> None:
        self._pg_ctl("-l", str(self.root / "server.log"), "-w", "-t", "60", "-o",
                     f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
                     "-c fsync=off -c full_page_writes=off -c synchronous_commit=off", "start")


@pytest.fixture(scope="module")
def pg() -> Iterator[_Server]:
    """A PostgreSQL server of this module's own (its tests stop and restart it)."""
    with postgres_server() as url:
        yield _Server(url)


def _epochs_reported(url: str) -> int:
    """Epoch rows written so far (0 before the table exists, or while the server is down)."""
    engine = sa.create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM nas_epochs")).scalar_one())
    except sa_exc.SQLAlchemyError:
        return 0
    finally:
        engine.dispose()


def _when(condition: Callable[[], bool], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.2)


def test_a_postgresql_restart_mid_run_is_retried_and_the_study_completes(
        pg: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PostgreSQL restarts (within a second) while trials train and report: the run reconnects
    and completes its budget with every trial recorded, none left RUNNING."""
    path = h.write_study(tmp_path / "restart.yaml", "restart", budget={"trials": 6},
                         evaluator="study_helpers:slow")
    restarted = threading.Event()
    problems: list[BaseException] = []

    def restart_when_under_way() -> None:
        try:
            _when(lambda: _epochs_reported(pg.url) >= 1)  # a trial mid-training
            pg.restart()
            restarted.set()
        except BaseException as exc:  # seen by the test below
            problems.append(exc)

    thread = threading.Thread(target=restart_when_under_way, daemon=True)
    thread.start()
    assert nas_main(["run", str(path), "--storage", pg.url]) == 0
    thread.join(60)
    assert not problems and restarted.is_set()
    err = capsys.readouterr().err
    # Whether a write met the restart depends on timing; when one did, the run said so.
    if "retrying for up to" in err:
        assert "the database is back after" in err
    assert "Traceback" not in err and "invalid data in the commit" not in err
    trials = h.load(pg.url, "restart")
    assert counted_trials(trials) == 6
    assert all(t.state.is_finished() for t in trials)
    assert {t.user_attrs.get("nas.status") for t in trials} <= {"completed", "reused"}
    assert read_owner(open_storage(pg.url).engine, "restart") is None


def test_a_database_down_past_the_bound_stops_in_one_line_and_resume_closes_what_was_left(
        pg: _Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """PostgreSQL stays down longer than the retries last: the run stops with one line naming
    the database error, without claiming the trials it could not write were closed; with the
    database back, `nas resume` closes them and the stale lease, and finishes the study."""
    path = h.write_study(tmp_path / "down.yaml", "down", budget={"trials": 6},
                         evaluator="study_helpers:slow")
    done_before = _epochs_reported(pg.url)  # the other study's, on the same server
    code = ("import sys; import studies.store.storage as s; s.RETRY_SECONDS = 3.0; "
            "from nas_cli.main import main; sys.exit(main(sys.argv[1:]))")
    process = subprocess.Popen([sys.executable, "-c", code, "run", str(path), "--storage",
                                pg.url], env=h.subprocess_env(), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _when(lambda: _epochs_reported(pg.url) > done_before or process.poll() is not None)
        pg.stop()
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        pg.start()
    lines = err.strip().splitlines()
    assert process.returncode == 1, err
    assert "cannot be used" in lines[-1] and "nas resume down" in lines[-1], err
    assert "invalid data in the commit" not in err
    assert "could not close" in lines[-1] and "were closed" not in lines[-1]
    assert not any("Traceback" in line for line in lines), err
    assert _running(pg.url, "down")  # left behind: the database was down
    assert nas_main(["status", "down", "--storage", pg.url, "--json"]) == 0
    statuses = json.loads(capsys.readouterr().out)["statuses"]
    assert statuses.get("interrupted") and "running" not in statuses  # its owner is gone
    assert read_owner(open_storage(pg.url).engine, "down") is not None  # a stale lease
    assert nas_main(["resume", "down", "--evaluator", "study_helpers:slow",
                     "--storage", pg.url]) == 0
    trials = h.load(pg.url, "down")
    assert counted_trials(trials) == 6
    assert not _running(pg.url, "down")
    assert any(t.user_attrs.get("nas.status") == "interrupted" for t in trials)
    assert read_owner(open_storage(pg.url).engine, "down") is None


# ----------------------------------------------------------------------------- lost workers
def dies_once(arch: dict[str, Any], settings: dict[str, Any], task: str,
              task_options: dict[str, Any], *, latency: bool = False, report: h.Report = None,
              log: str | None = None) -> dict[str, Any]:
    """An evaluator whose first call anywhere kills its own Ray worker process (SIGKILL, as the
    kernel's or Ray's memory killer does), after writing the architecture to the file
    ``$NAS_FAKE_KILL``; every later call is :func:`study_helpers.instant`."""
    mark = Path(os.environ["NAS_FAKE_KILL"])
    try:
        with mark.open("x") as f:
            f.write(json.dumps(arch))
    except FileExistsError:
        return h.instant(arch, settings, task, task_options, latency=latency, report=report,
                         log=log)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
def test_a_lost_worker_is_an_infrastructure_fault_and_its_configuration_runs_again(
        tmp_path: Path, verbose: bool) -> None:
    """A trial's worker process dies: the trial is closed with its reason as an infrastructure
    fault (interrupted, `nas.fault`), not counted; its configuration runs again and completes;
    the budget holds, the run says what happened in one line, and no trial is left RUNNING.
    Tune's traceback of the dead actor and the raylet's dump of the dead worker are printed
    with `--verbose` only."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    mark = tmp_path / "killed.json"
    path = h.write_study(tmp_path / "lost.yaml", "lost", budget={"trials": 4},
                         evaluator="test_study_faults:dies_once")
    done = subprocess.run([*h.NAS, "run", str(path), "--storage", url,
                           *(["--verbose"] if verbose else [])],
                          env=h.subprocess_env(NAS_FAKE_KILL=str(mark)), cwd=tmp_path,
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr
    killed = json.loads(mark.read_text())
    trials = h.load(url, "lost")
    lost = [t for t in trials if t.user_attrs.get("nas.fault") == "infrastructure"]
    assert len(lost) == 1 and lost[0].user_attrs["nas.arch"] == killed
    assert lost[0].user_attrs["nas.status"] == "interrupted"
    assert "infrastructure fault" in lost[0].user_attrs["nas.reason"]
    assert "Error" in lost[0].user_attrs["nas.reason"]  # Ray's error type, e.g. ActorDiedError
    again = [t for t in trials if t.user_attrs.get("nas.rerun_of") == lost[0].number]
    assert len(again) == 1 and again[0].user_attrs["nas.arch"] == killed
    assert again[0].user_attrs["nas.status"] in ("completed", "reused")
    assert counted_trials(trials) == 4
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert not [t for t in trials if t.user_attrs.get("nas.status") == "failed"]
    notes = [line for line in done.stderr.splitlines() if "worker was lost" in line]
    assert len(notes) == 1 and f"trial {lost[0].number}" in notes[0], done.stderr
    output = done.stdout + done.stderr
    if verbose:
        assert "Traceback" in done.stderr and "ActorDiedError" in done.stderr
    else:
        assert "Traceback" not in output and "(raylet)" not in output, output
        assert "Trials did not complete" not in output


def test_status_shows_the_running_trials_of_a_gone_owner_as_interrupted(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trial stored as RUNNING counts as running while a live process holds the study, and
    as interrupted once none does (its process died, or the database was down as it stopped)."""
    from studies import StudySpec, create_study
    from studies.store.lease import acquire

    url = f"sqlite:///{tmp_path / 's.db'}"
    run = create_study(StudySpec.from_dict(h.study_dict("gone")), url, geometry=h.GEOMETRY)
    run.study.ask()  # what a run that died left behind

    def statuses() -> dict[str, int]:
        assert nas_main(["status", "gone", "--storage", url, "--json"]) == 0
        return dict(json.loads(capsys.readouterr().out)["statuses"])

    assert statuses() == {"interrupted": 1}
    with acquire(run.storage.engine, "gone"):
        assert statuses() == {"running": 1}
    assert statuses() == {"interrupted": 1}
    assert nas_main(["status", "gone", "--storage", url]) == 0
    assert "by status: interrupted 1" in capsys.readouterr().out


def test_a_lost_ray_head_names_the_resume_command_with_the_flags_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """When the head stops answering, the one line names the resume that continues the study
    as it was run: ``--storage`` as given and the study's ``--evaluator``."""
    import studies.engine as engine
    from nas.errors import RunAborted

    class LostAtOnce:
        def __init__(self, on_lost: Callable[[str], None]) -> None:
            self.on_lost = on_lost

        def __enter__(self) -> None:
            self.on_lost("the Ray cluster's head at 127.0.0.1:1 stopped answering (for 10 s)")

        def __exit__(self, *exc: object) -> None:
            pass

    def exit_now(code: int) -> None:
        raise SystemExit(code)

    monkeypatch.setattr(engine, "HeadWatch", LostAtOnce)
    monkeypatch.setattr(engine.os, "_exit", exit_now)
    url = f"sqlite:///{tmp_path / 'head lost.db'}"
    study = h.write_study(tmp_path / "s.yaml", "gone", budget={"trials": 2},
                          evaluator="study_helpers:instant")
    with pytest.raises(SystemExit) as ended:
        nas_main(["run", str(study), "--storage", url])
    assert ended.value.code == RunAborted.exit_code
    err = capsys.readouterr().err
    assert ("stopped: the Ray cluster's head at 127.0.0.1:1 stopped answering (for 10 s); 0 "
            "running trials were closed as interrupted; continue with `nas resume gone "
            f"--storage '{url}' --evaluator study_helpers:instant` once the cluster is back."
            ) in err
