"""Samplers by name, and what a sampler learns from trials the scheduler stopped early."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from nas.errors import ConfigError
from studies import StudySpec, create_study, run_study
from studies.costaware import DEFAULT_POOL, CostAwareSampler
from studies.samplers import RETIRED_OPTIONS, SAMPLERS, LearnsFromStopped, make_sampler
from studies.spec import DEFAULT_SAMPLER, MEASURED_DEFAULT, load_study_spec
from studies.spec import StudySpec as Spec

DIRECTIONS = ["maximize", "minimize"]
ray_local = h.ray_local


def _study(sampler: optuna.samplers.BaseSampler, objectives: Any = ("accuracy", "params")
           ) -> optuna.Study:
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    study.set_user_attr("nas.objectives", list(objectives))
    return study


def _trial(study: optuna.Study, status: str, *, reached: int = 1, value: float = 0.5,
           attrs: dict[str, Any] | None = None) -> optuna.trial.Trial:
    """A trial closed as the engine closes one with ``status``: its cost, per-epoch values,
    user attributes and Optuna state."""
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    params = 1000.0 * x
    trial.set_user_attr("nas.cost", {"params": params, "madds": 2 * params})
    for key, v in {"nas.status": status, **(attrs or {})}.items():
        trial.set_user_attr(key, v)
    for epoch in range(1, reached + 1):
        study._storage.set_trial_intermediate_value(trial._trial_id, epoch, value + epoch / 10)
    state = {"completed": TrialState.COMPLETE, "stopped": TrialState.PRUNED}.get(
        status, TrialState.FAIL)
    study.tell(trial, [value + reached / 10, params] if state == TrialState.COMPLETE else None,
               state=state)
    return trial


def _seen(sampler: optuna.samplers.BaseSampler, study: optuna.Study,
          states: tuple[TrialState, ...] | None = None) -> dict[int, Any]:
    assert isinstance(sampler, LearnsFromStopped)
    view = sampler._view(study)
    return {t.number: (t.state, t.values) for t in view._get_trials(deepcopy=False,
                                                                    states=states)}


def test_a_stopped_trial_is_seen_with_its_values_at_the_epoch_it_reached() -> None:
    sampler = make_sampler({"name": "tpe"}, 0)
    study = _study(sampler)
    done = _trial(study, "completed", reached=4, value=0.5)
    stopped = _trial(study, "stopped", reached=2, value=0.3)
    rejected = _trial(study, "rejected", reached=0)
    failed = _trial(study, "failed", reached=1)
    params = {t.number: study.trials[t.number].user_attrs["nas.cost"]["params"]
              for t in (done, stopped)}
    seen = _seen(sampler, study)
    assert seen == {
        done.number: (TrialState.COMPLETE, [pytest.approx(0.9), params[done.number]]),
        stopped.number: (TrialState.COMPLETE, [pytest.approx(0.5), params[stopped.number]]),
        rejected.number: (TrialState.FAIL, None), failed.number: (TrialState.FAIL, None)}
    assert _seen(sampler, study, (TrialState.PRUNED,)) == {}
    # Only the sampler's view: the stored record still has the stopped trial PRUNED, no values.
    stored = study.trials[stopped.number]
    assert stored.state == TrialState.PRUNED and stored.values is None
    assert [t.number for t in study.best_trials] == [done.number]


def test_a_stopped_trial_without_a_usable_vector_is_left_out() -> None:
    """No epoch reported, a cost that does not parse, an objective measured only after the
    full epochs, or no stored objectives: the sampler does not see the trial at all (Optuna's
    multi-objective TPE raises on a pruned trial with intermediate values)."""
    sampler = make_sampler({"name": "tpe"}, 0)
    study = _study(sampler)
    _trial(study, "stopped", reached=0)
    _trial(study, "stopped", reached=1, attrs={"nas.cost": "not a mapping"})
    _trial(study, "stopped", reached=1, attrs={"nas.cost": {"params": -3}})
    kept = _trial(study, "stopped", reached=1)
    assert set(_seen(sampler, study)) == {kept.number}

    latency = make_sampler({"name": "tpe"}, 0)
    timed = _study(latency, ("accuracy", "latency_ms"))
    _trial(timed, "stopped", reached=1)
    assert _seen(latency, timed) == {}

    unnamed = make_sampler({"name": "tpe"}, 0)
    bare = optuna.create_study(directions=DIRECTIONS, sampler=unnamed)
    bare.set_user_attr("nas.objectives", "accuracy")  # not a list: does not parse
    _trial(bare, "stopped", reached=1)
    assert _seen(unnamed, bare) == {}


@pytest.mark.parametrize("name", ["tpe", "gp", "auto", "nsga2", "nsga3"])
def test_every_sampler_draws_in_a_study_of_mostly_stopped_trials(name) -> None:
    options = {"population_size": 4} if name in ("auto", "nsga2", "nsga3") else {}
    sampler = make_sampler({"name": name, **options}, 0)
    study = _study(sampler)
    for i in range(9):
        _trial(study, "completed" if i % 3 == 0 else "stopped", reached=4 if i % 3 == 0 else 1,
               value=0.1 * i)
    assert len(study.trials) == 9
    assert all(0.0 <= t.params["x"] <= 1.0 for t in study.trials)


@pytest.mark.parametrize("name", ["nsga2", "auto"])
def test_nsga2_generations_fill_with_stopped_trials(name) -> None:
    """NSGA-II builds a generation only from finished trials: the stopped ones count, so a
    study whose early stopping stops most trials still evolves."""
    sampler = make_sampler({"name": name, "population_size": 3}, 0)
    study = _study(sampler)
    for i in range(9):
        _trial(study, "stopped" if i % 3 else "completed", reached=1 if i % 3 else 4)
    generations = [next(v for k, v in t.system_attrs.items() if k.endswith(":generation"))
                   for t in study.trials]
    assert generations == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_memoryless_samplers_are_not_wrapped_and_the_rest_are() -> None:
    assert isinstance(make_sampler({"name": "random"}, 0), optuna.samplers.RandomSampler)
    for name in ("tpe", "gp", "auto", "nsga2"):
        assert isinstance(make_sampler({"name": name}, 0), LearnsFromStopped)


def test_sampler_options_are_checked() -> None:
    tpe = make_sampler({"name": "tpe", "n_startup_trials": 7, "multivariate": False}, 0)
    assert isinstance(tpe, LearnsFromStopped)
    assert isinstance(tpe.inner, optuna.samplers.TPESampler)
    assert tpe.inner._n_startup_trials == 7 and not tpe.inner._multivariate
    assert tpe.inner._constant_liar  # the default for parallel trials
    for spec, word in [({"name": "tpe", "populaton_size": 8}, "'populaton_size'"),
                       ({"name": "auto", "multivariate": True}, "'multivariate'"),
                       ({"name": "tpe", "gamma": 3}, "'gamma'"),
                       ({"name": "annealing"}, "'annealing'"),
                       ({"name": "auto", "population_size": 1}, "population_size")]:
        with pytest.raises(ConfigError, match=word):
            make_sampler(spec, 0)
    assert set(SAMPLERS) >= {"nsga2", "tpe", "gp", "auto", "random"}


def test_a_retired_option_is_ignored_and_an_unknown_one_still_refused() -> None:
    """``mc_samples`` (costaware before its expected gain had a closed form): a study stored by
    that release still parses; a misspelt option is still an error."""
    assert "mc_samples" in RETIRED_OPTIONS["costaware"]
    old = make_sampler({"name": "costaware", "candidates": 24, "mc_samples": 32}, 0)
    assert isinstance(old, LearnsFromStopped) and isinstance(old.inner, CostAwareSampler)
    assert old.inner.candidates == 24
    assert not hasattr(old.inner, "mc_samples")
    with pytest.raises(ConfigError, match="'mc_sample'"):
        make_sampler({"name": "costaware", "mc_sample": 32}, 0)
    with pytest.raises(ConfigError, match="'mc_samples'"):  # retired for costaware alone
        make_sampler({"name": "tpe", "mc_samples": 32}, 0)


def test_the_pool_grows_with_the_candidates_unless_given() -> None:
    """An earlier release drew ``candidates`` (up to any number) alone; the pool that keeps
    them between suggestions holds at least one suggestion's draws."""
    assert CostAwareSampler().pool == DEFAULT_POOL
    assert CostAwareSampler(candidates=100).pool == 100 + CostAwareSampler().early[1]
    assert CostAwareSampler(candidates=100, early_trials=0).pool == 100 + 8
    with pytest.raises(ValueError, match="pool at least"):
        CostAwareSampler(candidates=100, pool=64)


def test_the_default_sampler_is_the_one_the_benchmark_chose() -> None:
    """costaware: the best median final hypervolume of every arm on both tasks in
    benchmarks/search.py --samplers costaware (5 seeds, 24 epochs each, 2026-11-27; the README
    gives the table). The shipped study files use it, but for the one with a latency objective,
    which it cannot know before training: that one keeps GP, the default for such studies."""
    assert dict(DEFAULT_SAMPLER) == {"name": "costaware"}
    sampler = make_sampler(DEFAULT_SAMPLER, 0)
    assert isinstance(sampler, LearnsFromStopped)
    assert isinstance(sampler.inner, CostAwareSampler)
    shipped = sorted(Path(__file__).resolve().parent.parent.glob("studies/*.yaml"))
    assert shipped
    for path in shipped:
        spec = load_study_spec(path)
        measured = "latency_ms" in spec.objective_names
        assert spec.sampler == ({"name": "gp"} if measured else {"name": "costaware"}), path


def test_a_study_file_without_a_sampler_gets_the_default() -> None:
    data = h.study_dict("default")
    del data["sampler"]
    spec = Spec.from_dict(data)
    assert spec.sampler == dict(DEFAULT_SAMPLER)
    assert spec.to_dict()["sampler"] == dict(DEFAULT_SAMPLER)
    data["objectives"] = ["accuracy", "latency_ms"]
    assert Spec.from_dict(data).sampler == dict(MEASURED_DEFAULT) == {"name": "gp"}


@pytest.mark.usefixtures("ray_local")
@pytest.mark.timeout(600)
def test_the_default_sampler_learns_from_the_trials_a_study_stops(tmp_path: Path) -> None:
    data = h.study_dict("learns", budget={"trials": 10},
                        fidelity={"epochs": 4, "early_stopping": "asha", "grace_epochs": 1,
                                  "reduction_factor": 2})
    del data["sampler"]
    run = create_study(StudySpec.from_dict(data), f"sqlite:///{tmp_path / 's.db'}",
                       geometry=h.GEOMETRY)
    run_study(run, evaluator=h.instant, progress=False)
    trials = run.study.get_trials(deepcopy=False)
    stopped = [t for t in trials if t.state == TrialState.PRUNED]
    assert stopped and all(t.values is None for t in stopped)  # the record is unchanged
    sampler = make_sampler(run.spec.sampler, 0)
    seen = _seen(sampler, run.study)
    for t in stopped:
        reached = t.user_attrs["nas.epochs_reached"]
        assert seen[t.number] == (TrialState.COMPLETE, [
            t.intermediate_values[reached], t.user_attrs["nas.cost"]["params"]])
