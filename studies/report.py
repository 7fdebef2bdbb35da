"""Reading studies back: summaries, one study's status, its Pareto-optimal trials.

Everything here reads the database only, through Optuna's public API (``studies.store``), so
what it prints is what ``optuna.load_study`` sees. The store is opened read-only: reading
creates no table, switches no journal mode and writes nothing, whatever file ``--storage``
names.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.errors import NasError
from studies._trials import StudyRun, base_settings
from studies.engine import LEASE_STALE_AFTER, counted_trials, load_existing
from studies.noise import NoisyPoint, noisy_front
from studies.pareto import fill_reference, normalized_hypervolume
from studies.store import (
    Status,
    StoredValueError,
    StudyAttrs,
    StudyKey,
    StudyStore,
    StudySummary,
    UnknownStudyError,
    is_stale,
    parsed_trials,
    resolve_storage_url,
    study_names,
    study_summaries,
    trial_attrs,
)

__all__ = ["list_studies", "pareto_trials", "study_status"]


def _attrs(run: StudyRun) -> StudyAttrs:
    assert run.attrs is not None  # a study loaded by load_existing
    return run.attrs


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
    ``studies.pareto``). ``convergence`` says whether the default sampler's expected gains
    stayed below the hypervolume's noise (``studies.convergence.convergence_report``; None for
    another sampler)."""
    run = load_existing(name, storage_url)
    study, attrs = run.study, _attrs(run)
    trials = run.store.trials(run.study)
    parsed = parsed_trials(name, trials)
    owner = run.store.owner(name)
    if owner is not None and is_stale(owner, stale_after=LEASE_STALE_AFTER):
        owner = None
    states = Counter(t.state.name.lower() for t in trials)
    statuses = Counter(_status_word(t, p.status, owner is not None)
                       for t, p in zip(trials, parsed, strict=True))
    names, directions = list(attrs.objectives), _directions(study)
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    best: dict[str, float | None] = {}
    for i, (n, d) in enumerate(zip(names, directions, strict=True)):
        vals = [t.values[i] for t in complete]
        best[n] = (max(vals) if d == "maximize" else min(vals)) if vals else None
    values = [t.values for t in complete]
    stored = list(attrs.reference) if attrs.reference is not None else None
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
        "tune_dir": attrs.tune_dir,
        "promoted_from": attrs.promoted_from,
        "fidelity": _fidelity(attrs, trials) if attrs.promoted_from else None,
        "promotions": _promotions(attrs, run.store),
        "convergence": _convergence(trials, run.spec.budget.until),
    }


def _convergence(trials: list[optuna.trial.FrozenTrial], until: str | None
                 ) -> dict[str, Any] | None:
    """``studies.convergence.convergence_report`` of the trials in number order."""
    from studies.convergence import convergence_report

    ordered = sorted(trials, key=lambda t: t.number)
    return convergence_report([t.number for t in ordered], [t.system_attrs for t in ordered],
                              stops=until == "converged")


def _status_word(trial: optuna.trial.FrozenTrial, status: str | None, owned: bool) -> str:
    """A trial's status word: its stored one, else its Optuna state; a trial stored as RUNNING
    with no live process running the study is ``interrupted`` (the process that ran it is gone,
    or the database was down as it stopped; the next `nas resume` closes it as such)."""
    if status:
        return status
    if trial.state == TrialState.RUNNING and not owned:
        return Status.INTERRUPTED
    return trial.state.name.lower()


def _fidelity(attrs: StudyAttrs, trials: list[optuna.trial.FrozenTrial]) -> dict[str, Any]:
    """A promoted study's rank agreement, from its trials as they stand (a run cut short and
    resumed included)."""
    from studies.fidelity import fidelity

    spec = attrs.require_spec()
    proxy_epochs = (attrs.fidelity or {}).get("proxy_epochs")
    if proxy_epochs is not None and (isinstance(proxy_epochs, bool)
                                     or not isinstance(proxy_epochs, int)):
        raise StoredValueError(attrs.name, StudyKey.FIDELITY, "holds a `proxy_epochs` that is "
                               "not an integer")
    return fidelity(trials, list(attrs.objectives), epochs=spec.fidelity.epochs,
                    task=spec.task, proxy_epochs=proxy_epochs, study=attrs.name)


def _promotions(attrs: StudyAttrs, store: StudyStore) -> list[dict[str, Any]]:
    """The studies promoted from this one, each with its rank agreement (a deleted one with
    ``missing``)."""
    out: list[dict[str, Any]] = []
    for name in attrs.promotions:
        try:
            promoted = load_existing(name, store)
        except UnknownStudyError:
            out.append({"name": name, "missing": True})
            continue
        out.append({"name": name, **_fidelity(_attrs(promoted),
                                              promoted.store.trials(promoted.study))})
    return out


def _reference_source(stored: Any) -> str:
    """``stored``: the study's own reference; ``partly derived``: a latency objective's entry
    comes from the trials; ``derived``: a study created before references were stored."""
    if stored is None:
        return "derived"
    return "stored" if all(x is not None for x in stored) else "partly derived"


def list_studies(storage_url: str | None = None) -> list[dict[str, Any]]:
    """Name, task, trial counts and first start of every study in the database (none in a
    database without Optuna's tables), in name order: one read for all of them."""
    url = resolve_storage_url(storage_url)
    names = study_names(url)
    if not names:
        return []
    summaries = study_summaries(url)
    return [_summary(name, summaries[name]) for name in sorted(summaries)]


def _summary(name: str, summary: StudySummary | NasError) -> dict[str, Any]:
    """One study's row of the listing; a study whose stored values do not parse is listed
    with ``unreadable`` (the reason) so that the others still show."""
    if not isinstance(summary, StudySummary):
        return {"name": name, "task": None, "trials": None, "started": None,
                "unreadable": " ".join(str(summary).split())}
    started = summary.started
    return {"name": name, "task": summary.attrs.task, "trials": summary.trials,
            "started": started.isoformat() if started else None}


def pareto_trials(name: str, storage_url: str | None = None) -> list[dict[str, Any]]:
    """The study's Pareto-optimal trials (Optuna's ``best_trials``), ordered by number.

    For a study with a seeded promotion (``nas promote --seeds N``, N >= 2; the latest one,
    ``studies.noise.noisy_front``) each trial also has its promoted accuracy over its seeds
    (``accuracy_mean``, ``accuracy_std``: sample std, ``accuracy_min``, ``accuracy_max``,
    ``seeds``; ``None`` and 0 for a front trial it did not train with 2 seeds or more), whether its
    place on the front is within the noise (``within_noise``, ``None`` when untrained) and of
    which trial (``noise_neighbour``), and the promotion's name (``noise_from``)."""
    run = load_existing(name, storage_url)
    attrs = _attrs(run)
    names = list(attrs.objectives)
    best = run.store.best_trials(run.study)
    promoted, noisy = noisy_front(attrs, run.store)
    out = []
    for t in sorted(best, key=lambda t: t.number):
        p = trial_attrs(name, t.number, t.user_attrs)
        row = {"number": t.number, "values": dict(zip(names, t.values, strict=True)),
               "arch_id": p.arch_id, "arch": p.arch, "status": p.status}
        if promoted is not None:
            row.update(_noise_keys(noisy.get(t.number)), noise_from=promoted)
        out.append(row)
    return out


def _noise_keys(point: NoisyPoint | None) -> dict[str, Any]:
    if point is None:
        return {"accuracy_mean": None, "accuracy_std": None, "accuracy_min": None,
                "accuracy_max": None, "seeds": 0, "within_noise": None,
                "noise_neighbour": None}
    s = point.spread
    return {"accuracy_mean": s.mean, "accuracy_std": s.std, "accuracy_min": s.min,
            "accuracy_max": s.max, "seeds": s.seeds, "within_noise": point.within_noise,
            "noise_neighbour": point.neighbour}
