"""What runs on a Ray worker: a plain training function, and the thin Tune trainable around it.

``evaluate_trial`` trains one architecture and returns a JSON-friendly result; it is testable
without Ray. ``trainable`` is the Ray Tune function trainable that calls it (or a study's own
evaluator with the same signature): it reports every epoch with ``ray.tune.report`` and, last, the
trial's final result. Early stopping is Tune's: the scheduler's STOP ends the function at its
next report. Task data is cached per worker process, so a reused actor builds it once.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import torch

from nas.config import ArchConfig
from nas.models import create_model
from nas.tasks import TaskGeometry
from trainers import TaskData, TrainConfig, get_task, train

if TYPE_CHECKING:  # the workers import no storage code
    from studies._trials import Evaluator

__all__ = ["EvaluatorUnavailable", "evaluate_trial", "evaluator_call", "measure_latency_ms",
           "trainable"]

_TASKS: dict[str, TaskData] = {}
#: What the final report of a trial carries (the per-epoch reports carry ``epoch`` and its
#: metrics); every report has every key, so Tune's CSV and dataframe columns are stable.
FINAL_KEYS = ("status", "reason", "value", "seconds", "samples_per_second", "latency_ms",
              "checkpoint", "node", "epochs_reached")


class EvaluatorUnavailable(RuntimeError):
    """The worker cannot load the study's evaluator: not the trial's fault."""


def _task(name: str, options: dict[str, Any]) -> TaskData:
    key = json.dumps([name, options], sort_keys=True, default=str)
    if key not in _TASKS:
        _TASKS[key] = get_task(name, **options)
    return _TASKS[key]


def measure_latency_ms(config: ArchConfig, geometry: TaskGeometry, *, repeats: int = 10) -> float:
    """Median wall time of one forward pass on one sample (eval mode, no grad), in ms.

    The sample is the cost model's (``example_inputs``): a caption decoder runs on BOS + a full
    caption, ``nas.tasks.decoder_positions``, as in training; LXMERT skips what ``nas cost``
    skips (the last cross layer's vision half)."""
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


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _epoch_metrics(epoch: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "epoch", "epoch": int(epoch["epoch"]), "metric": epoch.get("metric"),
            "value": _number(epoch.get("value")), "train_loss": _number(epoch.get("train_loss")),
            "lr": _number(epoch.get("lr")), "epoch_seconds": _number(epoch.get("seconds")),
            "extra": json.dumps(epoch.get("extra") or {}),
            **dict.fromkeys(k for k in FINAL_KEYS if k != "value")}


def evaluator_call(config: dict[str, Any], report: Callable[[dict[str, Any]], bool]) -> tuple[
        tuple[Any, ...], dict[str, Any]]:
    """The arguments a trial's training function is called with, from the searcher's
    ``config``: ``(arch, settings, task, task_options)`` and the keywords ``latency`` and
    ``report``, and ``checkpoint_dir`` only when the study keeps checkpoints (an evaluator of
    one's own takes it only then). The engine checks a study's evaluator against this call
    before anything is written."""
    args = (config["arch"], config["settings"], config["task"], config["task_options"])
    kwargs: dict[str, Any] = {"latency": bool(config.get("latency")), "report": report}
    if config.get("checkpoint_dir"):
        kwargs["checkpoint_dir"] = config["checkpoint_dir"]
    return args, kwargs


def trainable(config: dict[str, Any], *, evaluator: bytes | None = None,
              threads: int = 1) -> None:
    """Ray Tune function trainable: one trial of a study.

    ``config`` is what the study's searcher suggested (``number``, ``arch``, ``settings``,
    ``task``, ``task_options``, ``latency``, ``checkpoint_dir``); ``evaluator`` the study's own
    training function, pickled (None: :func:`evaluate_trial`); ``threads`` the torch threads of
    the CPUs the trial holds.
    """
    import ray
    from ray import cloudpickle, tune

    torch.set_num_threads(max(1, threads))
    if evaluator is None:
        function: Evaluator = evaluate_trial
    else:
        try:
            function = cloudpickle.loads(evaluator)
        except Exception as exc:  # e.g. its module is not importable on this node
            raise EvaluatorUnavailable(f"{type(exc).__name__}: {exc}") from None
    last: dict[str, Any] = {}

    def report(epoch: dict[str, Any]) -> bool:
        last.update(_epoch_metrics(epoch))
        tune.report(dict(last))
        return False  # the scheduler's STOP ends this function inside tune.report

    args, kwargs = evaluator_call(config, report)
    out = function(*args, **kwargs)
    epochs = out.get("epochs") or []
    final = {**(last or _epoch_metrics({"epoch": 0})), "kind": "final",
             "status": str(out.get("status", "failed")), "reason": out.get("reason"),
             "value": _number(out.get("value")), "seconds": _number(out.get("seconds")),
             "samples_per_second": _number(out.get("samples_per_second")),
             "latency_ms": _number(out.get("latency_ms")), "checkpoint": out.get("checkpoint"),
             "node": ray.get_runtime_context().get_node_id(), "epochs_reached": len(epochs)}
    if not last and epochs:  # an evaluator that did not call `report`: its curve, at the end
        for epoch in epochs:
            tune.report(_epoch_metrics(epoch))
    tune.report(final)
