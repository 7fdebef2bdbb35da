"""What runs on a Ray worker: a plain function, and the thin, stateless actor around it.

``evaluate_trial`` trains one architecture and returns a JSON-friendly result; it is testable
without Ray. ``TrialWorker`` is the Ray actor that calls it: reused across trials (its only state
is a cache of generated task data), reporting each epoch to the study's coordinator, which may
answer "stop" (early stopping).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch

from nas.config import ArchConfig
from nas.models import create_model
from nas.tasks import TaskGeometry
from trainers import TaskData, TrainConfig, get_task, train

__all__ = ["TrialWorker", "evaluate_trial", "measure_latency_ms"]

_TASKS: dict[str, TaskData] = {}


def _task(name: str, options: dict[str, Any]) -> TaskData:
    key = json.dumps([name, options], sort_keys=True, default=str)
    if key not in _TASKS:
        _TASKS[key] = get_task(name, **options)
    return _TASKS[key]


def measure_latency_ms(config: ArchConfig, geometry: TaskGeometry, *, repeats: int = 10) -> float:
    """Median wall time of one forward pass on one sample (eval mode, no grad), in ms."""
    model = create_model(config, geometry).eval()
    inputs = model.example_inputs(1)
    times = []
    with torch.no_grad():
        model(**inputs)  # warm-up
        for _ in range(repeats):
            start = time.perf_counter()
            model(**inputs)
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def evaluate_trial(
    arch: dict[str, Any], settings: dict[str, Any], task: str, task_options: dict[str, Any],
    *, latency: bool = False, report: Callable[[dict[str, Any]], bool] | None = None,
    checkpoint_dir: str | None = None,
) -> dict[str, Any]:
    """Train one architecture with one training config; the result as a plain dict.

    With ``checkpoint_dir`` (the study's ``checkpoints`` key) the trained weights are saved
    there as ``nas train --out`` saves them, and ``checkpoint`` in the result is the file.
    """
    config = ArchConfig.from_dict(arch)
    data = _task(task, task_options)
    cfg = TrainConfig.from_dict(settings)
    result = train(config, cfg, data, (lambda e: report(asdict(e))) if report else None,
                   checkpoint_dir=checkpoint_dir)
    out = result.to_dict()
    if latency and result.status != "failed":
        out["latency_ms"] = measure_latency_ms(config, data.geometry)
    return out


class TrialWorker:
    """Ray actor: made remote (with the study's CPUs/GPUs per trial) by the engine."""

    def __init__(self, evaluator: Callable[..., dict[str, Any]] | None = None,
                 threads: int = 1) -> None:
        torch.set_num_threads(threads)  # the CPUs one trial holds; the engine sizes the pool
        self.evaluator = evaluator or evaluate_trial

    def run(self, number: int, arch: dict[str, Any], settings: dict[str, Any], task: str,
            task_options: dict[str, Any], latency: bool, coordinator: Any,
            cost_vector: list[float] | None = None,
            checkpoint_dir: str | None = None) -> dict[str, Any]:
        import ray

        def report(epoch: dict[str, Any]) -> bool:
            return bool(ray.get(coordinator.report.remote(number, epoch, cost_vector)))

        # An evaluator of the user's own gets `checkpoint_dir` only when the study asks for it.
        extra = {"checkpoint_dir": checkpoint_dir} if checkpoint_dir else {}
        out = self.evaluator(arch, settings, task, task_options, latency=latency, report=report,
                             **extra)
        out["node"] = ray.get_runtime_context().get_node_id()
        return out


class Coordinator:
    """Ray actor between workers and the driver: early-stopping decisions and epoch reports.

    Workers call ``report`` after each epoch, with the trial's cost objectives, and get back
    whether to stop; the driver drains the reports to write them to the database (the driver is
    the only writer).
    """

    def __init__(self, rungs: Any) -> None:
        self.rungs = rungs
        self.pending: list[tuple[int, dict[str, Any]]] = []

    def report(self, number: int, epoch: dict[str, Any],
               cost_vector: list[float] | None = None) -> bool:
        self.pending.append((number, epoch))
        if self.rungs is None:
            return False
        vector = [epoch["value"], *(cost_vector or [])]
        return bool(self.rungs.should_stop(number, int(epoch["epoch"]), vector))

    def drain(self) -> list[tuple[int, dict[str, Any]]]:
        out, self.pending = self.pending, []
        return out
