"""What a trial's worker sends Tune (``studies.worker.trainable``), without Ray: one report per
epoch, except that the last planned epoch goes with the final report (each report is a round
trip through Tune's driver), and nothing held back is lost when the evaluator raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import ray
from ray import cloudpickle, tune

from studies.tune_report import EpochResult, FinalResult, kind_of
from studies.worker import trainable


class _Context:
    def get_node_id(self) -> str:
        return "node-1"


def _run(evaluate: Callable[..., dict[str, Any]], epochs: int,
         monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(tune, "report", lambda metrics: sent.append(dict(metrics)))
    monkeypatch.setattr(ray, "get_runtime_context", _Context)
    config = {"number": 0, "arch": {}, "settings": {"epochs": epochs}, "task": "t",
              "task_options": {}}
    trainable(config, evaluator=cloudpickle.dumps(evaluate))
    return sent


def _evaluator(values: list[float], *, final: float = 0.9,
               fail: bool = False) -> Callable[..., dict[str, Any]]:
    def evaluate(arch: Any, settings: Any, task: Any, options: Any, *, latency: bool = False,
                 report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        rows = []
        for epoch, value in enumerate(values, start=1):
            row = {"epoch": epoch, "value": value, "metric": "accuracy", "train_loss": 1.0}
            rows.append(row)
            assert report is not None
            report(row)
        if fail:
            raise RuntimeError("after the last epoch")
        return {"status": "completed", "value": final, "epochs": rows, "seconds": 1.0}
    return evaluate


def test_the_last_planned_epoch_goes_with_the_final_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent = _run(_evaluator([0.5, 0.6, 0.7]), 3, monkeypatch)
    assert [(r["kind"], r["epoch"]) for r in sent] == [("epoch", 1), ("epoch", 2), ("final", 3)]
    final = sent[-1]
    assert final["value"] == 0.9 and final["epoch_value"] == 0.7
    assert final["epochs_reached"] == 3 and final["status"] == "completed"
    assert set(sent[0]) == set(final)  # every report has every key (Tune's columns)


def test_an_evaluator_that_ends_early_or_runs_longer_reports_every_epoch(
        monkeypatch: pytest.MonkeyPatch) -> None:
    early = _run(_evaluator([0.5, 0.6]), 3, monkeypatch)
    assert [(r["kind"], r["epoch"]) for r in early] == [("epoch", 1), ("epoch", 2),
                                                          ("final", 2)]
    assert early[-1]["epoch_value"] == 0.6


def test_a_held_epoch_is_reported_when_the_evaluator_raises(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(tune, "report", lambda metrics: sent.append(dict(metrics)))
    monkeypatch.setattr(ray, "get_runtime_context", _Context)
    config = {"number": 0, "arch": {}, "settings": {"epochs": 2}, "task": "t",
              "task_options": {}}
    with pytest.raises(RuntimeError, match="after the last epoch"):
        trainable(config, evaluator=cloudpickle.dumps(_evaluator([0.5, 0.6], fail=True)))
    assert [(r["kind"], r["epoch"], r["value"]) for r in sent] == [("epoch", 1, 0.5),
                                                                     ("epoch", 2, 0.6)]


def test_the_driver_reads_back_what_the_worker_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """``studies.tune_report``: what Tune carries is read back as the same fields (the
    searcher's and the scheduler's view), the final report's epoch with its own value."""
    sent = _run(_evaluator([0.5, 0.6, 0.7]), 3, monkeypatch)
    assert [kind_of(r) for r in sent] == ["epoch", "epoch", "final"]
    first = EpochResult.from_tune(sent[0])
    assert first == EpochResult(epoch=1, metric="accuracy", value=0.5, train_loss=1.0)
    assert first.to_tune() == sent[0]
    end = FinalResult.from_tune(sent[-1])
    assert (end.status, end.value, end.seconds, end.epochs_reached, end.node) == (
        "completed", 0.9, 1.0, 3, "node-1")
    assert end.epoch == EpochResult(epoch=3, metric="accuracy", value=0.7, train_loss=1.0)
    assert end.to_tune() == sent[-1]
    assert end.epoch.record() == {"epoch": 3, "train_loss": 1.0, "metric": "accuracy",
                                  "value": 0.7, "seconds": None, "extra": {}}
    assert kind_of({"time_total_s": 1.0}) is None  # a result of Tune's own
