"""One trial read back from the database, with everything an export writes about it.

The record is read through the engine's ``load_existing`` (the stored study file and space) and
Optuna's trials; the Pareto front is ``studies.report.pareto_trials``. ``build_record`` is the one
place a record is made from a trial's stored attributes: the dashboard, which reads trials with
its own SQL, calls it too. Nothing here writes.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial

import nas
from nas.config import ArchConfig
from nas.errors import NasError
from nas.tasks import GEOMETRIES, TaskGeometry
from studies.engine import StudyRun, load_existing
from studies.report import pareto_trials
from studies.spec import StudySpec
from studies.store import StudyKey, inert, trial_attrs
from studies.store.stored import stored_geometry, stored_text

__all__ = [
    "TrialRecord",
    "build_record",
    "git_commit",
    "known_geometry",
    "pareto_records",
    "trial_record",
]



@dataclass(frozen=True)
class TrialRecord:
    """A trial as exports see it: its architecture, training settings, task and provenance.

    ``objectives`` maps objective names to values (``None`` unless the trial completed);
    ``geometry`` is the task geometry its costs were computed on (``None`` when it cannot be
    determined); ``checkpoint`` is the trial's stored checkpoint path, if the engine kept one;
    ``export_dir`` the folder an export writes into (set by the writer), which the paths written
    into files are relative to.
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
    checkpoint_dir: str | None  # the study's checkpoint folder: the only place one is read from
    version: str
    git_commit: str | None
    export_dir: str | None = None  # the folder written into: paths in files are relative to it

    @property
    def label(self) -> str:
        return f"trial {self.number} of study {self.study!r}"

    def relative(self, path: str | None) -> str | None:
        """``path`` relative to ``export_dir`` (as stored when there is none), so an export
        folder can move together with what it points to."""
        if path is None or self.export_dir is None:
            return path
        return os.path.relpath(os.path.abspath(path), self.export_dir)

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
            "checkpoint": self.relative(self.checkpoint), "package": "lightweight-nas",
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


def known_geometry(spec: StudySpec, study_attrs: Mapping[str, Any]) -> TaskGeometry | None:
    """The geometry the study's costs were computed on, when known without building its task:
    stored with the study (``StudyKey.GEOMETRY``, as the engine does) or a cost geometry named
    by the task; else ``None``."""
    if study_attrs.get(StudyKey.GEOMETRY) is not None:
        return stored_geometry(spec.name, study_attrs)
    if spec.task in GEOMETRIES and not spec.task_options:
        return GEOMETRIES[spec.task]
    return None


def _geometry(run: StudyRun) -> TaskGeometry | None:
    """``known_geometry``, else the trainable task's own (by building it)."""
    spec = run.spec
    known = known_geometry(spec, run.study.user_attrs)
    if known is not None:
        return known
    return _built_geometry(spec.task, json.dumps(spec.task_options, sort_keys=True, default=str))


def build_record(
    spec: StudySpec,
    study_attrs: Mapping[str, Any],
    *,
    number: int,
    state: str,
    attrs: Mapping[str, Any],
    values: Sequence[float | None] | None,
    geometry: TaskGeometry | None,
) -> TrialRecord:
    """The record of trial ``number`` of the study ``spec`` describes, from what the database
    holds, however it was read (Optuna's trials here, the dashboard's SQL in
    ``dashboard.exports``).

    ``study_attrs`` and ``attrs`` are the study's and the trial's user attributes; ``state`` is
    the trial's Optuna state in lower case; ``values`` its objective values in the order of
    ``spec.objective_names`` (kept only when the trial is complete and has them all);
    ``geometry`` as ``known_geometry`` or the task gives it. ``NasError`` when the trial has no
    architecture yet.
    """
    parsed = trial_attrs(spec.name, number, attrs)
    if parsed.arch is None:
        raise NasError(f"Trial {number} of study {inert(spec.name)!r} has no architecture yet "
                       f"(state {state}); export a trial that was sampled.")
    known = [v for v in values or () if v is not None]
    complete = (state == "complete" and values is not None
                and len(known) == len(values) == len(spec.objectives))
    return TrialRecord(
        study=spec.name, number=number, state=state,
        status=parsed.status,
        objectives=dict(zip(spec.objective_names, known, strict=True)) if complete else None,
        directions={o.name: o.direction for o in spec.objectives},
        arch=parsed.config(), cost=parsed.cost, train=dict(parsed.train or {}), task=spec.task,
        task_options=dict(spec.task_options), geometry=geometry,
        space_hash=stored_text(spec.name, study_attrs, StudyKey.SPACE_HASH),
        seed=spec.seed, fidelity=asdict(spec.fidelity),
        epochs_reached=parsed.epochs_reached, checkpoint=parsed.checkpoint,
        checkpoint_dir=spec.checkpoints,
        version=nas.__version__, git_commit=git_commit(),
    )


def _record(run: StudyRun, trial: FrozenTrial, geometry: TaskGeometry | None) -> TrialRecord:
    return build_record(run.spec, run.study.user_attrs, number=trial.number,
                        state=trial.state.name.lower(), attrs=trial.user_attrs,
                        values=trial.values, geometry=geometry)


def trial_record(name: str, number: int, storage_url: str | None = None) -> TrialRecord:
    """Trial ``number`` of study ``name``; ``NasError`` naming the valid numbers otherwise."""
    run = load_existing(name, storage_url)
    trials = run.store.trials(run.study)
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
    by_number = {t.number: t for t in run.store.trials(run.study)}
    geometry = _geometry(run)
    return [_record(run, by_number[n], geometry) for n in numbers]

