"""The study engine and the study files: multi-objective search on Ray, Optuna studies in SQL.

Study files (``*.yaml`` in this folder) ship with the package; see ``studies.spec`` for the keys.
"""

from studies.engine import StudyRun, counted_trials, create_study, load_existing, run_study
from studies.report import list_studies, pareto_trials, study_status
from studies.spec import OBJECTIVES, StudySpec, load_study_spec
from studies.storage import DEFAULT_STORAGE, StorageError, open_storage, resolve_storage_url

__all__ = [
    "DEFAULT_STORAGE",
    "OBJECTIVES",
    "StorageError",
    "StudyRun",
    "StudySpec",
    "counted_trials",
    "create_study",
    "list_studies",
    "load_existing",
    "load_study_spec",
    "open_storage",
    "pareto_trials",
    "resolve_storage_url",
    "run_study",
    "study_status",
]
