"""The trivial trial of ``benchmarks/cluster.py``, for both arms: it sleeps
``$NAS_BENCH_EPOCH_SECONDS`` (default 1) per epoch and reports each epoch.

``evaluate`` is the engine's study ``evaluator:`` (``_sleep_trial:evaluate``: the nodes have
``benchmarks/`` on their ``PYTHONPATH``); ``tune_trainable`` is plain Ray Tune's function
trainable for the same work. The accuracy is made up from the architecture (stable, no
training); ``params`` is a made-up size, so neither arm runs a cost model on the workers.

With ``$NAS_BENCH_TIMES`` naming a folder, each trial appends one JSON line to
``FOLDER/PID.jsonl`` (``arm``: ``nas`` or ``tune``, ``entered`` and ``left``: the function's
wall-clock start and end, ``reports``: the seconds each report took to return). Tune's function
trainable reports synchronously: a report returns when the driver has handled the result and
told the trial to go on, so its time is the driver's latency per result.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from typing import Any

__all__ = ["QuickstartSpace", "evaluate", "made_up", "tune_trainable"]


def made_up(arch: dict[str, Any]) -> tuple[float, float]:
    """(accuracy in [0.5, 0.9), params) stable per architecture."""
    digest = hashlib.sha1(json.dumps(arch, sort_keys=True).encode()).digest()
    return 0.5 + 0.4 * digest[0] / 256, float(1000 + 1000 * digest[1])


def _epoch_seconds() -> float:
    return float(os.environ.get("NAS_BENCH_EPOCH_SECONDS", "1.0"))


def _timed(call: Callable[[dict[str, Any]], Any], took: list[float]) -> Callable[..., Any]:
    def timed(row: dict[str, Any]) -> Any:
        began = time.perf_counter()
        try:
            return call(row)
        finally:
            took.append(time.perf_counter() - began)
    return timed


def _write_times(arm: str, entered: float, took: list[float]) -> None:
    folder = os.environ.get("NAS_BENCH_TIMES")
    if folder:
        line = {"arm": arm, "entered": entered, "left": time.time(), "reports": took}
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a") as out:
            out.write(json.dumps(line) + "\n")


def evaluate(arch: dict[str, Any], settings: dict[str, Any], task: str,
             task_options: dict[str, Any], *, latency: bool = False,
             report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The engine's evaluator: ``settings['epochs']`` sleeps, one report each."""
    entered = time.time()
    took: list[float] = []
    if report is not None:
        report = _timed(report, took)
    try:
        return _sleep(arch, settings, report)
    finally:
        _write_times("nas", entered, took)


def _sleep(arch: dict[str, Any], settings: dict[str, Any],
           report: Callable[[dict[str, Any]], bool] | None) -> dict[str, Any]:
    accuracy, _ = made_up(arch)
    epochs, pause = [], _epoch_seconds()
    for epoch in range(1, int(settings["epochs"]) + 1):
        time.sleep(pause)
        row = {"epoch": epoch, "train_loss": 1.0 / epoch, "metric": "accuracy",
               "value": accuracy, "seconds": pause, "extra": {}}
        epochs.append(row)
        if report is not None and report(row):
            return {"status": "stopped", "value": accuracy, "epochs": epochs,
                    "seconds": pause * epoch, "metric": "accuracy"}
    return {"status": "completed", "value": accuracy, "epochs": epochs,
            "seconds": pause * len(epochs), "samples_per_second": 0.0, "metric": "accuracy"}


def tune_trainable(config: dict[str, Any]) -> None:
    """Plain Ray Tune's trainable: the same sleeps, one ``tune.report`` per epoch."""
    from ray import tune

    entered = time.time()
    took: list[float] = []
    report = _timed(tune.report, took)
    accuracy, params = made_up(config["arch"])
    pause = _epoch_seconds()
    try:
        for _ in range(int(config["epochs"])):
            time.sleep(pause)
            report({"accuracy": accuracy, "params": params})
    finally:
        _write_times("tune", entered, took)


class QuickstartSpace:
    """The ``quickstart`` space as ``OptunaSearch``'s define-by-run function (a module-level
    class: Tune pickles its searcher with the standard pickle)."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs

    def __call__(self, trial: Any) -> dict[str, Any]:
        from search_spaces import load_space

        config, _ = load_space("quickstart").suggest(trial)
        return {"arch": config.to_dict(), "epochs": self.epochs}
