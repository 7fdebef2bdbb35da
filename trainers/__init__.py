"""Trainers and tasks: one training loop for every family, proxy tasks and the user's datasets."""

from trainers.loop import (
    EpochReport,
    TrainConfig,
    TrainResult,
    learning_rate,
    load_checkpoint,
    select_device,
    train,
)
from trainers.tasks import TaskData, get_task, list_tasks

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
