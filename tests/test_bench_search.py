"""``benchmarks/search.py``'s budget rule: every arm on the same epochs, read at the budget.

The arms themselves are the benchmark's run (minutes to an hour); here the pieces that decide
what each arm is scored on: Tune's stopper for the epoch budget, and reading a hypervolume curve
at the budget.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The benchmark's folder is on the path only while its modules are imported: its
# ``dashboard.py`` must not shadow the ``dashboard`` package for the tests that follow.
_path = list(sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
try:
    from _search_arms import EpochBudget, PicklableNSGAII
    from search import SeedRun, curve, epochs_to_reach, final
finally:
    sys.path[:] = _path


def test_the_tune_stopper_ends_every_trial_once_the_budget_is_trained() -> None:
    stop = EpochBudget(3)
    assert stop("t1", {"epoch": 0, "accuracy": 0.1}) is False  # a rejected trial: no epoch
    assert not stop.stop_all()
    stop("t1", {"epoch": 1})
    stop("t2", {"epoch": 1})
    assert not stop.stop_all()
    stop("t1", {"epoch": 2})
    assert stop.trained == 3 and stop.stop_all()


def test_a_curve_is_read_at_the_budget_and_an_arm_that_ended_before_at_its_end() -> None:
    reference = [0.0, 10.0, 10.0]  # accuracy up from 0, params and MAdds down from 10
    points = [(1, None), (5, [0.5, 5.0, 5.0]), (9, [0.9, 1.0, 1.0]), (14, [1.0, 0.0, 0.0])]
    c = curve(points, reference)
    assert [used for used, _ in c] == [1, 5, 9, 14]
    assert c[0][1] == 0.0 and 0 < c[1][1] < c[2][1] < c[3][1]
    assert final(c, 12) == c[2][1]  # the trial that finished after 12 epochs counts nothing
    assert final(c, 20) == c[3][1]  # ended before the budget: read at its own end
    assert final(c, 0) == 0.0
    assert epochs_to_reach(c, c[2][1], 12) == 9
    assert epochs_to_reach(c, c[3][1], 12) is None  # reached only past the budget
    run = SeedRun({"x": c, "empty": []}, budget=12)
    assert run.used("x") == 12 and run.used("empty") == 0
    assert SeedRun({"x": c}, budget=20).used("x") == 14


@pytest.mark.parametrize("budget", [1, 4])
def test_the_stopper_never_stops_before_the_budget(budget: int) -> None:
    stop = EpochBudget(budget)
    for reported in range(budget):
        assert not stop.stop_all()
        stop(f"t{reported}", {"epoch": 1})
    assert stop.stop_all()


def test_the_nsga2_peer_pickles_with_its_tune_searcher_and_samples_as_optunas() -> None:
    """Tune's ``Tuner`` pickles its searcher; Optuna 5's NSGA-II holds a lock that cannot be.
    The benchmark's copy pickles, and after a round trip draws what Optuna's own draws."""
    import optuna
    from ray import cloudpickle
    from ray.tune.search.optuna import OptunaSearch

    def space(trial: optuna.Trial) -> None:
        trial.suggest_int("x", 0, 100)
        trial.suggest_categorical("k", [1, 2, 4])

    # Why the copy exists; once Optuna's own pickles, this raises no more and the copy can go.
    with pytest.raises(TypeError, match="lock"):
        cloudpickle.dumps(optuna.samplers.NSGAIISampler(population_size=4, seed=1))
    searcher = OptunaSearch(space, metric=["a", "b"], mode=["max", "min"],
                            sampler=PicklableNSGAII(population_size=4, seed=1))
    loaded = cloudpickle.loads(cloudpickle.dumps(searcher))
    before, after = searcher._sampler, loaded._sampler
    assert isinstance(before, PicklableNSGAII) and isinstance(after, PicklableNSGAII)
    assert after._thread_lock is not before._thread_lock

    def draws(sampler: optuna.samplers.BaseSampler) -> list[dict[str, object]]:
        study = optuna.create_study(directions=["maximize", "minimize"], sampler=sampler)
        out = []
        for _ in range(10):
            trial = study.ask()
            space(trial)
            study.tell(trial, [trial.params["x"], trial.params["k"]])
            out.append(trial.params)
        return out

    assert draws(cloudpickle.loads(cloudpickle.dumps(PicklableNSGAII(population_size=4, seed=1)))
                 ) == draws(optuna.samplers.NSGAIISampler(population_size=4, seed=1))
