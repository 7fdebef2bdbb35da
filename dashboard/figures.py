"""Plotly figures of the dashboard: pure functions from data to a new ``go.Figure`` each call.

Plotly renders a few HTML tags inside figure text, so every user-provided string (study names,
parameter values, failure reasons) goes through :func:`text` (HTML-escaped) before it reaches a
title, a legend, an axis's categories or a hover label; the one text plotly draws as plain text,
a parallel coordinates axis's tick labels, gets them as written. Every trace's ``customdata``
holds trial numbers: clicking a point opens that trial.
"""

from __future__ import annotations

import html
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from optuna.distributions import FloatDistribution, IntDistribution
from plotly.subplots import make_subplots

from dashboard._sql import number as stored_number
from dashboard.analysis import front_mask, knob_groups
from dashboard.data import StudyData
from dashboard.formatting import Kind, header, kind_of, number
from studies.store import Status

__all__ = [
    "COLORS",
    "FULL_LABELS_MAX",
    "WEBGL_FROM",
    "compare_fronts",
    "cost_parts",
    "empty",
    "epoch_curves",
    "front_labels",
    "hover_labels",
    "hypervolume_history",
    "importance",
    "knob_effect",
    "learning_curves",
    "parallel_coordinates",
    "parcoords_dimensions",
    "parcoords_selection",
    "pareto_2d",
    "pareto_3d",
    "promotion_scatter",
    "text",
    "timeline",
    "warm_up",
]

#: From this many points on, scatter plots draw with WebGL (SVG slows down past a few thousand).
WEBGL_FROM = 2000
#: Past this many points, a front's full hover labels (:func:`hover_labels`) are built for its
#: Pareto-optimal points only; the others get a brief one (trial number and coordinates):
#: 100,000 full labels are 30 MB to send and seconds to build.
FULL_LABELS_MAX = 20_000
COLORS = {"front": "#1f77b4", "dominated": "rgba(127,127,127,0.3)", "rejected": "#d62728",
          "other": "#ff7f0e", "selected": "#e6007e"}
_DOMINATED_3D = "#7f7f7f"  # COLORS["dominated"] without its transparency
#: One colour per trial status (the words of ``studies.store.Status``, and running).
STATUS_COLORS = {Status.COMPLETED: "#1f77b4", Status.REUSED: "#17becf",
                 Status.STOPPED: "#9467bd", Status.FAILED: "#ff7f0e",
                 Status.REJECTED: "#d62728", Status.INTERRUPTED: "#8c564b",
                 "running": "#2ca02c"}
#: Below this many completed trials, parameter importance is unreliable (and says so).
IMPORTANCE_MIN_TRIALS = 30
_GRID = "#EBF0F8"
_AXIS = {"gridcolor": _GRID, "linecolor": _GRID, "zerolinecolor": _GRID, "automargin": True}
_SCENE_AXIS = {"backgroundcolor": "white", "gridcolor": "#DFE8F3", "showbackground": True,
               "zerolinecolor": _GRID}
# plotly_white's look in a few keys: a named template is deep-copied into every figure
# (tens of milliseconds each), a small dict is cheap. Figures copy it; nothing mutates it.
_TEMPLATE: dict[str, Any] = {"layout": {
    "font": {"color": "#2a3f5f"}, "paper_bgcolor": "white", "plot_bgcolor": "white",
    "colorway": ["#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692",
                 "#B6E880", "#FF97FF", "#FECB52"],
    "xaxis": _AXIS, "yaxis": _AXIS, "hoverlabel": {"align": "left"},
    "scene": {"xaxis": _SCENE_AXIS, "yaxis": _SCENE_AXIS, "zaxis": _SCENE_AXIS}}}
_LAYOUT: dict[str, Any] = {"margin": {"l": 60, "r": 20, "t": 40, "b": 50},
                           "legend": {"orientation": "h", "y": -0.2}, "hovermode": "closest"}


def text(value: Any) -> str:
    """``value`` as text that plotly shows literally (its HTML subset escaped)."""
    return html.escape(str(value), quote=False)


def _figure(**layout: Any) -> go.Figure:
    fig = go.Figure(layout={"template": _TEMPLATE})
    fig.update_layout(**{**_LAYOUT, **layout})
    return fig


def empty(message: str) -> go.Figure:
    """A blank figure that says why it is blank."""
    fig = _figure(xaxis={"visible": False}, yaxis={"visible": False})
    fig.add_annotation(text=text(message), showarrow=False, font={"size": 14},
                       xref="paper", yref="paper", x=0.5, y=0.5)
    return fig


def _label(name: str, directions: Mapping[str, str]) -> str:
    if name == "number":
        return "trial"
    arrow = {"maximize": " (higher is better)", "minimize": " (lower is better)"}
    return text(header(name)) + arrow.get(directions.get(name, ""), "")


def _number(value: Any, kind: Kind = "plain") -> str:
    return text(number(value, kind))


def _column_text(column: pd.Series, prefix: str = "", kind: Kind = "plain",
                 missing: str | None = "-") -> np.ndarray:
    """A column as short escaped display strings (``missing`` where a value is missing; with
    None, an empty string), each after ``prefix``; every distinct value is formatted once."""
    values = column.to_numpy(dtype=object)
    # Keyed by type too: True and 1 are equal (and hash alike) but read differently.
    keys = np.empty(len(values), dtype=object)
    keys[:] = [None if v is None or (isinstance(v, float) and math.isnan(v))
               else (type(v).__name__, v if isinstance(v, Hashable) else repr(v))
               for v in values]
    codes, uniques = pd.factorize(keys, use_na_sentinel=True)
    firsts = {code: i for i, code in reversed(list(enumerate(codes)))}
    labels = [prefix + _number(values[firsts[c]], kind) for c in range(len(uniques))]
    absent = "" if missing is None else prefix + missing
    return np.array([*labels, absent], dtype=object)[codes]  # -1: missing, the last


def hover_labels(data: StudyData, front: np.ndarray | None = None) -> pd.Series:
    """The hover label of each completed or rejected trial (indexed as ``data.trials``): trial
    number, status and reason, objective values, knobs and arch_id, all escaped. The Pareto
    views share them (``labels=``), so a large study builds them once. Past
    :data:`FULL_LABELS_MAX` such trials, only those of ``front`` (a mask over
    ``data.complete()``, where given): the figures give the others a brief label.

    One string per point, names repeated: a 2-D ``customdata`` with a shared hover template
    would be smaller, but plotly copies string arrays item by item, several times per figure,
    which for 10,000 points costs more than the bytes saved."""
    trials = data.trials
    shown = trials[(trials.state == "complete") | (trials.status == Status.REJECTED)]
    if front is not None and len(shown) > FULL_LABELS_MAX:
        shown = data.complete()[front]
    return pd.Series(_hover(shown, data), index=shown.index, dtype=object)


def _hover(df: pd.DataFrame, data: StudyData) -> list[str]:
    """Objectives ("-" where a trial has none), then the knobs the trial has (a knob that does
    not apply to its architecture is left out), then its arch_id."""
    objectives = [c for c in data.objectives if c in df]
    status = [f"<b>trial {n}</b> {'not trained: ' if s == Status.REJECTED else ''}{text(s)}"
              + (f"<br>{text(r[:120])}" if isinstance(r, str) and r else "")
              for n, s, r in zip(df.number, df.status, df.reason, strict=True)]
    cells = [_column_text(df[c], f"{text(header(c))} = ", kind_of(c, data.objectives))
             for c in objectives]
    cells += [_column_text(df[c], f"{text(header(c))} = ", kind_of(c, data.objectives),
                           missing=None) for c in data.knobs]
    cells.append(_column_text(df.arch_id, header("arch_id") + " "))
    return ["<br>".join(cell for cell in row if cell)
            for row in zip(status, *cells, strict=True)]


def _numbers(numbers: Any) -> np.ndarray:
    """Trial numbers for ``customdata``: an object array, which plotly sends as a JSON list.
    (Dash copies ``customdata`` into click events from the figure as sent, and cannot index the
    base64 blob a numeric array becomes; a Python list would cost plotly a check per item.)"""
    return np.array([int(n) for n in numbers], dtype=object)


def _texts(labels: pd.Series) -> np.ndarray:
    """Labels as a fixed-width unicode array: plotly copies an object array (and a list) item
    by item, several times per figure, but a unicode array in one go."""
    return labels.to_numpy(dtype=str) if len(labels) else np.array([], dtype=str)


def _axis_values(df: pd.DataFrame, name: str) -> pd.Series:
    """An objective's values, or for ``params`` / ``madds`` the stored cost where the trial has
    no objective value (rejected trials were never trained, but were costed)."""
    cost = f"cost_{name}"
    if name == "number":
        return df.number
    if name in df and cost in df:
        return df[name].where(df[name].notna(), df[cost])
    if name in df:
        return df[name]
    return df[cost] if cost in df else pd.Series(np.nan, index=df.index)


def _worst(values: pd.Series, direction: str) -> float:
    return float(values.min() if direction == "maximize" else values.max())


def _points(df: pd.DataFrame, axes: Sequence[str], directions: Mapping[str, str],
            known: pd.DataFrame) -> list[np.ndarray]:
    """Coordinates of ``df`` on ``axes``; a value a rejected trial lacks (it never trained)
    sits at the worst value the completed trials reached, where the marker says "not trained"."""
    out = []
    for axis in axes:
        values = _axis_values(df, axis).astype(float)
        if values.isna().any():
            reference = _axis_values(known, axis).astype(float).dropna()
            fill = _worst(reference, directions.get(axis, "minimize")) if len(reference) else 0.0
            values = values.fillna(fill)
        out.append(values.to_numpy())
    return out


def _scatter_groups(data: StudyData, front: np.ndarray, noise: pd.DataFrame | None = None
                    ) -> list[tuple[str, pd.DataFrame, dict]]:
    """The traces' names, trials and markers; with a seeded promotion's ``noise``
    (``dashboard.data.seed_noise``) the front points within the seed noise are a trace of
    their own, as open diamonds."""
    complete = data.complete()
    rejected = data.trials[data.trials.status == Status.REJECTED]
    n_front = int(front.sum())
    on_front = complete[front]
    marked = (complete.number.isin(noise.source_trial[noise.within_noise]).to_numpy()
              if noise is not None and len(noise) else np.zeros(len(complete), dtype=bool))
    noisy = complete[front & marked]
    groups = [
        (f"dominated ({len(complete) - n_front})", complete[~front],
         {"color": COLORS["dominated"], "size": 6}),
        (f"Pareto-optimal ({n_front - len(noisy)})" if len(noisy) else
         f"Pareto-optimal ({n_front})", on_front[~marked[front]],
         {"color": COLORS["front"], "size": 10, "line": {"width": 1, "color": "white"}}),
    ]
    if len(noisy):
        groups.append((f"Pareto-optimal, within the seed noise ({len(noisy)})", noisy,
                       {"color": COLORS["front"], "size": 11, "symbol": "diamond-open",
                        "line": {"width": 2, "color": COLORS["front"]}}))
    groups.append((f"rejected by a constraint ({len(rejected)})", rejected,
                   {"color": COLORS["rejected"], "size": 7, "symbol": "x"}))
    return groups


def _error_bars(df: pd.DataFrame, noise: pd.DataFrame | None) -> dict[str, Any] | None:
    """Plotly ``error_y``/``error_x`` of ``df``'s trials: each one's seed std of accuracy
    (0 for a trial without a spread), or None when none of them has one."""
    if noise is None or not len(noise) or df.empty:
        return None
    std = df.number.map(dict(zip(noise.source_trial, noise["std"], strict=True)))
    if std.isna().all():
        return None
    return {"type": "data", "array": std.fillna(0.0).to_numpy(dtype=float), "visible": True,
            "thickness": 1.5, "width": 4}


def _noise_texts(df: pd.DataFrame, noise: pd.DataFrame | None) -> list[str]:
    """Each trial's line about its seeds for the hover text ('' without a spread)."""
    rows = ({} if noise is None else
            {int(r.source_trial): r for r in noise.itertuples(index=False)})
    out = []
    for n in df.number:
        r = rows.get(int(n))
        if r is None:
            out.append("")
            continue
        verdict = (f"within the noise of trial {r.neighbour}" if r.within_noise
                   else "stands out from the noise")
        out.append(f"<br>promoted accuracy {r.mean:.4f} ± {r.std:.4f} over {r.seeds} seeds "
                   f"(min {r.min:.4f}, max {r.max:.4f}): {verdict}")
    return out


def _selection(numbers: pd.Series, selected: Collection[int] | None) -> dict[str, Any]:
    """A trace's keys that highlight the ``selected`` trial numbers (none: no selection)."""
    if not selected:
        return {}
    chosen = set(selected)
    return {"selectedpoints": [i for i, n in enumerate(numbers) if int(n) in chosen],
            "selected": {"marker": {"color": COLORS["selected"], "opacity": 1.0}},
            "unselected": {"marker": {"opacity": 0.25}}}


def _trace_hover(df: pd.DataFrame, labels: pd.Series | None, noise: pd.DataFrame | None,
                 marker: Mapping[str, Any]) -> np.ndarray | None:
    """A trace's hover texts: each trial's label (with its seeds' line, ``noise``), or None
    where some trial of it has none (``labels`` None: none has)."""
    if labels is None or not df.index.isin(labels.index).all():
        return None
    hover = labels.loc[df.index]
    if noise is not None and marker.get("symbol") != "x":
        hover = hover + pd.Series(_noise_texts(df, noise), index=df.index, dtype=str)
    return _texts(hover)


def _hover_keys(hover: np.ndarray | None, axes: Sequence[str],
                objectives: Sequence[str]) -> dict[str, Any]:
    """A trace's hover keys: its texts, or where it has none a brief label (the trial number
    and its coordinates, named in ``meta``: no stored name enters the template itself)."""
    if hover is not None:
        return {"hovertext": hover, "hoverinfo": "text"}
    formats = {"count": ":.3s", "metric": ":.4f", "plain": ""}
    lines = [f"%{{meta[{i}]}} = %{{{v}{formats[kind_of(a, objectives)]}}}"
             for i, (v, a) in enumerate(zip("xyz", axes, strict=False))]
    return {"hovertemplate": "<br>".join(["<b>trial %{customdata}</b>", *lines])
            + "<extra></extra>", "meta": [text(header(a)) for a in axes]}


def front_labels(data: StudyData, front: np.ndarray, labels: pd.Series,
                 noise: pd.DataFrame | None = None) -> list[np.ndarray | None]:
    """The hover texts of each trace of :func:`pareto_2d` and :func:`pareto_3d` (their traces
    of trials, in order) with ``labels``; None for a trace some of whose trials have none. For a
    front drawn with ``brief=True`` and given its labels after."""
    return [_trace_hover(df, labels, noise, marker)
            for _, df, marker in _scatter_groups(data, front, noise)]


SCALES = ("auto", "linear", "log")
_COSTS = ("params", "madds")


def _log_axis(name: str, values: np.ndarray, scale: str = "auto") -> bool:
    """Whether the axis of objective ``name`` is logarithmic: with ``log``, the costs' (params,
    MAdds); with ``linear``, none; with ``auto``, any axis whose values are all positive and
    span more than 30x."""
    values = np.asarray(values, dtype=float)
    values = values[np.isfinite(values)]
    if scale == "linear" or not len(values) or values.min() <= 0:
        return False
    if scale == "log":
        return name in _COSTS
    return len(values) > 1 and values.max() / values.min() > 30


def pareto_2d(data: StudyData, x: str, y: str, front: np.ndarray, *,
              labels: pd.Series | None = None,
              selected: Collection[int] | None = None, scale: str = "auto",
              noise: pd.DataFrame | None = None, brief: bool = False) -> go.Figure:
    """Completed trials on objectives ``x`` and ``y``: the study's Pareto-optimal trials (over
    all its objectives, ``front`` a mask over ``data.complete()``) in colour, dominated ones
    faded, constraint-rejected ones as crosses (at their cost; on an axis they have no value for,
    at the worst value reached), and the constraint limits as dashed lines. ``labels``:
    :func:`hover_labels`, if already built (a trace some of whose trials have none gets brief
    labels); ``brief``: brief labels everywhere, none built (a first paint, completed by
    :func:`front_labels`); ``selected``: trial numbers to highlight (the others fade).
    ``noise``: a seeded promotion's spread (``dashboard.data.seed_noise``): the trials it
    trained get error bars of ± their accuracy's seed std on the accuracy axis, and the front
    points within the noise are open diamonds with a legend entry of their own."""
    complete = data.complete()
    if complete.empty and not (data.trials.status == Status.REJECTED).any():
        return empty("No completed trials yet.")
    if x == y:  # one objective (or the same chosen twice): against the trial number
        x = "number"
    directions = dict(zip(data.objectives, data.info.directions, strict=True))
    scatter = go.Scattergl if len(data.trials) >= WEBGL_FROM else go.Scatter
    fig = _figure(xaxis_title=_label(x, directions), yaxis_title=_label(y, directions),
                  uirevision=f"{x}/{y}")
    if not brief and labels is None:
        labels = hover_labels(data, front)
    all_x: list[np.ndarray] = []
    all_y: list[np.ndarray] = []
    for name, df, marker in _scatter_groups(data, front, noise):
        px, py = _points(df, (x, y), directions, complete)
        all_x.append(px)
        all_y.append(py)
        bars: dict[str, Any] = {}
        if noise is not None and marker.get("symbol") != "x":
            bar = _error_bars(df, noise)
            if bar is not None and "accuracy" in (x, y):
                bars["error_y" if y == "accuracy" else "error_x"] = {
                    **bar, "color": marker["color"]}
        hover = None if brief else _trace_hover(df, labels, noise, marker)
        fig.add_trace(scatter(x=px, y=py, mode="markers", name=name, marker=marker,
                              customdata=_numbers(df.number),
                              **_hover_keys(hover, (x, y), data.objectives),
                              **bars, **_selection(df.number, selected)))
    for axis, values, add in (("x", all_x, fig.add_vline), ("y", all_y, fig.add_hline)):
        name = x if axis == "x" else y
        limit = data.info.constraints.get(f"{name}_max")
        if limit is not None:
            add(limit, line_dash="dash", line_color=COLORS["rejected"],
                annotation_text=text(f"{name}_max"))
        if _log_axis(name, np.concatenate(values) if values else np.array([]), scale):
            fig.update_layout({f"{axis}axis_type": "log"})
    return fig


def pareto_3d(data: StudyData, front: np.ndarray, *,
              labels: pd.Series | None = None,
              selected: Collection[int] | None = None, scale: str = "auto",
              noise: pd.DataFrame | None = None) -> go.Figure:
    """The trials in 3-D: accuracy (the first objective that is not a cost) x params x MAdds
    (stored costs where they are not objectives); styles as :func:`pareto_2d`, the
    ``selected`` trials ringed. ``noise`` as for :func:`pareto_2d`: error bars of ± each
    trial's accuracy seed std along the accuracy axis (``error_x``), the seeds in the hover
    text, and the front points within the noise a trace of their own."""
    complete = data.complete()
    if complete.empty:
        return empty("No completed trials yet.")
    first = next((o for o in data.objectives if o not in ("params", "madds")), None)
    axes = [a for a in (first, "params", "madds") if a is not None]
    if len(axes) < 3 or any(_axis_values(complete, a).isna().all() for a in axes):
        return empty("The 3-D view needs accuracy, params and MAdds (as objectives or as the "
                     "costs the engine stores).")
    directions = {**dict.fromkeys(("params", "madds"), "minimize"),
                  **dict(zip(data.objectives, data.info.directions, strict=True))}
    # Plotly's default camera (eye at 1.25 on each axis) fills the scene's box so that the
    # titles of the front axes run off it: the camera steps back until they fit.
    fig = _figure(margin={"l": 10, "r": 10, "t": 30, "b": 10}, uirevision="3d",
                  legend={"orientation": "h", "y": 0, "yanchor": "top"},
                  scene={"xaxis_title": _label(axes[0], directions),
                         "yaxis_title": _label(axes[1], directions),
                         "zaxis_title": _label(axes[2], directions),
                         "camera": {"eye": {"x": 1.6, "y": 1.6, "z": 1.1}}})
    labels = hover_labels(data, front) if labels is None else labels
    for name, df, marker in _scatter_groups(data, front, noise):
        px, py, pz = _points(df, axes, directions, complete)
        bars: dict[str, Any] = {}
        if noise is not None and marker.get("symbol") != "x":
            bar = _error_bars(df, noise)
            if bar is not None:  # accuracy is the scene's x axis
                bars["error_x"] = {**bar, "color": marker["color"]}
        hover = _hover_keys(_trace_hover(df, labels, noise, marker), axes, data.objectives)
        opacity = 1.0
        if marker.get("symbol") == "x":  # WebGL 3-D draws it as a glyph fonts may lack
            marker = {**marker, "symbol": "diamond"}
        if marker["color"] == COLORS["dominated"]:
            # WebGL 3-D draws a marker whose colour is half transparent, at the 2-D size
            # halved, as nearly nothing: faded here by a solid grey and the trace's opacity.
            marker, opacity = {**marker, "color": _DOMINATED_3D}, 0.35
        fig.add_trace(go.Scatter3d(
            x=px, y=py, z=pz, mode="markers", name=name, opacity=opacity,
            marker={**marker, "size": max(5, int(marker["size"] * 0.8))},
            customdata=_numbers(df.number), **hover, **bars))
    if selected:
        chosen = complete[complete.number.isin(set(selected))]
        px, py, pz = _points(chosen, axes, directions, complete)
        fig.add_trace(go.Scatter3d(
            x=px, y=py, z=pz, mode="markers", name=f"selected ({len(chosen)})",
            marker={"size": 9, "color": "rgba(0,0,0,0)",
                    "line": {"color": COLORS["selected"], "width": 3}},
            customdata=_numbers(chosen.number),
            **_hover_keys(_trace_hover(chosen, labels, None, {}), axes, data.objectives)))
    for key, axis in zip(("xaxis", "yaxis", "zaxis"), axes, strict=True):
        if _log_axis(axis, _axis_values(complete, axis).astype(float).to_numpy(), scale):
            fig.update_scenes({f"{key}_type": "log"})
    return fig


def hypervolume_history(numbers: Sequence[int], volumes: Sequence[float]) -> go.Figure:
    """Hypervolume of the completed trials so far (against the study's fixed reference point,
    in [0, 1], as ``nas status``) against the trial number."""
    if not len(numbers):
        return empty("No completed trials yet.")
    fig = _figure(xaxis_title="trial", yaxis_title="hypervolume", showlegend=False)
    fig.add_trace(go.Scatter(x=list(numbers), y=list(volumes), mode="lines+markers",
                             line_shape="hv", customdata=list(numbers),
                             hovertemplate="trial %{x}<br>hypervolume %{y:.4f}<extra></extra>",
                             marker={"size": 4}))
    return fig


def _codes(column: pd.Series) -> tuple[np.ndarray, list[int], list[str]]:
    """A categorical axis of the parallel coordinates: each value's level, the levels and their
    labels. The labels are as written: plotly draws a parcoords tick as plain SVG text (an
    escaped one would show its entities), unlike its titles, which render its HTML subset."""
    groups = knob_groups(column)
    labels = sorted(groups.unique(), key=_natural)
    index = {label: i for i, label in enumerate(labels)}
    return (groups.map(index).to_numpy(dtype=float), list(range(len(labels))),
            [str(label) for label in labels])


def _natural(label: str) -> tuple[int, float, str]:
    try:
        return (0, float(label), label)
    except ValueError:
        return (1 if label != "not drawn" else 2, 0.0, label)


def _is_numeric(data: StudyData, knob: str, column: pd.Series) -> bool:
    """Whether a knob gets a numeric axis: an int or float distribution, drawn in every trial
    shown (a conditional knob's "not drawn" needs a level of its own)."""
    dist = data.distributions.get(knob)
    return (isinstance(dist, (FloatDistribution, IntDistribution)) and len(column) > 0
            and bool(column.notna().all()))


def parcoords_dimensions(data: StudyData) -> list[dict[str, Any]]:
    """The parallel coordinates' axes over ``data.complete()``: each knob, then each objective
    (categorical knobs and knobs not drawn in a trial as labelled levels)."""
    complete = data.complete()
    if complete.empty:
        return []
    dims = []
    for knob in data.knobs:
        column = complete[knob]
        if _is_numeric(data, knob, column):
            dims.append({"label": text(header(knob)), "values": column.to_numpy(dtype=float)})
        else:
            values, ticks, labels = _codes(column)
            dims.append({"label": text(header(knob)), "values": values, "tickvals": ticks,
                         "ticktext": labels, "range": [-0.2, max(ticks) + 0.2]})
    for objective in data.objectives:
        dims.append({"label": text(header(objective)),
                     "values": complete[objective].to_numpy(dtype=float)})
    return dims


def parcoords_selection(data: StudyData, ranges: Mapping[str, Any]) -> list[int]:
    """The completed trials inside every brushed range (``ranges``: axis index -> one
    [low, high] or a list of them, as plotly's ``constraintrange``)."""
    complete = data.complete()
    keep = np.ones(len(complete), dtype=bool)
    dims = parcoords_dimensions(data)
    for index, spans in ranges.items():
        if spans is None or int(index) >= len(dims):
            continue
        values = np.asarray(dims[int(index)]["values"], dtype=float)
        spans = [spans] if spans and not isinstance(spans[0], (list, tuple)) else spans
        inside = np.zeros(len(values), dtype=bool)
        for low, high in spans:
            inside |= (values >= low) & (values <= high)
        keep &= inside
    return [int(n) for n in complete.number.to_numpy()[keep]]


def parallel_coordinates(data: StudyData, *, selected: Collection[int] | None = None,
                         ranges: Mapping[str, Any] | None = None) -> go.Figure:
    """One line per completed trial across every knob and objective, coloured by the first
    objective (with a selection: the ``selected`` trials in colour, the others grey).
    Categorical knobs (and knobs not drawn in a trial) become labelled levels; ``ranges``
    (:func:`parcoords_selection`'s) are drawn as the axes' brushes."""
    complete = data.complete()
    if complete.empty:
        return empty("No completed trials yet.")
    dims = parcoords_dimensions(data)
    for index, spans in (ranges or {}).items():
        if spans is not None and int(index) < len(dims):
            dims[int(index)]["constraintrange"] = spans
    fig = _figure(margin={"l": 60, "r": 60, "t": 60, "b": 30})
    if selected:
        chosen = complete.number.isin(set(selected)).to_numpy(dtype=float)
        line: dict[str, Any] = {"color": chosen, "cmin": 0, "cmax": 1, "showscale": False,
                                "colorscale": [[0, "#cccccc"], [1, COLORS["selected"]]]}
        fig.update_layout(title=f"{int(chosen.sum())} selected trials highlighted")
    else:
        colour = complete[data.objectives[0]].to_numpy(dtype=float) if data.objectives else None
        line = {"color": colour, "colorscale": "Viridis", "showscale": True,
                "colorbar": {"title": {"text": text(data.objectives[0]) if data.objectives
                                       else ""}}}
    fig.add_trace(go.Parcoords(dimensions=dims, line=line))
    return fig


def importance(scores: Mapping[str, Mapping[str, float]],
               trials: int | None = None) -> go.Figure:
    """Each knob's importance for each objective, as grouped horizontal bars. ``trials``: the
    completed trials it was computed on; below :data:`IMPORTANCE_MIN_TRIALS` the figure says
    that the ranking is unreliable."""
    knobs = sorted({k for s in scores.values() for k in s},
                   key=lambda k: max(s.get(k, 0.0) for s in scores.values()))
    if not knobs:
        return empty("No knobs to rank yet.")
    fig = _figure(xaxis_title="share of the objective's variance explained (omega squared)",
                  barmode="group", height=max(300, 40 * len(knobs) * max(1, len(scores)) // 2))
    if trials is not None and trials < IMPORTANCE_MIN_TRIALS:
        fig.update_layout(title={"text": f"Unreliable: only {trials} completed trials (about "
                                         f"{IMPORTANCE_MIN_TRIALS} are needed to rank knobs)",
                                 "font": {"color": COLORS["rejected"], "size": 14}},
                          margin={"t": 60})
    for objective, values in scores.items():
        fig.add_trace(go.Bar(y=[text(header(k)) for k in knobs],
                             x=[values.get(k, 0.0) for k in knobs],
                             name=text(objective), orientation="h",
                             hovertemplate="%{y}: %{x:.3f}<extra>" + text(objective)
                             + "</extra>"))
    return fig


def knob_effect(data: StudyData, knob: str, objective: str) -> go.Figure:
    """``objective`` against one knob over the completed trials: a box per value (a numeric
    knob with many values as a scatter), e.g. accuracy against the group count."""
    complete = data.complete()
    if complete.empty or knob not in data.knobs or objective not in data.objectives:
        return empty("No completed trials yet." if complete.empty else "Choose a knob.")
    directions = dict(zip(data.objectives, data.info.directions, strict=True))
    fig = _figure(xaxis_title=text(header(knob)), yaxis_title=_label(objective, directions),
                  showlegend=False)
    column = complete[knob]
    if _is_numeric(data, knob, column):
        fig.add_trace(go.Scatter(x=column.to_numpy(dtype=float), y=complete[objective],
                                 mode="markers",
                                 customdata=_numbers(complete.number),
                                 marker={"color": COLORS["front"], "size": 6, "opacity": 0.6},
                                 hovertemplate="trial %{customdata}<br>%{x:.4g}: %{y:.4g}"
                                               "<extra></extra>"))
        if getattr(data.distributions.get(knob), "log", False):
            fig.update_xaxes(type="log")
        return fig
    groups = knob_groups(column)
    order = sorted(groups.unique(), key=_natural)
    for label in order:
        mask = (groups == label).to_numpy()
        fig.add_trace(go.Box(y=complete[objective][mask], name=text(label),
                             boxpoints="all" if mask.sum() <= 200 else "outliers",
                             jitter=0.3, pointpos=0, marker={"size": 4},
                             customdata=_numbers(complete.number[mask]),
                             hovertemplate="trial %{customdata}: %{y:.4g}<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=[text(x) for x in order])
    return fig


def compare_fronts(studies: Sequence[StudyData], x: str, y: str, *,
                   volumes: Sequence[float] | str | None = None,
                   reference: Sequence[float] | None = None) -> go.Figure:
    """The studies' completed trials on objectives ``x`` and ``y`` (faded) with each study's
    front in those two objectives as a line, one colour per study. ``volumes``: each study's
    hypervolume against the one shared ``reference`` (``analysis.shared_hypervolumes``), shown
    in the title with that reference; a string says why they do not compare."""
    title = None
    if isinstance(volumes, str):
        title = text(volumes)
    elif volumes is not None and reference is not None:
        objectives = studies[0].objectives
        point = ", ".join(f"{header(o)} {_number(r, kind_of(o, objectives))}"
                          for o, r in zip(objectives, reference, strict=True))
        title = ("hypervolume " + ", ".join(f"{text(d.info.name)} {v:.4f}" for d, v in
                                           zip(studies, volumes, strict=True))
                 + f"<br><sub>on one reference point: {text(point)}</sub>")
    fig = _figure(uirevision=f"compare/{x}/{y}", title=title,
                  margin={**_LAYOUT["margin"], "t": 70 if title else 40})
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"]
    directions: dict[str, str] = {}
    for i, data in enumerate(studies):
        dirs = dict(zip(data.objectives, data.info.directions, strict=True))
        if x not in dirs or y not in dirs:
            return empty(f"Study {data.info.name} has no objective {x if x not in dirs else y}.")
        directions = dirs
        complete = data.complete()
        colour = palette[i % len(palette)]
        values = complete[[x, y]].to_numpy(dtype=float)
        front = front_mask(values, [dirs[x], dirs[y]]) if len(values) else np.zeros(0, bool)
        scatter = go.Scattergl if len(complete) >= WEBGL_FROM else go.Scatter
        name = text(data.info.name)
        fig.add_trace(scatter(x=values[:, 0], y=values[:, 1], mode="markers",
                              name=f"{name}: all ({len(values)})", opacity=0.25,
                              marker={"color": colour, "size": 5}, legendgroup=str(i),
                              customdata=_numbers(complete.number),
                              hovertemplate=f"{name}<br>trial %{{customdata}}<extra></extra>"))
        order = np.argsort(values[front, 0], kind="stable")
        fig.add_trace(go.Scatter(x=values[front, 0][order], y=values[front, 1][order],
                                 mode="lines+markers", line_shape="hv", legendgroup=str(i),
                                 name=f"{name}: front ({int(front.sum())})",
                                 marker={"color": colour, "size": 9}, line={"color": colour},
                                 customdata=_numbers(complete.number.to_numpy()[front][order]),
                                 hovertemplate=f"{name}<br>trial %{{customdata}}<br>"
                                               "%{x:.4g}, %{y:.4g}<extra></extra>"))
    fig.update_layout(xaxis_title=_label(x, directions), yaxis_title=_label(y, directions))
    return fig


def cost_parts(cost: Mapping[str, Any] | None) -> go.Figure:
    """Parameters and MAdds of one architecture, split by part (backbone, embedding, head...)."""
    parts = {p: v for p, v in ((cost or {}).get("parts") or {}).items()
             if isinstance(v, Mapping)}  # a part written by something else: not drawn
    if not parts:
        return empty("No cost recorded for this trial.")
    names = [text(p) for p in parts]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("parameters", "MAdds"))
    for col, key in ((1, "params"), (2, "madds")):
        fig.add_trace(go.Bar(x=names, y=[stored_number(parts[p].get(key, 0)) for p in parts],
                             marker_color=COLORS["front"], showlegend=False,
                             hovertemplate="%{x}: %{y:,}<extra></extra>"), row=1, col=col)
    fig.update_layout(**{**_LAYOUT, "template": _TEMPLATE, "height": 320})
    return fig


def epoch_curves(epochs: Sequence[Mapping[str, Any]],
                 intermediate: Sequence[tuple[int, float | None]] = ()) -> go.Figure:
    """The trial's metric (and training loss, right axis) per epoch, from ``nas_epochs``; the
    intermediate values Optuna holds if the trial has no epoch rows."""
    if not epochs and not intermediate:
        return empty("No epochs reported for this trial.")
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    if epochs:
        metric = text(next((e.get("metric") for e in epochs if e.get("metric")), "metric"))
        x = [e["epoch"] for e in epochs]
        fig.add_trace(go.Scatter(x=x, y=[e.get("value") for e in epochs], name=metric,
                                 mode="lines+markers"), secondary_y=False)
        fig.add_trace(go.Scatter(x=x, y=[e.get("train_loss") for e in epochs],
                                 name="training loss", mode="lines+markers",
                                 line={"dash": "dot"}), secondary_y=True)
        fig.update_yaxes(title_text=metric, secondary_y=False)
        fig.update_yaxes(title_text="training loss", secondary_y=True)
    else:
        fig.add_trace(go.Scatter(x=[s for s, _ in intermediate], y=[v for _, v in intermediate],
                                 name="intermediate value", mode="lines+markers"))
    fig.update_layout(**{**_LAYOUT, "template": _TEMPLATE, "xaxis_title": "epoch",
                         "height": 320})
    return fig


def timeline(data: StudyData, now: Any = None) -> go.Figure:
    """Each trial as a bar from its start to its end (a running trial's to ``now``), one colour
    per status: when the workers were busy, idle or stuck, and which trials took long."""
    df = data.trials[data.trials.started.notna()]
    if df.empty:
        return empty("No trial has started yet.")
    now = pd.Timestamp.now() if now is None else pd.Timestamp(now)
    end = df.completed.where(df.completed.notna(), max(now, df.started.max()))
    fig = _figure(xaxis_title="time", yaxis_title="trial", barmode="overlay",
                  xaxis_type="date", uirevision="timeline")
    statuses = df.status.astype(str)
    for status in [s for s in STATUS_COLORS if (statuses == s).any()] + sorted(
            set(statuses) - set(STATUS_COLORS)):
        rows = df[statuses == status]
        seconds = (end[rows.index] - rows.started).dt.total_seconds()
        fig.add_trace(go.Bar(
            base=rows.started.dt.strftime("%Y-%m-%d %H:%M:%S.%f").to_numpy(),
            x=(seconds * 1000).to_numpy(), y=rows.number.to_numpy(), orientation="h",
            name=text(f"{status} ({len(rows)})"),
            marker={"color": STATUS_COLORS.get(status, COLORS["other"])},
            customdata=_numbers(rows.number),
            hovertemplate="trial %{customdata}: " + text(status)
                          + "<br>%{base} for %{x:,.0f} ms<extra></extra>"))
    return fig


def learning_curves(curves: pd.DataFrame, data: StudyData) -> go.Figure:
    """Every trial's metric after each epoch (``curves``: rows number, step, value, as
    ``dashboard.data.load_curves``), one trace per status: completed trials in colour, trials
    stopped early dashed (where early stopping cut them off is visible), the rest faded."""
    if curves.empty:
        return empty("No trial has reported an epoch yet.")
    status = data.trials.set_index("number").status.astype(str)
    metric = data.objectives[0] if data.objectives else "metric"
    fig = _figure(xaxis_title="epoch", yaxis_title=text(metric), uirevision="curves")
    curves = curves.assign(status=status.reindex(curves.number).to_numpy())
    styles = {Status.COMPLETED: {"color": COLORS["front"], "width": 1.5},
              Status.STOPPED: {"color": STATUS_COLORS[Status.STOPPED], "width": 1,
                               "dash": "dot"}}
    for name, rows in curves.groupby("status", sort=False):
        # One trace per status: the trials' curves joined by gaps (NaN) between trials.
        gaps = rows.number.to_numpy()[1:] != rows.number.to_numpy()[:-1]
        breaks = np.flatnonzero(gaps) + 1
        x = np.insert(rows.step.to_numpy(dtype=float), breaks, np.nan)
        y = np.insert(rows.value.to_numpy(dtype=float), breaks, np.nan)
        numbers = np.insert(rows.number.to_numpy(dtype=float), breaks, np.nan)
        scatter = go.Scattergl if len(rows) >= WEBGL_FROM else go.Scatter
        line = styles.get(str(name), {"color": STATUS_COLORS.get(str(name), COLORS["other"]),
                                      "width": 1})
        fig.add_trace(scatter(x=x, y=y, mode="lines+markers", connectgaps=False,
                              name=text(f"{name} ({rows.number.nunique()})"), line=line,
                              marker={"size": 4 if name == Status.COMPLETED else 6,
                                      "color": line["color"]},
                              opacity=1.0 if name == Status.COMPLETED else 0.7,
                              customdata=numbers,
                              hovertemplate="trial %{customdata}<br>epoch %{x}: %{y:.4g}"
                                            "<extra></extra>"))
    return fig


def promotion_scatter(pairs: pd.DataFrame, *, tau: float | None, epochs: tuple[Any, Any],
                      metric: str = "accuracy") -> go.Figure:
    """Each promoted trial's proxy accuracy (x, the source study's) against its accuracy after
    promotion (y), with the diagonal y = x: points in the same order along both axes mean the
    proxy ranks architectures as longer training does. ``pairs``: rows source_trial, proxy,
    promoted, number (the promoted trial); ``tau``: Kendall's tau of the pairs."""
    if pairs.empty:
        return empty("No promoted trial has finished yet.")
    proxy_epochs, epochs_after = epochs
    title = (f"Kendall tau {tau:+.2f} over {len(pairs)} pairs" if tau is not None and
             math.isfinite(tau) else f"{len(pairs)} pairs (too few for a rank correlation)")
    fig = _figure(title=title, xaxis_title=text(f"proxy {metric} ({proxy_epochs} epochs)"),
                  yaxis_title=text(f"promoted {metric} ({epochs_after} epochs)"),
                  showlegend=False)
    low = float(min(pairs.proxy.min(), pairs.promoted.min()))
    high = float(max(pairs.proxy.max(), pairs.promoted.max()))
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="y = x",
                             line={"color": "#999", "dash": "dash"}, hoverinfo="skip"))
    fig.add_trace(go.Scatter(
        x=pairs.proxy, y=pairs.promoted, mode="markers+text", name="promoted trials",
        text=[f"#{int(n)}" for n in pairs.source_trial], textposition="top center",
        marker={"color": COLORS["front"], "size": 9}, customdata=_numbers(pairs.number),
        hovertemplate="source trial %{text}: %{x:.4f} -> %{y:.4f}<extra></extra>"))
    return fig


def warm_up() -> None:
    """Build and serialise one small figure of each kind: plotly creates its validators on first
    use (a second or more in all), which a server should pay at start, not on its first page."""
    import plotly.io.json

    fig = make_subplots(rows=1, cols=2, specs=[[{"secondary_y": True}, {}]])
    for trace in (go.Scatter(x=[0]), go.Scattergl(x=[0]), go.Bar(x=[0]), go.Box(y=[0])):
        fig.add_trace(trace, row=1, col=1)
    fig.add_vline(0)
    for figure in (fig, go.Figure(go.Scatter3d(x=[0], y=[0], z=[0])),
                   go.Figure(go.Parcoords(dimensions=[{"values": [0]}]))):
        figure.update_layout(**_LAYOUT, template=_TEMPLATE)
        plotly.io.json.to_json_plotly(figure)
