"""The cost-aware sampler: candidates costed exactly, accuracy learned, the largest expected
hypervolume improvement trained; refused where an objective is only known after training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from nas.errors import ConfigError
from studies import StudySpec, create_study, run_study
from studies._draw import DrawnTrial
from studies._gp import GaussianProcess
from studies.costaware import CostAwareSampler, Costing, bind
from studies.record import Status, TrialKey
from studies.samplers import LearnsFromStopped, make_sampler

ray_local = h.ray_local
DIRECTIONS = ["maximize", "minimize"]


def _cost_of(trial: optuna.Trial) -> tuple[str, list[float]] | None:
    """A toy space: ``x`` in [0, 1] costs ``1000 x`` parameters; above 0.9 it breaks the
    constraint."""
    x = trial.suggest_float("x", 0.0, 1.0)
    return None if x > 0.9 else (repr(x), [1000.0 * x])


def _key_of(params: dict[str, Any]) -> str | None:
    return repr(params["x"]) if "x" in params else None


def _bound(**options: Any) -> tuple[CostAwareSampler, optuna.Study]:
    sampler = CostAwareSampler(seed=0, **options)
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    sampler.costing = Costing(_cost_of, _key_of, 0, DIRECTIONS, [0.0, 1000.0], full_epochs=4)
    return sampler, study


def _tell(study: optuna.Study, x: float, accuracy: float) -> None:
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)  # the sampler's own draw, replaced below
    study.tell(trial, state=TrialState.FAIL)
    study.add_trial(optuna.trial.create_trial(
        params={"x": x}, distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
        values=[accuracy, 1000.0 * x], intermediate_values={4: accuracy}))


def test_with_the_same_accuracy_everywhere_it_trains_the_cheapest_candidate() -> None:
    sampler, study = _bound(candidates=16)
    for x in (0.5, 0.6, 0.7):
        _tell(study, x, 0.6)
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    assert x < 0.5  # cheaper than every trial so far: the only way to add hypervolume
    assert sampler._chosen  # held for the trial until it is told


def test_a_candidate_that_breaks_a_constraint_is_never_chosen() -> None:
    sampler, study = _bound(candidates=8)
    def high_only(t: optuna.Trial) -> tuple[str, list[float]] | None:
        x = t.suggest_float("x", 0, 1)
        return None if x < 0.95 else (repr(x), [1000.0 * x])

    sampler.costing = Costing(high_only, _key_of, 0, DIRECTIONS, [0.0, 1000.0], full_epochs=4)
    for x in (0.5, 0.6):
        _tell(study, x, 0.6)
    for _ in range(5):
        trial = study.ask()
        x = trial.suggest_float("x", 0.0, 1.0)
        if trial._trial_id in sampler._chosen:
            assert x >= 0.95
        study.tell(trial, state=TrialState.FAIL)


def test_trials_running_at_once_get_different_architectures() -> None:
    sampler, study = _bound(candidates=16)
    for x in (0.5, 0.6):
        _tell(study, x, 0.6)
    first, second = study.ask(), study.ask()
    a, b = (t.suggest_float("x", 0.0, 1.0) for t in (first, second))
    assert a != b  # the first is counted at its predicted accuracy while it runs
    study.tell(first, [0.6, 1000 * a])
    assert first._trial_id not in sampler._chosen and second._trial_id in sampler._chosen


def test_unbound_or_in_its_start_up_it_draws_as_the_random_sampler() -> None:
    unbound = optuna.create_study(directions=DIRECTIONS, sampler=CostAwareSampler(seed=3))
    plain = optuna.create_study(directions=DIRECTIONS,
                                sampler=optuna.samplers.RandomSampler(seed=3))
    for study in (unbound, plain):
        for _ in range(3):
            t = study.ask()
            study.tell(t, [t.suggest_float("x", 0, 1), 1.0])
    assert [t.params for t in unbound.trials] == [t.params for t in plain.trials]
    sampler, bound = _bound(n_startup_trials=2, startup="random")
    t = bound.ask()
    t.suggest_float("x", 0, 1)
    assert not sampler._chosen  # no trial finished: a random draw


def test_its_start_up_trains_the_cheapest_candidates_first() -> None:
    """Before any trial has finished, every candidate has the same prior on the metric: the
    largest expected improvement is the cheapest candidate, and the next trial, asked while
    the first runs, is the cheapest of its own draw that the first does not dominate."""
    sampler, study = _bound(candidates=16, n_startup_trials=2)
    first = study.ask()
    x = first.suggest_float("x", 0.0, 1.0)
    chosen, _, predicted = sampler._chosen[first._trial_id]
    assert chosen == {"x": x} and predicted == pytest.approx(0.5)  # between reference and 1
    # The candidates: drawn from the generator the sampler's seed gives.
    rng = np.random.default_rng(0)
    candidates = [DrawnTrial(rng).suggest_float("x", 0.0, 1.0) for _ in range(16)]
    assert x == min(c for c in candidates if c <= 0.9)
    second = study.ask()
    y = second.suggest_float("x", 0.0, 1.0)
    assert second._trial_id in sampler._chosen and y != x and y < 0.5
    with pytest.raises(ValueError, match="startup must be one of cost, random"):
        CostAwareSampler(startup="best")


def test_the_gaussian_process_fits_what_it_saw_and_is_unsure_away_from_it() -> None:
    x = np.linspace(0, 1, 8)[:, None]
    y = np.sin(3 * x[:, 0])
    gp = GaussianProcess(x, y)
    mu, sd = gp.predict(x)
    assert np.allclose(mu, y, atol=0.1)
    _, far_sd = gp.predict(np.array([[3.0]]))
    assert far_sd[0] > 5 * sd.max()


def test_bind_reaches_the_sampler_inside_the_view_and_no_other() -> None:
    costing = Costing(_cost_of, _key_of, 0, DIRECTIONS, None, full_epochs=1)
    wrapped = make_sampler({"name": "costaware", "candidates": 4}, 0)
    assert isinstance(wrapped, LearnsFromStopped)
    assert bind(wrapped, costing) and wrapped.inner.costing is costing
    assert not bind(make_sampler({"name": "gp"}, 0), costing)


def test_a_study_with_an_objective_measured_after_training_is_refused() -> None:
    data = h.study_dict("lat", sampler={"name": "costaware"})
    data["objectives"] = ["accuracy", "latency_ms"]
    with pytest.raises(ConfigError, match="latency_ms") as info:
        StudySpec.from_dict(data)
    assert "\n" not in str(info.value)
    data["objectives"] = ["params", "madds"]
    with pytest.raises(ConfigError, match="no metric"):
        StudySpec.from_dict(data)
    data["objectives"] = ["accuracy", "params", "madds"]
    assert StudySpec.from_dict(data).sampler == {"name": "costaware"}


@pytest.mark.usefixtures("ray_local")
@pytest.mark.timeout(600)
def test_a_study_run_by_the_engine_trains_the_candidates_it_chose(tmp_path: Path) -> None:
    """Through the engine: its searcher binds the study's costing, every trial (start-up too:
    chosen by cost) is one the sampler chose among costed candidates, never an architecture
    trained before (reuse teaches nothing), and each meets the constraint."""
    data = h.study_dict("costaware", budget={"trials": 6}, sampler={"name": "costaware",
                                                                     "candidates": 6})
    run = create_study(StudySpec.from_dict(data), f"sqlite:///{tmp_path / 's.db'}",
                       geometry=h.GEOMETRY)
    sampler = run.study.sampler
    assert isinstance(sampler, LearnsFromStopped)
    inner = sampler.inner
    assert isinstance(inner, CostAwareSampler)
    chosen: dict[int, dict[str, Any]] = {}
    before = inner.before_trial

    def spy(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        before(study, trial)
        if trial._trial_id in inner._chosen:
            chosen[trial.number] = inner._chosen[trial._trial_id][0]

    inner.before_trial = spy  # type: ignore[method-assign]
    run_study(run, evaluator=h.instant, progress=False)
    trials = {t.number: t for t in run.study.get_trials(deepcopy=False)}
    assert {0, 1} <= set(chosen)  # the start-up's trials too (a draw with every candidate
    # trained before goes to the random sampler)
    for number, params in chosen.items():
        trial = trials[number]
        assert trial.params == params  # the engine trained what the sampler chose
        assert trial.user_attrs[TrialKey.STATUS] in (Status.COMPLETED, Status.STOPPED)
    assert sum(t.user_attrs.get(TrialKey.STATUS) in (Status.COMPLETED, Status.STOPPED,
                                                     Status.REUSED) for t in trials.values()) == 6
