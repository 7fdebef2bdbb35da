"""The names the study engine stores beside Optuna's own data (trial and study user attribute
keys, status words), importable here under their long-standing names; they live in
``studies.record``, the module that owns the study record."""

from __future__ import annotations

from studies.record import COUNTED_EXCLUDED, STATE_OF, Status, StudyKey, TrialKey

__all__ = [
    "COUNTED_EXCLUDED",
    "STATE_OF",
    "Status",
    "StudyKey",
    "TrialKey",
]
