"""One trial read back from the database, with everything an export writes about it.

The record is read through the engine's ``load_existing`` (the stored study file and space) and
Optuna's trials; the Pareto front is ``studies.report.pareto_trials``. Nothing here writes.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial, TrialState

import nas
from nas.config import ArchConfig
from nas.errors import NasError
from nas.tasks import GEOMETRIES, TaskGeometry
from studies.engine import StudyRun, load_existing
from studies.report import pareto_trials
from studies.storage import session

__all__ = ["TrialRecord", "git_commit", "pareto_records", "trial_record"]

_GEOMETRY_KEYS = {f.name for f in fields(TaskGeometry)}


@dataclass(frozen=True)
class TrialRecord:
    """A trial as exports see it: its architecture, training settings, task and provenance.

    ``objectives`` maps objective names to values (``None`` unless the trial completed);
    ``geometry`` is the task geometry its costs were computed on (``None`` when it cannot be
    determined); ``checkpoint`` is the trial's stored checkpoint path, if the engine kept one.
    """

    study: str
    number: int
    state: str
    status: str | None
    objectives: dict[str, float] | None
    directions: dict[str, str]
    arch: ArchConfig
    cost: dict[str, Any] | None
    train: dict[str, Any]
    task: str
    task_options: dict[str, Any]
    geometry: TaskGeometry | None
    space_hash: str | None
    seed: int | None
    fidelity: dict[str, Any] | None
    epochs_reached: int | None
    checkpoint: str | None
    version: str
    git_commit: str | None

    @property
    def label(self) -> str:
        return f"trial {self.number} of study {self.study!r}"

    def task_section(self) -> dict[str, Any]:
        return {"name": self.task, "options": dict(self.task_options),
                "geometry": asdict(self.geometry) if self.geometry is not None else None}

    def provenance(self) -> dict[str, Any]:
        """Where the trial comes from and what it scored, in a JSON/YAML-friendly mapping."""
        return {
            "study": self.study, "trial": self.number, "state": self.state,
            "status": self.status, "objectives": self.objectives,
            "directions": dict(self.directions), "arch_id": self.arch.arch_id,
            "cost": self.cost, "space_hash": self.space_hash, "seed": self.seed,
            "fidelity": self.fidelity, "epochs_reached": self.epochs_reached,
            "checkpoint": self.checkpoint, "package": "lightweight-nas",
            "version": self.version, "git_commit": self.git_commit,
        }


@functools.lru_cache(maxsize=4)
def git_commit(root: Path | None = None) -> str | None:
    """The commit of the git checkout holding the package (``root``: its parent folder), else
    ``None`` (an installed package, no git, not a repository)."""
    root = root if root is not None else Path(nas.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                              text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and re.fullmatch(r"[0-9a-f]{40,64}", commit) else None


@functools.lru_cache(maxsize=16)
def _built_geometry(task: str, options: str) -> TaskGeometry | None:
    """The geometry of a trainable task, by building it (proxy tasks take about a second)."""
    from trainers import get_task

    try:
        return get_task(task, **json.loads(options)).geometry
    except (NasError, OSError, ValueError, RuntimeError):
        return None  # e.g. a dataset that lives on another machine


def _geometry(run: StudyRun) -> TaskGeometry | None:
    """The geometry the study's costs were computed on: stored with the study (``nas.geometry``),
    a cost geometry named by the task, or the trainable task's own."""
    stored = run.study.user_attrs.get("nas.geometry")
    if isinstance(stored, dict) and set(stored) <= _GEOMETRY_KEYS:
        return TaskGeometry(**stored)
    spec = run.spec
    if spec.task in GEOMETRIES and not spec.task_options:
        return GEOMETRIES[spec.task]
    return _built_geometry(spec.task, json.dumps(spec.task_options, sort_keys=True, default=str))


def _record(run: StudyRun, trial: FrozenTrial, geometry: TaskGeometry | None) -> TrialRecord:
    spec, attrs = run.spec, trial.user_attrs
    if "nas.arch" not in attrs:
        raise NasError(f"Trial {trial.number} of study {spec.name!r} has no architecture yet "
                       f"(state {trial.state.name.lower()}); export a trial that was sampled.")
    complete = trial.state == TrialState.COMPLETE and trial.values is not None
    return TrialRecord(
        study=spec.name, number=trial.number, state=trial.state.name.lower(),
        status=attrs.get("nas.status"),
        objectives=(dict(zip(spec.objective_names, trial.values, strict=True))
                    if complete else None),
        directions={o.name: o.direction for o in spec.objectives},
        arch=ArchConfig.from_dict(attrs["nas.arch"]), cost=attrs.get("nas.cost"),
        train=dict(attrs.get("nas.train") or {}), task=spec.task,
        task_options=dict(spec.task_options), geometry=geometry,
        space_hash=run.study.user_attrs.get("nas.space_hash"),
        seed=spec.seed, fidelity=asdict(spec.fidelity),
        epochs_reached=attrs.get("nas.epochs_reached"), checkpoint=attrs.get("nas.checkpoint"),
        version=nas.__version__, git_commit=git_commit(),
    )


def _trials(run: StudyRun) -> list[FrozenTrial]:
    with session(run.storage.url):
        return run.study.get_trials(deepcopy=False)


def trial_record(name: str, number: int, storage_url: str | None = None) -> TrialRecord:
    """Trial ``number`` of study ``name``; ``NasError`` naming the valid numbers otherwise."""
    run = load_existing(name, storage_url)
    trials = _trials(run)
    found = [t for t in trials if t.number == number]
    if not found:
        numbers = f"0-{len(trials) - 1}" if trials else "none yet"
        raise NasError(f"Unknown trial {number} of study {name!r}; its trials are {numbers}.")
    return _record(run, found[0], _geometry(run))


def pareto_records(name: str, storage_url: str | None = None) -> list[TrialRecord]:
    """The study's Pareto-optimal trials, by number; ``NasError`` when it has none."""
    run = load_existing(name, storage_url)
    numbers = [t["number"] for t in pareto_trials(name, storage_url)]
    if not numbers:
        raise NasError(f"Study {name!r} has no completed trials, so no Pareto front yet; "
                       "export one trial with --trial N.")
    by_number = {t.number: t for t in _trials(run)}
    geometry = _geometry(run)
    return [_record(run, by_number[n], geometry) for n in numbers]

