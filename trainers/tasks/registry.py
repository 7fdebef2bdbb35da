"""The trainable tasks by name: ``get_task(name, **options)`` and ``list_tasks()``.

Each task is built by one function of keyword-only options (its module documents them and the
file formats it reads). Options are checked here, once, against that function's signature: an
unknown option, a missing required one, or a value of the wrong type or range is a
``ConfigError`` that names it. Task modules are imported only when their task is built.
"""

from __future__ import annotations

import importlib
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any

from nas.errors import ConfigError
from trainers.tasks.data import TaskData

__all__ = ["check_task", "get_task", "list_tasks", "task_options"]

# task name -> (module, builder function)
_TASKS: dict[str, tuple[str, str]] = {
    "synthetic-vqa": ("trainers.tasks.synthetic_vqa", "build"),
    "synthetic-captions": ("trainers.tasks.synthetic_captions", "build"),
    "digits": ("trainers.tasks.digits", "build"),
    "vqa-files": ("trainers.tasks.vqa_files", "build"),
    "coco-files": ("trainers.tasks.coco_files", "build"),
    "image-folder": ("trainers.tasks.images", "build_image_folder"),
    "cifar": ("trainers.tasks.images", "build_cifar"),
}

# annotation (as written, postponed) -> accepted types, and how a message names them
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "an integer"),
    "float": ((int, float), "a number"),
    "str": ((str, os.PathLike), "a path or string"),
    "Sequence[str]": ((list, tuple), "a list of strings"),
}
# numeric options that may be 0; every other one must be > 0
_NON_NEGATIVE = {"seed", "noise", "synonym_rate"}


def list_tasks() -> list[str]:
    """Names of the trainable tasks: the built-in proxy tasks, then the file formats."""
    return list(_TASKS)


def _builder(name: str) -> Callable[..., TaskData]:
    if name not in _TASKS:
        raise ConfigError(f"Unknown task {name!r}; trainable tasks are {list_tasks()}.")
    module, function = _TASKS[name]
    builder: Callable[..., TaskData] = getattr(importlib.import_module(module), function)
    return builder


def task_options(name: str) -> dict[str, Any]:
    """The options of task ``name`` and their defaults (``inspect.Parameter.empty``: required)."""
    params = inspect.signature(_builder(name)).parameters
    return {p.name: p.default for p in params.values()}


def _check(task: str, key: str, value: Any, annotation: str) -> None:
    optional = annotation.endswith(" | None")
    kinds, noun = _TYPES[annotation.removesuffix(" | None")]
    if value is None and optional:
        return
    ok = isinstance(value, kinds) and not isinstance(value, bool)
    if ok and noun == "a list of strings":
        ok = all(isinstance(v, str) for v in value)
    if not ok:
        raise ConfigError(f"Option {key!r} of task {task!r} must be {noun}"
                          f"{' or null' if optional else ''}, but got {key}={value!r}.")
    if isinstance(value, int | float) and (value < 0 or (value == 0 and key not in _NON_NEGATIVE)):
        bound = ">= 0" if key in _NON_NEGATIVE else "> 0"
        raise ConfigError(f"Option {key!r} of task {task!r} must be {bound}, "
                          f"but got {key}={value!r}.")


def check_task(name: str, options: Mapping[str, Any]) -> None:
    """Raise ``ConfigError`` for an unknown task or option, a missing required option or a bad
    value: everything :func:`get_task` checks before it builds the data."""
    params = inspect.signature(_builder(name)).parameters
    for key in options:
        if key not in params:
            raise ConfigError(
                f"Unknown option {key!r} for task {name!r}; valid options are {sorted(params)}."
            )
    for key, param in params.items():
        if key in options:
            _check(name, key, options[key], str(param.annotation))
        elif param.default is inspect.Parameter.empty:
            raise ConfigError(
                f"Task {name!r} needs the option {key!r}; its options are {sorted(params)}."
            )


def get_task(name: str, **options: Any) -> TaskData:
    """Build the trainable task ``name`` with ``options`` (see :func:`task_options`).

    Raises ``ConfigError`` for an unknown task or option, a missing required option or a bad
    value (:func:`check_task`), and ``NasError`` (one line naming the file) for a missing or
    malformed data file.
    """
    check_task(name, options)
    return _builder(name)(**options)
