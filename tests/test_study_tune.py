"""Ray Tune as the study's runner: Tune's folder and loggers, resources, and one owner per study.

The database stays the record: these tests read Tune's experiment folder only to check that it
is what a Tune user expects (``ExperimentAnalysis`` opens it, the loggers wrote their files).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import optuna
import pytest
import sqlalchemy as sa
import study_helpers as h
from optuna.trial import TrialState
from ports import free_port
from ray_nodes import end_groups, start_node

from nas_cli.main import main as nas_main
from studies import StudySpec, counted_trials, create_study, load_existing, run_study
from studies.store import Status, StudyKey, TrialKey
from studies.store.lease import acquire, leases_table, read_owner
from studies.store.storage import open_storage

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(600)]
ray_local = h.ray_local
BASE = h.SMALL_SPACE["base"]


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


# ----------------------------------------------------------------------------- Tune's folder
@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A study with Tune's CSV, JSON and TensorBoard loggers, a constraint and a reuse."""
    h.start_ray()
    tmp = tmp_path_factory.mktemp("logged")
    url = f"sqlite:///{tmp / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "logged", budget={"trials": 5}, constraints={"params_max": 20000},
        enqueue=[{**BASE, "groups": 2, "attention_sharing": "kv"},
                 {**BASE, "groups": 2, "attention_sharing": "kv"},
                 {**BASE, "groups": 1}],
        tune={"callbacks": ["csv", "json", "tensorboard"], "storage_path": str(tmp / "tune")}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)
    return {"url": url, "run": run, "trials": h.load(url, "logged")}


def test_tune_dir_opens_with_experiment_analysis(logged, capsys) -> None:
    from ray.tune import ExperimentAnalysis

    assert nas_main(["status", "logged", "--storage", logged["url"], "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    tune_dir = status["tune_dir"]
    assert tune_dir and Path(tune_dir).parent == Path(logged["run"].spec.tune.storage_path)
    assert status["owner"] is None  # the run ended and gave the study back
    frame = ExperimentAnalysis(tune_dir).dataframe()
    trained = [t for t in logged["trials"]
               if t.user_attrs[TrialKey.STATUS] in (Status.COMPLETED, Status.FAILED,
                                                    Status.STOPPED)]
    statuses = Counter(t.user_attrs[TrialKey.STATUS] for t in logged["trials"])
    assert statuses[Status.REJECTED] >= 1 and statuses[Status.REUSED] >= 1
    assert len(frame) == len(trained)  # one row per trial that trained, none for the others
    assert sorted(frame["config/number"]) == sorted(t.number for t in trained)
    by_number = {t.number: t for t in trained}
    for _, row in frame.iterrows():
        trial = by_number[row["config/number"]]
        assert row["kind"] == "final" and row["status"] == trial.user_attrs[TrialKey.STATUS]
        assert row["value"] == pytest.approx(trial.values[0])


def test_the_loggers_named_in_the_study_file_write_their_files(logged) -> None:
    tune_dir = Path(logged["run"].study.user_attrs[StudyKey.TUNE_DIR])
    trials = sorted(p for p in tune_dir.iterdir() if p.name.startswith("trial-"))
    assert trials
    for folder in trials:
        assert (folder / "progress.csv").stat().st_size > 0
        assert (folder / "result.json").stat().st_size > 0
        assert list(folder.glob("events.out.tfevents.*"))
        epochs = [json.loads(line) for line in (folder / "result.json").read_text().splitlines()]
        # every epoch reaches the loggers; the last one with the trial's end (one report)
        assert [(e["kind"], e["epoch"]) for e in epochs] == [("epoch", 1), ("final", 2)]
        assert epochs[-1]["epoch_value"] is not None


def test_the_objective_names_label_optunas_axes(logged) -> None:
    study = optuna.load_study(study_name="logged", storage=logged["url"])
    assert study.metric_names == ["accuracy", "params"]


def test_a_logger_whose_package_is_missing_is_refused_before_writing(tmp_path, capsys) -> None:
    missing = next((name for name, package in (("mlflow", "mlflow"), ("wandb", "wandb"))
                    if importlib.util.find_spec(package) is None), None)
    if missing is None:
        pytest.skip("mlflow and wandb are both installed")
    path = h.write_study(tmp_path / "s.yaml", "logger", tune={"callbacks": ["csv", missing]})
    db = tmp_path / "s.db"
    assert nas_main(["run", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"pip install {missing}" in err[0]
    assert not db.exists()


def test_resources_no_node_can_hold_are_refused_before_writing(tmp_path, capsys) -> None:
    db = tmp_path / "s.db"
    for resources in ({"cpu": 100}, {"cpu": 1, "gpu": 1}):
        path = h.write_study(tmp_path / "s.yaml", "greedy", resources=resources)
        assert nas_main(["run", str(path), "--storage", f"sqlite:///{db}"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "largest node" in err[0], err
        assert not db.exists()


def test_a_fractional_cpu_request_runs_trials_side_by_side(tmp_path) -> None:
    """Half a CPU per trial on this 2-CPU Ray: more than two trials train at once (the slow
    evaluator takes 1 s an epoch on the workers)."""
    log = tmp_path / "trained.jsonl"
    url = f"sqlite:///{tmp_path / 's.db'}"
    networks = [{"groups": 1, "attention_sharing": "none"},
                {"groups": 1, "attention_sharing": "kv"},
                {"groups": 2, "group_ffn": True, "attention_sharing": "none"},
                {"groups": 2, "group_ffn": True, "attention_sharing": "kv"}]
    spec = StudySpec.from_dict(h.study_dict("half", budget={"trials": 4},
                                            resources={"cpu": 0.5},
                                            enqueue=[{**BASE, **n} for n in networks],
                                            tune={"storage_path": str(tmp_path / "tune")}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    run_study(run, evaluator=functools.partial(h.slow, log=str(log)), progress=False)
    assert counted_trials(h.load(url, "half")) == 4
    spans = [(e["start"], e["end"]) for e in h.read_log(log)]
    assert len(spans) == 4
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most >= 3, spans  # with 1 cpu per trial at most 2 would overlap


# ----------------------------------------------------------------------------- one owner
def test_a_stale_lease_of_another_host_is_taken_over(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("stale", budget={"trials": 2},
                                            tune={"storage_path": str(tmp_path / "tune")}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    engine = open_storage(url).engine
    old = datetime.now(timezone.utc) - timedelta(minutes=10)
    acquire(engine, "stale").release()  # creates the table
    with engine.begin() as conn:
        conn.execute(leases_table.insert().values(
            study_name="stale", host="elsewhere", pid=1, process_start="", started=old,
            heartbeat=old, token="lost-machine"))
    run_study(run, evaluator=h.instant, progress=False)
    assert counted_trials(h.load(url, "stale")) == 2
    assert read_owner(engine, "stale") is None


def test_a_live_lease_refuses_resume_and_writes_nothing(tmp_path, capsys) -> None:
    db = tmp_path / "s.db"
    url = f"sqlite:///{db}"
    spec = StudySpec.from_dict(h.study_dict("owned", budget={"trials": 2}))
    create_study(spec, url, geometry=h.GEOMETRY)
    engine = open_storage(url).engine
    with acquire(engine, "owned"):  # this process owns it, as a live `nas run` would
        before = _sha(db)
        assert nas_main(["resume", "owned", "--storage", url]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"pid {os.getpid()}" in err[0] and "owned" in err[0]
        assert _sha(db) == before
        run = load_existing("owned", url)
        assert h.load(url, "owned") == [] and run.study.user_attrs.get(StudyKey.TUNE_DIR) is None


def _wait_for(condition: Callable[[], bool], proc: subprocess.Popen[str], what: str,
              timeout: float = 240) -> None:
    """Until ``condition`` holds, while ``proc`` (a `nas` subprocess) lives."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_second_process_on_a_live_study_is_refused_and_the_budget_holds(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = h.write_study(tmp_path / "live.yaml", "live", budget={"trials": 4},
                         evaluator="study_helpers:gated")
    gate = tmp_path / "gate"  # the first run's trials wait until both others were refused
    env = h.subprocess_env(NAS_FAKE_GATE=str(gate))
    first = subprocess.Popen([*h.NAS, "run", str(path), "--storage", url], env=env,
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        _wait_for(lambda: read_owner(open_storage(url).engine, "live") is not None, first,
                  "the first run never took the lease")
        for argv in (["resume", "live", "--evaluator", "study_helpers:gated"],
                     ["run", str(path)]):
            second = subprocess.run([*h.NAS, *argv, "--storage", url], env=env, cwd=tmp_path,
                                    capture_output=True, text=True, timeout=120)
            lines = second.stderr.strip().splitlines()
            assert second.returncode == 2 and len(lines) == 1, second.stderr
            assert f"pid {first.pid}" in lines[0] and "Traceback" not in second.stderr
        gate.touch()
        _, err = first.communicate(timeout=600)
        assert first.returncode == 0, err[-2000:]
    finally:
        if first.poll() is None:
            first.kill()
    trials = h.load(url, "live")
    assert counted_trials(trials) == 4 and len(trials) == 4
    assert not [t for t in trials if t.state == TrialState.RUNNING]


# ----------------------------------------------------------------------------- a real cluster



@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.xdist_group("ray-start")  # Ray's default ports: one such test at a time
def test_nas_run_on_a_cluster_started_with_ray_start(tmp_path) -> None:
    """``ray start --head`` in its own session, then ``nas run --address``, as a user would."""
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    env = h.subprocess_env(NAS_FAKE_SLEEP="0.1")
    groups: list[int] = []

    def head_args() -> list[str]:
        return ["--head", f"--port={free_port()}", "--num-cpus=1", "--include-dashboard=false",
                f"--temp-dir={temp}"]

    try:
        started = start_node(head_args, env, lambda n: tmp_path / f"head-{n}.log", groups)
        address = f"127.0.0.1:{started[1].removeprefix('--port=')}"
        url = f"sqlite:///{tmp_path / 's.db'}"
        path = h.write_study(tmp_path / "c.yaml", "on-cluster", budget={"trials": 3},
                             evaluator="study_helpers:slow")
        done = subprocess.run([*h.NAS, "run", str(path), "--storage", url, "--address", address],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=400)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "Pareto front of 'on-cluster'" in done.stdout
        trials = h.load(url, "on-cluster")
        assert counted_trials(trials) == 3
        assert all(t.user_attrs.get(TrialKey.NODE) for t in trials
                   if t.user_attrs[TrialKey.STATUS] == Status.COMPLETED)
    finally:
        end_groups(groups)
        shutil.rmtree(temp, ignore_errors=True)


def test_leases_table_is_not_created_by_read_only_status(tmp_path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    create_study(StudySpec.from_dict(h.study_dict("ro")), url, geometry=h.GEOMETRY)
    assert nas_main(["status", "ro", "--storage", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["owner"] is None
    assert "nas_leases" not in sa.inspect(sa.create_engine(url)).get_table_names()


def test_resume_continues_from_the_database_when_tunes_folder_is_gone(tmp_path) -> None:
    """Each run ends at its timeout; the next resumes with Tune's earlier folders deleted (the
    slow evaluator takes 1 s an epoch on the workers)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("cut", budget={"trials": 4, "timeout_minutes": 0.05},
                                            tune={"storage_path": str(tmp_path / "tune")}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    tune_dirs = []
    for _ in range(10):
        run_study(run, evaluator=h.slow, progress=False)
        tune_dirs.append(run.study.user_attrs[StudyKey.TUNE_DIR])
        # The database alone is what a resume reads: Tune's folders of the study go (the
        # claimed `tune.storage_path` itself stays, with its .nas-study marker).
        for folder in (tmp_path / "tune").iterdir():
            if folder.is_dir():
                shutil.rmtree(folder)
        if counted_trials(h.load(url, "cut")) >= 4:
            break
        run = load_existing("cut", url, write=True)
    trials = h.load(url, "cut")
    assert len(tune_dirs) >= 2, "the first run did not stop at its timeout"
    assert len(set(tune_dirs)) == len(tune_dirs)  # one Tune experiment per run
    assert counted_trials(trials) == 4
    assert not [t for t in trials if t.state == TrialState.RUNNING]


# ----------------------------------------------------------------------------- faults
def test_a_full_disk_stops_the_run_in_one_line_and_resume_continues(tmp_path, monkeypatch,
                                                                     capsys) -> None:
    """The per-epoch table cannot be written (as on a full disk): the run stops with one line
    and exit code 1, its running trials are closed, and `nas resume` finishes the study."""
    import studies.store.record as record_module
    from studies.store import StorageError

    url = f"sqlite:///{tmp_path / 's.db'}"
    path = h.write_study(tmp_path / "full.yaml", "full", budget={"trials": 4},
                         evaluator="study_helpers:instant")
    real = record_module.write_epochs
    calls = {"n": 0}

    def write_epochs(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 2:
            raise StorageError(f"Storage {url!r} cannot be used: database or disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(record_module, "write_epochs", write_epochs)
    assert nas_main(["run", str(path), "--storage", url]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "database or disk is full" in err[-1] and "nas resume full" in err[-1]
    assert not any("Traceback" in line for line in err)
    trials = h.load(url, "full")
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    assert read_owner(open_storage(url).engine, "full") is None
    monkeypatch.setattr(record_module, "write_epochs", real)
    assert nas_main(["resume", "full", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 0
    assert counted_trials(h.load(url, "full")) == 4


def _children(pid: int, name: str) -> list[int]:
    """Processes whose parent is ``pid`` and whose command line holds ``name``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2:].split()[1]) == pid and name in cmdline:
            out.append(int(entry))
    return out


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_when_the_ray_head_dies_trials_are_closed_and_resume_continues(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    path = h.write_study(tmp_path / "head.yaml", "head", budget={"trials": 3},
                         evaluator="study_helpers:gated")
    gate = tmp_path / "gate"
    env = h.subprocess_env(NAS_FAKE_GATE=str(gate))
    run = subprocess.Popen([*h.NAS, "run", str(path), "--storage", url], env=env, cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        _wait_for(lambda: any(TrialKey.TUNE_TRIAL in t.user_attrs
                              for t in h.load_if_any(url, "head")), run, "no trial started")
        head = _children(run.pid, "gcs_server")
        assert head, "the local Ray head (gcs_server) is not a child of `nas run`"
        for pid in head:
            os.kill(pid, 9)
        _, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, 9)
    lines = err.strip().splitlines()
    assert run.returncode == 1, err[-3000:]
    assert "stopped answering" in lines[-1] and "nas resume head" in lines[-1], err[-3000:]
    assert "Traceback" not in err
    trials = h.load(url, "head")
    assert trials and not [t for t in trials if t.state == TrialState.RUNNING]
    closed = [t for t in trials if t.state.is_finished()]
    assert closed and {t.user_attrs[TrialKey.STATUS] for t in closed} == {Status.INTERRUPTED}
    assert "stopped answering" in closed[0].user_attrs[TrialKey.REASON]
    assert read_owner(open_storage(url).engine, "head") is None
    gate.touch()
    done = subprocess.run([*h.NAS, "resume", "head", "--evaluator", "study_helpers:gated",
                           "--storage", url], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert counted_trials(h.load(url, "head")) == 3


def test_an_enqueued_architecture_trains_with_the_studys_learning_rate(tmp_path) -> None:
    """The space searches lr; the enqueued baseline gets the study's train.lr, not the
    trainer's default."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    space = {**h.SMALL_SPACE, "train": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}
    spec = StudySpec.from_dict(h.study_dict("lr", space=space, train={"lr": 3e-3},
                                            enqueue=[{**BASE, "groups": 1}]))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    trial = run.study.ask()
    _, overrides = run.space.suggest(trial)
    assert overrides["lr"] == pytest.approx(3e-3)


def test_trials_train_with_the_task_defaults_nas_train_uses(tmp_path) -> None:
    """`nas train` and a study trial of the same task start from the same settings."""
    from trainers.loop import quick_defaults

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("defaults", budget={"trials": 1},
                                            train={"batch_size": 32}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)
    (trial,) = h.load(url, "defaults")
    settings = trial.user_attrs[TrialKey.TRAIN]
    assert settings["lr"] == quick_defaults("digits")["lr"]  # the task's default
    assert settings["batch_size"] == 32  # the study's own train wins
    assert settings["epochs"] == 2 and settings["seed"] == 0  # fidelity and seed, not the CLI's
