"""Early-stopping decisions (the Tune scheduler, called directly) and the progress hypervolume."""

from __future__ import annotations

import random
from typing import Any

import pytest
from ray.tune.schedulers import TrialScheduler

from studies.asha import MultiObjectiveASHA, Rungs
from studies.pareto import hypervolume_history, normalized_hypervolume

CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP


class _Trial:
    """What the scheduler reads of a Tune trial: its id and its config."""

    def __init__(self, number: int, cost: float) -> None:
        self.trial_id = f"t{number}"
        self.config = {"number": number, "cost_vector": [cost]}


def _epoch(epoch: int, value: float | None) -> dict[str, Any]:
    return {"kind": "epoch", "epoch": epoch, "value": value}


def test_the_scheduler_stops_dominated_trials_at_a_rung() -> None:
    """Each trial's cost objectives come from its config, so a decision needs no registration
    that could arrive after the first report."""
    rungs = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"])
    stopped: list[tuple[str, int]] = []
    scheduler = MultiObjectiveASHA(rungs, on_stop=lambda trial_id, epoch: stopped.append(
        (trial_id, epoch)))
    t0, t1, t2, t3 = _Trial(0, 100.0), _Trial(1, 50.0), _Trial(2, 200.0), _Trial(3, 10.0)
    assert scheduler.on_trial_result(None, t0, _epoch(1, 0.8)) == CONTINUE
    assert scheduler.on_trial_result(None, t1, _epoch(1, 0.9)) == CONTINUE  # dominates t0
    assert scheduler.on_trial_result(None, t2, _epoch(1, 0.7)) == STOP  # dominated by both
    assert scheduler.on_trial_result(None, t3, _epoch(1, 0.5)) == CONTINUE  # the smallest
    assert scheduler.on_trial_result(None, t1, _epoch(3, 0.95)) == CONTINUE  # no rung at 3
    assert stopped == [("t2", 1)]
    # The final report of a trial and a report without a value decide nothing.
    assert scheduler.on_trial_result(None, t2, {"kind": "final", "epoch": 1, "value": 0.1}) \
        == CONTINUE
    assert scheduler.on_trial_result(None, t2, _epoch(1, None)) == CONTINUE


@pytest.mark.parametrize("directions", [["maximize", "minimize"],
                                        ["maximize", "minimize", "minimize"]])
def test_the_progress_hypervolume_is_the_last_of_the_history(directions) -> None:
    rng = random.Random(0)
    values = [[rng.random() for _ in directions] for _ in range(30)]
    assert normalized_hypervolume(values, directions) == pytest.approx(
        hypervolume_history(values, directions)[-1])
    assert normalized_hypervolume([], directions) == 0.0
