"""A study's page (``/study/<name>``): the summary, the 2-D front, the trial table, the
comparison with another study, and its downloads; the views below the front are
``dashboard.pages.views``'.

Live refresh: the page's tick asks for the study's fingerprint (one cheap read); only when it
changed does the page's store change, and with it every figure, from one load of the study
shared by all of them (``StudyCache``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dash
import numpy as np
import pandas as pd
from dash import ALL, Input, Output, Patch, State, ctx, dcc, no_update

from dashboard import exports, figures, layout
from dashboard._cache import StudyCache
from dashboard.analysis import StudyView, filter_trials, shared_hypervolumes, sort_trials
from dashboard.data import seed_noise
from dashboard.formatting import kind_of, number
from dashboard.pages._common import (
    file_stem,
    formats,
    guarded,
    hover,
    line,
    numbers,
    refused,
    send_csv,
    study_family,
)
from nas.errors import NasError

__all__ = ["page", "register"]


def page(cache: StudyCache, name: str, refresh_ms: int) -> list[Any]:
    """The page, sent with its front drawn (the views wait for it). A large study's front
    comes first, from the part of the study it needs and with brief hover labels: reading
    every knob and building every label took most of a 10,000-trial page's time. Its full
    labels follow (``front_labels``), and the rest of the page is filled from the whole
    study, read once the front is sent."""
    info = cache.info(name)
    version = cache.version(info)
    view = cache.view(info.name, version)
    others = [n for n in cache.reader.study_names() if n != info.name]
    stored = info.stored
    promoted = stored is not None and bool(stored.promoted_from or stored.promotions)
    brief = len(view.front_data.trials) >= figures.WEBGL_FROM
    data = view.front_data if brief else view.data
    x, y = layout.front_axes(info.objectives)
    front = (figures.pareto_2d(data, x, y, view.front, labels=None if brief else hover(view),
                               noise=promotion_noise(cache, view), brief=brief)
             if x is not None and y is not None else None)
    children = layout.study_page(info, data, version, others=others,
                                 formats=formats(study_family(info)), refresh_ms=refresh_ms,
                                 promoted=promoted, front=front)
    if brief and front is not None:
        children.append(dcc.Store(id=layout.FRONT_LABELS, data=version))
    return children


def promotion_noise(cache: StudyCache, view: StudyView) -> pd.DataFrame | None:
    """The spread of the study's latest seeded promotion (``nas promote --seeds``; one that
    trained some trial with 2 seeds or more, ``dashboard.data.seed_noise``), or None. Read once
    per version of the study; a deleted or unreadable promotion is passed over."""
    def read() -> pd.DataFrame | None:
        stored = view.front_data.info.stored
        for name in reversed(stored.promotions if stored is not None else ()):
            try:
                promoted = cache.view(name)
            except NasError:
                continue  # a deleted promotion, or one that does not parse (its tab says so)
            info = promoted.front_data.info
            links = promoted.memo("promotion", partial(cache.reader.load_promotion, info))
            noise = seed_noise(promoted.front_data, links)
            if len(noise):
                return noise
        return None

    return view.memo("seed_noise", read)


def register(app: dash.Dash, cache: StudyCache) -> None:
    """The study page's callbacks, on ``app`` (its views': ``dashboard.pages.views``)."""
    _register_store(app, cache)
    _register_labels(app, cache)
    _register_table(app, cache)
    _register_downloads(app, cache)


def _view(cache: StudyCache, data: dict[str, Any]) -> StudyView:
    """The study of the page's store, as of the store's version."""
    return cache.view(data["name"], data.get("version"))


def _register_store(app: dash.Dash, cache: StudyCache) -> None:
    store = Input(layout.STUDY, "data")

    @app.callback(Output(layout.STUDY, "data"), Input(layout.STUDY_TICK, "n_intervals"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    @guarded(lambda exc: no_update)
    def refresh(_tick: int | None, data: dict[str, Any]) -> Any:
        version = cache.version(cache.info(data["name"]))
        return no_update if version == data.get("version") else {**data, "version": version}

    @app.callback(Output(layout.SUMMARY, "children"), store)
    @guarded(lambda exc: layout.problem(line(exc)))
    def summary(data: dict[str, Any]) -> Any:
        v = _view(cache, data)
        trials = v.data.trials
        convergence = v.memo("convergence", lambda: cache.reader.load_convergence(v.data.info))
        return layout.study_summary(v.data.info, v.counts, v.best, v.hypervolume,
                                    v.last_activity,
                                    [int(n) for n in trials.number[trials.unreadable.notna()]],
                                    convergence=convergence)

    # The page arrives with its front drawn (``page`` sends it): this redraws it when the
    # axes, the trials or the selection change.
    @app.callback(Output(layout.PARETO_2D, "figure"), Output(layout.FRONT_DRAWN, "data"), store,
                  Input(layout.PARETO_X, "value"), Input(layout.PARETO_Y, "value"),
                  Input(layout.SELECTED, "data"), Input(layout.PARETO_SCALE, "value"),
                  prevent_initial_call=True)
    @guarded(lambda exc: (figures.empty(line(exc)), no_update))
    def pareto_2d(data: dict[str, Any], x: str, y: str, selection: dict[str, Any] | None,
                  scale: str | None) -> Any:
        v = _view(cache, data)
        figure = figures.pareto_2d(v.data, x, y, v.front, labels=hover(v),
                                   selected=numbers(selection), scale=scale or "auto",
                                   noise=promotion_noise(cache, v))
        # A new selection redraws the front only: the views do not wait on it again.
        drawn = no_update if ctx.triggered_id in (layout.SELECTED, layout.PARETO_SCALE) else \
            f"{data.get('version')}/{x}/{y}"
        return figure, drawn

    @app.callback(Output(layout.COMPARE, "figure"), store, Input(layout.COMPARE_WITH, "value"),
                  Input(layout.PARETO_X, "value"), Input(layout.PARETO_Y, "value"))
    @guarded(lambda exc: figures.empty(line(exc)))
    def compare(data: dict[str, Any], other: str | None, x: str, y: str) -> Any:
        if not other:
            return figures.empty("Choose a study to compare with.")
        views = [_view(cache, data), cache.view(other)]
        shared = shared_hypervolumes(views)
        volumes, reference = (shared, None) if isinstance(shared, str) else shared
        return figures.compare_fronts([v.front_data for v in views], x, y, volumes=volumes,
                                      reference=reference)

    @app.callback(Output(layout.URL, "pathname", allow_duplicate=True),
                  Input(layout.PARETO_2D, "clickData"),
                  Input({"type": layout.VIEW_GRAPH, "name": ALL}, "clickData"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def open_trial(*args: Any) -> Any:
        data = args[-1]
        clicked = ctx.triggered[0]["value"] if ctx.triggered else None
        points = (clicked or {}).get("points") or []
        trial = points[0].get("customdata") if points else None
        if isinstance(trial, list):
            trial = trial[0] if trial else None
        if trial is None or not data:
            return no_update
        return layout.trial_href(data["name"], int(trial))


def _register_labels(app: dash.Dash, cache: StudyCache) -> None:
    @app.callback(Output(layout.PARETO_2D, "figure", allow_duplicate=True),
                  Input(layout.FRONT_LABELS, "data"), State(layout.STUDY, "data"),
                  prevent_initial_call="initial_duplicate")
    @guarded(lambda exc: no_update)
    def front_labels(pending: str | None, data: dict[str, Any]) -> Any:
        # A large study's front came with brief labels (``page``): its full ones, as a patch
        # of the traces' hover texts (a redraw, after a new selection or axes, has them).
        if not pending or pending != data.get("version"):
            return no_update  # the page has moved on to a newer version, redrawn whole
        v = _view(cache, data)
        patch = Patch()
        for i, texts in enumerate(figures.front_labels(v.data, v.front, hover(v),
                                                       promotion_noise(cache, v))):
            if texts is not None:
                patch["data"][i]["hovertext"] = texts
                patch["data"][i]["hoverinfo"] = "text"
                del patch["data"][i]["hovertemplate"]
        return patch


def _register_table(app: dash.Dash, cache: StudyCache) -> None:
    store = Input(layout.STUDY, "data")

    @app.callback(Output(layout.TABLE, "columns"), Output(layout.EFFECT_KNOB, "options"),
                  Output(layout.EFFECT_KNOB, "value"), store, State(layout.TABLE, "columns"),
                  State(layout.EFFECT_KNOB, "value"))
    @guarded(lambda exc: (no_update, no_update, no_update))
    def knobs(data: dict[str, Any], shown: list[dict[str, Any]] | None,
              knob: str | None) -> Any:
        # The knobs are the parameters the trials hold: a page opened before the first trial
        # finished has none, and gets them here when the trials arrive.
        v = _view(cache, data)
        columns = layout.table_columns(v.data)
        options = layout.knob_options(v.data)
        values = [o["value"] for o in options]
        chosen = knob if knob in values else layout.default_knob(v.data)
        if columns == shown and chosen == knob:
            return no_update, no_update, no_update
        return columns, options, chosen

    @app.callback(Output(layout.TABLE, "data"), Output(layout.TABLE, "page_count"),
                  Output(layout.TABLE, "selected_rows"),
                  Output(layout.TABLE, "style_data_conditional"), store,
                  Input(layout.TABLE, "page_current"), Input(layout.TABLE, "page_size"),
                  Input(layout.TABLE, "sort_by"), Input(layout.TABLE, "filter_query"),
                  Input(layout.SELECTED, "data"))
    @guarded(lambda exc: ([], 0, [], []))
    def table(data: dict[str, Any], page: int | None, size: int | None,
              sort_by: list[dict[str, str]] | None, query: str | None,
              selection: dict[str, Any] | None) -> Any:
        v = _view(cache, data)
        rows = sort_trials(filter_trials(v.table, query), sort_by)
        size = size or layout.PAGE_SIZE
        page = page or 0
        shown = rows.iloc[page * size:(page + 1) * size]
        chosen = set(numbers(selection))
        marked = [i for i, n in enumerate(shown.number) if int(n) in chosen]
        style = [{"if": {"row_index": i}, "backgroundColor": "#fde0ef"} for i in marked]
        return (_records(shown, v.data.info.name, v.data.objectives),
                max(1, -(-len(rows) // size)), marked, style)


def _records(rows: pd.DataFrame, name: str, objectives: tuple[str, ...]) -> list[dict[str, Any]]:
    """The table's cells as the page shows them (``dashboard.formatting``); sorting and
    filtering work on the values (``dashboard.analysis``), before this."""
    kinds = {c: kind_of(c, objectives) for c in rows.columns}
    out = []
    for record in rows.to_dict("records"):
        cells: dict[str, Any] = {k: (None if _missing(v) else number(v, kinds[k]))
                                 for k, v in record.items()}
        number_ = int(record["number"])
        cells["number"] = f"[{number_}]({layout.trial_href(name, number_)})"
        cells["id"] = number_  # the row's id: the table's selection is by trial
        out.append(cells)
    return out


def _missing(value: Any) -> bool:
    return value is None or value is pd.NaT or (isinstance(value, float) and np.isnan(value))


def _register_downloads(app: dash.Dash, cache: StudyCache) -> None:
    # Each download answers with the file or with why not (one line beside its button), never
    # a server error: a study or trial that does not parse, a checkpoint that the export code
    # refuses (``NasError``), a file it cannot read (``OSError``).
    @app.callback(Output(layout.CSV_DOWNLOAD, "data"), Output(layout.CSV_MESSAGE, "children"),
                  Input(layout.CSV_BUTTON, "n_clicks"), State(layout.STUDY, "data"),
                  State(layout.TABLE, "sort_by"), State(layout.TABLE, "filter_query"),
                  prevent_initial_call=True)
    def csv(clicks: int | None, data: dict[str, Any], sort_by: Any, query: str | None) -> Any:
        if not clicks:
            return no_update, no_update
        try:
            v = _view(cache, data)
            rows = sort_trials(filter_trials(v.table, query), sort_by)
        except NasError as exc:
            return no_update, refused("csv", exc)
        return send_csv(rows, f"{file_stem(data['name'])}-trials.csv"), ""

    @app.callback(Output(layout.SELECTION_DOWNLOAD, "data"),
                  Output(layout.SELECTION_MESSAGE, "children"),
                  Input(layout.SELECTION_CSV, "n_clicks"), State(layout.SELECTED, "data"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def selection_csv(clicks: int | None, selection: dict[str, Any] | None,
                      data: dict[str, Any]) -> Any:
        if not clicks:
            return no_update, no_update
        try:
            v = _view(cache, data)
        except NasError as exc:
            return no_update, refused("selection_csv", exc)
        rows = v.table[v.table.number.isin(numbers(selection))]
        return send_csv(rows, f"{file_stem(data['name'])}-selected.csv"), ""

    @app.callback(Output(layout.PARETO_DOWNLOAD, "data"),
                  Output(layout.PARETO_MESSAGE, "children"),
                  Input(layout.PARETO_BUTTON, "n_clicks"), State(layout.PARETO_FORMAT, "value"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def export_pareto(clicks: int | None, fmt: str | None, data: dict[str, Any]) -> Any:
        if not clicks or not fmt:
            return no_update, no_update
        reader = cache.reader
        try:
            v = _view(cache, data)  # the front the page shows
            info = v.data.info
            front = sorted(int(n) for n in v.complete.number[v.front])
            records = exports.records_of(info, front, lambda n: reader.load_trial(info, n),
                                         reader.export_storage())
            blob = exports.pareto_zip(records, fmt)
        except (NasError, OSError) as exc:
            return no_update, refused("export_pareto", exc)
        filename = f"{file_stem(data['name'])}-pareto-{fmt}.zip"
        return (dcc.send_bytes(blob, filename),
                f"Downloaded {len(records)} trials as {filename}.")
