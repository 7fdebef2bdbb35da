"""The study engine: an Optuna multi-objective study in SQL, trials trained on Ray workers.

The driver is the only process that writes to the database. It asks Optuna for a trial, maps the
trial's parameters to an architecture (the search space), computes the cheap objectives on the
meta device, rejects constraint violations before any training, reuses the result of an
architecture already trained with the same settings, and sends the rest to a pool of reused Ray
actors, spread over the cluster's nodes. Epoch reports flow back through a coordinator actor that
also makes the early-stopping decisions (multi-objective ASHA). ``resume`` rebuilds everything
from the database alone.

Trial bookkeeping lives in Optuna's trial user attributes:
- ``nas.arch``: the architecture config; ``nas.arch_id``; ``nas.cost``: params, params_matrix,
  MAdds and their split by part; ``nas.train``: the training settings;
- ``nas.status``: ``completed``, ``stopped`` (early-stopped; Optuna state PRUNED), ``failed``,
  ``rejected`` (broke a constraint, never trained; Optuna state FAIL), ``interrupted`` (a crash
  left it RUNNING; closed as FAIL and its parameters enqueued again) or ``reused``;
- ``nas.reason``, ``nas.epochs_reached``, ``nas.seconds``, ``nas.node``, ``nas.reused_from``.
Rejected and interrupted trials do not count against the trial budget.

An architecture and its training settings (``nas.arch_id`` + ``nas.train``) are trained at most
once to completion: a re-sampled one reuses the completed result, and one sampled while its twin
is still training waits for it. The study's user attributes hold the study file (``nas.spec``),
the search space (``nas.space``, ``nas.space_hash``), the objective names and the task geometry
the costs were computed on (``nas.geometry``).

This module creates, loads and resumes studies; the loop that runs one is
``studies._driver``, the trial bookkeeping both share is ``studies._trials``.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import asdict
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError
from nas.loading import load_arch, unwritable_ancestor
from nas.tasks import GEOMETRIES, TaskGeometry
from search_spaces import SearchSpace, load_space
from studies._driver import Driver, Evaluator, check_ray_address, init_ray
from studies._trials import StudyRun, counted_trials
from studies.samplers import make_sampler
from studies.spec import StudySpec
from studies.storage import open_storage, session, set_trial_user_attrs

__all__ = [
    "StudyRun",
    "check_ray_address",
    "counted_trials",
    "create_study",
    "load_existing",
    "run_study",
]

optuna.logging.set_verbosity(optuna.logging.WARNING)


# ----------------------------------------------------------------------------- create / load
def _space_for(spec: StudySpec) -> SearchSpace:
    return load_space(spec.space)


def _load_evaluator(target: str) -> Evaluator:
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


def _accepts(function: Evaluator, keyword: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return True
    return any(p.name == keyword or p.kind is p.VAR_KEYWORD for p in parameters)


def _cost_only(spec: StudySpec) -> bool:
    """A cost-only geometry (``vqa2``, ``imagenet``, ...) that the study's own evaluator trains
    on: there is no built-in task to build."""
    return bool(spec.evaluator) and spec.task in GEOMETRIES and not spec.task_options


def _check_task(spec: StudySpec) -> None:
    """The task and its options, checked as building it would check them, before anything is
    written (its data is built when the study runs)."""
    from trainers.tasks import check_task, list_tasks

    if _cost_only(spec):
        return
    if spec.task in GEOMETRIES and spec.task not in list_tasks():
        raise ConfigError(f"Task {spec.task!r} is a cost-only geometry: a study trains on it "
                          f"only with its own `evaluator`; trainable tasks are {list_tasks()}.")
    check_task(spec.task, spec.task_options)


def _check_checkpoints(spec: StudySpec) -> None:
    """The ``checkpoints`` folder can be made (checked without writing; on a cluster the
    workers write there)."""
    if spec.checkpoints is None:
        return
    blocked = unwritable_ancestor(spec.checkpoints)
    if blocked is not None:
        raise ConfigError(f"Study key `checkpoints`: {str(blocked)!r} is not a writable folder, "
                          f"so {spec.checkpoints!r} cannot be made there.")


def _task_geometry(spec: StudySpec) -> TaskGeometry:
    """The geometry costs are computed on: a cost-only geometry when a study's own evaluator
    trains on it, else the trainable task's, by building it."""
    if _cost_only(spec):
        return GEOMETRIES[spec.task]
    from trainers import get_task

    return get_task(spec.task, **spec.task_options).geometry


def create_study(spec: StudySpec, storage_url: str | None = None, *,
                 geometry: TaskGeometry | None = None) -> StudyRun:
    """Create the study in the database (refusing an existing name) with its first trials.

    The space, sampler, enqueued architectures, evaluator and task are checked before the
    database is opened, so a bad study file writes nothing. ``geometry`` (tests, benchmarks)
    is stored as the geometry the study's costs are computed on.
    """
    space = _space_for(spec)
    sampler = make_sampler(spec.sampler, spec.seed)
    enqueued = [_enqueue_params(space, item) for item in spec.enqueue]
    if spec.evaluator:
        evaluator = _load_evaluator(spec.evaluator)
        if spec.checkpoints and not _accepts(evaluator, "checkpoint_dir"):
            raise ConfigError(f"Study key `checkpoints` needs an evaluator that takes "
                              f"`checkpoint_dir`; {spec.evaluator!r} does not.")
    _check_task(spec)
    _check_checkpoints(spec)
    storage = open_storage(storage_url)
    with session(storage.url):
        existing = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
    if spec.name in existing:
        run = load_existing(spec.name, storage)
        if run.space.hash != space.hash:
            raise ConfigError(
                f"Study {spec.name!r} already exists with a different search space (hash "
                f"{run.space.hash} there, {space.hash} now); choose another --name."
            )
        raise ConfigError(
            f"Study {spec.name!r} already exists; continue it with `nas resume {spec.name}` or "
            "choose another --name."
        )
    with session(storage.url):
        study = optuna.create_study(storage=storage, study_name=spec.name,
                                    directions=spec.directions, sampler=sampler)
        study.set_user_attr("nas.spec", spec.to_dict())
        study.set_user_attr("nas.space", space.to_dict())
        study.set_user_attr("nas.space_hash", space.hash)
        study.set_user_attr("nas.training_key", spec.training_key())
        study.set_user_attr("nas.objectives", spec.objective_names)
        if geometry is not None:
            study.set_user_attr("nas.geometry", asdict(geometry))
        for label, params in enqueued:
            study.enqueue_trial(params, user_attrs={"nas.enqueued": label})
    return StudyRun(spec, space, study, storage, geometry=geometry)


def _enqueue_params(space: SearchSpace, item: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        config, label = load_arch(item), item
    elif isinstance(item, dict):
        config, label = ArchConfig.from_dict(item), "inline"
    else:
        raise ConfigError(f"`enqueue` items are presets, files or mappings, got {item!r}.")
    try:
        return label, space.params_for(config)
    except ConfigError as exc:
        raise ConfigError(f"Cannot enqueue {label!r}: {exc}") from None


def load_existing(name: str, storage: optuna.storages.RDBStorage | str | None = None) -> StudyRun:
    """Load a study and its spec and space from the database alone."""
    if not isinstance(storage, optuna.storages.RDBStorage):
        storage = open_storage(storage, create=False)
    with session(storage.url):
        names = [s.study_name for s in optuna.study.get_all_study_summaries(storage)]
        if name not in names:
            raise NasError(f"Unknown study {name!r}; studies in this database: "
                           f"{', '.join(sorted(names)) or 'none'}.")
        study = optuna.load_study(study_name=name, storage=storage)
        attrs = study.user_attrs
    if "nas.spec" not in attrs:
        raise NasError(f"Study {name!r} was not created by nas (it has no stored study file).")
    spec = StudySpec.from_dict(attrs["nas.spec"])
    space = SearchSpace.from_dict(attrs["nas.space"])
    if space.hash != attrs.get("nas.space_hash"):
        raise ConfigError(
            f"Study {name!r}: its stored search space now hashes to {space.hash}, not "
            f"{attrs.get('nas.space_hash')} as when it was created (the meaning of a knob "
            "changed between versions); resuming would mix two spaces. Start a new study."
        )
    study.sampler = make_sampler(spec.sampler, spec.seed + len(study.trials))
    stored = attrs.get("nas.geometry")
    geometry = TaskGeometry(**stored) if isinstance(stored, dict) else None
    return StudyRun(spec, space, study, storage, geometry=geometry)


def close_interrupted(run: StudyRun) -> int:
    """Close trials a crash left RUNNING as failed, and enqueue their parameters again.

    A trial killed between ``ask`` and the drawing of its parameters has no configuration to
    run again: it is only closed (the sampler draws a fresh one in its place).
    """
    storage, n = run.storage, 0
    with session(storage.url):
        for t in run.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            set_trial_user_attrs(storage, t._trial_id, {
                "nas.status": "interrupted",
                "nas.reason": "the driver stopped while this trial ran"})
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            if t.params:  # killed after its configuration was drawn: run that again
                run.study.enqueue_trial(t.params, user_attrs={"nas.rerun_of": t.number},
                                        skip_if_exists=False)
            n += 1
    return n


# ----------------------------------------------------------------------------- the driver
def run_study(
    run: StudyRun,
    *,
    address: str | None = None,
    progress: bool = True,
    evaluator: Evaluator | None = None,
    geometry: TaskGeometry | None = None,
) -> StudyRun:
    """Run ``run`` until its trial budget is spent or its timeout passes.

    ``evaluator`` replaces the training function on the workers (tests, benchmarks; a study
    file's ``evaluator`` key does the same from the database); ``geometry`` is then the task
    geometry used for costs (otherwise the one stored with the study, else the task is built).
    A finished study returns at once, without starting Ray.

    Raises:
        NasError: no more trials can start (every draw of a long run broke the constraints, or
            the Ray workers cannot start, e.g. cannot import the evaluator); the running trials
            are finished first, those not started are closed as interrupted and enqueued again.
    """
    spec = run.spec
    check_ray_address(address)  # before anything is written; Ray itself retries for minutes
    close_interrupted(run)
    with session(run.storage.url):
        if counted_trials(run.study.get_trials(deepcopy=False)) >= spec.budget.trials:
            return run  # a finished study: nothing to start Ray for
    if evaluator is None and spec.evaluator:
        evaluator = _load_evaluator(spec.evaluator)
    run.geometry = geometry or run.geometry or _task_geometry(spec)
    if "nas.geometry" not in run.study.user_attrs:
        with session(run.storage.url):
            run.study.set_user_attr("nas.geometry", asdict(run.geometry))
    ray, pool = init_ray(address, spec)
    driver = Driver(run, run.geometry, ray, pool, evaluator, progress)
    try:
        driver.loop()
    except KeyboardInterrupt:
        driver.interrupt_all()
        raise
    finally:
        driver.close()
    if driver.halted:
        raise NasError(driver.halted)
    return run
