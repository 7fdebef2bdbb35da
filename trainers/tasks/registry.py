"""The trainable tasks by name: ``get_task(name, **options)`` and ``list_tasks()``.

Each task is built by one function of keyword-only options (its module documents them and the
file formats it reads). Options are checked here, once, against that function's signature: an
unknown option, a missing required one, or a value of the wrong type or range is a
``ConfigError`` that names it. Task modules are imported only when their task is built.

Bounds before allocation: every numeric option has a range (``OPTION_LIMITS``; the sizes a model
sees take ``nas.tasks.GEOMETRY_LIMITS``), numbers must be finite, and a task that generates its
data in memory (the synthetic tasks, ``digits``) estimates the bytes it would generate, refused
when more than the host has available, all before a single item is made.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

from nas.errors import ConfigError
from nas.tasks import GEOMETRY_LIMITS, TaskKind
from trainers.tasks.cache import Prepared
from trainers.tasks.data import TaskData

__all__ = ["OPTION_LIMITS", "PREPARED_TASKS", "check_task", "get_task", "list_tasks",
           "prepare_task", "task_kind", "task_options"]

# task name -> (module, builder function, the module's estimate of the bytes the builder
# generates in memory from its options, if it generates data)
_TASKS: dict[str, tuple[str, str, str | None]] = {
    "synthetic-vqa": ("trainers.tasks.synthetic_vqa", "build", "generated_bytes"),
    "synthetic-captions": ("trainers.tasks.synthetic_captions", "build", "generated_bytes"),
    "digits": ("trainers.tasks.digits", "build", "generated_bytes"),
    "vqa-files": ("trainers.tasks.vqa_files", "build", None),
    "coco-files": ("trainers.tasks.coco_files", "build", None),
    "image-folder": ("trainers.tasks.image_folder", "build", None),
    "cifar": ("trainers.tasks.images", "build_cifar", None),
}
# The kind of each task's geometry, known without building its data (the tests build each and
# compare): what lets a study refuse a family of another kind before it reads a file.
_KINDS: dict[str, TaskKind] = {
    "synthetic-vqa": "vqa", "synthetic-captions": "caption", "digits": "image",
    "vqa-files": "vqa", "coco-files": "caption", "image-folder": "image", "cifar": "image",
}

#: The tasks whose files are parsed once per node into prepared arrays (their modules'
#: ``prepare``; see ``trainers.tasks.cache``).
PREPARED_TASKS = ("vqa-files", "coco-files", "image-folder")

#: The largest value of each numeric option, whichever task has it. Sizes a model sees take the
#: geometry's limits; dataset sizes allow all of VQA v2 (443,757 training questions) or GQA's
#: balanced split (943,000) ten times over; seeds must fit numpy's and scikit-learn's 32 bits.
OPTION_LIMITS: dict[str, float] = {
    "seed": 2**32 - 1,
    "train_size": 10_000_000,
    "val_size": 10_000_000,
    "region_dim": GEOMETRY_LIMITS["region_dim"],
    "max_regions": GEOMETRY_LIMITS["regions"],
    "max_tokens": GEOMETRY_LIMITS["question_tokens"],
    "max_words": GEOMETRY_LIMITS["caption_words"],
    "image_size": GEOMETRY_LIMITS["image_size"],
    "in_chans": GEOMETRY_LIMITS["in_chans"],
    "captions_per_image": 100,  # COCO has 5
    "min_count": 10_000_000,
    "noise": 1000.0,
    "synonym_rate": 1.0,
    "val_fraction": 1.0,
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


def list_tasks(kind: TaskKind | None = None) -> list[str]:
    """Names of the trainable tasks (of ``kind`` only, if given): the built-in proxy tasks,
    then the file formats."""
    return [name for name in _TASKS if kind is None or _KINDS[name] == kind]


def task_kind(name: str) -> TaskKind:
    """The kind of trainable task ``name`` (``image``, ``vqa``, ``caption``), without building it.

    Raises:
        ConfigError: an unknown task.
    """
    if name not in _KINDS:
        raise ConfigError(f"Unknown task {name!r}; trainable tasks are {list_tasks()}.")
    return _KINDS[name]


def _builder(name: str) -> Callable[..., TaskData]:
    if name not in _TASKS:
        raise ConfigError(f"Unknown task {name!r}; trainable tasks are {list_tasks()}.")
    module, function, _ = _TASKS[name]
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
    if not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"Option {key!r} of task {task!r} must be a finite number, but got "
                          f"{key}={value}.")
    if value < 0 or (value == 0 and key not in _NON_NEGATIVE):
        bound = ">= 0" if key in _NON_NEGATIVE else "> 0"
        raise ConfigError(f"Option {key!r} of task {task!r} must be {bound}, "
                          f"but got {key}={value!r}.")
    limit = OPTION_LIMITS.get(key)  # every numeric option has one (the tests check it)
    if limit is not None and value > limit:
        shown = int(limit) if float(limit).is_integer() else limit
        raise ConfigError(f"Option {key!r} of task {task!r} must be <= {shown}, "
                          f"but got {key}={value!r}.")


def _check_generated(name: str, params: Mapping[str, inspect.Parameter],
                     options: Mapping[str, Any]) -> None:
    """Refuse a task whose data, generated in memory, would not fit the host's memory."""
    module, _, estimate = _TASKS[name]
    if estimate is None:
        return
    from nas.memory import available_memory, format_bytes  # torch: only for these tasks

    values = {key: options.get(key, p.default) for key, p in params.items()}
    needed, formula = getattr(importlib.import_module(module), estimate)(values)
    free = available_memory("cpu")
    if needed > free:
        raise ConfigError(
            f"Task {name!r} would generate about {format_bytes(needed)} of data ({formula}), but "
            f"the host has {format_bytes(free)} available; lower those options."
        )


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
    _check_generated(name, params, options)


def get_task(name: str, **options: Any) -> TaskData:
    """Build the trainable task ``name`` with ``options`` (see :func:`task_options`).

    Raises ``ConfigError`` for an unknown task or option, a missing required option or a bad
    value (:func:`check_task`), and ``NasError`` (one line naming the file) for a missing or
    malformed data file.
    """
    check_task(name, options)
    return _builder(name)(**options)


def prepare_task(name: str, **options: Any) -> Prepared:
    """Prepare task ``name``'s files on this node, or open what is prepared, without building
    its datasets (``nas data prepare``; a study's driver reads its validation size from it).

    Raises ``ConfigError`` for a task without prepared data (not in ``PREPARED_TASKS``) and
    what :func:`get_task` raises for its options and files.
    """
    check_task(name, options)
    if name not in PREPARED_TASKS:
        raise ConfigError(f"Task {name!r} has no prepared data (it reads its files quickly, or "
                          f"none); the tasks with prepared data are {list(PREPARED_TASKS)}.")
    params = inspect.signature(_builder(name)).parameters
    filled = {key: options.get(key, p.default) for key, p in params.items()}
    module = importlib.import_module(_TASKS[name][0])
    prepared: Prepared = module.prepare(filled)
    return prepared
