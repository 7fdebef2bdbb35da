"""The studies page (``/``): every study with its trials by status, best values and hypervolume,
refreshed on the page's tick."""

from __future__ import annotations

from typing import Any

import dash
import numpy as np
from dash import Input, Output

from dashboard import layout
from dashboard._cache import StudyCache
from dashboard.pages._common import guarded, line
from dashboard.reader import Listing
from studies.pareto import normalized_hypervolume

__all__ = ["register", "rows"]

#: Each study's hypervolume, with the trials it was computed on (count, sum of numbers).
Volumes = dict[int, tuple[tuple[int, float], float]]


def register(app: dash.Dash, cache: StudyCache) -> None:
    """The studies page's callbacks, on ``app``."""
    volumes: Volumes = {}  # recomputed only when a study's completed trials change

    @app.callback(Output(layout.STUDIES_TABLE, "children"),
                  Input(layout.STUDIES_TICK, "n_intervals"))
    @guarded(lambda exc: layout.problem(line(exc)))
    def studies(_tick: int | None) -> Any:
        return layout.studies_table(rows(cache.reader.list_studies(), volumes))


def rows(listing: Listing, volumes: Volumes) -> list[dict[str, Any]]:
    """The studies page's rows: each listed study with its best values and hypervolume (kept in
    ``volumes`` between calls); a study that does not parse is listed, with why, beside them."""
    infos, frame = listing
    values = frame.attrs["values"]
    out = []
    for info, row in zip(infos, frame.to_dict("records"), strict=True):
        if info.problem is not None:
            out.append({**row, "best": {}, "hypervolume": None})
            continue
        mine = values[values.study_id == info.study_id]
        wide = mine.pivot_table(index="number", columns="objective", values="value")
        wide = wide.reindex(columns=range(len(info.objectives))).dropna()
        matrix = wide.to_numpy(dtype=float)
        key = (len(matrix), float(wide.index.to_numpy().sum()))
        if volumes.get(info.study_id, (None, 0.0))[0] != key:
            volume = normalized_hypervolume(matrix, info.directions, info.reference)
            volumes[info.study_id] = (key, volume)
        best = {}
        for i, (name, direction) in enumerate(zip(info.objectives, info.directions,
                                                  strict=True)):
            column = matrix[:, i] if len(matrix) else np.array([])
            best[name] = (None if not len(column) else
                          float(column.max() if direction == "maximize" else column.min()))
        out.append({**row, "best": best, "hypervolume": volumes[info.study_id][1]})
    return out
