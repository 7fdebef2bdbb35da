"""What runs on a Ray worker: a plain training function, and the thin Tune trainable around it.

``evaluate_trial`` trains one architecture and returns a JSON-friendly result; it is testable
without Ray. ``trainable`` is the Ray Tune function trainable that calls it (or a study's own
evaluator with the same signature): it reports every epoch with ``ray.tune.report`` and, last, the
trial's final result (``studies.tune_report``'s ``EpochResult`` and ``FinalResult``). Early
stopping is Tune's: the scheduler's STOP ends the function at its next report. Task data is
cached per worker process, so a reused actor builds it once.

The module imports no torch, timm, model or trainer code: only the path that trains (or measures
latency) does, so a study whose evaluator trains nothing keeps its trial processes light (see
``benchmarks/worker_memory.py``). A trial Ray assigned a GPU trains on it
(``trainers.devices``) or fails with the reason.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from studies.tune_report import EpochResult, FinalResult

if TYPE_CHECKING:  # the workers import no storage code, and torch only to train
    from nas.config import ArchConfig
    from nas.tasks import TaskGeometry
    from studies._trials import Evaluator
    from trainers import TaskData
    from trainers.devices import Placement

__all__ = ["EvaluatorUnavailable", "evaluate_trial", "evaluator_call", "measure_latency_ms",
           "task_data", "trainable"]

_TASKS: dict[str, TaskData] = {}


class EvaluatorUnavailable(RuntimeError):
    """The worker cannot load the study's evaluator: not the trial's fault."""


def task_data(name: str, options: dict[str, Any]) -> TaskData:
    """``get_task(name, **options)``, built once per process."""
    from trainers import get_task

    key = json.dumps([name, options], sort_keys=True, default=str)
    if key not in _TASKS:
        _TASKS[key] = get_task(name, **options)
    return _TASKS[key]


def measure_latency_ms(config: ArchConfig, geometry: TaskGeometry, *, repeats: int = 10) -> float:
    """Median wall time of one forward pass on one sample (eval mode, no grad), in ms.

    The sample is the cost model's (``example_inputs``): a caption decoder runs on BOS + a full
    caption, ``nas.tasks.decoder_positions``, as in training; LXMERT skips what ``nas cost``
    skips (the last cross layer's vision half)."""
    import torch

    from nas.models import create_model

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
    checkpoint_dir: str | None = None, placement: Placement | None = None,
) -> dict[str, Any]:
    """Train one architecture with one training config; the result as a plain dict.

    With ``checkpoint_dir`` (the study's ``checkpoints`` key) the trained weights are saved
    there as ``nas train --out`` saves them, and ``checkpoint`` in the result is the file.
    ``placement`` is what Ray gave the trial: with a GPU the trial trains on it, and fails
    (status ``failed``, the reason) when CUDA cannot use it.
    """
    from nas.config import ArchConfig
    from trainers import TrainConfig, train
    from trainers.devices import GpuUnavailable, trial_device

    config = ArchConfig.from_dict(arch)
    cfg = TrainConfig.from_dict(settings)
    fraction = 1.0
    if placement is not None and placement.gpu_ids:
        try:
            cfg = replace(cfg, device=trial_device(cfg.device, placement))
        except GpuUnavailable as exc:
            return {"status": "failed", "reason": str(exc), "value": None, "epochs": [],
                    "seconds": 0.0, "samples_per_second": None, "arch_id": config.arch_id}
        fraction = placement.fraction
    data = task_data(task, task_options)
    result = train(config, cfg, data, (lambda e: report(asdict(e))) if report else None,
                   checkpoint_dir=checkpoint_dir, gpu_fraction=fraction)
    out = result.to_dict()
    if latency and result.status != "failed":
        out["latency_ms"] = measure_latency_ms(config, data.geometry)
    return out


def _planned_epochs(config: dict[str, Any]) -> int | None:
    epochs = (config.get("settings") or {}).get("epochs")
    return epochs if isinstance(epochs, int) and not isinstance(epochs, bool) else None


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
              threads: int = 1, gpu: float = 0.0) -> None:
    """Ray Tune function trainable: one trial of a study.

    ``config`` is what the study's searcher suggested (``number``, ``arch``, ``settings``,
    ``task``, ``task_options``, ``latency``, ``checkpoint_dir``); ``evaluator`` the study's own
    training function, pickled (None: :func:`evaluate_trial`, which is then given the trial's
    GPU placement); ``threads`` the torch threads of the CPUs the trial holds; ``gpu`` the
    study's ``resources.gpu``.
    """
    import ray
    from ray import cloudpickle, tune

    placement: Placement | None = None
    if evaluator is None:
        from trainers.devices import Placement

        function: Evaluator = evaluate_trial
        placement = Placement.from_ray(gpu, ray.get_gpu_ids())
    else:
        try:
            function = cloudpickle.loads(evaluator)
        except Exception as exc:  # e.g. its module is not importable on this node
            raise EvaluatorUnavailable(f"{type(exc).__name__}: {exc}") from None
    reported: list[EpochResult] = []
    planned = _planned_epochs(config)
    held: list[EpochResult] = []  # the last planned epoch: it goes with the final report

    def report(epoch: dict[str, Any]) -> bool:
        reported.append(EpochResult.from_evaluator(epoch))
        if reported[-1].epoch == planned:  # no rung sits at the last epoch: nothing to decide
            held.append(reported[-1])
            return False
        tune.report(reported[-1].to_tune())
        return False  # the scheduler's STOP ends this function inside tune.report

    args, kwargs = evaluator_call(config, report)
    if placement is not None:
        kwargs["placement"] = placement
    if evaluator is None or "torch" in sys.modules:  # an evaluator that trains with torch
        import torch

        torch.set_num_threads(max(1, threads))
    try:
        out = function(*args, **kwargs)
    except BaseException:
        for epoch in held:  # what was held back still reaches the record
            tune.report(epoch.to_tune())
        raise
    # One report for the last epoch and the trial's end (each report is a round trip through
    # Tune's driver).
    final = FinalResult.from_evaluator(out, reported[-1] if reported else None,
                                       node=ray.get_runtime_context().get_node_id())
    if not reported:  # an evaluator that did not call `report`: its curve, at the end
        for epoch in out.get("epochs") or []:
            tune.report(EpochResult.from_evaluator(epoch).to_tune())
    tune.report(final.to_tune())
