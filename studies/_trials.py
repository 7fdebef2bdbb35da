"""What a running study is, and the trial bookkeeping the engine and its searcher share.

``counted_trials`` is the budget rule: trials completed, pruned or failed count; those rejected
by a constraint or closed because a crash interrupted them do not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.tasks import TaskGeometry
from search_spaces import SearchSpace
from studies.smoke import SMOKE_TRAIN, Smoke
from studies.spec import StudySpec
from studies.store import COUNTED_EXCLUDED, StudyAttrs, StudyStore, TrialKey, trial_attrs

__all__ = ["Evaluator", "StudyRun", "base_settings", "counted_trials", "suggest"]

#: A training function with the signature of ``studies.worker.evaluate_trial``.
Evaluator = Callable[..., dict[str, Any]]


@dataclass
class StudyRun:
    """What the engine knows about one study while it runs: its file and space, the Optuna
    study, and the store that reads and writes it."""

    spec: StudySpec
    space: SearchSpace
    study: optuna.Study
    store: StudyStore
    geometry: TaskGeometry | None = None
    attrs: StudyAttrs | None = None  # the stored study attributes, typed (a loaded study)

    @property
    def storage(self) -> optuna.storages.RDBStorage:
        """Optuna's storage of the study (the store's)."""
        return self.store.storage


def base_settings(spec: StudySpec) -> dict[str, Any]:
    """The training settings of every trial before the space's own: the task's quick defaults
    (the ones `nas train` uses) and, in a smoke study, the task's ``SMOKE_TRAIN``; then the
    study's ``train``, its epochs and seed."""
    from trainers.config import quick_defaults

    defaults = {k: v for k, v in quick_defaults(spec.task).items() if k != "epochs"}
    if spec.smoke:
        defaults.update(SMOKE_TRAIN.get(spec.task, {}))
    settings = {**defaults, **spec.train, "epochs": spec.fidelity.epochs, "seed": spec.seed}
    return spec.smoke.train(settings) if spec.smoke else settings


def suggest(space: SearchSpace, trial: Any, smoke: Smoke | None) -> tuple[ArchConfig,
                                                                        dict[str, Any]]:
    """The architecture and training overrides ``space`` draws for ``trial``, shrunk to the
    study's smoke scale when it has one (``StudySpec.smoke``, ``studies.smoke``). A trial
    enqueued with a seed (``TrialKey.SEED``: ``nas promote --seeds``) trains with it."""
    config, train = space.suggest(trial)
    if TrialKey.SEED in trial.user_attrs:  # an Optuna trial, enqueued by a seeded promotion
        raw = {TrialKey.SEED: trial.user_attrs[TrialKey.SEED]}
        seed = trial_attrs(trial.study.study_name, trial.number, raw).seed
        train = {**train, "seed": seed}
    return (smoke.shrink(config) if smoke else config), train


def counted_trials(trials: list[optuna.trial.FrozenTrial]) -> int:
    """Trials that count against the budget: completed, pruned or failed, not counting
    constraint-rejected ones nor those closed because a crash interrupted them."""
    return sum(
        1 for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        and t.user_attrs.get(TrialKey.STATUS) not in COUNTED_EXCLUDED
    )
