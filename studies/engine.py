"""The study engine: an Optuna multi-objective study in SQL, trials run as Ray Tune trials.

``run_study`` runs a ``ray.tune.Tuner`` over the function trainable of ``studies.worker``
(``studies._tune``). Suggestions come from ``studies.searcher.StudySearcher``, which asks and
tells the stored Optuna study through the study's own sampler: it computes the cheap objectives
on the meta device, rejects constraint violations before any training, and reuses the result of
an architecture already trained with the same settings. Early stopping is
``studies.asha.MultiObjectiveASHA``, a Tune scheduler. Resources per trial are
``tune.with_resources``; retries are Tune's ``FailureConfig``; Tune's loggers are the study key
``tune``.

This module is the study's life cycle: create, load, prepare a resume, run. The database is the
record (``studies.store``, one ``StudyStore`` in front of it): every state change is written
there as it happens, and Tune's experiment folder (``nas_runs/<study>/tune-<time>``, named in
the study's ``nas.tune_dir``) is a by-product. ``resume`` rebuilds everything from the database
alone. One process owns a study while it runs (its lease): another ``run`` or ``resume`` of it
is refused.

Everything a run would refuse is checked before its first write (``studies.checks``): a refused
``run``, ``resume`` or ``promote`` leaves the database and the file tree as they were. A study
read from the database is data whoever can write that database chose: it runs under the
database's name, and its ``evaluator`` (code) is imported only when the person running the
command names the same one (``studies.evaluator.resolve_evaluator``). The hypervolume reference
point stored with a study is ``studies.reference``'s. Rejected and interrupted trials do not
count against the trial budget.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import optuna

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError, RunAborted
from nas.loading import load_arch
from nas.tasks import TaskGeometry
from search_spaces import SearchSpace, load_space
from studies._trials import Evaluator, StudyRun, base_settings, counted_trials
from studies._tune import fit, tune_callbacks
from studies.checks import (
    check_folders,
    check_run,
    check_run_name,
    check_space,
    check_task,
    task_facts,
)
from studies.cluster import HeadWatch, check_ray_address, check_resources
from studies.evaluator import check_evaluator, load_evaluator, resolve_evaluator
from studies.fidelity import record_fidelity
from studies.folders import check_claims, claim
from studies.interrupts import (
    Interrupted,
    SignalStop,
    Stopped,
    deferring,
    resume_command,
    stopping_on_signals,
)
from studies.reference import study_reference, uniform_chance
from studies.samplers import make_sampler
from studies.spec import StudySpec, check_until
from studies.store import (
    Status,
    StudyExists,
    StudyKey,
    StudyOwned,
    StudyStore,
    TrialKey,
    inert,
    is_stale,
    resolve_storage_url,
)

__all__ = [
    "LEASE_STALE_AFTER",
    "StudyRun",
    "counted_trials",
    "create_study",
    "load_existing",
    "prepare_resume",
    "run_study",
]

#: Seconds without a heartbeat after which another host's lease is taken over (a lease of a
#: process of this host that is gone is taken over at once).
LEASE_STALE_AFTER = 60.0


def create_study(spec: StudySpec, storage_url: str | None = None, *,
                 geometry: TaskGeometry | None = None,
                 trials: Sequence[tuple[dict[str, Any], dict[str, Any]]] = (),
                 attrs: Mapping[str, Any] | None = None,
                 evaluator: Evaluator | None = None,
                 claim_folders: bool = True) -> StudyRun:
    """Create the study in the database (refusing an existing name) with its first trials.

    The space, sampler, enqueued architectures, evaluator, task, resources and folders are
    checked before the database is opened, so a bad study file writes nothing. ``geometry``
    (tests, benchmarks) is stored as the geometry the study's costs are computed on. ``trials``
    are enqueued after the study file's ``enqueue`` list, as (trial parameters of the space,
    user attributes); ``attrs`` are study user attributes stored beside the engine's own
    (``nas promote``). ``evaluator`` is the function the study will run, where the caller
    resolved it (else the study file's ``evaluator`` is imported). The folders the study file
    names (``checkpoints``, ``tune.storage_path``) are claimed for it (``studies.folders``);
    with ``claim_folders=False`` (a study file read from the database: ``nas promote``) they
    must have been claimed by a run already.
    """
    space = load_space(spec.space)
    sampler = make_sampler(spec.sampler, spec.seed)
    enqueued = [_enqueue_params(space, item, base_settings(spec)) for item in spec.enqueue]
    if evaluator is None and spec.evaluator:
        evaluator = load_evaluator(spec.evaluator)
    if evaluator is not None:
        check_evaluator(spec, evaluator)
    check_resources(spec.resources)
    check_task(spec)
    check_folders(spec)
    tune_callbacks(spec)  # a logger whose package is missing: refused before anything is written
    # Building the task checks its data roots and layout; its geometry prices the space.
    if geometry is None:
        geometry, chance = task_facts(spec)
    else:
        chance = uniform_chance(geometry)
    check_space(spec, space, geometry)
    reference = study_reference(spec, space, geometry, chance)
    url = resolve_storage_url(storage_url)
    if spec.name in _existing_names(url):  # read without writing: refused leaves it untouched
        run = load_existing(spec.name, url)
        owner = run.store.owner(spec.name)
        if owner is not None and not is_stale(owner, stale_after=LEASE_STALE_AFTER):
            raise ConfigError(f"Study {spec.name!r} already exists and is being run by "
                              f"{owner.describe()}; choose another --name.")
        if run.space.hash != space.hash:
            raise ConfigError(
                f"Study {spec.name!r} already exists with a different search space (hash "
                f"{run.space.hash} there, {space.hash} now); choose another --name."
            )
        raise StudyExists(spec.name)
    if claim_folders:
        claim(spec)  # the author's folders: made, and marked as this study's (studies.folders)
    else:
        check_claims(spec)
    store = StudyStore.open(url)
    study = store.create(spec, space, geometry, reference, sampler=sampler, attrs=attrs,
                         trials=[*((params, {TrialKey.ENQUEUED: label})
                                   for label, params in enqueued), *trials])
    return StudyRun(spec, space, study, store, geometry=geometry)


def _existing_names(url: str) -> list[str]:
    """The studies already in the database (none in an SQLite file that does not exist yet)."""
    from sqlalchemy.engine import make_url

    from studies.store import study_names

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return []
    return study_names(url)


def _store_reference(run: StudyRun) -> None:
    """Store the reference of a study created before references were stored (``nas resume``),
    derived from its study file, space and geometry, and say so."""
    if run.store.user_attrs(run.study).get(StudyKey.REFERENCE) is not None or run.geometry is None:
        return
    reference = study_reference(run.spec, run.space, run.geometry, uniform_chance(run.geometry))
    run.store.set_study_attrs(run.study, {StudyKey.REFERENCE: reference})
    print(f"study {run.spec.name!r}: it had no stored hypervolume reference (created before "
          f"references were stored); stored {reference} ({', '.join(run.spec.objective_names)}, "
          "accuracy at uniform chance), so its hypervolume changes from the value derived from "
          "its trials.", file=sys.stderr)


def _store_budget(run: StudyRun) -> None:
    """Store the budget of a resume that grows the study (``prepare_resume``): the spec is
    stored again with it, so ``nas status`` and later resumes keep it."""
    stored = run.attrs.spec if run.attrs is not None else None
    if stored is None or stored.budget == run.spec.budget:
        return
    run.store.set_study_attrs(run.study, {StudyKey.SPEC: run.spec.to_dict()})


def _enqueue_params(space: SearchSpace, item: Any,
                    train: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The trial parameters of an enqueued architecture; a searched training setting takes the
    study's own ``train`` value (the trainer's default only where the study sets none)."""
    if isinstance(item, str):
        config, label = load_arch(item), item
    elif isinstance(item, dict):
        config, label = ArchConfig.from_dict(item), "inline"
    else:
        raise ConfigError(f"`enqueue` items are presets, files or mappings, got {item!r}.")
    try:
        return label, space.params_for(config, {k: v for k, v in train.items()
                                                if k in space.train})
    except ConfigError as exc:
        raise ConfigError(f"Cannot enqueue {label!r}: {exc}") from None


def load_existing(name: str,
                  storage: StudyStore | optuna.storages.RDBStorage | str | None = None, *,
                  write: bool = False) -> StudyRun:
    """Load a study and its spec and space from the database alone.

    ``storage`` is an open store (or Optuna's storage of one), used as it is, or a URL
    (``None``: the default storage). A URL is opened read-only (``StudyStore.open_study``):
    reading a study creates and writes nothing. ``write=True`` first checks read-only that the
    study exists, so an unknown name still writes nothing, then opens the store writable;
    callers read and check everything stored read-only before that (``prepare_resume``, ``nas
    promote`` through its plan), so a value that does not parse refuses with nothing written.

    Raises:
        UnknownStudyError: no study ``name`` there (the message lists the studies there).
    """
    if isinstance(storage, optuna.storages.RDBStorage):
        storage = StudyStore(storage)
    store = (storage if isinstance(storage, StudyStore)
             else StudyStore.open_study(name, storage, write=write))
    study, attrs, trials = store.load(name)
    spec = attrs.require_spec()
    assert attrs.space is not None  # study_attrs(full=True) with a spec
    space = attrs.space
    if space.hash != attrs.space_hash:
        raise ConfigError(
            f"Study {inert(name)!r}: its stored search space now hashes to {space.hash}, not "
            f"{attrs.space_hash} as when it was created (the meaning of a knob changed between "
            "versions); resuming would mix two spaces. Start a new study."
        )
    study.sampler = make_sampler(spec.sampler, spec.seed + len(trials))
    return StudyRun(spec, space, study, store, geometry=attrs.geometry, attrs=attrs)


@dataclass(frozen=True)
class _Ready:
    """What a run found before its first write: its evaluator, how many trials run at once,
    the geometry its costs are computed on."""

    evaluator: Evaluator | None
    pool: int
    geometry: TaskGeometry


def _prepare(run: StudyRun, *, address: str | None, evaluator: Evaluator | None,
             geometry: TaskGeometry | None) -> _Ready | None:
    """Everything a run of ``run`` would refuse, checked reading only; None: its budget is
    spent (nothing to check Ray or the evaluator for)."""
    spec = run.spec
    check_run_name(spec.name)
    check_ray_address(address)  # Ray itself retries for minutes
    owner = run.store.owner(spec.name)
    if owner is not None and not is_stale(owner, stale_after=LEASE_STALE_AFTER):
        raise StudyOwned(f"Study {inert(spec.name)!r} is being run by {owner.describe()}; wait "
                         "for it to end, or stop that process.")
    counted = counted_trials(run.store.trials(run.study))
    if counted >= spec.budget.trials:
        return None
    if evaluator is None:
        evaluator = resolve_evaluator(spec, stored=run.attrs is not None)
    pool = check_run(spec, address=address, evaluator=evaluator, stored=run.attrs is not None)
    return _Ready(evaluator, pool, geometry or run.geometry or task_facts(spec)[0])


def prepare_resume(name: str, storage: str | None = None, *, vouched: str | None = None,
                   address: str | None = None, trials: int | None = None,
                   timeout_minutes: float | None = None,
                   until: str | None = None) -> tuple[StudyRun, Evaluator | None]:
    """``nas resume``: study ``name`` read and checked as :func:`run_study` checks it (its
    stored evaluator ``vouched`` for, see :func:`resolve_evaluator`) before the database is
    opened for writing, then opened for writing. Returns the run and the evaluator to pass to
    :func:`run_study`.

    ``trials`` (a new total), ``timeout_minutes`` (a new limit of each run) and ``until``
    (``converged``, or ``budget``: run to the trials) change the study's budget
    (``Budget.grown``): the returned run carries it, and :func:`run_study` stores it in the
    study's spec once the study is its own.

    Raises:
        UnknownStudyError, StoredValueError, StudyOwned, ConfigError: nothing written (a total
            below the trials already counted is a ConfigError).
    """
    check_ray_address(address)
    stored = load_existing(name, storage)  # read-only
    budget = stored.spec.budget
    if trials is not None or timeout_minutes is not None or until is not None:
        counted = counted_trials(stored.store.trials(stored.study))
        budget = budget.grown(counted=counted, trials=trials, timeout_minutes=timeout_minutes,
                              until=until)
        check_until(budget, stored.spec.sampler)
        stored.spec = replace(stored.spec, budget=budget)
    evaluator = resolve_evaluator(stored.spec, stored=True, vouched=vouched)
    ready = _prepare(stored, address=address, evaluator=evaluator, geometry=None)
    run = load_existing(name, storage, write=True)
    run.spec = replace(run.spec, budget=budget)
    if ready is not None:
        run.geometry = ready.geometry  # a task built to find it is not built again
    return run, evaluator


@contextlib.contextmanager
def _owned(run: StudyRun, stop: SignalStop) -> Iterator[None]:
    """Once the study is this process's: the trials a dead run left RUNNING are closed (and
    enqueued again). A signal ``stop`` received inside ends it as ``Interrupted``, raised once
    its trials are closed, carrying what the stop left (``studies.interrupts.Stopped``); Ray's
    own calls turn the ``Interrupted`` raised under them into a plain ``KeyboardInterrupt``,
    whose signal ``stop`` remembers."""
    run.store.close_interrupted(run.study, space=run.space)
    before = _interrupted(run.store.trials(run.study))
    try:
        yield
    except KeyboardInterrupt as exc:
        stopped = None
        with contextlib.suppress(NasError):  # the database gone too: nothing to count
            trials = run.store.trials(run.study)
            stopped = Stopped(run.spec.name, run.spec.evaluator, run.spec.budget.trials,
                              finished=counted_trials(trials),
                              closed=_interrupted(trials) - before)
        signum = exc.signum if isinstance(exc, Interrupted) else stop.received or signal.SIGINT
        raise Interrupted(signum, stopped).with_traceback(exc.__traceback__) from None


def _interrupted(trials: Sequence[optuna.trial.FrozenTrial]) -> int:
    return sum(1 for t in trials if t.user_attrs.get(TrialKey.STATUS) == Status.INTERRUPTED)


def run_study(
    run: StudyRun,
    *,
    address: str | None = None,
    progress: bool = True,
    evaluator: Evaluator | None = None,
    geometry: TaskGeometry | None = None,
    verbose: bool = False,
    on_start: Callable[[int], None] | None = None,
    resume: str | None = None,
) -> StudyRun:
    """Run ``run`` until its trial budget is spent or its timeout passes.

    Everything the run would refuse is checked first, writing nothing (:func:`check_run`;
    another live owner: ``StudyOwned``). The study's lease is then taken, a budget that
    :func:`prepare_resume` grew is stored, and trials a crashed run left RUNNING are closed and
    enqueued again. ``evaluator`` replaces the training function
    on the workers (tests, benchmarks; a study file's ``evaluator`` key does the same). A study
    read from the database (``load_existing``) runs its stored evaluator only when the caller
    passes it (see :func:`resolve_evaluator`, :func:`prepare_resume`). ``geometry`` is then the
    task geometry used for costs (otherwise the one stored with the study, else the task is
    built). A finished study returns at once, without starting Ray. ``verbose`` shows Tune's own
    progress table; ``on_start`` is called with the number of counted trials once the study is
    this process's. ``resume`` is the command a lost Ray head's message names to continue the
    study (the CLI's, with the ``--storage`` and ``--address`` it was given; by default
    ``nas resume NAME``, with ``--evaluator`` where the study names one).

    Raises:
        Interrupted: SIGINT or SIGTERM (``studies.interrupts``): no trial is launched any
            more, the running ones are closed as interrupted and enqueued again; it carries
            the counts (``Stopped``).
        StudyOwned: another live process runs the study.
        ConfigError: what :func:`check_run` refuses; a stored evaluator not passed in.
        NasError: no more trials can start (every draw of a long run broke the constraints, or
            the Ray workers cannot start, e.g. cannot import the evaluator); the running trials
            are finished first, those not started are closed as interrupted and enqueued again.
    """
    from studies._progress import Progress

    spec = run.spec
    ready = _prepare(run, address=address, evaluator=evaluator, geometry=geometry)
    lease = run.store.acquire(spec.name, stale_after=LEASE_STALE_AFTER)
    # lease: renewed by a heartbeat thread while the run lives, released at the end
    with stopping_on_signals(spec.name, spec.evaluator) as stop, lease, _owned(run, stop):
        _store_budget(run)
        counted = counted_trials(run.store.trials(run.study))
        if on_start is not None:
            on_start(counted)
        if ready is None or counted >= spec.budget.trials:
            return run  # a finished study: nothing to start Ray for
        run.geometry = ready.geometry
        if StudyKey.GEOMETRY not in run.store.user_attrs(run.study):
            run.store.set_study_attrs(run.study, {StudyKey.GEOMETRY: asdict(run.geometry)})
        _store_reference(run)
        deadline = (time.monotonic() + 60 * spec.budget.timeout_minutes
                    if spec.budget.timeout_minutes else math.inf)
        bar = Progress(spec.budget.trials, list(spec.directions), enabled=progress,
                       counted_at_start=counted,
                       reference=run.store.user_attrs(run.study).get(StudyKey.REFERENCE))

        def head_lost(reason: str) -> None:
            """Ray ends this process soon after its head is gone, running no Python cleanup:
            close the trials while the database can still be written, and end in one line."""
            closed = run.store.close_interrupted(run.study, space=run.space,
                                                 reason=f"{reason} while this trial ran")
            lease.release()
            bar.close()
            again = resume or resume_command(spec.name, spec.evaluator)
            print(f"nas: error: Study {spec.name!r} stopped: {reason}; {closed} running "
                  f"trials were closed as interrupted; continue with `{again}` once the "
                  "cluster is back.", file=sys.stderr, flush=True)
            os._exit(RunAborted.exit_code)

        with HeadWatch(head_lost), deferring():  # a signal stops Tune between its steps
            halted = fit(run, ready.evaluator, ready.pool, deadline, bar, verbose)
        if run.store.user_attrs(run.study).get(StudyKey.PROMOTED_FROM):
            record_fidelity(run)
    if halted:
        raise NasError(halted)
    return run
