"""The cost-aware sampler: candidates costed exactly, accuracy learned, the largest expected
hypervolume improvement trained; refused where an objective is only known after training."""

from __future__ import annotations

import math
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
from studies.costaware import GAIN_KEY, SECONDS_KEY, CostAwareSampler, Costing, _Memory, bind
from studies.samplers import LearnsFromStopped, make_sampler
from studies.store import Status, TrialKey

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


def _arch_and_lr(trial: optuna.Trial) -> tuple[str, list[float]] | None:
    """A space whose cost is the architecture's (``a``), with a learning rate that costs
    nothing: the same architecture at many learning rates ties on cost."""
    a = trial.suggest_int("a", 1, 6)
    return f"{a}|{trial.suggest_float('lr', 1e-4, 1e-2, log=True)!r}", [1000.0 * a]


@pytest.mark.parametrize("finished", [0, 4])
def test_trials_asked_at_once_spread_over_architectures(finished: int) -> None:
    """Eight trials asked before any is told: each running one counts as observed at its
    predicted score (in the start-up and with the model alike), so they do not all train the
    cheapest architecture at eight learning rates (as they did: ``benchmarks/cluster.py``'s
    first eight trials)."""
    sampler = CostAwareSampler(seed=0)
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    sampler.costing = Costing(_arch_and_lr, lambda p: f"{p['a']}|{p['lr']!r}" if p else None,
                              0, DIRECTIONS, [0.0, 7000.0], full_epochs=4)
    for i in range(finished):
        t = study.ask()
        a = t.suggest_int("a", 1, 6)
        t.suggest_float("lr", 1e-4, 1e-2, log=True)
        study.tell(t, [0.5 + 0.05 * i, 1000.0 * a])
    asked = [study.ask() for _ in range(8)]
    archs = [t.suggest_int("a", 1, 6) for t in asked]
    for t in asked:
        t.suggest_float("lr", 1e-4, 1e-2, log=True)
    assert len(sampler._chosen) == 8 and len(set(archs)) >= 3, archs


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


def test_each_chosen_trial_records_its_expected_gain_and_seconds() -> None:
    _sampler, study = _bound(candidates=8)
    for x, acc in ((0.5, 0.6), (0.2, 0.3)):
        _tell(study, x, acc)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    attrs = study._storage.get_trial(trial._trial_id).system_attrs
    assert attrs[GAIN_KEY] > 0 and attrs[SECONDS_KEY] >= 0
    # the gain is what the chosen candidate adds in expectation: at most the volume left
    assert attrs[GAIN_KEY] <= 1.0 - 0.6 * 0.5


def test_past_max_points_the_model_fits_a_subset_and_refits_on_a_schedule() -> None:
    sampler, study = _bound(candidates=8, mutations=4, max_points=6)
    rng = np.random.default_rng(0)
    for x in rng.uniform(0, 0.9, 20):
        _tell(study, float(x), float(0.3 + 0.5 * x))
    trial = study.ask()
    x = trial.suggest_float("x", 0.0, 1.0)
    assert trial._trial_id in sampler._chosen and sampler._hyper is not None
    first_fit = sampler._hyper_at
    study.tell(trial, [0.3 + 0.5 * x, 1000 * x])
    study.ask()  # one more trial than at the fit: the length scale and noise are kept
    assert sampler._hyper_at == first_fit
    for x in rng.uniform(0, 0.9, 10):
        _tell(study, float(x), float(0.3 + 0.5 * x))
    study.ask()  # a third more: searched again
    assert sampler._hyper_at > first_fit


def test_a_small_study_draws_more_candidates_a_trial_than_a_large_one() -> None:
    """Below ``early_trials`` finished trials, each suggestion draws ``early_candidates`` at
    random and ``early_mutations`` neighbours; from there on ``candidates`` and ``mutations``."""
    drawn: list[float] = []

    def counting(trial: optuna.Trial) -> tuple[str, list[float]] | None:
        got = _cost_of(trial)
        drawn.append(trial.params["x"])
        return got

    sampler = CostAwareSampler(seed=0, early_trials=4)  # 24 + 16 early, then 8 + 8
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    sampler.costing = Costing(counting, _key_of, 0, DIRECTIONS, [0.0, 1000.0], full_epochs=4)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}

    def add(x: float) -> None:
        study.add_trial(optuna.trial.create_trial(params={"x": x}, distributions=dist,
                                                  values=[0.3 + 0.5 * x, 1000.0 * x]))

    for x in (0.1, 0.4, 0.7):
        add(x)
    study.ask()
    assert len(drawn) == 24 + 16  # 3 finished: the early draws (the front has parents)
    add(0.2)
    drawn.clear()
    study.ask()
    assert len(drawn) == 8 + 8  # 4 finished
    assert sampler.draws(3) == (24, 16) and sampler.draws(4) == (8, 8)
    # the early draws are never fewer than the steady ones; early_trials 0 turns them off
    assert CostAwareSampler(candidates=30).draws(0) == (30, 16)
    assert CostAwareSampler(early_trials=0).draws(0) == (8, 8)
    with pytest.raises(ValueError, match="early_trials"):
        CostAwareSampler(early_trials=-1)


def test_mutations_are_neighbours_of_the_front() -> None:
    def grid(t: optuna.Trial) -> tuple[str, list[float]] | None:
        a, b, c = (t.suggest_int(n, 0, 50) for n in "abc")
        return f"{a},{b},{c}", [float(a + b + c)]

    sampler = CostAwareSampler(seed=0, candidates=1, mutations=16, early_trials=0)
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    sampler.costing = Costing(grid, lambda p: ",".join(str(p.get(n)) for n in "abc"), 0,
                              DIRECTIONS, [0.0, 150.0], full_epochs=1)
    dists = {n: optuna.distributions.IntDistribution(0, 50) for n in "abc"}
    parents = [(10, 10, 10), (30, 40, 20)]
    for (a, b, c), acc in zip(parents, (0.5, 0.9), strict=True):
        study.add_trial(optuna.trial.create_trial(params={"a": a, "b": b, "c": c},
                                                  distributions=dists, values=[acc, a + b + c]))
    drawn, _ = sampler._draw(sampler.costing, _read(sampler, study))
    neighbours = [p for p, _, _ in drawn[1:]]  # after the one random candidate
    assert len(neighbours) >= 8
    for p in neighbours:  # one or two of a front trial's three parameters drawn again
        assert any(sum(p[n] == v for n, v in zip("abc", parent, strict=True)) >= 1
                   for parent in parents)


def _read(sampler: CostAwareSampler, study: optuna.Study) -> Any:
    memory = sampler._memory.setdefault(study._study_id, _Memory())
    assert sampler.costing is not None
    memory.read(study.get_trials(deepcopy=False), sampler.costing)
    return memory


def test_a_drawn_trial_keeps_fixed_values_inside_their_distribution_and_draws_the_rest() -> None:
    rng = np.random.default_rng(0)
    t = DrawnTrial(rng, {"a": 3, "b": 99, "c": "y"})
    assert t.suggest_int("a", 0, 5) == 3
    assert 0 <= t.suggest_int("b", 0, 5) <= 5  # 99 is outside: drawn
    assert t.suggest_categorical("c", ["x", "y"]) == "y"
    assert t.suggest_int("a", 0, 5) == 3  # asked again: the same value
    stepped = [DrawnTrial(rng).suggest_float("f", 0.0, 1.0, step=0.25) for _ in range(50)]
    assert set(stepped) <= {0.0, 0.25, 0.5, 0.75, 1.0} and len(set(stepped)) > 2
    logged = [DrawnTrial(rng).suggest_int("n", 1, 1000, log=True) for _ in range(200)]
    assert min(logged) >= 1 and max(logged) <= 1000 and np.median(logged) < 200
    assert set(t.params) == {"a", "b", "c"} and set(t.distributions) == {"a", "b", "c"}
    with pytest.raises(NotImplementedError, match="never trained"):
        t.report(0.5, 1)


def test_with_the_validation_samples_each_choice_records_the_hypervolumes_noise() -> None:
    """Told the metric's validation samples, the sampler records with each choice the
    hypervolume's noise the front's measured accuracies give it (the binomial rule); not told
    them, none."""
    from studies.convergence import binomial_sd, hypervolume_noise
    from studies.costaware import NOISE_KEY

    sampler, study = _bound(candidates=8)
    sampler.costing = Costing(_cost_of, _key_of, 0, DIRECTIONS, [0.0, 1000.0], full_epochs=4,
                              samples=200)
    told = ((0.5, 0.6), (0.2, 0.3), (0.7, 0.5))  # the last is dominated: no noise of its own
    for x, acc in told:
        _tell(study, x, acc)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    recorded = study._storage.get_trial(trial._trial_id).system_attrs[NOISE_KEY]
    values = [[acc, 1000.0 * x] for x, acc in told]
    expected = hypervolume_noise(values, DIRECTIONS, [0.0, 1000.0], 0,
                                 binomial_sd([v[0] for v in values], 200))
    assert recorded == pytest.approx(expected) and recorded > 0
    # 0.6 at cost 0.5 alone covers costs 0.5-1 at its level, 0.3 at cost 0.2 those 0.2-0.5
    assert recorded == pytest.approx(math.hypot(0.5 * math.sqrt(0.24 / 200),
                                                0.3 * math.sqrt(0.21 / 200)))
    _unbound, plain = _bound(candidates=8)
    for x, acc in told:
        _tell(plain, x, acc)
    trial = plain.ask()
    trial.suggest_float("x", 0.0, 1.0)
    assert NOISE_KEY not in plain._storage.get_trial(trial._trial_id).system_attrs


def test_the_engine_costs_a_candidate_with_only_what_its_study_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A study that names no MAdds costs a sampler's candidate by its parameters on the meta
    build (no traced pass; the count its whole cost gives), once per architecture; a study
    that names MAdds costs it whole. A candidate that breaks a constraint is refused."""
    import studies.searcher as searcher_module
    from nas.cost import estimate_cost
    from studies._trials import suggest
    from studies.searcher import StudySearcher

    traced: list[str] = []
    real = searcher_module._cost_and_memory

    def counted(config: Any, geometry: Any) -> Any:
        traced.append(config.arch_id)
        return real(config, geometry)

    monkeypatch.setattr(searcher_module, "_cost_and_memory", counted)
    params_only = create_study(StudySpec.from_dict(h.study_dict("p")),
                               f"sqlite:///{tmp_path / 'p.db'}", geometry=h.GEOMETRY)
    searcher = StudySearcher(params_only, h.GEOMETRY)
    drawn = [DrawnTrial(np.random.default_rng(1)) for _ in range(2)]  # the same draw twice
    outs = [searcher._cost_of(t) for t in drawn]  # type: ignore[arg-type]
    assert outs[0] is not None and outs[0] == outs[1]
    config, _ = suggest(params_only.space, DrawnTrial(np.random.default_rng(1)), False)
    assert outs[0][1] == [float(estimate_cost(config, h.GEOMETRY).params)]
    assert traced == [] and list(searcher.params) == [config.arch_id]

    data = h.study_dict("m", objectives=[{"name": "accuracy", "direction": "maximize"},
                                         {"name": "madds", "direction": "minimize"}])
    with_madds = create_study(StudySpec.from_dict(data), f"sqlite:///{tmp_path / 'm.db'}",
                              geometry=h.GEOMETRY)
    out = StudySearcher(with_madds, h.GEOMETRY)._cost_of(
        DrawnTrial(np.random.default_rng(1)))  # type: ignore[arg-type]
    assert out is not None and out[1] == [float(estimate_cost(config, h.GEOMETRY).madds)]
    assert traced == [config.arch_id]

    bound = {"params_max": outs[0][1][0] - 1}  # the drawn architecture breaks it, not all do
    tight = create_study(StudySpec.from_dict(h.study_dict("t", constraints=bound)),
                         f"sqlite:///{tmp_path / 't.db'}", geometry=h.GEOMETRY)
    assert StudySearcher(tight, h.GEOMETRY)._cost_of(
        DrawnTrial(np.random.default_rng(1))) is None  # type: ignore[arg-type]
