"""The study engine: an Optuna multi-objective study in SQL, trials run as Ray Tune trials.

``run_study`` runs a ``ray.tune.Tuner`` over the function trainable of ``studies.worker``.
Suggestions come from ``studies.searcher.StudySearcher``, which asks and tells the stored Optuna
study through the study's own sampler: it computes the cheap objectives on the meta device,
rejects constraint violations before any training, and reuses the result of an architecture
already trained with the same settings. Early stopping is ``studies.asha.MultiObjectiveASHA``, a
Tune scheduler. Resources per trial are ``tune.with_resources``; retries are Tune's
``FailureConfig``; Tune's loggers are the study key ``tune``.

The database is the record: every state change is written there as it happens, and Tune's
experiment folder (``nas_runs/<study>/tune-<time>``, named in the study's ``nas.tune_dir``) is a
by-product. ``resume`` rebuilds everything from the database alone. One process owns a study
while it runs (``studies.lease``): another ``run`` or ``resume`` of it is refused.

Everything a run would refuse is checked before its first write (:func:`check_run`): a refused
``run``, ``resume`` or ``promote`` leaves the database and the file tree as they were. A study
read from the database is data whoever can write that database chose: it runs under the
database's name, and its ``evaluator`` (code) is imported only when the person running the
command names the same one (:func:`resolve_evaluator`).

What is written for the study and each trial (keys, status words, objectives) is
``studies.record``'s. Rejected and interrupted trials do not count against the trial budget.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

import optuna
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.errors import ConfigError, NasError, RunAborted
from nas.loading import load_arch, unwritable_ancestor
from nas.tasks import GEOMETRIES, TaskGeometry
from search_spaces import SearchSpace, load_space
from studies._trials import Evaluator, StudyRun, base_settings, counted_trials, suggest
from studies._tune import fit, run_folders, tune_callbacks
from studies.cluster import HeadWatch, check_ray_address, check_resources, connect
from studies.fidelity import record_fidelity
from studies.folders import check_claims, claim
from studies.lease import Lease, StudyOwned, acquire, is_stale, read_owner
from studies.record import StudyKey, TrialKey, close_interrupted, write_study
from studies.samplers import make_sampler
from studies.smoke import Smoke
from studies.spec import StudySpec, _check_name
from studies.storage import open_storage, resolve_storage_url, session
from studies.stored import guarded, inert, parsed_trials, study_attrs

__all__ = [
    "StudyRun",
    "check_evaluator",
    "check_ray_address",
    "check_run",
    "close_interrupted",
    "counted_trials",
    "create_study",
    "load_existing",
    "prepare_resume",
    "resolve_evaluator",
    "run_study",
    "study_reference",
    "uniform_chance",
]

#: Seconds without a heartbeat after which another host's lease is taken over (a lease of a
#: process of this host that is gone is taken over at once).
LEASE_STALE_AFTER = 60.0

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


def resolve_evaluator(spec: StudySpec, *, stored: bool,
                      vouched: str | None = None) -> Evaluator | None:
    """The training function a run of ``spec`` calls on the workers (None: the built-in one).

    A study file's ``evaluator`` is its author's code and is imported as it is. A spec read from
    the database (``stored``: ``nas resume``, ``nas promote``) is data that whoever can write
    the database chose: its evaluator is imported only when ``vouched`` (the command's
    ``--evaluator``) names the same function, and nothing is imported before that check.

    Raises:
        ConfigError: a stored evaluator not vouched for (the message names it and the flag),
            ``vouched`` for a study without one, or an evaluator that cannot be imported.
    """
    if stored and vouched != spec.evaluator:
        name = inert(spec.name)
        if spec.evaluator is None:
            raise ConfigError(f"Study {name!r} names no evaluator (its trials run the built-in "
                              f"trainer); leave out --evaluator {inert(vouched)}.")
        given = f" (not {inert(vouched)!r})" if vouched else ""
        raise ConfigError(
            f"Study {name!r} trains with the evaluator {spec.evaluator!r} that its database "
            f"names{given}; importing it runs that code, so it runs only when you name it: "
            f"pass --evaluator {spec.evaluator}.")
    return _load_evaluator(spec.evaluator) if spec.evaluator else None


def check_evaluator(spec: StudySpec, evaluator: Evaluator) -> None:
    """Refuse an evaluator that cannot take the call the workers make
    (``studies.worker.evaluator_call``): every trial of the study would fail.

    Raises:
        ConfigError: the call does not bind to its signature (one without a signature to read,
            such as a builtin, is left to the call).
    """
    from studies.worker import evaluator_call

    config = {"arch": {}, "settings": {}, "task": spec.task, "task_options": spec.task_options,
              "latency": False, "checkpoint_dir": spec.checkpoint_dir(0)}
    args, kwargs = evaluator_call(config, lambda epoch: False)
    try:
        signature = inspect.signature(evaluator)
    except (TypeError, ValueError):  # no signature to read: let the call decide
        return
    label = spec.evaluator or getattr(evaluator, "__qualname__", repr(evaluator))
    problem = _bind(signature, args, kwargs)
    if problem is None:
        return
    without = {k: v for k, v in kwargs.items() if k != "checkpoint_dir"}
    if len(without) < len(kwargs) and _bind(signature, args, without) is None:
        raise ConfigError(f"Study key `checkpoints` needs an evaluator that takes "
                          f"`checkpoint_dir`; {label!r} does not.")
    keywords = "".join(f", {k}=..." for k in kwargs)
    raise ConfigError(
        f"Study key `evaluator`: {label!r} cannot take the call the workers make, "
        f"f(arch, settings, task, task_options{keywords}) ({problem}); give it the signature "
        "of studies.worker.evaluate_trial.")


def _bind(signature: inspect.Signature, args: Sequence[Any],
          kwargs: Mapping[str, Any]) -> str | None:
    """Why ``signature`` cannot take ``args`` and ``kwargs``, or None when it can."""
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return str(exc)
    return None


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


def _check_folders(spec: StudySpec) -> None:
    """Every folder a run writes can be made, checked without writing: Tune's and its loggers'
    (``studies._tune.run_folders``) and ``checkpoints/<study>`` (on a cluster the workers
    write there)."""
    folders = run_folders(spec)
    if spec.checkpoints is not None:
        folders.append(("Study key `checkpoints`", Path(spec.checkpoints) / spec.name))
    for what, folder in folders:
        try:
            blocked = unwritable_ancestor(folder)
        except OSError as exc:  # e.g. an ancestor this user may not look into
            raise ConfigError(f"{what}: {str(folder)!r} cannot be made: "
                              f"{exc.strerror or type(exc).__name__}.") from None
        if blocked is None:
            continue
        problem = ("is a file, not a folder" if blocked.exists() and not blocked.is_dir()
                   else "is not a writable folder")
        where = "" if blocked == folder else f", so {str(folder)!r} cannot be made there"
        raise ConfigError(f"{what}: {str(blocked)!r} {problem}{where}.")


def _check_run_name(name: str) -> None:
    """A study runs under its database's name, and the name names its folders (Tune's,
    ``checkpoints/<study>``): one nas would not have given (a slash, a control character: a
    copy made with Optuna's own tools) is refused."""
    try:
        valid = _check_name(name) == name
    except ConfigError:
        valid = False
    if not valid:
        raise ConfigError(
            f"Study {inert(name)!r} cannot run under its name, which names its folders: a study "
            "name is one line of at most 200 characters, without slashes, control characters "
            "or spaces around it, not starting with '.'; copy it to such a name "
            "(optuna.copy_study) and resume the copy.")


def check_run(spec: StudySpec, *, address: str | None = None,
              evaluator: Evaluator | None = None, stored: bool = False) -> int:
    """Refuse, before anything is written, what would stop a run of ``spec`` once it started
    writing; start or join Ray; return how many trials can run at once.

    Checked: the name (it names folders), the Ray address, resources Ray cannot schedule or no
    node of the cluster holds, ``evaluator`` against the call the workers make (the caller
    resolves it with :func:`resolve_evaluator`: nothing is imported here), every folder the run
    writes (for a study file read from the database, ``stored``: only folders a run claimed,
    see ``studies.folders``), Tune's logger packages.

    Raises:
        ConfigError, NasError: one line naming the value and what would be valid.
    """
    _check_run_name(spec.name)
    check_ray_address(address)
    check_resources(spec.resources)
    if evaluator is not None:
        check_evaluator(spec, evaluator)
    _check_folders(spec)
    if stored:
        check_claims(spec)
    tune_callbacks(spec)  # a logger whose package is missing
    return connect(address, spec.resources)


def _task_facts(spec: StudySpec) -> tuple[TaskGeometry, float]:
    """The geometry costs are computed on and the task's chance level: a cost-only geometry
    (with :func:`uniform_chance`) when a study's own evaluator trains on it, else the trainable
    task's, by building it."""
    if _cost_only(spec):
        return GEOMETRIES[spec.task], uniform_chance(GEOMETRIES[spec.task])
    from trainers import get_task

    data = get_task(spec.task, **spec.task_options)
    return data.geometry, float(data.chance)


def _task_geometry(spec: StudySpec) -> TaskGeometry:
    return _task_facts(spec)[0]


def uniform_chance(geometry: TaskGeometry) -> float:
    """The accuracy of guessing uniformly among a task's outputs (a caption task: 0), the
    reference accuracy where the task's own chance level is not known (a cost-only geometry,
    a geometry a test or benchmark passes in, a study created before references were stored)."""
    return 0.0 if geometry.kind == "caption" else 1.0 / max(1, geometry.num_outputs)


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
    space = _space_for(spec)
    sampler = make_sampler(spec.sampler, spec.seed)
    enqueued = [_enqueue_params(space, item, base_settings(spec)) for item in spec.enqueue]
    if evaluator is None and spec.evaluator:
        evaluator = _load_evaluator(spec.evaluator)
    if evaluator is not None:
        check_evaluator(spec, evaluator)
    check_resources(spec.resources)
    _check_task(spec)
    _check_folders(spec)
    tune_callbacks(spec)  # a logger whose package is missing: refused before anything is written
    # Building the task checks its data roots and layout; its geometry prices the space.
    if geometry is None:
        geometry, chance = _task_facts(spec)
    else:
        chance = uniform_chance(geometry)
    check_space(spec, space, geometry)
    reference = study_reference(spec, space, geometry, chance)
    url = resolve_storage_url(storage_url)
    if spec.name in _existing_names(url):  # read without writing: refused leaves it untouched
        run = load_existing(spec.name, url)
        owner = read_owner(run.storage.engine, spec.name)
        if owner is not None and not is_stale(owner, stale_after=LEASE_STALE_AFTER):
            raise ConfigError(f"Study {spec.name!r} already exists and is being run by "
                              f"{owner.describe()}; choose another --name.")
        if run.space.hash != space.hash:
            raise ConfigError(
                f"Study {spec.name!r} already exists with a different search space (hash "
                f"{run.space.hash} there, {space.hash} now); choose another --name."
            )
        raise ConfigError(
            f"Study {spec.name!r} already exists; continue it with `nas resume {spec.name}` or "
            "choose another --name."
        )
    if claim_folders:
        claim(spec)  # the author's folders: made, and marked as this study's (studies.folders)
    else:
        check_claims(spec)
    storage = open_storage(url)
    with session(storage.url):
        try:
            study = optuna.create_study(storage=storage, study_name=spec.name,
                                        directions=spec.directions, sampler=sampler)
        except optuna.exceptions.DuplicatedStudyError:  # created by another process just now
            raise ConfigError(f"Study {spec.name!r} already exists; continue it with "
                              f"`nas resume {spec.name}` or choose another --name.") from None
        write_study(study, spec, space, geometry, reference, attrs)
        for label, params in enqueued:
            study.enqueue_trial(params, user_attrs={TrialKey.ENQUEUED: label})
        for params, user_attrs in trials:
            study.enqueue_trial(params, user_attrs=user_attrs, skip_if_exists=False)
    return StudyRun(spec, space, study, storage, geometry=geometry)


def _existing_names(url: str) -> list[str]:
    """The studies already in the database (none in an SQLite file that does not exist yet)."""
    from sqlalchemy.engine import make_url

    from studies.storage import study_names

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and not Path(parsed.database or "").is_file():
        return []
    return study_names(url)


#: Architectures drawn from a space to find one within the constraints before a study starts.
FEASIBILITY_SAMPLES = 300


def check_space(spec: StudySpec, space: SearchSpace, geometry: TaskGeometry,
                samples: int = FEASIBILITY_SAMPLES) -> None:
    """Refuse a study that could only fail: training settings the trainer refuses, or
    constraints that no architecture of the space meets.

    Draws up to ``samples`` architectures at random (their costs on the meta device) and stops
    at the first within the constraints; the training settings (the study's ``train`` with the
    space's training parameters of each draw) are checked as the trainer checks them.
    """
    from nas.cost import estimate_cost
    from studies.constraints import broken_constraints
    from trainers import TrainConfig

    base = base_settings(spec)
    try:
        cfg = TrainConfig.from_dict(base)
    except NasError as exc:
        raise ConfigError(f"Study key `train`: {exc}") from None
    if str(cfg.device).startswith("cuda") and spec.resources.gpu <= 0:
        raise ConfigError(f"Study key `train.device` is {cfg.device!r}, but `resources` gives a "
                          "trial no GPU; set resources.gpu (e.g. 1 or 0.5) or leave device out.")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=spec.seed),
                                directions=spec.directions)
    costs: dict[str, Any] = {}
    broken: Counter[str] = Counter()
    for _ in range(samples):
        trial = study.ask()
        try:
            config, overrides = suggest(space, trial, spec.smoke)
            TrainConfig.from_dict({**base, **overrides})
        except NasError as exc:
            raise ConfigError(f"Search space {space.name!r}: {exc}") from None
        cost = costs.get(config.arch_id) or estimate_cost(config, geometry)
        costs[config.arch_id] = cost
        study.tell(trial, state=TrialState.PRUNED)
        keys = broken_constraints(spec, cost)
        if not keys:
            return
        broken.update(keys)
    worst, count = broken.most_common(1)[0]
    raise ConfigError(
        f"Study key `constraints`: none of {samples} architectures drawn from space "
        f"{space.name!r} meets them ({worst}={spec.constraints[worst]:,.0f} is broken by "
        f"{count}); the smallest costs {min(c.params for c in costs.values()):,} params and "
        f"{min(c.madds for c in costs.values()):,} MAdds on {geometry.name!r}. Loosen the "
        "constraints or the space.")


#: Values tried per knob when searching a space's largest model (a longer range: its ends).
_LARGEST_CHOICES = 16


def largest_cost(space: SearchSpace, geometry: TaskGeometry,
                 key: Literal["params", "madds"], smoke: Smoke | None = None) -> int:
    """The largest ``key`` (params or MAdds) of an architecture of ``space`` on ``geometry``,
    found on the meta device by coordinate ascent: from every knob at its first value, each knob
    in turn takes the value (every choice, or a range's ends) that makes the model largest,
    until no knob changes. Exact for a space whose cost grows with each knob separately (as
    widths, depths, groups and sharing do), a local maximum otherwise."""
    from optuna.trial import FixedTrial

    from nas.cost import estimate_cost, estimate_params

    measure = (estimate_params if key == "params"
               else lambda config, geometry: estimate_cost(config, geometry).madds)
    candidates = {k: (list(d.values()) if len(d.values()) <= _LARGEST_CHOICES
                      else [d.values()[0], d.values()[-1]]) for k, d in space.arch.items()}
    train = {k: d.values()[0] for k, d in space.train.items()}
    costs: dict[str, int] = {}

    def size(params: dict[str, Any]) -> int:
        config, _ = suggest(space, FixedTrial({**params, **train}), smoke)
        if config.arch_id not in costs:
            costs[config.arch_id] = int(measure(config, geometry))
        return costs[config.arch_id]

    point = {k: values[0] for k, values in candidates.items()}
    best, changed = size(point), True
    while changed:
        changed = False
        for knob, values in candidates.items():
            for value in values:
                trial = {**point, knob: value}
                got = size(trial)
                if got > best:
                    point, best, changed = trial, got, True
    return best


def study_reference(spec: StudySpec, space: SearchSpace, geometry: TaskGeometry,
                    chance: float) -> list[float | None]:
    """The fixed hypervolume reference point of a study, in raw objective units, one entry per
    objective (see ``studies.pareto``): accuracy at the task's ``chance`` level; params and
    MAdds at ``params_max`` / ``madds_max`` where constrained, else the space's largest model
    (:func:`largest_cost`); latency at ``latency_ms_max``, else ``None`` (derived from the
    trials: it cannot be known before one is measured)."""
    out: list[float | None] = []
    for objective in spec.objectives:
        name = objective.name
        limit = spec.constraints.get(f"{name}_max")
        if objective.source == "metric":
            out.append(float(chance))
        elif limit is not None:
            out.append(float(limit))
        elif objective.source == "cost":
            out.append(float(largest_cost(space, geometry, "params" if name == "params"
                                          else "madds", spec.smoke)))
        else:
            out.append(None)
    return out


def _store_reference(run: StudyRun) -> None:
    """Store the reference of a study created before references were stored (``nas resume``),
    derived from its study file, space and geometry, and say so."""
    if run.study.user_attrs.get(StudyKey.REFERENCE) is not None or run.geometry is None:
        return
    reference = study_reference(run.spec, run.space, run.geometry, uniform_chance(run.geometry))
    with session(run.storage.url):
        run.study.set_user_attr(StudyKey.REFERENCE, reference)
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
    with session(run.storage.url):
        run.study.set_user_attr(StudyKey.SPEC, run.spec.to_dict())


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


def load_existing(name: str, storage: optuna.storages.RDBStorage | str | None = None, *,
                  write: bool = False) -> StudyRun:
    """Load a study and its spec and space from the database alone.

    ``storage`` is an open storage, used as it is, or a URL (``None``: the default storage).
    A URL is opened read-only (``studies.storage.open_storage(url, read_only=True)``): reading a
    study creates and writes nothing. ``write=True`` first checks read-only that the study
    exists, so an unknown name still writes nothing, then opens the storage writable; callers
    read and check everything stored read-only before that (``prepare_resume``, ``nas promote``
    through its plan), so a value that does not parse refuses with nothing written.

    Raises:
        UnknownStudyError: no study ``name`` there (the message lists the studies there).
    """
    from studies.storage import UnknownStudyError, resolve_storage_url, study_names

    if isinstance(storage, optuna.storages.RDBStorage):
        with session(storage.url):
            names = [s.study_name for s in storage.get_all_studies()]
        if name not in names:
            raise UnknownStudyError(name, storage.url, names)
    else:
        url = resolve_storage_url(storage)
        names = study_names(url)
        if name not in names:
            raise UnknownStudyError(name, url, names)
        storage = open_storage(url, read_only=not write)
    with session(storage.url):
        study, raw, trials = guarded(storage.engine, name, lambda: _read(storage, name))
    attrs = study_attrs(name, raw, len(study.directions))
    parsed_trials(name, trials)  # every trial's stored attributes parse
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
    return StudyRun(spec, space, study, storage, geometry=attrs.geometry, attrs=attrs)


def _read(storage: optuna.storages.RDBStorage, name: str) -> tuple[
        optuna.Study, dict[str, Any], list[optuna.trial.FrozenTrial]]:
    study = optuna.load_study(study_name=name, storage=storage)
    return study, study.user_attrs, study.get_trials(deepcopy=False)


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
    _check_run_name(spec.name)
    check_ray_address(address)  # Ray itself retries for minutes
    owner = read_owner(run.storage.engine, spec.name)
    if owner is not None and not is_stale(owner, stale_after=LEASE_STALE_AFTER):
        raise StudyOwned(f"Study {inert(spec.name)!r} is being run by {owner.describe()}; wait "
                         "for it to end, or stop that process.")
    with session(run.storage.url):
        counted = counted_trials(run.study.get_trials(deepcopy=False))
    if counted >= spec.budget.trials:
        return None
    if evaluator is None:
        evaluator = resolve_evaluator(spec, stored=run.attrs is not None)
    pool = check_run(spec, address=address, evaluator=evaluator, stored=run.attrs is not None)
    return _Ready(evaluator, pool, geometry or run.geometry or _task_geometry(spec))


def prepare_resume(name: str, storage: str | None = None, *, vouched: str | None = None,
                   address: str | None = None, trials: int | None = None,
                   timeout_minutes: float | None = None) -> tuple[StudyRun, Evaluator | None]:
    """``nas resume``: study ``name`` read and checked as :func:`run_study` checks it (its
    stored evaluator ``vouched`` for, see :func:`resolve_evaluator`) before the database is
    opened for writing, then opened for writing. Returns the run and the evaluator to pass to
    :func:`run_study`.

    ``trials`` (a new total) and ``timeout_minutes`` (a new limit of each run) grow the study's
    budget (``Budget.grown``): the returned run carries it, and :func:`run_study` stores it in
    the study's spec once the study is its own.

    Raises:
        UnknownStudyError, StoredValueError, StudyOwned, ConfigError: nothing written (a total
            below the trials already counted is a ConfigError).
    """
    check_ray_address(address)
    stored = load_existing(name, storage)  # read-only
    budget = stored.spec.budget
    if trials is not None or timeout_minutes is not None:
        with session(stored.storage.url):
            counted = counted_trials(stored.study.get_trials(deepcopy=False))
        budget = budget.grown(counted=counted, trials=trials, timeout_minutes=timeout_minutes)
        stored.spec = replace(stored.spec, budget=budget)
    evaluator = resolve_evaluator(stored.spec, stored=True, vouched=vouched)
    ready = _prepare(stored, address=address, evaluator=evaluator, geometry=None)
    run = load_existing(name, storage, write=True)
    run.spec = replace(run.spec, budget=budget)
    if ready is not None:
        run.geometry = ready.geometry  # a task built to find it is not built again
    return run, evaluator


def run_study(
    run: StudyRun,
    *,
    address: str | None = None,
    progress: bool = True,
    evaluator: Evaluator | None = None,
    geometry: TaskGeometry | None = None,
    verbose: bool = False,
    on_start: Callable[[int], None] | None = None,
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
    this process's.

    Raises:
        StudyOwned: another live process runs the study.
        ConfigError: what :func:`check_run` refuses; a stored evaluator not passed in.
        NasError: no more trials can start (every draw of a long run broke the constraints, or
            the Ray workers cannot start, e.g. cannot import the evaluator); the running trials
            are finished first, those not started are closed as interrupted and enqueued again.
    """
    from studies._progress import Progress

    spec = run.spec
    ready = _prepare(run, address=address, evaluator=evaluator, geometry=geometry)
    lease: Lease = acquire(run.storage.engine, spec.name, stale_after=LEASE_STALE_AFTER)
    with lease:  # renewed by a heartbeat thread while the run lives, released at the end
        _store_budget(run)
        close_interrupted(run)
        with session(run.storage.url):
            counted = counted_trials(run.study.get_trials(deepcopy=False))
        if on_start is not None:
            on_start(counted)
        if ready is None or counted >= spec.budget.trials:
            return run  # a finished study: nothing to start Ray for
        run.geometry = ready.geometry
        if StudyKey.GEOMETRY not in run.study.user_attrs:
            with session(run.storage.url):
                run.study.set_user_attr(StudyKey.GEOMETRY, asdict(run.geometry))
        _store_reference(run)
        deadline = (time.monotonic() + 60 * spec.budget.timeout_minutes
                    if spec.budget.timeout_minutes else math.inf)
        bar = Progress(spec.budget.trials, list(spec.directions), enabled=progress,
                       counted_at_start=counted,
                       reference=run.study.user_attrs.get(StudyKey.REFERENCE))

        def head_lost(reason: str) -> None:
            """Ray ends this process soon after its head is gone, running no Python cleanup:
            close the trials while the database can still be written, and end in one line."""
            closed = close_interrupted(run, reason=f"{reason} while this trial ran")
            lease.release()
            bar.close()
            print(f"nas: error: Study {spec.name!r} stopped: {reason}; {closed} running "
                  f"trials were closed as interrupted; continue with `nas resume "
                  f"{spec.name}` once the cluster is back.", file=sys.stderr, flush=True)
            os._exit(RunAborted.exit_code)

        with HeadWatch(head_lost):
            halted = fit(run, ready.evaluator, ready.pool, deadline, bar, verbose)
        if run.study.user_attrs.get(StudyKey.PROMOTED_FROM):
            record_fidelity(run)
    if halted:
        raise NasError(halted)
    return run
