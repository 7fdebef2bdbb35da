"""The study engine on a real local Ray runtime: trials, statuses, budget, reuse, early stopping.

One study trains for real (a tiny ViT on `digits`, 2 epochs); the others replace the trainer
with the fake evaluators of ``study_helpers`` (the engine is under test, not training).
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
import torch
from optuna.trial import TrialState

import studies._pace as pace
from nas.errors import NasError
from nas_cli.main import main as nas_main
from studies import StudySpec, counted_trials, create_study, load_existing, run_study
from studies.store import read_epochs
from trainers import TrainConfig, get_task
from trainers.loop import evaluate, load_checkpoint

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(600)]
ray_local = h.ray_local

GEOMETRY = h.GEOMETRY
# The four distinct networks of SMALL_SPACE, under the `chaos` evaluator: A breaks
# params_max=20000, B trains, C's loss turns NaN, the evaluator raises for D.
A = {"groups": 1, "attention_sharing": "none"}
B = {"groups": 1, "attention_sharing": "kv"}
C = {"groups": 2, "group_ffn": True, "attention_sharing": "none"}
D = {"groups": 2, "group_ffn": True, "attention_sharing": "kv"}
BASE = h.SMALL_SPACE["base"]
ENQUEUED = [{**BASE, **arch} for arch in (B, B, A, C, D)]


def _run(tmp_path: Path, name: str, evaluator: Any, **overrides: Any) -> tuple[str, Any]:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(name, **overrides))
    run = create_study(spec, url, geometry=GEOMETRY)
    run_study(run, evaluator=evaluator, progress=False)
    return url, run


def _status(trial: optuna.trial.FrozenTrial) -> str | None:
    return trial.user_attrs.get("nas.status")


# ----------------------------------------------------------------------------- a mixed study
@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Enqueued B, B, A, C, D first, then random draws: a constraint, NaN losses, an evaluator
    that raises, and reuse."""
    h.start_ray()
    tmp = tmp_path_factory.mktemp("mixed")
    log = tmp / "trained.jsonl"
    url, _ = _run(tmp, "mixed", functools.partial(h.chaos, log=str(log)),
                  budget={"trials": 8}, constraints={"params_max": 20000}, enqueue=ENQUEUED)
    return {"url": url, "trials": h.load(url, "mixed"), "log": h.read_log(log)}


def test_enqueued_architectures_run_first(mixed) -> None:
    trials = mixed["trials"]
    for trial, arch in zip(trials[:5], ENQUEUED, strict=True):
        assert trial.user_attrs["nas.enqueued"] == "inline"
        assert all(trial.user_attrs["nas.arch"][k] == v for k, v in arch.items())
    assert not any("nas.enqueued" in t.user_attrs for t in trials[5:])


def test_constraint_rejects_without_training(mixed) -> None:
    rejected = [t for t in mixed["trials"] if _status(t) == "rejected"]
    assert rejected and rejected[0].number == 2
    trained = {json.dumps(e["arch"], sort_keys=True) for e in mixed["log"]}
    for t in rejected:
        assert t.state == TrialState.FAIL
        assert "params_max" in t.user_attrs["nas.reason"]
        assert t.user_attrs["nas.cost"]["params"] > 20000
        assert "nas.node" not in t.user_attrs  # never reached a worker
        assert json.dumps(t.user_attrs["nas.arch"], sort_keys=True) not in trained


def test_nan_loss_and_evaluator_errors_fail_their_trial_only(mixed) -> None:
    trials = mixed["trials"]
    nan, boom = trials[3], trials[4]
    for t in (nan, boom):
        assert t.state == TrialState.FAIL and _status(t) == "failed"
    assert "loss became nan at epoch 1" in nan.user_attrs["nas.reason"]
    assert "boom: the trainer crashed" in boom.user_attrs["nas.reason"]
    assert max(t.number for t in trials) > 4  # the study went on after them
    for t in trials:
        if _status(t) == "failed":
            assert t.user_attrs["nas.arch"]["group_ffn"] and t.user_attrs["nas.reason"]


def test_a_resampled_architecture_reuses_the_result(mixed) -> None:
    trials = mixed["trials"]
    reused = [t for t in trials if _status(t) == "reused"]
    assert reused and reused[0].number == 1  # B again, while B (trial 0) was still training
    for t in reused:
        source = trials[t.user_attrs["nas.reused_from"]]
        assert _status(source) == "completed" and t.state == TrialState.COMPLETE
        assert t.values == source.values and h.result_key(t) == h.result_key(source)
    completed = [json.dumps([e["arch"], e["settings"]], sort_keys=True) for e in mixed["log"]
                 if e["status"] == "completed"]
    assert len(completed) == len(set(completed)) == 1  # B trained once


def test_budget_counts_completed_pruned_and_failed_only(mixed) -> None:
    trials = mixed["trials"]
    states = Counter(t.state for t in trials)
    statuses = Counter(_status(t) for t in trials)
    assert counted_trials(trials) == 8
    assert (states[TrialState.COMPLETE] + states[TrialState.PRUNED] + states[TrialState.FAIL]
            - statuses["rejected"] - statuses["interrupted"]) == 8
    assert statuses["rejected"] >= 1 and statuses["failed"] >= 1 and statuses["reused"] >= 1
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]


def test_status_json_counts(mixed, capsys) -> None:
    assert nas_main(["status", "mixed", "--storage", mixed["url"], "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    trials = mixed["trials"]
    assert status["counted"] == 8 and status["budget"] == 8
    assert status["statuses"] == dict(Counter(_status(t) for t in trials))
    assert sum(status["states"].values()) == len(trials)


def test_status_prints_one_format_per_objective(mixed, capsys) -> None:
    assert nas_main(["status", "mixed", "--storage", mixed["url"]]) == 0
    out = capsys.readouterr().out
    best = {line.split(":")[0].split()[1]: line.split(": ")[1]
            for line in out.splitlines() if line.strip().startswith("best ")}
    assert len(best["accuracy"].split(".")[1]) == 4  # e.g. 0.6117, never 0.6116666666666667
    assert best["params"].replace(",", "").isdigit() and "," in best["params"]


# ----------------------------------------------------------------------------- the front
@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Ten trials of the shipped quickstart space on three objectives."""
    h.start_ray()
    url, _ = _run(tmp_path_factory.mktemp("front"), "front", h.instant, space="quickstart",
                  objectives=["accuracy", "params", "madds"], budget={"trials": 10})
    return {"url": url}



def test_status_shows_the_training_settings_the_trials_used(front, capsys) -> None:
    """`nas status` gives the settings every trial starts from and the searched ones; each
    trial's nas.train holds exactly those, with its own draw of the searched keys."""
    assert nas_main(["status", "front", "--storage", front["url"], "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert set(status["train_searched"]) == {"lr"}  # the quickstart space searches lr
    lr = status["train_searched"]["lr"]
    assert {"epochs", "seed", "batch_size"} <= set(status["train"])
    trials = [t for t in h.load(front["url"], "front") if "nas.train" in t.user_attrs]
    assert trials
    for t in trials:
        used = t.user_attrs["nas.train"]
        assert {k: used[k] for k in status["train"]} == status["train"]
        assert lr["low"] <= used["lr"] <= lr["high"]
    assert nas_main(["status", "front", "--storage", front["url"]]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "training:" in x)
    assert f"epochs {status['train']['epochs']}" in line and "lr searched in [0.001" in line


@pytest.mark.parametrize(("evaluator", "warned"), [(h.at_chance, True), (h.instant, False)])
def test_a_study_whose_trials_never_beat_chance_says_so(evaluator, warned, tmp_path,
                                                         capsys) -> None:
    from nas_cli.run_cmd import warn_at_chance

    url, _ = _run(tmp_path, "chance", evaluator, budget={"trials": 2})
    capsys.readouterr()
    warn_at_chance("chance", url)
    out = capsys.readouterr().out
    assert ("no trial beat chance accuracy (0.1000 on 'digits')" in out) is warned

_PLAIN_OPTUNA = """
import json, sys
import optuna
study = optuna.load_study(study_name=sys.argv[1], storage=sys.argv[2])
ours = ("nas", "nas_cli", "studies", "search_spaces", "trainers", "dashboard")
print(json.dumps({
    "studies": [s.study_name for s in optuna.get_all_study_summaries(sys.argv[2])],
    "best": [[t.number, t.values] for t in sorted(study.best_trials, key=lambda t: t.number)],
    "user_attrs": sorted(study.user_attrs),
    "project_modules": sorted(m for m in sys.modules if m.split(".")[0] in ours),
}))
"""


def test_plain_optuna_sees_the_study_and_its_front(front, tmp_path, capsys) -> None:
    done = subprocess.run([sys.executable, "-c", _PLAIN_OPTUNA, "front", front["url"]],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["project_modules"] == []
    assert "front" in seen["studies"] and "nas.spec" in seen["user_attrs"]
    assert nas_main(["pareto", "front", "--json", "--storage", front["url"]]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [[t["number"], list(t["values"].values())] for t in printed] == seen["best"]
    assert list(printed[0]["values"]) == ["accuracy", "params", "madds"]
    assert len(seen["best"]) >= 2


def test_nas_run_refuses_the_name_of_a_study_that_ran(front, tmp_path, capsys) -> None:
    path = h.write_study(tmp_path / "again.yaml", "front", space="quickstart")
    assert nas_main(["run", str(path), "--storage", front["url"]]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "already exists" in err


# ----------------------------------------------------------------------------- more studies
def test_mo_asha_stops_some_trials(tmp_path) -> None:
    space = {"name": "lr-only", "base": BASE, "train": {"lr": {"low": 1e-4, "high": 1e-2,
                                                              "log": True}}}
    url, run = _run(tmp_path, "asha", h.instant, space=space, budget={"trials": 10},
                    fidelity={"epochs": 4, "early_stopping": "asha", "grace_epochs": 1,
                              "reduction_factor": 2})
    trials = h.load(url, "asha")
    rows = Counter(r["trial_number"] for r in read_epochs(run.storage.engine, "asha"))
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    assert pruned, [t.intermediate_values for t in trials]
    for t in trials:
        reached = t.user_attrs["nas.epochs_reached"]
        assert rows[t.number] == reached == len(t.intermediate_values)
        assert sorted(t.intermediate_values) == list(range(1, reached + 1))
        if t.state == TrialState.PRUNED:
            assert _status(t) == "stopped" and reached in (1, 2)  # the rungs below 4 epochs
            assert t.user_attrs["nas.seconds"] >= 0  # Tune's time of the trial, until stopped
        else:
            assert _status(t) == "completed" and reached == 4
    assert counted_trials(trials) == 10


def test_a_crash_left_running_trial_is_closed_and_enqueued_again(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 'crash.db'}"
    run = create_study(StudySpec.from_dict(h.study_dict("crash", budget={"trials": 3})), url,
                       geometry=GEOMETRY)
    orphan = run.study.ask()  # a driver died after asking: the trial stays RUNNING
    run.space.suggest(orphan)
    # Another died while Optuna drew its parameters: one of them drawn, the rest not.
    name, dist = next(iter(h.load(url, "crash")[0].distributions.items()))
    run.study.ask({name: dist})
    run = load_existing("crash", url, write=True)
    assert run.store.close_interrupted(run.study, space=run.space) == 2
    first, torn = h.load(url, "crash")[:2]
    assert first.state == TrialState.FAIL and _status(first) == "interrupted"
    assert first.user_attrs["nas.reason"] and counted_trials([first]) == 0
    assert _status(torn) == "interrupted" and list(torn.params) == [name]
    waiting = [t for t in h.load(url, "crash") if t.state == TrialState.WAITING]
    assert [t.user_attrs["nas.rerun_of"] for t in waiting] == [0]  # no part of a configuration
    rerun = run.study.ask()  # the next trial asked is the interrupted one's rerun
    assert rerun.user_attrs["nas.rerun_of"] == 0
    run.space.suggest(rerun)
    assert rerun.params == first.params


@pytest.mark.slow
def test_a_real_study_trains_on_digits(tmp_path) -> None:
    """End to end: the real trainer on Ray workers, a tiny ViT on `digits` for 2 epochs."""
    url = f"sqlite:///{tmp_path / 'real.db'}"
    spec = StudySpec.from_dict(h.study_dict("real", budget={"trials": 2},
                                            train={"batch_size": 128, "lr": 3e-3},
                                            checkpoints=str(tmp_path / "weights")))
    run = create_study(spec, url)
    run_study(run, progress=False)
    trials = h.load(url, "real")
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2
    rows = read_epochs(run.storage.engine, "real")
    for t in trials:
        accuracy, params = t.values
        assert 0.1 < accuracy <= 1.0 and math.isfinite(accuracy)
        assert params == t.user_attrs["nas.cost"]["params"]
        # `checkpoints:` keeps each trial's trained weights: they reproduce its accuracy.
        path = Path(t.user_attrs["nas.checkpoint"])
        assert path.parent == tmp_path / "weights" / "real" / f"trial-{t.number}"
        model, config, blob = load_checkpoint(path)
        assert config.arch_id == t.user_attrs["nas.arch_id"]
        assert blob["result"]["value"] == accuracy
        data = get_task("digits")
        again = evaluate(model, data, TrainConfig.from_dict(t.user_attrs["nas.train"]),
                         torch.device("cpu"), None)
        assert again[data.metric] == pytest.approx(accuracy)
        assert t.user_attrs["nas.epochs_reached"] == 2 and t.user_attrs["nas.seconds"] > 0
        assert t.user_attrs["nas.node"]
        mine = [r for r in rows if r["trial_number"] == t.number]
        assert [r["epoch"] for r in mine] == [1, 2] and mine[-1]["value"] == accuracy
        assert all(math.isfinite(r["train_loss"]) for r in mine)
    assert run.study.user_attrs["nas.geometry"]["name"] == "digits"


def test_a_spent_timeout_starts_nothing(tmp_path) -> None:
    url, _ = _run(tmp_path, "timeout", h.instant,
                  budget={"trials": 50, "timeout_minutes": 1e-9})
    assert h.load(url, "timeout") == []


def test_rejections_in_a_row_end_the_study(tmp_path, monkeypatch, capsys) -> None:
    """The space has architectures within the constraint, but the first draws break it."""
    monkeypatch.setattr(pace, "MAX_REJECTED_IN_A_ROW", 5)
    path = h.write_study(tmp_path / "tight.yaml", "tight", constraints={"params_max": 20000},
                         enqueue=[{**BASE, **A}] * 6, evaluator="study_helpers:instant")
    db = tmp_path / "tight.db"
    assert nas_main(["run", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "5 architectures in a row were rejected" in err[-1] and "params_max" in err[-1]
    asked = [t for t in h.load(f"sqlite:///{db}", "tight") if t.state != TrialState.WAITING]
    assert len(asked) == 5 and all(_status(t) == "rejected" for t in asked)


def test_constraints_no_architecture_meets_are_refused_before_writing(tmp_path, capsys) -> None:
    path = h.write_study(tmp_path / "hopeless.yaml", "hopeless",
                         constraints={"params_max": 1000}, evaluator="study_helpers:instant")
    db = tmp_path / "hopeless.db"
    assert nas_main(["run", str(path), "--storage", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none of 300 architectures" in err[0]
    assert "params_max=1,000" in err[0] and "the smallest costs" in err[0]
    assert not db.exists()


def test_workers_that_cannot_start_stop_the_study_without_spending_it(tmp_path,
                                                                      monkeypatch) -> None:
    (tmp_path / "driver_only.py").write_text(
        "def evaluate(*args, **kwargs):\n    return {'status': 'completed', 'value': 0.5}\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the driver imports it, Ray workers cannot
    import driver_only

    with pytest.raises(NasError, match=r"Ray workers cannot start: .*driver_only"):
        _run(tmp_path, "unimportable", driver_only.evaluate)
    trials = h.load(f"sqlite:///{tmp_path / 'studies.db'}", "unimportable")
    assert counted_trials(trials) == 0 and trials
    assert {_status(t) for t in trials if t.state.is_finished()} == {"interrupted"}
