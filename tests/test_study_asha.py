"""Early-stopping decisions and the progress hypervolume, as plain functions (no Ray)."""

from __future__ import annotations

import random

import pytest

from studies.asha import Rungs
from studies.pareto import hypervolume_history, normalized_hypervolume
from studies.worker import Coordinator


def _epoch(epoch: int, value: float) -> dict[str, float]:
    return {"epoch": epoch, "value": value}


def test_the_coordinator_decides_with_the_cost_vector_each_report_carries() -> None:
    """Each report carries its trial's cost objectives: no registration that could arrive after
    the first report (Ray orders calls per caller only)."""
    rungs = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"])
    coordinator = Coordinator(rungs)
    assert not coordinator.report(0, _epoch(1, 0.8), [100.0])
    assert not coordinator.report(1, _epoch(1, 0.9), [50.0])  # dominates trial 0
    assert coordinator.report(2, _epoch(1, 0.7), [200.0])  # dominated by both: stops
    assert not coordinator.report(3, _epoch(1, 0.5), [10.0])  # the smallest: non-dominated
    assert not coordinator.report(1, _epoch(3, 0.95), [50.0])  # no rung at epoch 3
    assert [n for n, _ in coordinator.drain()] == [0, 1, 2, 3, 1]
    assert coordinator.drain() == []


def test_without_rungs_nothing_stops() -> None:
    coordinator = Coordinator(None)
    assert not any(coordinator.report(n, _epoch(1, 0.1 * n), [1.0]) for n in range(5))
    assert len(coordinator.drain()) == 5


@pytest.mark.parametrize("directions", [["maximize", "minimize"],
                                        ["maximize", "minimize", "minimize"]])
def test_the_progress_hypervolume_is_the_last_of_the_history(directions) -> None:
    rng = random.Random(0)
    values = [[rng.random() for _ in directions] for _ in range(30)]
    assert normalized_hypervolume(values, directions) == pytest.approx(
        hypervolume_history(values, directions)[-1])
    assert normalized_hypervolume([], directions) == 0.0
