"""Config downloads: a trial, or a study's Pareto set, in the export formats of ``studies.export``.

The files are rendered by ``studies.export`` itself (its ``FORMATS``, ``pareto_index``) from its
``TrialRecord``; only the record is built here, from the dashboard's own read of the trial (a
few indexed queries) instead of ``studies.export.trial_record``, which loads every trial of the
study through Optuna's object API (about a minute for a 10,000-trial study on a laptop). The two
records are equal (the tests check it). A study with no stored geometry whose task must be built
to know it goes through ``studies.export`` itself, over the same read-only storage.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any

import nas
from dashboard.data import StudyInfo
from nas.config import ArchConfig
from nas.errors import NasError
from nas.tasks import GEOMETRIES, TaskGeometry
from studies.export import FORMATS, INDEX, TrialRecord, git_commit, pareto_index
from studies.export import trial_record as slow_trial_record
from studies.spec import StudySpec

__all__ = ["pareto_zip", "records_of", "trial_file", "trial_record"]

_GEOMETRY_KEYS = {f.name for f in fields(TaskGeometry)}


def _spec(info: StudyInfo) -> StudySpec:
    if "nas.spec" not in info.attrs:
        raise NasError(f"Study {info.name!r} was not created by nas (it has no stored study "
                       "file), so its trials cannot be exported.")
    return StudySpec.from_dict(info.attrs["nas.spec"])


def _geometry(info: StudyInfo, spec: StudySpec) -> TaskGeometry | None:
    """The geometry the study's costs were computed on, when the study says without building
    its task: stored with it (``nas.geometry``, as the engine does) or a cost geometry."""
    stored = info.attrs.get("nas.geometry")
    if isinstance(stored, dict) and set(stored) <= _GEOMETRY_KEYS:
        return TaskGeometry(**stored)
    if spec.task in GEOMETRIES and not spec.task_options:
        return GEOMETRIES[spec.task]
    return None


def trial_record(info: StudyInfo, trial: Mapping[str, Any], storage: Any) -> TrialRecord:
    """The export record of ``trial`` (from ``dashboard.data.load_trial``), equal to
    ``studies.export.trial_record``'s; ``storage``: a read-only Optuna storage for the rare
    study that needs ``studies.export``'s own path."""
    spec = _spec(info)
    geometry = _geometry(info, spec)
    if geometry is None:  # only building the task would tell: studies.export does that
        return slow_trial_record(info.name, int(trial["number"]), storage)
    attrs = trial["attrs"]
    if "nas.arch" not in attrs:
        raise NasError(f"Trial {trial['number']} of study {spec.name!r} has no architecture yet "
                       f"(state {trial['state']}); export a trial that was sampled.")
    values = [trial["values"].get(name) for name in spec.objective_names]
    complete = trial["state"] == "complete" and all(v is not None for v in values)
    return TrialRecord(
        study=spec.name, number=int(trial["number"]), state=trial["state"],
        status=attrs.get("nas.status"),
        objectives=dict(zip(spec.objective_names, values, strict=True)) if complete else None,
        directions={o.name: o.direction for o in spec.objectives},
        arch=ArchConfig.from_dict(attrs["nas.arch"]), cost=attrs.get("nas.cost"),
        train=dict(attrs.get("nas.train") or {}), task=spec.task,
        task_options=dict(spec.task_options), geometry=geometry,
        space_hash=info.attrs.get("nas.space_hash"), seed=spec.seed,
        fidelity=asdict(spec.fidelity), epochs_reached=attrs.get("nas.epochs_reached"),
        checkpoint=attrs.get("nas.checkpoint"), version=nas.__version__,
        git_commit=git_commit())


def _format(fmt: str) -> Any:
    if fmt not in FORMATS:
        raise NasError(f"Unknown export format {fmt!r}; formats are {list(FORMATS)}.")
    return FORMATS[fmt]


def trial_file(record: TrialRecord, fmt: str) -> tuple[str, str]:
    """(file name, text) of ``record`` in format ``fmt`` (``hf-config``'s folder joined with a
    dash: a download is one file)."""
    form = _format(fmt)
    form.check(record)
    return form.path(record.number).replace("/", "-"), form.render(record)


def pareto_zip(records: Sequence[TrialRecord], fmt: str) -> bytes:
    """A zip of every record in format ``fmt`` plus ``pareto.csv``, as ``nas export --pareto``
    writes them into a folder."""
    if not records:
        raise NasError("The study has no completed trials, so no Pareto front yet.")
    form = _format(fmt)
    for record in records:
        form.check(record)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for record in records:
            archive.writestr(form.path(record.number), form.render(record))
        archive.writestr(INDEX, pareto_index(list(records), form))
    return buffer.getvalue()


def records_of(info: StudyInfo, numbers: Sequence[int],
               load: Callable[[int], Mapping[str, Any]], storage: Any) -> list[TrialRecord]:
    """The records of trials ``numbers`` (``load(number)`` reads one trial)."""
    return [trial_record(info, load(n), storage) for n in numbers]
