"""The views below a study's front (a tab each: hypervolume, 3-D front, parallel coordinates,
importance, knob effect, timeline, learning curves, promotion) and the page's one selection of
trials, linked across the front, the parallel coordinates and the table.

Only the open view is computed and sent, and only once the front is drawn, so the heavy ones
never delay it.
"""

from __future__ import annotations

import re
from typing import Any

import dash
from dash import ALL, Input, Output, State, ctx, no_update

from dashboard import figures, layout
from dashboard._cache import StudyCache
from dashboard.analysis import StudyView
from dashboard.pages._common import guarded, hover, line, numbers
from dashboard.pages.study import promotion_noise

__all__ = ["register"]

#: The views that draw the page's selection.
_SELECTABLE_VIEWS = (layout.PARETO_3D, layout.PARCOORDS)

_VIEW_HEIGHTS = {layout.HYPERVOLUME: 340, layout.PARETO_3D: 560, layout.PARCOORDS: 460,
                 layout.EFFECT: 420, layout.TIMELINE: 520, layout.CURVES: 480,
                 layout.PROMOTION: 480}


def register(app: dash.Dash, cache: StudyCache) -> None:
    """The views' and the selection's callbacks, on ``app``."""
    _register_views(app, cache)
    _register_selection(app, cache)


def _register_views(app: dash.Dash, cache: StudyCache) -> None:
    @app.callback(Output(layout.VIEW, "children"), Output(layout.EFFECT_CONTROLS, "style"),
                  Input(layout.VIEWS, "value"), Input(layout.FRONT_DRAWN, "data"),
                  Input(layout.EFFECT_KNOB, "value"), Input(layout.EFFECT_OBJECTIVE, "value"),
                  Input(layout.SELECTED, "data"), Input(layout.PARETO_SCALE, "value"),
                  State(layout.PARCOORDS_RANGES, "data"),
                  State(layout.STUDY, "data"), State(layout.EFFECT_CONTROLS, "style"))
    @guarded(lambda exc: (layout.problem(line(exc)), no_update))
    def show_view(tab: str, drawn: str | None, knob: str | None, objective: str | None,
                  selection: dict[str, Any] | None, scale: str | None,
                  ranges: dict[str, Any] | None, data: dict[str, Any],
                  style: dict[str, Any] | None) -> Any:
        # Called with the page (whose route already sent the front), when the front is redrawn
        # (FRONT_DRAWN), and as tabs open.
        if drawn is None:
            return no_update, no_update
        trigger = ctx.triggered_id
        if trigger in (layout.EFFECT_KNOB, layout.EFFECT_OBJECTIVE) and tab != layout.EFFECT:
            return no_update, no_update
        if trigger == layout.PARETO_SCALE and tab != layout.PARETO_3D:
            return no_update, no_update
        if trigger == layout.SELECTED and (tab not in _SELECTABLE_VIEWS or (
                selection or {}).get("source") == tab):
            return no_update, no_update  # a view without the selection, or where it was made
        controls = {**(style or {}), "display": "flex" if tab == layout.EFFECT else "none"}
        v = cache.view(data["name"], data.get("version"))
        figure = _view_figure(cache, v, tab, knob, objective, numbers(selection), ranges,
                              scale or "auto")
        return layout.view_box(tab, figure, _VIEW_HEIGHTS.get(tab, 450)), controls


def _view_figure(cache: StudyCache, v: StudyView, tab: str, knob: str | None,
                 objective: str | None, selected: list[int] | None = None,
                 ranges: dict[str, Any] | None = None, scale: str = "auto") -> Any:
    """The figure of view ``tab`` (see ``layout.VIEW_TABS``), with the page's selection."""
    if tab == layout.HYPERVOLUME:  # from the front's part of the study alone
        return figures.hypervolume_history(*v.curve)
    data = v.data
    if tab == layout.PARETO_3D:
        return figures.pareto_3d(data, v.front, labels=hover(v), selected=selected, scale=scale,
                                 noise=promotion_noise(cache, v))
    if tab == layout.PARCOORDS:
        return figures.parallel_coordinates(data, selected=selected, ranges=ranges)
    if tab == layout.IMPORTANCE:
        return figures.importance(v.importances, trials=len(v.complete))
    if tab == layout.EFFECT:
        return figures.knob_effect(data, knob or "", objective or "")
    if tab == layout.TIMELINE:
        return figures.timeline(data)
    if tab == layout.CURVES:
        curves = v.memo("curves", lambda: cache.reader.load_curves(data.info))
        return figures.learning_curves(curves, data)
    if tab == layout.PROMOTION:
        return _promotion_figure(cache, v)
    return figures.empty(f"No view {tab!r}.")


def _promotion_figure(cache: StudyCache, v: StudyView) -> Any:
    """A promoted study's pairs; for a source study, those of its latest promotion."""
    from studies.promote import rank_agreement

    info = v.front_data.info
    if info.stored is None or not info.stored.promoted_from:
        promotions = info.stored.promotions if info.stored is not None else ()
        if not promotions:
            return figures.empty("This study has not been promoted (nas promote).")
        v = cache.view(promotions[-1])
        info = v.front_data.info
    links = v.memo("promotion", lambda: cache.reader.load_promotion(info))
    metric = "accuracy" if "accuracy" in info.objectives else info.objectives[0]
    complete = v.complete.set_index("number")[metric]
    pairs = links[links.number.isin(complete.index)].assign(
        promoted=lambda df: complete.reindex(df.number).to_numpy())
    tau, _ = rank_agreement(list(pairs.proxy), list(pairs.promoted))
    fidelity = (info.stored.fidelity if info.stored is not None else None) or {}
    return figures.promotion_scatter(pairs, tau=tau, metric=metric, epochs=(
        fidelity.get("proxy_epochs", "?"), fidelity.get("epochs", "?")))


def _register_selection(app: dash.Dash, cache: StudyCache) -> None:
    @app.callback(Output(layout.SELECTED, "data"), Output(layout.PARCOORDS_RANGES, "data"),
                  Input(layout.PARETO_2D, "selectedData"),
                  Input(layout.TABLE, "selected_row_ids"),
                  Input({"type": layout.VIEW_GRAPH, "name": ALL}, "restyleData"),
                  Input(layout.SELECTION_CLEAR, "n_clicks"),
                  State(layout.SELECTED, "data"), State(layout.PARCOORDS_RANGES, "data"),
                  State(layout.TABLE, "data"), State(layout.STUDY, "data"),
                  prevent_initial_call=True)
    @guarded(lambda exc: (no_update, no_update))
    def select(front: dict[str, Any] | None, rows: list[Any] | None, restyles: list[Any],
               _clear: int | None, current: dict[str, Any] | None,
               ranges: dict[str, Any] | None, page: list[dict[str, Any]] | None,
               data: dict[str, Any]) -> Any:
        """The one selection of the page, from whichever view changed it."""
        trigger = ctx.triggered_id
        before = numbers(current)
        ranges = dict(ranges or {})
        source: str | None = None
        if trigger == layout.SELECTION_CLEAR:
            chosen: list[int] = []
            ranges = {}
        elif trigger == layout.PARETO_2D:
            chosen, source = _points_of(front), layout.PARETO_2D
        elif trigger == layout.TABLE:
            on_page = {int(r["id"]) for r in page or [] if r.get("id") is not None}
            ticked = {int(n) for n in rows or []}
            chosen = sorted((set(before) - on_page) | ticked)
            source = layout.TABLE
        elif isinstance(trigger, dict) and trigger.get("name") == layout.PARCOORDS:
            ranges = _brushed(ranges, restyles)
            chosen = (figures.parcoords_selection(
                cache.view(data["name"], data.get("version")).data, ranges) if ranges else [])
            source = layout.PARCOORDS
        else:
            return no_update, no_update
        if chosen == before and trigger != layout.SELECTION_CLEAR:
            return no_update, ranges
        return {"numbers": chosen, "source": source}, ranges

    @app.callback(Output(layout.SELECTION_NOTE, "children"), Input(layout.SELECTED, "data"))
    def selection_note(selection: dict[str, Any] | None) -> str:
        n = len(numbers(selection))
        return "no trials selected" if not n else f"{n} trial{'s' if n != 1 else ''} selected"


def _brushed(ranges: dict[str, Any], restyles: list[Any]) -> dict[str, Any]:
    """The parallel coordinates' brushed ranges by dimension, after a restyle of the graph."""
    change = next((r for r in restyles if r), None)
    for key, value in ((change or [{}])[0]).items():
        found = re.fullmatch(r"dimensions\[(\d+)\]\.constraintrange", key)
        if found:
            ranges[found.group(1)] = value
    return {k: v for k, v in ranges.items() if v}


def _points_of(selected: dict[str, Any] | None) -> list[int]:
    """The trial numbers of the points a box or lasso selected on a graph."""
    chosen = set()
    for point in (selected or {}).get("points") or []:
        trial = point.get("customdata")
        if isinstance(trial, list):
            trial = trial[0] if trial else None
        if trial is not None:
            chosen.add(int(trial))
    return sorted(chosen)
