"""How the dashboard writes numbers and names: one rule each, used by every page and figure.

Parameter and MAdd counts read with an SI suffix (k, M, G, as plotly writes axis ticks) and
three significant digits (``1.23M``), the objectives that are not costs (accuracy) with four
decimals (``0.8200``), other whole numbers with thousands grouped (``12,345``), other fractions
with four significant digits.
Column keys become headers (``arch_id`` reads "architecture id", ``madds`` "MAdds").
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import datetime
from typing import Any, Literal

import numpy as np
import pandas as pd

__all__ = ["COSTS", "Kind", "count", "header", "kind_of", "number"]

#: Columns that hold parameter or MAdd counts.
COSTS = frozenset({"params", "params_matrix", "madds", "cost_params", "cost_madds"})
# SI prefixes, as plotly writes its axis ticks (``16k``, ``1.2M``).
_SUFFIXES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_HEADERS = {"number": "trial", "pareto": "Pareto", "madds": "MAdds", "cost_madds": "MAdds",
            "cost_params": "params", "params_matrix": "weight-matrix params",
            "arch_id": "architecture id", "epochs_reached": "epochs", "duration_s": "seconds",
            "lr": "learning rate"}

Kind = Literal["count", "metric", "plain"]


def header(key: str) -> str:
    """A column key (``epochs_reached``, ``nas.arch_id``, ``param:lr``) as a header."""
    key = str(key)
    if key in _HEADERS:
        return _HEADERS[key]
    prefix, _, rest = key.rpartition(":") if key.startswith("param:") else ("", "", key)
    rest = rest.removeprefix("nas.")
    words = _HEADERS.get(rest, rest.replace("_", " ").replace(".", " "))
    return f"{prefix} {words}" if prefix else words


def kind_of(key: str, objectives: Collection[str] = ()) -> Kind:
    """How a column's numbers read: counts (params, MAdds), metrics (the other objectives) or
    plain."""
    if key in COSTS:
        return "count"
    return "metric" if key in objectives else "plain"


def count(value: float) -> str:
    """A parameter or MAdd count: ``950``, ``12.3k``, ``1.23M``, ``4.5G``."""
    size = abs(float(value))
    for i, (scale, suffix) in enumerate(_SUFFIXES):
        if size >= scale:
            shown = f"{value / scale:.3g}"
            if abs(float(shown)) >= 1000 and i > 0:  # 999,950 rounds to 1000k: say 1M
                scale, suffix = _SUFFIXES[i - 1]
                shown = f"{value / scale:.3g}"
            return shown + suffix
    return f"{value:.3g}" if not float(value).is_integer() else str(int(value))


def _missing(value: Any) -> bool:
    return value is None or value is pd.NaT or (
        isinstance(value, (float, np.floating)) and math.isnan(float(value)))


def number(value: Any, kind: Kind = "plain") -> str:
    """``value`` as the dashboard writes it (``-`` where missing)."""
    if _missing(value):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value))
    if isinstance(value, (datetime, pd.Timestamp)):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if not isinstance(value, (int, float, np.integer, np.floating)):
        return str(value)
    value = float(value) if isinstance(value, (float, np.floating)) else int(value)
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if kind == "count":
        return count(value)
    if kind == "metric":
        return f"{value:.4f}"
    if isinstance(value, int) or value.is_integer():
        return f"{int(value):,}"
    return f"{value:.4g}"
