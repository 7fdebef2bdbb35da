"""Config downloads: a trial, or a study's Pareto set, in the export formats of ``studies.export``.

The files are rendered by ``studies.export`` itself (its ``FORMATS``, ``pareto_index``) from its
``TrialRecord``, built by its ``build_record``; only the reading differs: the dashboard's own read
of the trial (a few indexed queries) instead of ``studies.export.trial_record``, which loads every
trial of the study through Optuna's object API (about a minute for a 10,000-trial study on a
laptop). The two records are equal (the tests check it). A study with no stored geometry whose
task must be built to know it goes through ``studies.export`` itself, over the same read-only
storage.

What the record holds was read from the database, so it is parsed as every reader parses it
(``studies.store.stored``: the study's typed attributes here, the trial's and its architecture in
``build_record``), and a file the export copies (a ``torch`` or ``timm`` checkpoint) is read
only by ``studies.export``'s formats, which refuse one outside the study's checkpoint folder or
not the trial's own. Every refusal is a ``NasError``, which the app shows beside the button.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dashboard.data import StudyInfo
from nas.errors import NasError
from studies.export import FORMATS, INDEX, TrialRecord, build_record, known_geometry, pareto_index
from studies.export import trial_record as slow_trial_record
from studies.spec import StudySpec
from studies.store import inert

__all__ = ["pareto_zip", "records_of", "trial_file", "trial_record"]


def _spec(info: StudyInfo) -> StudySpec:
    info.check()
    if info.space_problem is not None:  # the study shows; its exports need a space nas can use
        raise info.space_problem.with_traceback(None)
    if info.spec is None:
        raise NasError(f"Study {inert(info.name)!r} was not created by nas (it has no stored "
                       "study file), so its trials cannot be exported.")
    return info.spec


def trial_record(info: StudyInfo, trial: Mapping[str, Any], storage: Any) -> TrialRecord:
    """The export record of ``trial`` (from ``dashboard.data.load_trial``), equal to
    ``studies.export.trial_record``'s; ``storage``: a read-only Optuna storage for the rare
    study that needs ``studies.export``'s own path (None: such a study's export is refused)."""
    spec = _spec(info)
    geometry = known_geometry(spec, info.attrs)
    if geometry is None:  # only building the task would tell: studies.export does that
        if storage is None:
            raise NasError(f"Study {inert(info.name)!r} stores no task geometry and this "
                           "dashboard reads no Optuna storage, so its trials cannot be "
                           "exported here; use nas export.")
        return slow_trial_record(info.name, int(trial["number"]), storage)
    return build_record(spec, info.attrs, number=int(trial["number"]), state=trial["state"],
                        attrs=trial["attrs"],
                        values=[trial["values"].get(name) for name in spec.objective_names],
                        geometry=geometry)


def _format(fmt: str) -> Any:
    if fmt not in FORMATS:
        raise NasError(f"Unknown export format {fmt!r}; formats are {list(FORMATS)}.")
    return FORMATS[fmt]


def trial_file(record: TrialRecord, fmt: str) -> tuple[str, str | bytes]:
    """(file name, content) of ``record`` in format ``fmt``: the file's text (``hf-config``'s
    folder joined with a dash), or, where the format writes more than one file (the weights
    beside a ``torch`` script or a ``timm`` config), a zip of them all, as ``nas export``
    writes them into a folder."""
    form = _format(fmt)
    form.check(record)
    files = form.files(record)
    if len(files) == 1:
        return form.path(record.number).replace("/", "-"), form.render(record)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return f"trial-{record.number}-{fmt}.zip", buffer.getvalue()


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
            for name, content in form.files(record).items():
                archive.writestr(name, content)
        archive.writestr(INDEX, pareto_index(list(records), form))
    return buffer.getvalue()


def records_of(info: StudyInfo, numbers: Sequence[int],
               load: Callable[[int], Mapping[str, Any]], storage: Any) -> list[TrialRecord]:
    """The records of trials ``numbers`` (``load(number)`` reads one trial)."""
    return [trial_record(info, load(n), storage) for n in numbers]
