"""What the pages read, behind one small interface: :class:`StudyReader`.

``create_app`` takes any object with these methods (``create_app(reader=...)``); the one it
builds from a storage URL is :class:`SqlReader`, the read-only SQL of ``dashboard.data``.
Everything a reader returns is already typed (``StudyInfo``, ``StudyData``, a trial's dict,
frames of curves and promotion links), so a reader that holds its studies in memory serves the
same pages; :func:`listing_of` gives such a reader its studies page from the studies it holds.

Every method raises ``NasError`` (``StorageError`` for an unknown study or trial,
``studies.store.StoredValueError`` for a stored value that does not parse) and nothing else
for what is in the studies: the pages show its one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import pandas as pd
from sqlalchemy.engine import make_url

from dashboard import data
from dashboard.data import UNFINISHED, StudyData, StudyInfo
from studies.store import Status, resolve_storage_url

__all__ = ["FrontFirst", "Listing", "SqlReader", "StudyReader", "listing_of"]

#: Every study and the studies page's frame (see ``dashboard.data.list_studies``).
Listing = tuple[list[StudyInfo], pd.DataFrame]


@runtime_checkable
class StudyReader(Protocol):
    """The studies the dashboard shows. Only read: nothing here may change a study."""

    @property
    def label(self) -> str:
        """Where the studies are read from, as the page header names it (no password)."""
        ...

    def study_names(self) -> list[str]:
        """Every study's name, in creation order."""
        ...

    def list_studies(self) -> Listing:
        """Every study and its row of the studies page (``dashboard.data.list_studies``)."""
        ...

    def study_info(self, name: str) -> StudyInfo:
        """The study called ``name``; ``NasError`` when there is none or it does not parse."""
        ...

    def fingerprint(self, info: StudyInfo) -> str:
        """A cheap text that changes whenever the study's trials change (live refresh)."""
        ...

    def load_study(self, info: StudyInfo, version: str = "") -> StudyData:
        """Every trial of the study, as the study page shows them."""
        ...

    def trial_state(self, info: StudyInfo, number: int) -> str:
        """Trial ``number``'s Optuna state in lower case, read without its stored values."""
        ...

    def load_trial(self, info: StudyInfo, number: int) -> dict[str, Any]:
        """One trial, as ``dashboard.data.load_trial`` returns it."""
        ...

    def load_curves(self, info: StudyInfo) -> pd.DataFrame:
        """Every trial's learning curve: rows (number, step, value)."""
        ...

    def load_promotion(self, info: StudyInfo) -> pd.DataFrame:
        """A promoted study's links: rows (number, source_trial, proxy)."""
        ...

    def load_convergence(self, info: StudyInfo) -> dict[str, Any] | None:
        """Whether the study converged, as ``dashboard.data.load_convergence`` says; None
        where its sampler records no gains."""
        ...

    def export_storage(self) -> Any:
        """An Optuna storage over the same studies, read-only, for the rare export that only
        ``studies.export`` itself can build (a study without a stored geometry); None where
        there is none (such an export is then refused)."""
        ...


@runtime_checkable
class FrontFirst(Protocol):
    """A reader that can read a study's 2-D front first and the rest after (the app uses
    these methods where a reader has them, ``load_study`` otherwise)."""

    def load_front(self, info: StudyInfo, version: str = "") -> StudyData:
        """What the 2-D front draws (``dashboard.data.load_front``)."""
        ...

    def load_rest(self, front: StudyData) -> StudyData:
        """``front`` completed into the whole study (``dashboard.data.load_rest``)."""
        ...


class SqlReader:
    """:class:`StudyReader` over a study database, read-only (``dashboard.data``'s SQL); a
    :class:`FrontFirst` one."""

    def __init__(self, storage_url: str | None = None) -> None:
        """``storage_url`` is resolved as ``--storage``; ``StorageError`` when it cannot be read."""
        self.url = resolve_storage_url(storage_url)
        self.engine = data.open_readonly(self.url)
        self._export_storage: Any = None

    @property
    def label(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def study_names(self) -> list[str]:
        return data.study_names(self.engine)

    def list_studies(self) -> Listing:
        return data.list_studies(self.engine)

    def study_info(self, name: str) -> StudyInfo:
        return data.study_info(self.engine, name)

    def fingerprint(self, info: StudyInfo) -> str:
        return data.fingerprint(self.engine, info.study_id, info.name)

    def load_study(self, info: StudyInfo, version: str = "") -> StudyData:
        return data.load_study(self.engine, info, version)

    def load_front(self, info: StudyInfo, version: str = "") -> StudyData:
        return data.load_front(self.engine, info, version)

    def load_rest(self, front: StudyData) -> StudyData:
        return data.load_rest(self.engine, front)

    def trial_state(self, info: StudyInfo, number: int) -> str:
        return data.trial_state(self.engine, info, number)

    def load_trial(self, info: StudyInfo, number: int) -> dict[str, Any]:
        return data.load_trial(self.engine, info, number)

    def load_curves(self, info: StudyInfo) -> pd.DataFrame:
        return data.load_curves(self.engine, info)

    def load_promotion(self, info: StudyInfo) -> pd.DataFrame:
        return data.load_promotion(self.engine, info)

    def load_convergence(self, info: StudyInfo) -> dict[str, Any] | None:
        return data.load_convergence(self.engine, info)

    def export_storage(self) -> Any:
        if self._export_storage is None:  # opened on the first export only
            self._export_storage = data.readonly_optuna_storage(self.url)
        return self._export_storage


def listing_of(studies: Sequence[StudyData]) -> Listing:
    """The studies page's listing (as ``dashboard.data.list_studies`` gives it) of studies
    already loaded: for a reader that holds its studies in memory. A trial counts by its
    status, one still running or waiting by its state."""
    words = (*Status.ALL, *UNFINISHED)
    rows, values = [], []
    for study in studies:
        info, trials = study.info, study.trials
        counts = dict.fromkeys(words, 0)
        for state, status in zip(trials.state, trials.status, strict=True):
            word = state if state in UNFINISHED else status
            if word in counts:
                counts[word] += 1
        stamps = pd.concat([trials.started, trials.completed]).dropna()
        rows.append({"study_id": info.study_id, "name": info.name, "task": info.task,
                     "trials": len(trials), **counts,
                     "last_activity": stamps.max() if len(stamps) else None,
                     "unreadable": info.unreadable})
        complete = study.complete()
        for i, objective in enumerate(info.objectives):
            values.append(pd.DataFrame({"study_id": info.study_id, "number": complete.number,
                                        "objective": i, "value": complete[objective]}))
    frame = pd.DataFrame(rows, columns=["study_id", "name", "task", "trials", *words,
                                        "last_activity", "unreadable"])
    frame.attrs["values"] = (pd.concat(values, ignore_index=True) if values else
                             pd.DataFrame(columns=["study_id", "number", "objective", "value"]))
    return [s.info for s in studies], frame
