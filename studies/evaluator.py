"""The training function a study runs on the workers: resolved, and checked against the call.

A study file's ``evaluator: module:function`` is its author's code. A study file read back from
the database is data that whoever can write the database chose, so its evaluator is imported
only when the person running the command names the same one (:func:`resolve_evaluator`), and
nothing is imported before that check. :func:`check_evaluator` refuses a function that cannot
take the call the workers make, before anything is written.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from nas.errors import ConfigError
from studies._trials import Evaluator
from studies.spec import StudySpec
from studies.store.stored import inert

__all__ = ["check_evaluator", "load_evaluator", "resolve_evaluator"]


def load_evaluator(target: str) -> Evaluator:
    """The function a study's ``evaluator: module:function`` names."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"Study key `evaluator`: cannot import {module_name!r} ({exc}); put "
                          "its folder on PYTHONPATH, for the driver and the Ray workers.") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"Study key `evaluator`: module {module_name!r} has no function "
                          f"{name!r}.")
    return function


def resolve_evaluator(spec: StudySpec, *, stored: bool,
                      vouched: str | None = None) -> Evaluator | None:
    """The training function a run of ``spec`` calls on the workers (None: the built-in one).

    A study file's ``evaluator`` is its author's code and is imported as it is. A spec read from
    the database (``stored``: ``nas resume``, ``nas promote``) is data that whoever can write
    the database chose: its evaluator is imported only when ``vouched`` (the command's
    ``--evaluator``) names the same function, and nothing is imported before that check.

    Raises:
        ConfigError: a stored evaluator not vouched for (the message names it and the flag),
            ``vouched`` for a study without one, or an evaluator that cannot be imported.
    """
    if stored and vouched != spec.evaluator:
        name = inert(spec.name)
        if spec.evaluator is None:
            raise ConfigError(f"Study {name!r} names no evaluator (its trials run the built-in "
                              f"trainer); leave out --evaluator {inert(vouched)}.")
        given = f" (not {inert(vouched)!r})" if vouched else ""
        raise ConfigError(
            f"Study {name!r} trains with the evaluator {spec.evaluator!r} that its database "
            f"names{given}; importing it runs that code, so it runs only when you name it: "
            f"pass --evaluator {spec.evaluator}.")
    return load_evaluator(spec.evaluator) if spec.evaluator else None


def check_evaluator(spec: StudySpec, evaluator: Evaluator) -> None:
    """Refuse an evaluator that cannot take the call the workers make
    (``studies.worker.evaluator_call``): every trial of the study would fail.

    Raises:
        ConfigError: the call does not bind to its signature (one without a signature to read,
            such as a builtin, is left to the call).
    """
    from studies.worker import evaluator_call

    config = {"arch": {}, "settings": {}, "task": spec.task, "task_options": spec.task_options,
              "latency": False, "checkpoint_dir": spec.checkpoint_dir(0)}
    args, kwargs = evaluator_call(config, lambda epoch: False)
    try:
        signature = inspect.signature(evaluator)
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return
    label = spec.evaluator or getattr(evaluator, "__qualname__", repr(evaluator))
    problem = _bind(signature, args, kwargs)
    if problem is None:
        return
    without = {k: v for k, v in kwargs.items() if k != "checkpoint_dir"}
    if len(without) < len(kwargs) and _bind(signature, args, without) is None:
        raise ConfigError(f"Study key `checkpoints` needs an evaluator that takes "
                          f"`checkpoint_dir`; {label!r} does not.")
    keywords = "".join(f", {k}=..." for k in kwargs)
    raise ConfigError(
        f"Study key `evaluator`: {label!r} cannot take the call the workers make, "
        f"f(arch, settings, task, task_options{keywords}) ({problem}); give it the signature "
        "of studies.worker.evaluate_trial.")


def _bind(signature: inspect.Signature, args: Sequence[Any],
          kwargs: Mapping[str, Any]) -> str | None:
    """Why ``signature`` cannot take ``args`` and ``kwargs``, or None when it can."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None
