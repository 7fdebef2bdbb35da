"""The Dash app: ``create_app(storage_url)``, routing with ``dcc.Location``, live refresh.

Pages: ``/`` (studies), ``/study/<name>`` and ``/study/<name>/trial/<number>`` (names
percent-encoded). Callbacks are registered on the app instance, never on Dash's global
registry, so two apps (tests) never share them. Live refresh: a ``dcc.Interval`` asks for the
study's fingerprint (one cheap query); only when it changed does the study's store change and
its figures recompute, from one load of the study shared by every view (cached per version).

Every callback that reads the database turns a ``NasError`` (an unknown study, the database
gone, a stored value that does not parse: ``studies.stored.StoredValueError``) into its one line
in the page, and one line in the log: never a server error. Downloads serve only what the app
renders (CSV through :func:`_send_csv`, configs through ``dashboard.exports``): no file named by
the database is read here.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import dash
import numpy as np
import pandas as pd
from dash import ALL, Input, Output, State, ctx, dcc, no_update
from sqlalchemy.engine import make_url

from dashboard import exports, figures, layout
from dashboard.analysis import StudyView, filter_trials, shared_hypervolumes, sort_trials
from dashboard.data import StudyInfo as _Info
from dashboard.data import (
    fingerprint,
    list_studies,
    load_curves,
    load_promotion,
    load_study,
    load_trial,
    open_readonly,
    readonly_optuna_storage,
    study_info,
    study_names,
    trial_state,
)
from dashboard.formatting import kind_of, number
from nas.errors import NasError
from studies.pareto import normalized_hypervolume
from studies.storage import resolve_storage_url
from studies.stored import StoredValueError

__all__ = ["create_app"]

_log = logging.getLogger(__name__)

_CACHED_STUDIES = 6


class _Reader:
    """The app's access to the database: the read-only engine and a small cache of loaded
    studies keyed by (study, fingerprint), each loaded once however many views ask at once."""

    def __init__(self, storage_url: str | None) -> None:
        self.url = resolve_storage_url(storage_url)
        self.engine = open_readonly(self.url)
        self._views: OrderedDict[tuple[int, str], StudyView] = OrderedDict()
        self._locks: dict[tuple[int, str], threading.Lock] = {}
        self._guard = threading.Lock()
        # The studies page's hypervolume of each study, with the trials it was computed on.
        self._volumes: dict[int, tuple[tuple[int, float], float]] = {}
        self._export_storage: Any = None

    @property
    def label(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def info(self, name: str) -> _Info:
        return study_info(self.engine, name)

    def version(self, info: _Info) -> str:
        return fingerprint(self.engine, info.study_id, info.name)

    def view(self, name: str, version: str | None = None) -> StudyView:
        """The study as of ``version`` (loaded now if not cached; the current one if None)."""
        info = self.info(name)
        version = version or self.version(info)
        key = (info.study_id, version)
        with self._guard:
            if key in self._views:
                self._views.move_to_end(key)
                return self._views[key]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:  # the first caller loads; the others wait for its result
            with self._guard:
                if key in self._views:
                    return self._views[key]
            view = StudyView(load_study(self.engine, info, version))
            with self._guard:
                self._views[key] = view
                self._locks.pop(key, None)
                while len(self._views) > _CACHED_STUDIES:
                    self._views.popitem(last=False)
        return view

    def studies(self) -> list[dict[str, Any]]:
        """The studies page's rows."""
        infos, frame = list_studies(self.engine)
        values = frame.attrs["values"]
        rows = []
        for info, row in zip(infos, frame.to_dict("records"), strict=True):
            if info.problem is not None:  # listed, with why, beside the others
                rows.append({**row, "best": {}, "hypervolume": None})
                continue
            mine = values[values.study_id == info.study_id]
            wide = mine.pivot_table(index="number", columns="objective", values="value")
            wide = wide.reindex(columns=range(len(info.objectives))).dropna()
            matrix = wide.to_numpy(dtype=float)
            key = (len(matrix), float(wide.index.to_numpy().sum()))
            if self._volumes.get(info.study_id, (None, 0.0))[0] != key:
                volume = normalized_hypervolume(matrix, info.directions, info.reference)
                self._volumes[info.study_id] = (key, volume)
            best = {}
            for i, (name, direction) in enumerate(zip(info.objectives, info.directions,
                                                      strict=True)):
                column = matrix[:, i] if len(matrix) else np.array([])
                best[name] = (None if not len(column) else
                              float(column.max() if direction == "maximize" else column.min()))
            rows.append({**row, "best": best, "hypervolume": self._volumes[info.study_id][1]})
        return rows

    def export_storage(self) -> Any:
        """An Optuna storage on the read-only connection, for ``studies.export``."""
        if self._export_storage is None:
            self._export_storage = readonly_optuna_storage(self.url)
        return self._export_storage


def create_app(storage_url: str | None = None, *, refresh_seconds: float = 5.0) -> dash.Dash:
    """The dashboard over the study database at ``storage_url`` (resolved as ``--storage``).

    The database is only read. Raises ``StorageError`` (a ``NasError``) when it cannot be.
    ``refresh_seconds``: how often open pages look for new trials.
    """
    if not refresh_seconds > 0:
        raise ValueError(f"`refresh_seconds > 0` must hold, but got {refresh_seconds=}.")
    reader = _Reader(storage_url)
    figures.warm_up()
    app = dash.Dash(__name__, title="nas dashboard", update_title="",
                    suppress_callback_exceptions=True)
    refresh_ms = int(refresh_seconds * 1000)
    app.layout = layout.shell(reader.label, refresh_ms)
    _register_pages(app, reader, refresh_ms)
    _register_study(app, reader)
    _register_downloads(app, reader)
    return app


def _parse(pathname: str | None) -> list[str]:
    parts = [p for p in (pathname or "/").split("/") if p]
    return [urllib.parse.unquote(p) for p in parts]


def _formats(family: str | None) -> list[str]:
    from studies.export import formats_for

    return formats_for(family) if family else []


def _family(info: _Info) -> str | None:
    """The family of the study's search space (its parsed base config), for the formats."""
    space = info.stored.space if info.stored is not None else None
    return space.base_config.family if space is not None else None


def _trial_family(trial: dict[str, Any]) -> str | None:
    family = (trial.get("arch") or {}).get("family")
    return family if isinstance(family, str) else None


def _line(exc: BaseException) -> str:
    """An error as the page shows it: one line."""
    return " ".join(str(exc).split())


def _guarded(fallback: Callable[[NasError], Any]
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Turn a ``NasError`` (unknown study, database gone, a stored value that does not parse)
    into ``fallback(error)``, logged as one line."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any) -> Any:
            try:
                return fn(*args)
            except NasError as exc:
                _log.warning("%s: %s", fn.__name__, _line(exc))
                return fallback(exc)

        inner.__name__ = fn.__name__
        return inner

    return wrap


def _page_error(exc: NasError) -> list[Any]:
    if isinstance(exc, StoredValueError):
        return layout.page_unreadable(_line(exc))
    return layout.page_not_found(_line(exc))


def _register_pages(app: dash.Dash, reader: _Reader, refresh_ms: int) -> None:
    @app.callback(Output(layout.PAGE, "children"), Input(layout.URL, "pathname"))
    @_guarded(_page_error)
    def route(pathname: str | None) -> Any:
        parts = _parse(pathname)
        if not parts:
            return layout.studies_page(refresh_ms)
        if parts[0] == "study" and len(parts) == 2:
            info = reader.info(parts[1])
            version = reader.version(info)
            view = reader.view(info.name, version)
            others = [n for n in study_names(reader.engine) if n != info.name]
            stored = info.stored
            promoted = stored is not None and bool(stored.promoted_from or stored.promotions)
            x, y = layout.front_axes(info.objectives)
            front = (figures.pareto_2d(view.data, x, y, view.front, labels=_hover(view))
                     if x is not None and y is not None else None)
            return layout.study_page(info, view.data, version, others=others,
                                     formats=_formats(_family(info)), refresh_ms=refresh_ms,
                                     promoted=promoted, front=front)
        if parts[0] == "study" and len(parts) == 4 and parts[2] == "trial":
            if not re.fullmatch(r"\d{1,18}", parts[3]):
                return layout.page_not_found(f"{parts[3]!r} is not a trial number.")
            info = reader.info(parts[1])
            # The trial's stored values are read (and any that does not parse reported) by
            # the body's callback, under the page's link back to the study.
            number = int(parts[3])
            state = trial_state(reader.engine, info, number)
            return layout.trial_page(info.name, number, state == "running", refresh_ms)
        return layout.page_not_found(f"No page at {pathname!r}.")

    @app.callback(Output(layout.STUDIES_TABLE, "children"),
                  Input(layout.STUDIES_TICK, "n_intervals"))
    @_guarded(lambda exc: layout.problem(_line(exc)))
    def studies(_tick: int | None) -> Any:
        return layout.studies_table(reader.studies())

    @app.callback(Output(layout.TRIAL_BODY, "children"), Output(layout.TRIAL_TICK, "disabled"),
                  Input(layout.TRIAL_TICK, "n_intervals"), State(layout.TRIAL, "data"))
    @_guarded(lambda exc: (layout.problem(_line(exc), id_=layout.TRIAL_PROBLEM), True))
    def trial(_tick: int | None, store: dict[str, Any]) -> Any:
        info = reader.info(store["name"])
        trial = load_trial(reader.engine, info, int(store["number"]))
        body = layout.trial_body(info.name, trial, _formats(_trial_family(trial)),
                                 figures.cost_parts(trial.get("cost")),
                                 figures.epoch_curves(trial["epochs"], trial["intermediate"]))
        return body, trial["state"] != "running"


def _register_study(app: dash.Dash, reader: _Reader) -> None:
    store = Input(layout.STUDY, "data")

    def view(data: dict[str, Any]) -> StudyView:
        return reader.view(data["name"], data.get("version"))

    @app.callback(Output(layout.STUDY, "data"), Input(layout.STUDY_TICK, "n_intervals"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    @_guarded(lambda exc: no_update)
    def refresh(_tick: int | None, data: dict[str, Any]) -> Any:
        version = reader.version(reader.info(data["name"]))
        return no_update if version == data.get("version") else {**data, "version": version}

    @app.callback(Output(layout.SUMMARY, "children"), store)
    @_guarded(lambda exc: layout.problem(_line(exc)))
    def summary(data: dict[str, Any]) -> Any:
        v = view(data)
        trials = v.data.trials
        return layout.study_summary(v.data.info, v.counts, v.best, v.hypervolume,
                                    v.last_activity,
                                    [int(n) for n in trials.number[trials.unreadable.notna()]])

    # The page arrives with its front drawn (the route sends it): this redraws it when the
    # axes, the trials or the selection change.
    @app.callback(Output(layout.PARETO_2D, "figure"), Output(layout.FRONT_DRAWN, "data"), store,
                  Input(layout.PARETO_X, "value"), Input(layout.PARETO_Y, "value"),
                  Input(layout.SELECTED, "data"), Input(layout.PARETO_SCALE, "value"),
                  prevent_initial_call=True)
    @_guarded(lambda exc: (figures.empty(_line(exc)), no_update))
    def pareto_2d(data: dict[str, Any], x: str, y: str, selection: dict[str, Any] | None,
                  scale: str | None) -> Any:
        v = view(data)
        figure = figures.pareto_2d(v.data, x, y, v.front, labels=_hover(v),
                                   selected=_numbers(selection), scale=scale or "auto")
        # A new selection redraws the front only: the views do not wait on it again.
        drawn = no_update if ctx.triggered_id in (layout.SELECTED, layout.PARETO_SCALE) else \
            f"{data.get('version')}/{x}/{y}"
        return figure, drawn

    @app.callback(Output(layout.VIEW, "children"), Output(layout.EFFECT_CONTROLS, "style"),
                  Input(layout.VIEWS, "value"), Input(layout.FRONT_DRAWN, "data"),
                  Input(layout.EFFECT_KNOB, "value"), Input(layout.EFFECT_OBJECTIVE, "value"),
                  Input(layout.SELECTED, "data"), Input(layout.PARETO_SCALE, "value"),
                  State(layout.PARCOORDS_RANGES, "data"),
                  State(layout.STUDY, "data"), State(layout.EFFECT_CONTROLS, "style"))
    @_guarded(lambda exc: (layout.problem(_line(exc)), no_update))
    def show_view(tab: str, drawn: str | None, knob: str | None, objective: str | None,
                  selection: dict[str, Any] | None, scale: str | None,
                  ranges: dict[str, Any] | None, data: dict[str, Any],
                  style: dict[str, Any] | None) -> Any:
        # Called with the page (whose route already sent the front), when the front is redrawn
        # (FRONT_DRAWN), and as tabs open: only the open view is computed and sent, so the
        # heavy ones never delay the front.
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
        v = view(data)
        figure = _view_figure(reader, v, tab, knob, objective, _numbers(selection), ranges,
                              scale or "auto")
        return layout.view_box(tab, figure, _VIEW_HEIGHTS.get(tab, 450)), controls

    @app.callback(Output(layout.SELECTED, "data"), Output(layout.PARCOORDS_RANGES, "data"),
                  Input(layout.PARETO_2D, "selectedData"),
                  Input(layout.TABLE, "selected_row_ids"),
                  Input({"type": layout.VIEW_GRAPH, "name": ALL}, "restyleData"),
                  Input(layout.SELECTION_CLEAR, "n_clicks"),
                  State(layout.SELECTED, "data"), State(layout.PARCOORDS_RANGES, "data"),
                  State(layout.TABLE, "data"), State(layout.STUDY, "data"),
                  prevent_initial_call=True)
    @_guarded(lambda exc: (no_update, no_update))
    def select(front: dict[str, Any] | None, rows: list[Any] | None, restyles: list[Any],
               _clear: int | None, current: dict[str, Any] | None,
               ranges: dict[str, Any] | None, page: list[dict[str, Any]] | None,
               data: dict[str, Any]) -> Any:
        """The one selection of the page, from whichever view changed it."""
        trigger = ctx.triggered_id
        before = _numbers(current)
        ranges = dict(ranges or {})
        source: str | None = None
        if trigger == layout.SELECTION_CLEAR:
            numbers: list[int] = []
            ranges = {}
        elif trigger == layout.PARETO_2D:
            numbers, source = _points_of(front), layout.PARETO_2D
        elif trigger == layout.TABLE:
            on_page = {int(r["id"]) for r in page or [] if r.get("id") is not None}
            chosen = {int(n) for n in rows or []}
            numbers = sorted((set(before) - on_page) | chosen)
            source = layout.TABLE
        elif isinstance(trigger, dict) and trigger.get("name") == layout.PARCOORDS:
            change = next((r for r in restyles if r), None)
            for key, value in ((change or [{}])[0]).items():
                found = re.fullmatch(r"dimensions\[(\d+)\]\.constraintrange", key)
                if found:
                    ranges[found.group(1)] = value
            ranges = {k: v for k, v in ranges.items() if v}
            numbers = (figures.parcoords_selection(view(data).data, ranges) if ranges else [])
            source = layout.PARCOORDS
        else:
            return no_update, no_update
        if numbers == before and trigger != layout.SELECTION_CLEAR:
            return no_update, ranges
        return {"numbers": numbers, "source": source}, ranges

    @app.callback(Output(layout.SELECTION_NOTE, "children"), Input(layout.SELECTED, "data"))
    def selection_note(selection: dict[str, Any] | None) -> str:
        n = len(_numbers(selection))
        return "no trials selected" if not n else f"{n} trial{'s' if n != 1 else ''} selected"

    @app.callback(Output(layout.TABLE, "columns"), Output(layout.EFFECT_KNOB, "options"),
                  Output(layout.EFFECT_KNOB, "value"), store, State(layout.TABLE, "columns"),
                  State(layout.EFFECT_KNOB, "value"))
    @_guarded(lambda exc: (no_update, no_update, no_update))
    def knobs(data: dict[str, Any], shown: list[dict[str, Any]] | None,
              knob: str | None) -> Any:
        # The knobs are the parameters the trials hold: a page opened before the first trial
        # finished has none, and gets them here when the trials arrive.
        v = view(data)
        columns = layout.table_columns(v.data)
        options = layout.knob_options(v.data)
        values = [o["value"] for o in options]
        chosen = knob if knob in values else layout.default_knob(v.data)
        if columns == shown and chosen == knob:
            return no_update, no_update, no_update
        return columns, options, chosen

    @app.callback(Output(layout.COMPARE, "figure"), store, Input(layout.COMPARE_WITH, "value"),
                  Input(layout.PARETO_X, "value"), Input(layout.PARETO_Y, "value"))
    @_guarded(lambda exc: figures.empty(_line(exc)))
    def compare(data: dict[str, Any], other: str | None, x: str, y: str) -> Any:
        if not other:
            return figures.empty("Choose a study to compare with.")
        views = [view(data), reader.view(other)]
        shared = shared_hypervolumes(views)
        volumes, reference = (shared, None) if isinstance(shared, str) else shared
        return figures.compare_fronts([v.data for v in views], x, y, volumes=volumes,
                                      reference=reference)

    @app.callback(Output(layout.TABLE, "data"), Output(layout.TABLE, "page_count"),
                  Output(layout.TABLE, "selected_rows"),
                  Output(layout.TABLE, "style_data_conditional"), store,
                  Input(layout.TABLE, "page_current"), Input(layout.TABLE, "page_size"),
                  Input(layout.TABLE, "sort_by"), Input(layout.TABLE, "filter_query"),
                  Input(layout.SELECTED, "data"))
    @_guarded(lambda exc: ([], 0, [], []))
    def table(data: dict[str, Any], page: int | None, size: int | None,
              sort_by: list[dict[str, str]] | None, query: str | None,
              selection: dict[str, Any] | None) -> Any:
        v = view(data)
        rows = sort_trials(filter_trials(v.table, query), sort_by)
        size = size or layout.PAGE_SIZE
        page = page or 0
        shown = rows.iloc[page * size:(page + 1) * size]
        chosen = set(_numbers(selection))
        marked = [i for i, n in enumerate(shown.number) if int(n) in chosen]
        style = [{"if": {"row_index": i}, "backgroundColor": "#fde0ef"} for i in marked]
        return (_records(shown, v.data.info.name, v.data.objectives),
                max(1, -(-len(rows) // size)), marked, style)

    @app.callback(Output(layout.URL, "pathname", allow_duplicate=True),
                  Input(layout.PARETO_2D, "clickData"),
                  Input({"type": layout.VIEW_GRAPH, "name": ALL}, "clickData"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def open_trial(*args: Any) -> Any:
        data = args[-1]
        clicked = ctx.triggered[0]["value"] if ctx.triggered else None
        points = (clicked or {}).get("points") or []
        number = points[0].get("customdata") if points else None
        if isinstance(number, list):
            number = number[0] if number else None
        if number is None or not data:
            return no_update
        return layout.trial_href(data["name"], int(number))


def _hover(v: StudyView) -> Any:
    """The study's hover labels, built once per version and shared by the Pareto views."""
    return v.memo("hover", lambda: figures.hover_labels(v.data))


#: The views that draw the page's selection.
_SELECTABLE_VIEWS = (layout.PARETO_3D, layout.PARCOORDS)


def _numbers(selection: dict[str, Any] | None) -> list[int]:
    return [int(n) for n in (selection or {}).get("numbers") or []]


def _points_of(selected: dict[str, Any] | None) -> list[int]:
    """The trial numbers of the points a box or lasso selected on a graph."""
    numbers = set()
    for point in (selected or {}).get("points") or []:
        number = point.get("customdata")
        if isinstance(number, list):
            number = number[0] if number else None
        if number is not None:
            numbers.add(int(number))
    return sorted(numbers)


_VIEW_HEIGHTS = {layout.HYPERVOLUME: 340, layout.PARETO_3D: 560, layout.PARCOORDS: 460,
                 layout.EFFECT: 420, layout.TIMELINE: 520, layout.CURVES: 480,
                 layout.PROMOTION: 480}


def _view_figure(reader: _Reader, v: StudyView, tab: str, knob: str | None,
                 objective: str | None, selected: list[int] | None = None,
                 ranges: dict[str, Any] | None = None, scale: str = "auto") -> Any:
    """The figure of view ``tab`` (see ``layout.VIEW_TABS``), with the page's selection."""
    data = v.data
    if tab == layout.HYPERVOLUME:
        return figures.hypervolume_history(*v.curve)
    if tab == layout.PARETO_3D:
        return figures.pareto_3d(data, v.front,
                                 labels=_hover(v),
                                 selected=selected, scale=scale)
    if tab == layout.PARCOORDS:
        return figures.parallel_coordinates(data, selected=selected, ranges=ranges)
    if tab == layout.IMPORTANCE:
        return figures.importance(v.importances, trials=len(v.complete))
    if tab == layout.EFFECT:
        return figures.knob_effect(data, knob or "", objective or "")
    if tab == layout.TIMELINE:
        return figures.timeline(data)
    if tab == layout.CURVES:
        return figures.learning_curves(v.memo("curves", lambda: load_curves(reader.engine,
                                                                            data.info)), data)
    if tab == layout.PROMOTION:
        return _promotion_figure(reader, v)
    return figures.empty(f"No view {tab!r}.")


def _promotion_figure(reader: _Reader, v: StudyView) -> Any:
    """A promoted study's pairs; for a source study, those of its latest promotion."""
    from studies.promote import rank_agreement

    info = v.data.info
    if info.stored is None or not info.stored.promoted_from:
        promotions = info.stored.promotions if info.stored is not None else ()
        if not promotions:
            return figures.empty("This study has not been promoted (nas promote).")
        v = reader.view(promotions[-1])
        info = v.data.info
    links = v.memo("promotion", lambda: load_promotion(reader.engine, info))
    metric = "accuracy" if "accuracy" in v.data.objectives else v.data.objectives[0]
    complete = v.complete.set_index("number")[metric]
    pairs = links[links.number.isin(complete.index)].assign(
        promoted=lambda df: complete.reindex(df.number).to_numpy())
    tau, _ = rank_agreement(list(pairs.proxy), list(pairs.promoted))
    fidelity = (info.stored.fidelity if info.stored is not None else None) or {}
    return figures.promotion_scatter(pairs, tau=tau, metric=metric, epochs=(
        fidelity.get("proxy_epochs", "?"), fidelity.get("epochs", "?")))


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


def _send_csv(rows: pd.DataFrame, filename: str) -> dict[str, Any]:
    """A CSV download of ``rows``: every CSV the dashboard serves is made here."""
    # Lines end CRLF (RFC 4180), so a cell holding a carriage return is quoted as one holding
    # a line feed is: no cell can start a row of its own.
    return dcc.send_string(_csv_safe(rows).to_csv(index=False, lineterminator="\r\n"),
                           filename)


def _filename(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "study"


def _register_downloads(app: dash.Dash, reader: _Reader) -> None:
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
            v = reader.view(data["name"], data.get("version"))
            rows = sort_trials(filter_trials(v.table, query), sort_by)
        except NasError as exc:
            return no_update, _refused("csv", exc)
        return _send_csv(rows, f"{_filename(data['name'])}-trials.csv"), ""

    @app.callback(Output(layout.SELECTION_DOWNLOAD, "data"),
                  Output(layout.SELECTION_MESSAGE, "children"),
                  Input(layout.SELECTION_CSV, "n_clicks"), State(layout.SELECTED, "data"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def selection_csv(clicks: int | None, selection: dict[str, Any] | None,
                      data: dict[str, Any]) -> Any:
        if not clicks:
            return no_update, no_update
        try:
            v = reader.view(data["name"], data.get("version"))
        except NasError as exc:
            return no_update, _refused("selection_csv", exc)
        rows = v.table[v.table.number.isin(_numbers(selection))]
        return _send_csv(rows, f"{_filename(data['name'])}-selected.csv"), ""

    @app.callback(Output(layout.TRIAL_DOWNLOAD, "data"), Output(layout.TRIAL_MESSAGE, "children"),
                  Input({"type": layout.EXPORT, "format": ALL}, "n_clicks"),
                  State(layout.TRIAL, "data"), prevent_initial_call=True)
    def export_trial(clicks: list[int | None], data: dict[str, Any]) -> Any:
        if not any(clicks) or not isinstance(ctx.triggered_id, dict):
            return no_update, no_update
        try:
            info = reader.info(data["name"])
            trial = load_trial(reader.engine, info, int(data["number"]))
            record = exports.trial_record(info, trial, reader.export_storage())
            filename, content = exports.trial_file(record, ctx.triggered_id["format"])
        except (NasError, OSError) as exc:
            return no_update, _refused("export_trial", exc)
        send = dcc.send_bytes if isinstance(content, bytes) else dcc.send_string
        return send(content, filename), f"Downloaded {filename}."

    @app.callback(Output(layout.PARETO_DOWNLOAD, "data"),
                  Output(layout.PARETO_MESSAGE, "children"),
                  Input(layout.PARETO_BUTTON, "n_clicks"), State(layout.PARETO_FORMAT, "value"),
                  State(layout.STUDY, "data"), prevent_initial_call=True)
    def export_pareto(clicks: int | None, fmt: str | None, data: dict[str, Any]) -> Any:
        if not clicks or not fmt:
            return no_update, no_update
        try:
            v = reader.view(data["name"], data.get("version"))  # the front the page shows
            info = v.data.info
            numbers = sorted(int(n) for n in v.complete.number[v.front])
            records = exports.records_of(info, numbers,
                                         lambda n: load_trial(reader.engine, info, n),
                                         reader.export_storage())
            blob = exports.pareto_zip(records, fmt)
        except (NasError, OSError) as exc:
            return no_update, _refused("export_pareto", exc)
        filename = f"{_filename(data['name'])}-pareto-{fmt}.zip"
        return (dcc.send_bytes(blob, filename),
                f"Downloaded {len(records)} trials as {filename}.")


def _refused(what: str, exc: BaseException) -> str:
    """Why a download was not served, in one line (and one line in the log)."""
    line = _line(exc)
    if isinstance(exc, OSError):  # the export code's read of a file; its words, not ours
        line = f"Could not read a file for this download: {exc.strerror or type(exc).__name__}."
    _log.warning("%s: %s", what, line)
    return line
