"""Proxy fidelity: retrain a study's front and a spread of its other trials at a higher fidelity.

Every proxy-based search assumes that the ranking after a few epochs on small data predicts the
ranking after real training. ``promote`` measures it: it picks the Pareto-optimal trials of a
study (up to ``top``, spread over the front by accuracy) and as many dominated completed trials,
evenly spaced by their proxy accuracy (so that the pairs span the range the proxy saw), and
retrains each for ``epochs`` (default 4x the study's) on ``task`` (default the study's) as a NEW
study in the same database, ``<name>-promoted`` (``-promoted-2`` ... when taken). It is an
ordinary study of the engine: the chosen architectures are enqueued with their training
parameters, the budget is their number, early stopping and constraints are off, the trials run
as Ray Tune trials under the study's lease, and Optuna reads it as any other (same directions;
values = promoted accuracy, params, MAdds).

The links (``studies.store.keys``): each promoted trial carries ``TrialKey.SOURCE_TRIAL`` (the
source trial's number) and ``TrialKey.SOURCE_VALUE`` (its proxy accuracy); the promoted study
carries ``StudyKey.PROMOTED_FROM`` (the source's name) and ``StudyKey.FIDELITY``
(:func:`fidelity` of its trials: Kendall's tau-b and Spearman's rho between proxy and promoted
accuracy over the ``pairs`` of completed trials, with ``epochs`` and ``task``); the source study
lists its promoted studies in ``StudyKey.PROMOTIONS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from nas.errors import ConfigError
from nas.tasks import TaskGeometry
from studies._trials import Evaluator, StudyRun
from studies.checks import check_run, check_task
from studies.evaluator import resolve_evaluator
from studies.fidelity import fidelity, rank_agreement, record_fidelity
from studies.pareto import nondominated_mask, to_minimization
from studies.spec import StudySpec
from studies.store import StudyKey, StudyStore, TrialKey, parsed_trials

__all__ = ["DEFAULT_TOP", "EPOCH_FACTOR", "Plan", "fidelity", "plan_promotion", "promote",
           "promoted_pairs", "rank_agreement", "record_fidelity", "select_trials"]

#: Pareto-optimal trials promoted at most (and dominated ones besides) unless ``top`` says.
DEFAULT_TOP = 8
#: The promoted epochs, as a multiple of the study's, unless ``epochs`` says.
EPOCH_FACTOR = 4
#: The largest training seed (numpy's 32 bits, as the trainer checks).
_SEED_MAX = 2**32 - 1


def _spread(trials: list[FrozenTrial], k: int, accuracy: int) -> list[FrozenTrial]:
    """``k`` of ``trials`` evenly spaced by accuracy rank (all of them if there are fewer)."""
    ranked = sorted(trials, key=lambda t: (-t.values[accuracy], t.number))
    if len(ranked) <= k:
        return ranked
    picks = np.unique(np.linspace(0, len(ranked) - 1, k).round().astype(int))
    return [ranked[i] for i in picks]


def select_trials(trials: Sequence[FrozenTrial], directions: Sequence[str], accuracy: int,
                  top: int) -> tuple[list[FrozenTrial], list[FrozenTrial]]:
    """The Pareto-optimal completed trials (up to ``top``, evenly spread by accuracy rank) and up
    to ``top`` dominated ones, evenly spaced by accuracy rank. A trial that repeats an earlier
    one's parameters (a reused result) is left out: it would pair the same training twice."""
    seen: set[str] = set()
    distinct: list[FrozenTrial] = []
    for t in sorted(trials, key=lambda t: t.number):
        key = json.dumps(t.params, sort_keys=True, default=str)
        if t.state == TrialState.COMPLETE and t.values is not None and key not in seen:
            seen.add(key)
            distinct.append(t)
    if not distinct:
        return [], []
    mask = nondominated_mask(to_minimization([t.values for t in distinct], directions))
    front = [t for t, m in zip(distinct, mask, strict=True) if m]
    dominated = [t for t, m in zip(distinct, mask, strict=True) if not m]
    return _spread(front, top, accuracy), _spread(dominated, top, accuracy)


@dataclass(frozen=True)
class Plan:
    """What ``promote`` will run: the source, the promoted study and the trials chosen."""

    source: StudyRun
    spec: StudySpec
    front: list[FrozenTrial]
    dominated: list[FrozenTrial]
    accuracy: int  # the index of accuracy among the objectives
    seeds: int = 1  # trainings of each chosen trial, with seeds spec.seed, spec.seed + 1, ...

    @property
    def chosen(self) -> list[FrozenTrial]:
        return sorted([*self.front, *self.dominated], key=lambda t: t.number)

    def enqueued(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Each chosen trial's parameters and the links of its promoted trial; with ``seeds``
        above 1, ``seeds`` promoted trials per chosen trial, each naming its training seed
        (``TrialKey.SEED``)."""
        out: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for t in self.chosen:
            links = {TrialKey.SOURCE_TRIAL: t.number,
                     TrialKey.SOURCE_VALUE: float(t.values[self.accuracy])}
            if self.seeds == 1:
                out.append((dict(t.params), links))
                continue
            out.extend((dict(t.params), {**links, TrialKey.SEED: self.spec.seed + i})
                       for i in range(self.seeds))
        return out


def _free_name(base: str, taken: Sequence[str]) -> str:
    if base not in taken:
        return base
    n = 2
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def plan_promotion(name: str, storage_url: str | None = None, *, top: int = DEFAULT_TOP,
                   epochs: int | None = None, task: str | None = None,
                   seeds: int = 1) -> Plan:
    """Choose the trials and build the promoted study's spec, reading the database only.
    ``seeds`` above 1 trains each chosen trial that many times, with the seeds ``seed``,
    ``seed + 1``, ... of the study (``studies.noise`` reads their spread).

    Raises:
        UnknownStudyError: no study ``name``.
        ConfigError: ``top``, ``epochs`` or ``seeds`` below 1, seeds past the trainer's
            largest, an unknown ``task``, a study without an accuracy objective or without
            completed trials.
    """
    from studies.engine import load_existing

    if top < 1:
        raise ConfigError(f"`--top >= 1` must hold, but got {top}.")
    if epochs is not None and epochs < 1:
        raise ConfigError(f"`--epochs >= 1` must hold, but got {epochs}.")
    if seeds < 1:
        raise ConfigError(f"`--seeds >= 1` must hold, but got {seeds}.")
    source = load_existing(name, storage_url)
    spec = source.spec
    if "accuracy" not in spec.objective_names:
        raise ConfigError(f"Study {name!r} has no accuracy objective (objectives "
                          f"{spec.objective_names}): there is no proxy ranking to check.")
    accuracy = spec.objective_names.index("accuracy")
    trials = source.store.trials(source.study)
    front, dominated = select_trials(trials, spec.directions, accuracy, top)
    if not front:
        raise ConfigError(f"Study {name!r} has no completed trials to promote; run or resume it "
                          "first.")
    if spec.seed + seeds - 1 > _SEED_MAX:
        raise ConfigError(f"`seed + seeds - 1 <= {_SEED_MAX}` must hold (the trainer's largest "
                          f"seed), but got seed={spec.seed}, seeds={seeds}.")
    task_name = task or spec.task
    data = spec.to_dict()
    data.update({
        "name": _free_name(f"{name}-promoted", source.store.names()),
        "description": f"Trials of {name!r} retrained at a higher fidelity (nas promote).",
        # The space the source's trials were drawn from, as stored: their parameters are
        # enqueued, and a stored path is not a file to read.
        "space": source.space.to_dict(),
        "task": ({"name": task_name, **spec.task_options} if task_name == spec.task
                 else task_name),
        "fidelity": {"epochs": epochs or EPOCH_FACTOR * spec.fidelity.epochs,
                     "early_stopping": "none"},
        # Every chosen trial trains: none is rejected (on another task the costs change), and
        # the budget is their number, so the sampler never draws one of its own.
        "constraints": {}, "sampler": {"name": "random"}, "enqueue": [],
        "budget": {"trials": (len(front) + len(dominated)) * seeds},
    })
    promoted = StudySpec.from_dict(data)
    check_task(promoted)  # before anything is announced or written
    return Plan(source, promoted, front, dominated, accuracy, seeds)


def promote(plan: Plan, *, address: str | None = None, progress: bool = True,
            evaluator: Evaluator | None = None, geometry: TaskGeometry | None = None,
            verbose: bool = False,
            on_start: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Create the promoted study, link it to its source, run it and store its fidelity.

    Everything the run would refuse is checked first (``studies.checks.check_run``): a refused
    promotion creates no study and leaves the source as it was. ``geometry`` as for
    ``studies.engine.run_study`` (tests, benchmarks). The source's stored ``evaluator`` is data
    of the database: the caller passes the function as ``evaluator`` once the person running
    the command vouched for it (``studies.evaluator.resolve_evaluator``); without it, a study that
    names one is refused. ``on_start`` as for ``run_study``: called once the promoted study is
    created and this process's, after every refusal (an announcement printed there is not
    followed by an error line). Returns ``StudyKey.FIDELITY``'s value, with the promoted
    study's ``name``.
    """
    from studies.engine import create_study, load_existing, run_study

    source, spec = plan.source, plan.spec
    if evaluator is None:
        evaluator = resolve_evaluator(source.spec, stored=True)  # none, or refused
    check_run(spec, address=address, evaluator=evaluator, stored=True)
    before = fidelity([], spec.objective_names, epochs=spec.fidelity.epochs, task=spec.task,
                      proxy_epochs=source.spec.fidelity.epochs)
    attrs: dict[str, Any] = {StudyKey.PROMOTED_FROM: source.spec.name, StudyKey.FIDELITY: before}
    reference = source.store.user_attrs(source.study).get(StudyKey.REFERENCE)
    if reference is not None and spec.task == source.spec.task:
        attrs[StudyKey.REFERENCE] = reference  # hypervolumes comparable with the source's
    run = create_study(spec, source.store.url, geometry=geometry, trials=plan.enqueued(),
                       claim_folders=False,
                       attrs=attrs, evaluator=evaluator)
    writable = load_existing(source.spec.name, source.store.url, write=True)
    listed = list(writable.store.user_attrs(writable.study).get(StudyKey.PROMOTIONS) or [])
    writable.store.set_study_attrs(writable.study, {StudyKey.PROMOTIONS: [*listed, spec.name]})
    run_study(run, address=address, progress=progress, evaluator=evaluator, geometry=geometry,
              verbose=verbose, on_start=on_start)  # stores the fidelity at its end
    return {"name": spec.name, **run.store.user_attrs(run.study)[StudyKey.FIDELITY]}


def promoted_pairs(name: str, store: StudyStore) -> list[dict[str, Any]]:
    """Each completed promoted trial of study ``name``: its number, source trial, proxy and
    promoted accuracy."""
    attrs, _, trials = store.completed(name)
    names = attrs.objectives
    if "accuracy" not in names:
        return []
    accuracy = names.index("accuracy")
    return [{"number": t.number, "source_trial": p.source_trial, "proxy": p.source_value,
             "promoted": t.values[accuracy]}
            for t, p in zip(trials, parsed_trials(name, trials), strict=True)
            if p.source_value is not None]
