"""The study engine and the study files: multi-objective search on Ray, Optuna studies in SQL.

Study files (``*.yaml`` in this folder) ship with the package; see ``studies.spec`` for the keys.

The study database is ``studies.store`` (one ``StudyStore`` in front of it). The names below are
imported on first use, so that ``import studies.store`` (the dashboard, ``nas status``) does not
pay for torch, Ray and the model code that the engine needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studies.engine import StudyRun, counted_trials, create_study, load_existing, run_study
    from studies.objectives import OBJECTIVES
    from studies.report import list_studies, pareto_trials, study_status
    from studies.spec import StudySpec, load_study_spec
    from studies.store import DEFAULT_STORAGE, StorageError, StudyStore, resolve_storage_url

_HOME = {
    "StudyRun": "studies.engine",
    "counted_trials": "studies.engine",
    "create_study": "studies.engine",
    "load_existing": "studies.engine",
    "run_study": "studies.engine",
    "list_studies": "studies.report",
    "pareto_trials": "studies.report",
    "study_status": "studies.report",
    "OBJECTIVES": "studies.objectives",
    "StudySpec": "studies.spec",
    "load_study_spec": "studies.spec",
    "DEFAULT_STORAGE": "studies.store",
    "StorageError": "studies.store",
    "StudyStore": "studies.store",
    "resolve_storage_url": "studies.store",
}

__all__ = [
    "DEFAULT_STORAGE",
    "OBJECTIVES",
    "StorageError",
    "StudyRun",
    "StudySpec",
    "StudyStore",
    "counted_trials",
    "create_study",
    "list_studies",
    "load_existing",
    "load_study_spec",
    "pareto_trials",
    "resolve_storage_url",
    "run_study",
    "study_status",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'studies' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
