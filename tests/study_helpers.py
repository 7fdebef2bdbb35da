"""Fake evaluators and small study files for the study-engine tests.

The evaluators have the signature of ``studies.worker.evaluate_trial`` and run inside Ray
workers, which import them by module name (``study_helpers``): :data:`TESTS_DIR` must be on the
workers' ``PYTHONPATH`` (:func:`worker_env` puts it there before Ray starts). Their results are
deterministic functions of the architecture, so tests can predict them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

TESTS_DIR = Path(__file__).resolve().parent
ROOT = TESTS_DIR.parent
NAS = str(Path(sys.executable).with_name("nas"))

# A vit space on `digits` small enough that a study re-samples architectures: 2 x 2 x 2 = 8.
SMALL_SPACE: dict[str, Any] = {
    "name": "tiny",
    "base": {"family": "vit", "d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 2,
             "patch_size": 8},
    "arch": {"groups": {"choices": [1, 2]}, "group_ffn": {"choices": [False, True]},
             "attention_sharing": {"choices": ["none", "kv"]}},
}
# NaN for this width: the fake evaluator reports the failure the trainer would.
NAN_GROUPS = 2


def worker_env() -> None:
    """Let Ray workers started from now on import this module."""
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(TESTS_DIR) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), *filter(None, paths)])


def study_dict(name: str, **overrides: Any) -> dict[str, Any]:
    """A study on `digits` over :data:`SMALL_SPACE`, with ``overrides`` on top."""
    data: dict[str, Any] = {
        "name": name, "task": "digits", "space": SMALL_SPACE,
        "objectives": [{"name": "accuracy", "direction": "maximize"},
                       {"name": "params", "direction": "minimize"}],
        "sampler": {"name": "random"}, "budget": {"trials": 6},
        "fidelity": {"epochs": 2}, "resources": {"cpu": 1}, "seed": 0,
    }
    data.update(overrides)
    return data


def write_study(path: Path, name: str, **overrides: Any) -> Path:
    path.write_text(yaml.safe_dump(study_dict(name, **overrides), sort_keys=False))
    return path


def fake_value(arch: dict[str, Any], epoch: int) -> float:
    """A made-up accuracy in [0.5, 0.9), stable per architecture, rising with the epoch."""
    digest = hashlib.sha1(json.dumps(arch, sort_keys=True).encode()).digest()
    return 0.5 + 0.3 * digest[0] / 256 + 0.01 * epoch


def _fake(arch: dict[str, Any], settings: dict[str, Any],
          report: Callable[[dict[str, Any]], bool] | None, *, sleep: float = 0.0,
          nan: bool = False) -> dict[str, Any]:
    epochs: list[dict[str, Any]] = []
    status, reason = "completed", None
    for epoch in range(1, int(settings["epochs"]) + 1):
        time.sleep(sleep)
        if nan and arch.get("groups") == NAN_GROUPS:
            status, reason = "failed", f"loss became nan at epoch {epoch}, step 3"
            break
        row = {"epoch": epoch, "train_loss": 1.0 / epoch, "metric": "accuracy",
               "value": fake_value(arch, epoch), "lr": 1e-3, "seconds": sleep, "extra": {}}
        epochs.append(row)
        if report is not None and report(row):
            status = "stopped"
            break
    if os.environ.get("NAS_FAKE_LOG"):  # which trainings really ran, across processes
        with open(os.environ["NAS_FAKE_LOG"], "a") as log:
            log.write(json.dumps({"arch": arch, "settings": settings, "status": status}) + "\n")
    return {"status": status, "reason": reason, "value": epochs[-1]["value"] if epochs else 0.0,
            "epochs": epochs, "seconds": sleep * len(epochs), "samples_per_second": 0.0,
            "metric": "accuracy"}


def instant(arch: dict[str, Any], settings: dict[str, Any], task: str,
            task_options: dict[str, Any], *, latency: bool = False,
            report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Return at once: the per-epoch values of :func:`fake_value`."""
    return _fake(arch, settings, report)


def slow(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False,
         report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Like :func:`instant`, one second per epoch (a driver can be killed meanwhile)."""
    return _fake(arch, settings, report, sleep=float(os.environ.get("NAS_FAKE_SLEEP", "1.0")))


def nan_grouped(arch: dict[str, Any], settings: dict[str, Any], task: str,
                task_options: dict[str, Any], *, latency: bool = False,
                report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """Like :func:`instant`, but the loss of every grouped architecture turns NaN."""
    return _fake(arch, settings, report, nan=True)


def noop(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False,
         report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The trivial objective of the overhead benchmark: a completed trial, no epochs."""
    return {"status": "completed", "value": fake_value(arch, 0), "epochs": [], "seconds": 0.0}


def boom(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False,
         report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """An evaluator that raises for grouped architectures (a bug in a user's trainer)."""
    if arch.get("groups", 1) > 1:
        raise ValueError("boom: the trainer crashed")
    return _fake(arch, settings, report)
