"""Everything a run would refuse, checked before its first write.

A refused ``nas run``, ``resume`` or ``promote`` leaves the database and the file tree as they
were: the study's name (it names folders), the Ray address and resources, the task and its
options (:func:`check_task`, which ``studies.promote`` uses too), every folder a run writes,
Tune's logger packages, and a space whose constraints no architecture meets
(:func:`check_space`). The evaluator is ``studies.evaluator``'s.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.errors import ConfigError, NasError
from nas.loading import unwritable_ancestor
from nas.tasks import GEOMETRIES, TaskGeometry
from search_spaces import SearchSpace
from studies._trials import Evaluator, base_settings, suggest
from studies._tune import run_folders, tune_callbacks
from studies.cluster import check_ray_address, check_resources, connect
from studies.evaluator import check_evaluator
from studies.folders import check_claims
from studies.reference import uniform_chance
from studies.spec import StudySpec, _check_name
from studies.store.stored import inert

__all__ = ["FEASIBILITY_SAMPLES", "check_folders", "check_run", "check_run_name", "check_space",
           "check_task", "cost_only", "task_facts"]


def cost_only(spec: StudySpec) -> bool:
    """A cost-only geometry (``vqa2``, ``imagenet``, ...) that the study's own evaluator trains
    on: there is no built-in task to build."""
    return bool(spec.evaluator) and spec.task in GEOMETRIES and not spec.task_options


def check_task(spec: StudySpec) -> None:
    """The task and its options, checked as building it would check them, before anything is
    written (its data is built when the study runs)."""
    from trainers.tasks import check_task as check_trainable
    from trainers.tasks import list_tasks

    if cost_only(spec):
        return
    if spec.task in GEOMETRIES and spec.task not in list_tasks():
        raise ConfigError(f"Task {spec.task!r} is a cost-only geometry: a study trains on it "
                          f"only with its own `evaluator`; trainable tasks are {list_tasks()}.")
    check_trainable(spec.task, spec.task_options)


def check_folders(spec: StudySpec) -> None:
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


def check_run_name(name: str) -> None:
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
    check_run_name(spec.name)
    check_ray_address(address)
    check_resources(spec.resources)
    if evaluator is not None:
        check_evaluator(spec, evaluator)
    check_folders(spec)
    if stored:
        check_claims(spec)
    tune_callbacks(spec)  # a logger whose package is missing
    return connect(address, spec.resources)


def task_facts(spec: StudySpec) -> tuple[TaskGeometry, float]:
    """The geometry costs are computed on and the task's chance level: a cost-only geometry
    (with :func:`uniform_chance`) when a study's own evaluator trains on it, else the trainable
    task's, by building it."""
    if cost_only(spec):
        return GEOMETRIES[spec.task], uniform_chance(GEOMETRIES[spec.task])
    from trainers import get_task

    data = get_task(spec.task, **spec.task_options)
    return data.geometry, float(data.chance)


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
