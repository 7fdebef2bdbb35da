"""What every page's callbacks share: the one-line error guard, the export formats of a family,
the page's selection, and the one place a CSV download is made."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import Any

import pandas as pd
from dash import dcc

from dashboard import figures, layout
from dashboard.analysis import StudyView
from dashboard.data import StudyInfo
from nas.errors import NasError
from studies.store import StoredValueError

__all__ = ["file_stem", "formats", "guarded", "hover", "line", "log", "numbers", "page_error",
           "refused", "send_csv", "study_family", "trial_family"]

#: The app's one log, whichever page's callback writes to it (its name is what users configure).
log = logging.getLogger("dashboard.app")


def line(exc: BaseException) -> str:
    """An error as the page shows it: one line."""
    return " ".join(str(exc).split())


def guarded(fallback: Callable[[NasError], Any]
            ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn a ``NasError`` (unknown study, database gone, a stored value that does not parse)
    into ``fallback(error)``, logged as one line."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any) -> Any:
            try:
                return fn(*args)
            except NasError as exc:
                log.warning("%s: %s", fn.__name__, line(exc))
                return fallback(exc)

        inner.__name__ = fn.__name__
        return inner

    return wrap


def page_error(exc: NasError) -> list[Any]:
    """The page in place of one that cannot be read: unreadable, or not found."""
    if isinstance(exc, StoredValueError):
        return layout.page_unreadable(line(exc))
    return layout.page_not_found(line(exc))


def refused(what: str, exc: BaseException) -> str:
    """Why a download was not served, in one line (and one line in the log)."""
    text = line(exc)
    if isinstance(exc, OSError):  # the export code's read of a file; its words, not ours
        text = f"Could not read a file for this download: {exc.strerror or type(exc).__name__}."
    log.warning("%s: %s", what, text)
    return text


def formats(family: str | None) -> list[str]:
    """The export formats of an architecture family (none without one)."""
    from studies.export import formats_for

    return formats_for(family) if family else []


def study_family(info: StudyInfo) -> str | None:
    """The family of the study's search space (its parsed base config), for the formats."""
    space = info.stored.space if info.stored is not None else None
    return space.base_config.family if space is not None else None


def trial_family(trial: dict[str, Any]) -> str | None:
    family = (trial.get("arch") or {}).get("family")
    return family if isinstance(family, str) else None


def hover(v: StudyView) -> Any:
    """The study's hover labels, built once per version and shared by the Pareto views (a
    large study's: its front's only, ``figures.FULL_LABELS_MAX``)."""
    return v.memo("hover", lambda: figures.hover_labels(v.data, v.front))


def numbers(selection: dict[str, Any] | None) -> list[int]:
    """The trial numbers of the page's selection (``layout.SELECTED``'s data)."""
    return [int(n) for n in (selection or {}).get("numbers") or []]


# ----------------------------------------------------------------------------- CSV
#: What a spreadsheet reads as the start of a formula (OWASP's CSV injection list).
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula, with a leading apostrophe (it
    shows the text as written); numbers, a negative one too, stay numbers."""
    return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_STARTS) else value


def _csv_safe(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every text cell and column name neutralised by :func:`_csv_cell`."""
    df = df.rename(columns=lambda c: _csv_cell(str(c)))
    for i in range(df.shape[1]):
        column = df.iloc[:, i]
        if not pd.api.types.is_numeric_dtype(column) and \
                not pd.api.types.is_datetime64_any_dtype(column):
            df.isetitem(i, column.map(_csv_cell))
    return df


def file_stem(name: str) -> str:
    """A study's name as the start of a download's file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "study"


def send_csv(rows: pd.DataFrame, filename: str) -> dict[str, Any]:
    """A CSV download of ``rows``: every CSV the dashboard serves is made here."""
    # Lines end CRLF (RFC 4180), so a cell holding a carriage return is quoted as one holding
    # a line feed is: no cell can start a row of its own.
    return dcc.send_string(_csv_safe(rows).to_csv(index=False, lineterminator="\r\n"),
                           filename)
