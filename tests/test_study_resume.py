"""`nas run` killed with SIGKILL in the middle of a study, then `nas resume`.

The study file names a slow fake evaluator (study key ``evaluator``), so the driver can be
killed while trials train. The resumed study ends with exactly its budget counted, nothing left
RUNNING, and no architecture trained twice to completion with the same settings.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from nas_cli.main import main as nas_main
from studies import StudySpec, counted_trials, create_study, run_study

ray_local = h.ray_local

BUDGET = 8
# 4 networks x 2 learning rates: re-sampling is likely (reuse), 8 results at most.
SPACE = {**h.SMALL_SPACE, "train": {"lr": {"choices": [0.001, 0.002]}}}


def _process_tree(root: int) -> dict[int, str]:
    """``root`` and its descendants, each with its start time (to tell a reused pid)."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry)], starts[int(entry)] = int(fields[1]), fields[19]
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier.extend(children)
    return {pid: starts[pid] for pid in tree if pid in starts}


def _alive(processes: dict[int, str]) -> dict[int, str]:
    alive = {}
    for pid, start in processes.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rindex(")") + 2:].split()[19] == start and " (Z) " not in stat:
            alive[pid] = start
    return alive


def _wait_for_training(url: str, proc: subprocess.Popen[str], timeout: float) -> None:
    """Until some trials are counted and one is training."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the driver ended before it could be killed"
        try:
            trials = h.load(url, "killed")
        except (KeyError, optuna.exceptions.StorageInternalError):
            trials = []  # not created yet
        training = [t for t in trials
                    if t.state == TrialState.RUNNING and "nas.arch" in t.user_attrs]
        if counted_trials(trials) >= 1 and training:
            return
        time.sleep(0.3)
    pytest.fail("the study did not start training in time")


@pytest.mark.slow
@pytest.mark.timeout(900)
def _wholly_drawn(trial: optuna.trial.FrozenTrial) -> bool:
    """The space rebuilds the whole configuration from the trial's parameters (killed after
    Optuna drew them, before its architecture was stored: while it was costed)."""
    from nas.errors import NasError
    from search_spaces import SearchSpace

    try:
        SearchSpace.from_dict(SPACE).suggest(optuna.trial.FixedTrial(dict(trial.params)))
    except (NasError, ValueError):  # FixedTrial: "The value of the parameter ... is not found"
        return False
    return True


def test_sigkill_then_resume(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    path = h.write_study(tmp_path / "killed.yaml", "killed", space=SPACE,
                         budget={"trials": BUDGET}, evaluator="study_helpers:slow")
    env = h.subprocess_env(NAS_FAKE_SLEEP="0.7")
    log = (tmp_path / "run.log").open("w")
    proc = subprocess.Popen([*h.NAS, "run", str(path), "--storage", url], env=env, cwd=tmp_path,
                            stdout=log, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    processes: dict[int, str] = {}
    try:
        _wait_for_training(url, proc, timeout=240)
        processes = _process_tree(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        killed = h.load(url, "killed")
        left_running = [t.number for t in killed if t.state == TrialState.RUNNING]
        assert left_running, "the crash left no trial RUNNING"
        leftovers = _alive({p: s for p, s in processes.items() if p != proc.pid})

        # The database names the evaluator: the resume vouches for it.
        done = subprocess.run([*h.NAS, "resume", "killed", "--evaluator", "study_helpers:slow",
                               "--storage", url], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stderr[-3000:], f"leftovers: {sorted(leftovers)}")
        assert "Pareto front of 'killed'" in done.stdout
    finally:
        log.close()
        for pid in _alive(processes):  # what Ray left of the killed driver
            os.kill(pid, signal.SIGKILL)

    trials = h.load(url, "killed")
    states = Counter(t.state for t in trials)
    statuses = Counter(t.user_attrs.get("nas.status") for t in trials)
    assert counted_trials(trials) == BUDGET, statuses
    assert states[TrialState.RUNNING] == states[TrialState.WAITING] == 0
    interrupted = [t for t in trials if t.user_attrs.get("nas.status") == "interrupted"]
    assert sorted(t.number for t in interrupted) == left_running
    for t in interrupted:
        assert t.state == TrialState.FAIL and t.user_attrs["nas.reason"]
        reruns = [r for r in trials if r.user_attrs.get("nas.rerun_of") == t.number]
        if "nas.arch" in t.user_attrs or _wholly_drawn(t):  # its configuration was drawn
            assert len(reruns) == 1 and reruns[0].params == t.params  # runs again, once
        else:  # killed before its configuration was wholly drawn: nothing to re-run
            assert reruns == []
    trained = [h.result_key(t) for t in trials if t.user_attrs.get("nas.status") == "completed"]
    assert len(trained) == len(set(trained)), "an architecture was trained twice"
    for t in trials:
        if t.user_attrs.get("nas.status") == "reused":
            source = trials[t.user_attrs["nas.reused_from"]]
            assert h.result_key(source) == h.result_key(t) and source.values == t.values
    assert json.loads(subprocess.run(
        [*h.NAS, "status", "killed", "--storage", url, "--json"], env=env, capture_output=True,
        text=True, timeout=120).stdout)["counted"] == BUDGET


# ----------------------------------------------------------------------------- a study that grows
def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root``; a SQLite database by its content (its write-ahead log and
    shared-memory files change when a connection an earlier command left open is closed, which
    writes nothing)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.name.endswith(("-wal", "-shm")):
            continue
        if p.suffix == ".db":
            with contextlib.closing(sqlite3.connect(f"file:{p}?mode=ro", uri=True)) as conn:
                out[str(p.relative_to(root))] = "\n".join(conn.iterdump()).encode()
        else:
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def _stored_budget(url: str, name: str) -> dict[str, object]:
    study = optuna.load_study(study_name=name, storage=url)
    budget: dict[str, object] = study.user_attrs["nas.spec"]["budget"]
    return budget


def _resume(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = nas_main(["resume", *argv])
    return code, capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_study_that_ended_on_its_budget_grows(tmp_path: Path, ray_local: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict("grow", budget={"trials": 3},
                                            evaluator="study_helpers:instant",
                                            tune={"storage_path": str(tmp_path / "tune")}))
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False,
              evaluator=h.instant)
    assert counted_trials(h.load(url, "grow")) == 3
    vouch = ["--evaluator", "study_helpers:instant", "--storage", url]

    # Spent: a plain resume runs nothing.
    code, err = _resume(["grow", *vouch], capsys)
    assert code == 0 and "the budget is spent (3 of 3 trials)" in err
    assert counted_trials(h.load(url, "grow")) == 3

    code, err = _resume(["grow", "--trials", "5", "--timeout-minutes", "30", *vouch], capsys)
    assert code == 0, err
    assert "budget 3 trials -> 5 trials, 30 minutes per run" in err
    assert "resuming at 3 of 5 trials" in err
    assert counted_trials(h.load(url, "grow")) == 5
    assert _stored_budget(url, "grow") == {"trials": 5, "timeout_minutes": 30.0}
    assert nas_main(["status", "grow", "--storage", url, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert (status["counted"], status["budget"]) == (5, 5)

    # A later resume keeps the stored budget: nothing left to run.
    code, err = _resume(["grow", *vouch], capsys)
    assert code == 0 and "the budget is spent (5 of 5 trials)" in err

    # Fewer than counted, or a timeout that is no limit: one line, exit 2, nothing written.
    before = _files(tmp_path)
    for flags, fragments in [(["--trials", "4"], ["--trials 4", "5 trials"]),
                             (["--trials", "0"], ["--trials", "0"]),
                             (["--trials", "6", "--timeout-minutes", "0"],
                              ["--timeout-minutes", "0"]),
                             (["--timeout-minutes", "nan"], ["--timeout-minutes", "nan"])]:
        code, err = _resume(["grow", *flags, *vouch], capsys)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1, err
        assert all(f in lines[0] for f in fragments), lines[0]
    assert _files(tmp_path) == before
    assert _stored_budget(url, "grow") == {"trials": 5, "timeout_minutes": 30.0}
    assert counted_trials(h.load(url, "grow")) == 5


#: The sampler of a study stored by the release before the closed-form expected gain (db9c1b0):
#: its study file's ``sampler`` as written, with the option that release took and this one
#: does not (``mc_samples``) and its ``candidates``.
_OLD_SAMPLER = {"name": "costaware", "mc_samples": 32, "candidates": 24}


@pytest.mark.timeout(300)
def test_a_study_stored_with_a_retired_sampler_option_resumes(
        tmp_path: Path, ray_local: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A study is resumed from the database alone: a sampler option a later release retired
    (``studies.samplers.RETIRED_OPTIONS``) is ignored, not refused, by every command."""
    db = tmp_path / "studies.db"
    url = f"sqlite:///{db}"
    spec = StudySpec.from_dict(h.study_dict("old", budget={"trials": 2},
                                            sampler={"name": "costaware"},
                                            evaluator="study_helpers:instant",
                                            tune={"storage_path": str(tmp_path / "tune")}))
    create_study(spec, url, geometry=h.GEOMETRY)
    stored = {**spec.to_dict(), "sampler": _OLD_SAMPLER}
    h.edit_sqlite(db, [("UPDATE study_user_attributes SET value_json = ? WHERE key = ?",
                        (json.dumps(stored), "nas.spec"))])
    assert nas_main(["status", "old", "--storage", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counted"] == 0

    code, err = _resume(["old", "--evaluator", "study_helpers:instant", "--storage", url],
                        capsys)
    assert code == 0, err
    assert counted_trials(h.load(url, "old")) == 2
    chosen = [t for t in h.load(url, "old") if "costaware:seconds" in t.system_attrs]
    assert chosen, "the trials were not chosen by costaware"
    assert optuna.load_study(study_name="old", storage=url).user_attrs["nas.spec"][
        "sampler"] == _OLD_SAMPLER  # read as it is, not rewritten
