"""What the study views compute from the trials: Pareto front, importance, and the trial
table's filtering and sorting. Pure functions of arrays and frames, tested by equality.

Fronts and hypervolumes are ``studies.pareto``'s (what ``nas status`` and ``nas pareto`` print).
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any, cast

import numpy as np
import pandas as pd

from dashboard.data import StudyData
from studies.pareto import (
    Sweep,
    fill_reference,
    nondominated_mask,
    normalized_hypervolume,
    pareto_sweep,
    to_minimization,
)

__all__ = [
    "IMPORTANCE_BINS",
    "StudyView",
    "filter_trials",
    "front_mask",
    "importances",
    "knob_groups",
    "omega_squared",
    "shared_hypervolumes",
    "sort_trials",
]

# ----------------------------------------------------------------------------- Pareto front
def front_mask(values: np.ndarray, directions: Sequence[str]) -> np.ndarray:
    """The Pareto-optimal rows of objective ``values`` (one column per objective)."""
    return nondominated_mask(to_minimization(cast(Any, values), directions))


# ----------------------------------------------------------------------------- importance
#: Numeric knobs are cut into at most this many quantile bins for the importance.
IMPORTANCE_BINS = 8


def knob_groups(column: pd.Series, *, bins: int = IMPORTANCE_BINS) -> pd.Series:
    """The group of each trial for one knob: its value as text (``"not drawn"`` where a
    conditional knob was not suggested), or its quantile bin for a numeric knob with more
    than ``bins`` distinct values."""
    present = column.dropna()
    uniques = pd.unique(present.to_numpy(dtype=object))
    is_number = len(uniques) > 0 and all(
        isinstance(v, (int, float, np.integer, np.floating))
        and not isinstance(v, (bool, np.bool_)) for v in uniques)
    if is_number and len(uniques) > bins:
        codes, edges = pd.qcut(present.astype(float), bins, labels=False, retbins=True,
                               duplicates="drop")
        names = np.array([f"({lo:.3g}, {hi:.3g}]" for lo, hi in itertools.pairwise(edges)],
                         dtype=object)  # labelled here: pandas' interval labels are slow
        groups = pd.Series(names[codes.to_numpy(dtype=int)], index=present.index, dtype=object)
    else:  # each distinct value labelled once (knob values are few)
        labels = {v: _label(v) for v in uniques}
        groups = pd.Series([labels[v] for v in present.to_numpy(dtype=object)],
                           index=present.index, dtype=object)
    return groups.reindex(column.index).fillna("not drawn")


def _label(value: Any) -> str:
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        return f"{float(value):.4g}"
    return str(value)


def omega_squared(values: np.ndarray, groups: np.ndarray) -> float:
    """The share of ``values``' variance that ``groups`` (labels, or integer codes) explain:
    omega squared, one-way ANOVA's effect size corrected for the number of groups, clipped to
    [0, 1]."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    groups = np.asarray(groups)
    if groups.dtype.kind not in "iu":
        groups = pd.factorize(pd.Series(groups, dtype=object))[0]
    counts = np.bincount(groups) if n else np.zeros(0, dtype=int)
    present = counts > 0
    k = int(present.sum())
    if n < 3 or k < 2 or k >= n:
        return 0.0
    mean = values.mean()
    total = float(((values - mean) ** 2).sum())
    if total <= 0:
        return 0.0
    means = np.bincount(groups, weights=values)[present] / counts[present]
    between = float((counts[present] * (means - mean) ** 2).sum())
    within_mean_square = (total - between) / (n - k)
    omega = (between - (k - 1) * within_mean_square) / (total + within_mean_square)
    return float(min(1.0, max(0.0, omega)))


def importances(data: StudyData) -> dict[str, dict[str, float]]:
    """Each knob's importance for each objective, over the completed trials: the share of the
    objective's variance the knob explains on its own (:func:`omega_squared` of the objective's
    ranks grouped by :func:`knob_groups`).

    A main-effect estimate: fast (milliseconds for 10,000 trials) and exact, so the page can
    afford it live. Interactions between knobs are not credited, and correlated knobs share
    credit. Optuna's fANOVA took minutes per objective for 2,000 trials on a laptop, and its
    PED-ANOVA about a second, too slow to recompute on every refresh.
    """
    complete = data.complete()
    out: dict[str, dict[str, float]] = {}
    codes = {knob: pd.factorize(knob_groups(complete[knob]))[0] for knob in data.knobs}
    for objective in data.objectives:
        ranks = complete[objective].rank(method="average").to_numpy(dtype=float)
        out[objective] = {knob: omega_squared(ranks, c) for knob, c in codes.items()}
    return out


# ----------------------------------------------------------------------------- table
# A DataTable filter part: ``{column} op value``. The table prefixes an operator with ``s``
# (case-sensitive) or ``i`` (case-insensitive), as it writes ``{knob} scontains kv`` for ``kv``
# typed into a text column's filter cell.
_FILTER_PART = re.compile(
    r"\{(?P<column>[^}]+)\}\s*(?P<case>[is]?)(?P<op>>=|<=|!=|=|<|>|contains|datestartswith"
    r"|eq|ne|lt|le|gt|ge)\s*(?P<value>.*)$", re.DOTALL)
_OPS = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _filter_value(text: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        return text[1:-1].replace("\\" + text[0], text[0])
    try:
        return float(text)
    except ValueError:
        return text


def filter_trials(df: pd.DataFrame, query: str | None) -> pd.DataFrame:
    """Apply a DataTable ``filter_query`` (``{col} op value`` parts joined by ``&&``, an
    operator optionally prefixed ``s`` or ``i`` for case); parts naming unknown columns or
    malformed are ignored. Text is compared without regard to case unless ``s`` asks for it:
    ``kv`` typed in a filter cell keeps the rows whose cell contains ``kv`` or ``KV``."""
    if not query:
        return df
    for part in query.split(" && "):
        match = _FILTER_PART.match(part.strip())
        if not match or match["column"] not in df.columns:
            continue
        op = _OPS.get(match["op"], match["op"])
        sensitive = match["case"] == "s" and op in ("contains", "datestartswith")
        value = _filter_value(match["value"])
        column = df[match["column"]]
        if op in ("contains", "datestartswith"):
            text = column.astype(str).where(column.notna(), "")
            needle = str(value) if not isinstance(value, float) else match["value"].strip()
            if not sensitive:
                text, needle = text.str.lower(), needle.lower()
            keep = (text.str.contains(needle, regex=False) if op == "contains"
                    else text.str.startswith(needle))
        elif isinstance(value, float):
            numbers = pd.to_numeric(column, errors="coerce")
            keep = {"=": numbers == value, "!=": numbers != value, "<": numbers < value,
                    "<=": numbers <= value, ">": numbers > value, ">=": numbers >= value}[op]
        else:
            text = column.astype(str).str.lower()
            value = value.lower()
            keep = {"=": text == value, "!=": text != value, "<": text < value,
                    "<=": text <= value, ">": text > value, ">=": text >= value}[op]
        df = df[keep.fillna(False).astype(bool)]
    return df


def sort_trials(df: pd.DataFrame, sort_by: Sequence[dict[str, str]] | None) -> pd.DataFrame:
    """Apply a DataTable ``sort_by`` (missing values last)."""
    sort_by = [s for s in (sort_by or []) if s.get("column_id") in df.columns]
    if not sort_by:
        return df
    columns = [s["column_id"] for s in sort_by]
    ascending = [s.get("direction", "asc") == "asc" for s in sort_by]

    def key(column: pd.Series) -> pd.Series:
        numbers = pd.to_numeric(column, errors="coerce")
        if numbers.notna().sum() == column.notna().sum():
            return numbers
        return column.astype(str).where(column.notna())

    return df.sort_values(columns, ascending=ascending, na_position="last", kind="stable",
                          key=key)


# ----------------------------------------------------------------------------- one study
#: The hypervolume history of a long study is drawn with at most this many points.
CURVE_POINTS = 300


class StudyView:
    """A loaded study and what its views derive from it, each computed once on first use
    (the app keeps one per study and data version).

    ``data`` is the whole study. A view may start from the part its 2-D front draws
    (``dashboard.data.load_front``, ``StudyData.whole`` False) with ``rest``, the function
    that completes it (``dashboard.data.load_rest``): the front, the hypervolume, the best
    values and the counts come from that part, and ``data`` is completed once, when first
    asked for.
    """

    def __init__(self, data: StudyData,
                 rest: Callable[[StudyData], StudyData] | None = None) -> None:
        if not data.whole and rest is None:
            raise ValueError("A part of a study needs `rest`, the function that completes it.")
        self.front_data = data
        self._whole = data if data.whole else None
        self._rest = rest
        self._lock = threading.Lock()
        self._memo: dict[str, Any] = {}

    @property
    def data(self) -> StudyData:
        """The whole study (read now if the view started from its front's part)."""
        if self._whole is None:
            with self._lock:  # the first caller reads; the others wait for its result
                if self._whole is None:
                    assert self._rest is not None
                    self._whole = self._rest(self.front_data)
        return self._whole

    def memo(self, key: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per view (for what the figures share, such as hover labels)."""
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]

    @cached_property
    def complete(self) -> pd.DataFrame:
        """The completed trials (the front's part holds them as the whole study does)."""
        return self.front_data.complete()

    @cached_property
    def values(self) -> np.ndarray:
        """Objective values of the completed trials, one column per objective."""
        return self.complete[list(self.front_data.objectives)].to_numpy(dtype=float)

    @cached_property
    def sweep(self) -> Sweep:
        info = self.front_data.info
        return pareto_sweep(self.values, info.directions, reference=info.reference,
                            max_points=CURVE_POINTS)

    @cached_property
    def front(self) -> np.ndarray:
        """The study's Pareto-optimal trials over all objectives (a mask over ``complete``);
        the sweep's front, found without its hypervolumes (which the first paint does not
        need)."""
        return front_mask(self.values, self.front_data.info.directions)

    @property
    def hypervolume(self) -> float:
        return self.sweep.hypervolume

    @cached_property
    def curve(self) -> tuple[list[int], list[float]]:
        """(trial numbers, hypervolume after each)."""
        numbers = self.complete.number.to_numpy()
        return [int(numbers[i]) for i in self.sweep.positions], self.sweep.volumes

    @cached_property
    def importances(self) -> dict[str, dict[str, float]]:
        return importances(self.data)

    @cached_property
    def counts(self) -> dict[str, int]:
        """Trials by status (``nas.status``, else the Optuna state)."""
        counts = self.front_data.trials.status.astype(str).value_counts()
        return {str(k): int(v) for k, v in counts.items()}

    @cached_property
    def best(self) -> dict[str, float]:
        out = {}
        info = self.front_data.info
        for i, (name, direction) in enumerate(zip(info.objectives, info.directions,
                                                  strict=True)):
            if len(self.values):
                column = self.values[:, i]
                out[name] = float(column.max() if direction == "maximize" else column.min())
        return out

    @property
    def last_activity(self) -> Any:
        trials = self.data.trials
        stamps = pd.concat([trials.started, trials.completed]).dropna()
        return stamps.max() if len(stamps) else None

    @cached_property
    def table(self) -> pd.DataFrame:
        """The trial table: every trial, with ``pareto`` marking the front."""
        df = self.data.trials.drop(columns=["trial_id", "state", "cost_params", "cost_madds",
                                            "completed"])  # the status says what the state does
        pareto = pd.Series("", index=df.index, dtype=object)
        pareto[self.complete.index[self.front]] = "yes"
        df.insert(1, "pareto", pareto)
        return df


def shared_hypervolumes(views: Sequence[StudyView]) -> tuple[list[float], list[float]] | str:
    """Each study's hypervolume against ONE reference point, so the numbers compare: per
    objective the least demanding of the studies' references (each its stored ``nas.reference``,
    entries it lacks derived from its trials). Returns (volumes, reference), or why the studies
    cannot be compared (different objectives or directions)."""
    first = views[0].front_data.info
    for v in views[1:]:
        info = v.front_data.info
        if (info.objectives, info.directions) != (first.objectives, first.directions):
            return (f"{info.name} and {first.name} have different objectives "
                    f"({', '.join(info.objectives)} vs {', '.join(first.objectives)}): their "
                    "hypervolumes do not compare.")
    directions = list(first.directions)
    refs = np.array([fill_reference(v.front_data.info.reference, v.values,
                                    directions) for v in views])
    shared = [float(refs[:, k].min() if d == "maximize" else refs[:, k].max())
              for k, d in enumerate(directions)]
    return [normalized_hypervolume(v.values, directions, shared) for v in views], shared
