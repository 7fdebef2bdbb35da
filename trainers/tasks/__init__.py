"""Trainable tasks: the built-in proxy tasks and the user's own datasets.

``get_task(name, **options)`` returns a :class:`TaskData` (geometry, train/val datasets, metric,
chance level, caption vocabulary); ``collate`` batches its items for a ``DataLoader``. Built in,
generated from a seed or shipped with an installed package: ``synthetic-vqa``,
``synthetic-captions``, ``digits``. From the user's files: ``vqa-files`` (VQA v2 with
MCAN/OpenVQA region features), ``coco-files`` (Karpathy-split COCO captions with region
features), ``image-folder`` and ``cifar``; the first three are parsed once per node into
memory-mapped arrays (``prepare_task``, :mod:`trainers.tasks.cache`). Metrics live in
:mod:`trainers.tasks.metrics`.
"""

from trainers.tasks.collate import Batch, collate
from trainers.tasks.data import Item, MetricName, TaskData, TaskDataset
from trainers.tasks.registry import (
    PREPARED_TASKS,
    check_task,
    get_task,
    list_tasks,
    prepare_task,
    task_kind,
    task_options,
)

__all__ = [
    "PREPARED_TASKS",
    "Batch",
    "Item",
    "MetricName",
    "TaskData",
    "TaskDataset",
    "check_task",
    "collate",
    "get_task",
    "list_tasks",
    "prepare_task",
    "task_kind",
    "task_options",
]
