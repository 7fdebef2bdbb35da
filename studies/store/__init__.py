"""The study database: Optuna's storage, our tables beside it, and one object in front.

:class:`StudyStore` opens a database read-only or writable, creates studies, writes every study
attribute and trial ending, reads typed study and trial records and epochs, and takes a study's
lease. Behind it, one concept per module:

- ``keys``: the attribute keys and status words of the record;
- ``storage``: URLs, opening, driver errors as ``StorageError``, retries, the ``nas_epochs``
  table;
- ``record``: the writes (a new study's attributes, each way a trial ends, each epoch);
- ``stored``: the trust boundary, every stored value parsed into typed records;
- ``lease``: one owner per study (``nas_leases``);
- ``_snapshot``: one read of the trials per suggestion;
- ``_listing``: what a listing shows of every study, read for all at once.

The names below are imported on first use, so that reading ``TrialKey`` or ``inert`` does not
import Optuna and SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from studies.store._listing import study_summaries
    from studies.store._store import StudyExists, StudyStore, StudySummary
    from studies.store.keys import (
        COUNTED_EXCLUDED,
        STATE_OF,
        SamplerKey,
        Status,
        StudyKey,
        TrialKey,
    )
    from studies.store.lease import Lease, Owner, StudyOwned, is_stale
    from studies.store.storage import (
        DEFAULT_STORAGE,
        StorageError,
        UnknownStudyError,
        epochs_table,
        read_only_engine,
        read_only_engine_kwargs,
        reading,
        resolve_storage_url,
        study_names,
    )
    from studies.store.stored import (
        InertStream,
        StoredValueError,
        StudyAttrs,
        TrialAttrs,
        inert,
        loads,
        parsed_trials,
        read_epochs,
        study_attrs,
        trial_attrs,
    )

_HOME = {
    "study_summaries": "studies.store._listing",
    **dict.fromkeys(("StudyExists", "StudyStore", "StudySummary"), "studies.store._store"),
    **dict.fromkeys(("COUNTED_EXCLUDED", "STATE_OF", "SamplerKey", "Status", "StudyKey",
                     "TrialKey"), "studies.store.keys"),
    **dict.fromkeys(("Lease", "Owner", "StudyOwned", "is_stale"), "studies.store.lease"),
    **dict.fromkeys(("DEFAULT_STORAGE", "StorageError", "UnknownStudyError", "epochs_table",
                     "read_only_engine", "read_only_engine_kwargs", "reading",
                     "resolve_storage_url", "study_names"), "studies.store.storage"),
    **dict.fromkeys(("InertStream", "StoredValueError", "StudyAttrs", "TrialAttrs", "inert",
                     "loads", "parsed_trials", "read_epochs", "study_attrs", "trial_attrs"),
                    "studies.store.stored"),
}

__all__ = [
    "COUNTED_EXCLUDED",
    "DEFAULT_STORAGE",
    "STATE_OF",
    "InertStream",
    "Lease",
    "Owner",
    "SamplerKey",
    "Status",
    "StorageError",
    "StoredValueError",
    "StudyAttrs",
    "StudyExists",
    "StudyKey",
    "StudyOwned",
    "StudyStore",
    "StudySummary",
    "TrialAttrs",
    "TrialKey",
    "UnknownStudyError",
    "epochs_table",
    "inert",
    "is_stale",
    "loads",
    "parsed_trials",
    "read_epochs",
    "read_only_engine",
    "read_only_engine_kwargs",
    "reading",
    "resolve_storage_url",
    "study_attrs",
    "study_names",
    "study_summaries",
    "trial_attrs",
]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'studies.store' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
