"""Reading studies back: summaries, one study's status, its Pareto-optimal trials.

Everything here reads the database only, through Optuna's public API, so what it prints is what
``optuna.load_study`` sees. The storage is opened read-only: reading creates no table, switches
no journal mode and writes nothing, whatever file ``--storage`` names.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
from optuna.trial import TrialState

from studies._trials import base_settings
from studies.engine import LEASE_STALE_AFTER, counted_trials, load_existing
from studies.keys import StudyKey, TrialKey
from studies.lease import is_stale, read_owner
from studies.pareto import fill_reference, normalized_hypervolume
from studies.storage import open_storage, resolve_storage_url, session, study_names

__all__ = ["list_studies", "pareto_trials", "study_status"]


def _objective_names(study: optuna.Study) -> list[str]:
    names = study.user_attrs.get(StudyKey.OBJECTIVES)
    return list(names) if names else [f"objective_{i}" for i in range(len(study.directions))]


def _directions(study: optuna.Study) -> list[str]:
    return [d.name.lower() for d in study.directions]


def study_status(name: str, storage_url: str | None = None) -> dict[str, Any]:
    """Trial counts by state, best value of each objective, hypervolume, budget, the process
    running it (``owner``, None when none is alive), Ray Tune's folder of its latest run, and
    its promotions (``nas promote``): for a promoted study its source (``promoted_from``) and
    rank agreement (``fidelity``), for a source the studies promoted from it (``promotions``).

    ``train`` is the training settings every trial starts from (the task's defaults, the
    study's ``train``, its epochs and seed), ``train_searched`` the distributions of those the
    space searches per trial (each trial's own values are in its ``nas.train`` attribute).

    The hypervolume is taken against the study's fixed reference point (``reference``, by
    objective, raw units; ``reference_source`` says whether it was stored with the study or,
    for a study created before references were stored, derived from its trials: see
    ``studies.pareto``)."""
    run = load_existing(name, storage_url)
    study = run.study
    with session(run.storage.url):
        trials = study.get_trials(deepcopy=False)
    owner = read_owner(run.storage.engine, name)
    if owner is not None and is_stale(owner, stale_after=LEASE_STALE_AFTER):
        owner = None
    states = Counter(t.state.name.lower() for t in trials)
    statuses = Counter(t.user_attrs.get(TrialKey.STATUS, t.state.name.lower()) for t in trials)
    names, directions = _objective_names(study), _directions(study)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best: dict[str, float | None] = {}
    for i, (n, d) in enumerate(zip(names, directions, strict=True)):
        vals = [t.values[i] for t in complete]
        best[n] = (max(vals) if d == "maximize" else min(vals)) if vals else None
    values = [t.values for t in complete]
    stored = study.user_attrs.get(StudyKey.REFERENCE)
    reference = fill_reference(stored, values, directions)
    times = [t.datetime_complete or t.datetime_start for t in trials]
    last = max((x for x in times if x is not None), default=None)
    return {
        "name": name, "task": run.spec.task, "space_hash": run.space.hash,
        "budget": run.spec.budget.trials, "counted": counted_trials(trials),
        "states": dict(states), "statuses": dict(statuses),
        "objectives": [{"name": n, "direction": d} for n, d in zip(names, directions,
                                                                    strict=True)],
        "best": best,
        "hypervolume": normalized_hypervolume(values, directions, stored),
        "reference": dict(zip(names, map(float, reference), strict=True)),
        "reference_source": _reference_source(stored),
        "train": {k: v for k, v in base_settings(run.spec).items() if k not in run.space.train},
        "train_searched": {k: d.to_dict() for k, d in run.space.train.items()},
        "last_activity": last.isoformat() if last else None,
        "owner": owner.to_dict() if owner is not None else None,
        "tune_dir": study.user_attrs.get(StudyKey.TUNE_DIR),
        "promoted_from": study.user_attrs.get(StudyKey.PROMOTED_FROM),
        "fidelity": (_fidelity(study, trials) if study.user_attrs.get(StudyKey.PROMOTED_FROM)
                     else None),
        "promotions": _promotions(study, run.storage),
    }


def _fidelity(study: optuna.Study, trials: list[optuna.trial.FrozenTrial]) -> dict[str, Any]:
    """A promoted study's rank agreement, from its trials as they stand (a run cut short and
    resumed included)."""
    from studies.promote import fidelity
    from studies.spec import StudySpec

    spec = StudySpec.from_dict(study.user_attrs[StudyKey.SPEC])
    stored = study.user_attrs.get(StudyKey.FIDELITY) or {}
    return fidelity(trials, _objective_names(study), epochs=spec.fidelity.epochs,
                    task=spec.task, proxy_epochs=stored.get("proxy_epochs"))


def _promotions(study: optuna.Study, storage: optuna.storages.RDBStorage) -> list[dict[str, Any]]:
    """The studies promoted from ``study``, each with its rank agreement (a deleted one with
    ``missing``)."""
    out: list[dict[str, Any]] = []
    for name in study.user_attrs.get(StudyKey.PROMOTIONS) or []:
        with session(storage.url):
            try:
                promoted = optuna.load_study(study_name=name, storage=storage)
            except KeyError:
                out.append({"name": name, "missing": True})
                continue
            trials = promoted.get_trials(deepcopy=False)
        out.append({"name": name, **_fidelity(promoted, trials)})
    return out


def _reference_source(stored: Any) -> str:
    """``stored``: the study's own reference; ``partly derived``: a latency objective's entry
    comes from the trials; ``derived``: a study created before references were stored."""
    if stored is None:
        return "derived"
    return "stored" if all(x is not None for x in stored) else "partly derived"


def list_studies(storage_url: str | None = None) -> list[dict[str, Any]]:
    """Name, task, trial counts and last activity of every study in the database (none in a
    database without Optuna's tables)."""
    url = resolve_storage_url(storage_url)
    if not study_names(url):
        return []
    storage = open_storage(url, read_only=True)
    with session(storage.url):
        summaries = optuna.study.get_all_study_summaries(storage, include_best_trial=False)
    out = []
    for s in summaries:
        spec = s.user_attrs.get(StudyKey.SPEC, {})
        out.append({"name": s.study_name, "task": (spec.get("task") or {}).get("name"),
                    "trials": s.n_trials,
                    "started": s.datetime_start.isoformat() if s.datetime_start else None})
    return out


def pareto_trials(name: str, storage_url: str | None = None) -> list[dict[str, Any]]:
    """The study's Pareto-optimal trials (Optuna's ``best_trials``), ordered by number."""
    run = load_existing(name, storage_url)
    names = _objective_names(run.study)
    with session(run.storage.url):
        best = run.study.best_trials
    return [{"number": t.number,
             "values": dict(zip(names, t.values, strict=True)),
             "arch_id": t.user_attrs.get(TrialKey.ARCH_ID),
             "arch": t.user_attrs.get(TrialKey.ARCH),
             "status": t.user_attrs.get(TrialKey.STATUS)}
            for t in sorted(best, key=lambda t: t.number)]
