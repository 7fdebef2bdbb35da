"""Trainers and tasks: one training loop for every family, proxy tasks and the user's datasets.

The training settings (``trainers.config``) import no torch; the names below are imported on
first use, so that reading a study's search space (the dashboard, ``nas status``) does not pay
for torch and the task data that training needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainers.config import TrainConfig
    from trainers.loop import (
        EpochReport,
        TrainResult,
        learning_rate,
        load_checkpoint,
        select_device,
        train,
    )
    from trainers.tasks import TaskData, get_task, list_tasks

_HOME = {
    "EpochReport": "trainers.loop",
    "TaskData": "trainers.tasks",
    "TrainConfig": "trainers.config",
    "TrainResult": "trainers.loop",
    "get_task": "trainers.tasks",
    "learning_rate": "trainers.loop",
    "list_tasks": "trainers.tasks",
    "load_checkpoint": "trainers.loop",
    "select_device": "trainers.loop",
    "train": "trainers.loop",
}

__all__ = [
    "EpochReport",
    "TaskData",
    "TrainConfig",
    "TrainResult",
    "get_task",
    "learning_rate",
    "list_tasks",
    "load_checkpoint",
    "select_device",
    "train",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'trainers' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
