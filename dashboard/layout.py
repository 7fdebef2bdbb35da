"""The dashboard's pages as Dash component trees: the studies list, a study, a trial.

Pages are skeletons whose figures and tables the callbacks in ``dashboard.pages`` fill. Every
user-provided string reaches the page as a component's text, which React escapes; nothing here
uses raw HTML or ``dangerously_allow_html``. Component ids are the module's constants.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any, cast

from dash import dcc, html
from dash.dash_table.DataTable import DataTable

from dashboard.data import UNFINISHED, StudyData, StudyInfo
from dashboard.figures import SCALES
from dashboard.formatting import header, kind_of, number
from studies.convergence import convergence_text
from studies.store import Status, TrialKey

__all__ = [
    "VIEW_TABS",
    "by_status",
    "default_knob",
    "fmt",
    "front_axes",
    "knob_options",
    "page_not_found",
    "page_unreadable",
    "problem",
    "shell",
    "studies_page",
    "studies_table",
    "study_href",
    "study_page",
    "study_summary",
    "table_columns",
    "trial_body",
    "trial_href",
    "trial_page",
    "view_box",
    "view_tabs",
]

# Component ids.
URL, PAGE = "url", "page"
STUDIES_TICK, STUDIES_TABLE = "studies-tick", "studies-table"
STUDY, STUDY_TICK, SUMMARY = "study", "study-tick", "study-summary"
PLOTLY_PRELOAD = "plotly-preload"
PARETO_X, PARETO_Y, PARETO_2D, PARETO_3D = "pareto-x", "pareto-y", "pareto-2d", "pareto-3d"
PARETO_SCALE = "pareto-scale"  # the fronts' params and MAdds axes: one of figures.SCALES
PARETO_FORMAT, PARETO_BUTTON, PARETO_DOWNLOAD, PARETO_MESSAGE = (
    "pareto-format", "pareto-button", "pareto-download", "pareto-message")
HYPERVOLUME, PARCOORDS, IMPORTANCE = "hypervolume", "parcoords", "importance"
EFFECT_KNOB, EFFECT_OBJECTIVE, EFFECT = "effect-knob", "effect-objective", "effect"
TIMELINE, CURVES, PROMOTION = "timeline", "curves", "promotion"
# The views below the front: a tab each, drawn only when opened and after the front.
VIEWS, VIEW, VIEW_GRAPH, EFFECT_CONTROLS, FRONT_DRAWN = (
    "views", "view", "view-graph", "effect-controls", "front-drawn")
# On a large study's page only: its version, whose front came with brief hover labels.
FRONT_LABELS = "front-labels"
# Linked selection: trials chosen on the front, the parallel coordinates or the table.
SELECTED, PARCOORDS_RANGES, SELECTION_NOTE, SELECTION_CLEAR = (
    "selected", "parcoords-ranges", "selection-note", "selection-clear")
SELECTION_CSV, SELECTION_DOWNLOAD, SELECTION_MESSAGE = (
    "selection-csv", "selection-download", "selection-message")
TABLE, CSV_BUTTON, CSV_DOWNLOAD, CSV_MESSAGE = (
    "trial-table", "csv-button", "csv-download", "csv-message")
COMPARE_WITH, COMPARE = "compare-with", "compare"
TRIAL, TRIAL_TICK, TRIAL_BODY, TRIAL_PROBLEM = "trial", "trial-tick", "trial-body", "trial-problem"
EXPORT, TRIAL_DOWNLOAD, TRIAL_MESSAGE = "export", "trial-download", "trial-message"

PAGE_SIZE = 25
_CELL = {"padding": "4px 10px", "borderBottom": "1px solid #ddd", "textAlign": "left"}
_SECTION = {"marginTop": "28px"}
_ROW = {"display": "flex", "gap": "12px", "alignItems": "center", "flexWrap": "wrap"}
_BUTTON = {"padding": "4px 12px", "cursor": "pointer"}
_PROBLEM = {"color": "#b00020"}


def study_href(name: str) -> str:
    """The study page's path; the name is percent-encoded (it may hold any character)."""
    return "/study/" + urllib.parse.quote(name, safe="")


def trial_href(name: str, number: int) -> str:
    return f"{study_href(name)}/trial/{int(number)}"


def fmt(value: Any, name: str = "", objectives: Sequence[str] = ()) -> str:
    """``value`` as the dashboard writes a value of column ``name`` (see
    ``dashboard.formatting``)."""
    return number(value, kind_of(name, objectives))


def shell(storage_label: str, refresh_ms: int) -> html.Div:
    """The frame of every page: the location, a header and the page's slot."""
    return html.Div(style={"fontFamily": "system-ui, sans-serif", "margin": "0 auto",
                           "maxWidth": "1400px", "padding": "0 16px"}, children=[
        dcc.Location(id=URL, refresh="callback-nav"),
        html.Header(style={**_ROW, "borderBottom": "2px solid #1f77b4", "padding": "8px 0"},
                    children=[
            dcc.Link(html.B("nas dashboard"), href="/"),
            html.Span(f"read-only view of {storage_label}", style={"color": "#666"}),
            html.Span(f"refreshes every {refresh_ms / 1000:g} s", style={"color": "#666"}),
        ]),
        html.Main(id=PAGE),
        # An empty graph in the frame itself: the browser fetches and compiles plotly.js while
        # the server still builds the page, instead of after the page's figures arrive.
        dcc.Graph(id=PLOTLY_PRELOAD, figure={"data": [], "layout": {}},
                  style={"display": "none"}, config={"staticPlot": True}),
    ])


def page_not_found(message: str) -> list[Any]:
    return [html.H2("Not found"), html.P(message, id="not-found"),
            dcc.Link("All studies", href="/")]


def page_unreadable(message: str) -> list[Any]:
    """The page of a study whose stored values do not parse: the one line that says which."""
    return [html.H2("Unreadable study"), problem(message, id_="unreadable"),
            dcc.Link("All studies", href="/")]


def problem(message: str, *, id_: str | None = None) -> html.P:
    """Why something cannot be shown: one line, as text."""
    if id_:
        return html.P(message, id=id_, className="problem", style=_PROBLEM)
    return html.P(message, className="problem", style=_PROBLEM)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], **kwargs: Any) -> html.Table:
    return html.Table(style={"borderCollapse": "collapse"}, children=[
        html.Thead(html.Tr([html.Th(h, style=_CELL) for h in header])),
        html.Tbody([html.Tr([html.Td(c, style=_CELL) for c in row]) for row in rows]),
    ], **kwargs)


# ----------------------------------------------------------------------------- studies
def studies_page(refresh_ms: int) -> list[Any]:
    return [html.H2("Studies"), dcc.Interval(id=STUDIES_TICK, interval=refresh_ms),
            html.Div(id=STUDIES_TABLE)]


def studies_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """One row per study: name (a link), task, trials by state, best values, hypervolume and
    last activity; a study whose stored values do not parse (``unreadable``) says why in place
    of its best values."""
    if not rows:
        return html.P("No studies in this database yet: start one with `nas run`.")
    header = ["study", "task", "trials", "by status", "best values", "hypervolume",
              "last activity"]
    body = []
    for r in rows:
        best: Any = "; ".join(f"{name} {fmt(value, name, list(r['best']))}"
                              for name, value in r["best"].items() if value is not None) or "-"
        if r.get("unreadable"):
            best = html.Span(f"unreadable: {r['unreadable']}", className="unreadable",
                             style=_PROBLEM)
        volume = r.get("hypervolume")
        body.append([dcc.Link(r["name"], href=study_href(r["name"])), r["task"] or "-",
                     fmt(r["trials"]), by_status({w: r[w] for w in _WORDS}), best,
                     "-" if volume is None else f"{volume:.4f}", fmt(r["last_activity"])])
    return _table(header, body, id="studies-list")


_WORDS = (*Status.ALL, *UNFINISHED)


def by_status(counts: Mapping[str, int]) -> str:
    """Trials by status, in ``studies.store.Status``' words and order (then running, waiting),
    the ones with none left out: "completed 6, stopped 1, failed 1"."""
    # Then any word written by something else than nas.
    words = _WORDS + tuple(sorted(w for w in counts if w not in _WORDS))
    return ", ".join(f"{w} {fmt(counts[w])}" for w in words if counts.get(w)) or "none yet"


# ----------------------------------------------------------------------------- one study
def _options(values: Sequence[str]) -> list[dict[str, str]]:
    return [{"label": v, "value": v} for v in values]


def _graph(id_: str, height: int = 450, figure: Any = None) -> dcc.Loading:
    extra = {} if figure is None else {"figure": figure}
    return dcc.Loading(dcc.Graph(id=id_, style={"height": f"{height}px"},
                                 config={"displaylogo": False}, **extra), type="circle")


#: (tab value and the id of the view's box, label, what it shows), in tab order.
VIEW_TABS: tuple[tuple[str, str, str], ...] = (
    (HYPERVOLUME, "Hypervolume", "Hypervolume of the completed trials so far, against the "
     "study's fixed reference point (as nas status)."),
    (PARETO_3D, "3-D front", "Accuracy, params and MAdds together; drag to turn it."),
    (PARCOORDS, "Parallel coordinates", "Every completed trial across its knobs and objectives; "
     "drag along an axis to select a range."),
    (IMPORTANCE, "Importance", "The share of each objective's variance (of its ranks) a knob "
     "explains on its own over the completed trials (omega squared of a one-way ANOVA)."),
    (EFFECT, "Knob effect", "One objective against one knob over the completed trials."),
    (TIMELINE, "Timeline", "Each trial from its start to its end, coloured by status."),
    (CURVES, "Learning curves", "Every trial's metric after each epoch; trials stopped early "
     "dotted."),
    (PROMOTION, "Proxy vs promoted", "Each promoted trial's proxy accuracy against its accuracy "
     "after longer training (nas promote), with the diagonal."),
)


def view_tabs(promoted: bool) -> list[dcc.Tab]:
    """The tabs of the views; the promotion tab only for a study with promotions."""
    return [dcc.Tab(label=label, value=value) for value, label, _ in VIEW_TABS
            if value != PROMOTION or promoted]


def view_box(value: str, figure: Any, height: int = 450) -> html.Div:
    """One view: its explanation and its graph (clicking a point opens the trial)."""
    note = next(n for v, _, n in VIEW_TABS if v == value)
    return html.Div(id=value, children=[
        html.P(note, style={"color": "#666"}),
        dcc.Graph(id={"type": VIEW_GRAPH, "name": value}, figure=figure,
                  style={"height": f"{height}px"}, config={"displaylogo": False})])


def front_axes(objectives: Sequence[str]) -> tuple[str | None, str | None]:
    """The 2-D front's axes when the page opens: params (else the last objective) across, the
    first other objective up."""
    x = "params" if "params" in objectives else objectives[-1] if objectives else None
    return x, next((o for o in objectives if o != x), x)


def study_page(info: StudyInfo, data: StudyData, version: str, *, others: Sequence[str],
               formats: Sequence[str], refresh_ms: int, promoted: bool = False,
               front: Any = None) -> list[Any]:
    """The study page's skeleton; its callbacks fill every figure and the table. The summary
    and the 2-D front come first; the other views are tabs, drawn when opened and only after
    the front (``FRONT_DRAWN``). ``front``: the 2-D front's figure on :func:`front_axes`, sent
    with the page itself so that it draws without waiting for another request."""
    objectives = list(info.objectives)
    return [
        dcc.Store(id=STUDY, data={"name": info.name, "version": version}),
        dcc.Interval(id=STUDY_TICK, interval=refresh_ms),
        html.H2(["Study ", html.Span(info.name, id="study-name")]),
        html.Div(id=SUMMARY),
        _front_section(objectives, version, formats, front, _no_exports(info)),
        _views_section(objectives, data, promoted),
        _trials_section(data),
        _compare_section(others),
    ]


def _no_exports(info: StudyInfo) -> str:
    """Why a study offers no export formats (shown where they would be)."""
    if info.space_problem is not None:
        return " ".join(str(info.space_problem).split())
    return "(exports need a study made by nas: this one has no search space)"


def _front_section(objectives: list[str], version: str, formats: Sequence[str],
                   front: Any, no_exports: str) -> html.Section:
    """The 2-D front with its axes, the selection's controls and the Pareto set's download
    (``no_exports``: why there is none, where ``formats`` is empty)."""
    x, y = front_axes(objectives)
    return html.Section(style=_SECTION, children=[
        html.H3("Pareto front"),
        html.Div(style=_ROW, children=[
            html.Label("x"), dcc.Dropdown(_options(objectives), x, id=PARETO_X,
                                          clearable=False, style={"width": "200px"}),
            html.Label("y"), dcc.Dropdown(_options(objectives), y, id=PARETO_Y,
                                          clearable=False, style={"width": "200px"}),
            html.Label("params and MAdds axes"),
            dcc.RadioItems([{"label": s, "value": s} for s in SCALES],
                           "auto", id=PARETO_SCALE, inline=True,
                           inputStyle={"marginRight": "4px"},
                           labelStyle={"marginRight": "10px"}),
            html.Span("Click a point to open its trial.", style={"color": "#666"}),
        ]),
        _graph(PARETO_2D, 520, front),
        dcc.Store(id=FRONT_DRAWN, data=None if front is None else f"{version}/{x}/{y}"),
        dcc.Store(id=SELECTED, data={"numbers": [], "source": None}),
        dcc.Store(id=PARCOORDS_RANGES, data={}),
        html.Div(style=_ROW, children=[
            html.Span("Select trials with the box or lasso on the front, by brushing the "
                      "parallel coordinates' axes or with the table's boxes: they are "
                      "highlighted everywhere.", style={"color": "#666"}),
            html.B(id=SELECTION_NOTE, children="no trials selected"),
            html.Button("Clear the selection", id=SELECTION_CLEAR, style=_BUTTON),
            html.Button("Download the selection (CSV)", id=SELECTION_CSV, style=_BUTTON),
            dcc.Download(id=SELECTION_DOWNLOAD),
            html.Span(id=SELECTION_MESSAGE, style=_PROBLEM)]),
        html.Div(style=_ROW, children=[
            html.Span("Download the Pareto set as"),
            dcc.Dropdown(_options(formats), formats[0] if formats else None,
                         id=PARETO_FORMAT, clearable=False, style={"width": "160px"}),
            html.Button("Download (zip)", id=PARETO_BUTTON, style=_BUTTON,
                        disabled=not formats),
            dcc.Download(id=PARETO_DOWNLOAD),
            html.Span(id=PARETO_MESSAGE, children="" if formats else no_exports),
        ]),
    ])


def _views_section(objectives: list[str], data: StudyData, promoted: bool) -> html.Section:
    """The views below the front, a tab each, and the knob effect's controls."""
    return html.Section(style=_SECTION, children=[
        html.H3("More views"),
        dcc.Tabs(id=VIEWS, value=HYPERVOLUME, children=view_tabs(promoted)),
        html.Div(id=EFFECT_CONTROLS, style={**_ROW, "display": "none",
                                            "marginTop": "8px"}, children=[
            dcc.Dropdown(_options(objectives), objectives[0] if objectives else None,
                         id=EFFECT_OBJECTIVE, clearable=False, style={"width": "200px"}),
            html.Span("against"),
            dcc.Dropdown(knob_options(data), default_knob(data), id=EFFECT_KNOB,
                         clearable=False,
                         style={"width": "240px"}),
        ]),
        dcc.Loading(html.Div(id=VIEW, style={"minHeight": "320px"}), type="circle"),
    ])


def _trials_section(data: StudyData) -> html.Section:
    """The trial table (paged, sorted and filtered by its callback) and its CSV download."""
    return html.Section(style=_SECTION, children=[
        html.H3("Trials"),
        html.Div(style=_ROW, children=[
            html.Span("Sort by a header; filter with the row under it (text: kv; numbers: "
                  "> 0.5; status: = rejected)."),
            html.Button("Download CSV", id=CSV_BUTTON, style=_BUTTON),
            dcc.Download(id=CSV_DOWNLOAD), html.Span(id=CSV_MESSAGE, style=_PROBLEM)]),
        DataTable(
            id=TABLE, columns=cast(Any, table_columns(data)), data=[], page_current=0,
            row_selectable="multi", selected_rows=[], selected_row_ids=[],
            page_size=PAGE_SIZE, page_action="custom", sort_action="custom",
            sort_mode="multi", sort_by=[], filter_action="custom", filter_query="",
            filter_options={"case": "insensitive"},
            markdown_options={"link_target": "_self", "html": False},
            style_table={"overflowX": "auto"},
            style_cell={"fontFamily": "inherit", "fontSize": "13px", "padding": "3px 8px",
                        "maxWidth": "320px", "overflow": "hidden",
                        "textOverflow": "ellipsis", "textAlign": "left"},
            # Numbers line up on the right, text on the left.
            style_cell_conditional=[{"if": {"column_type": "numeric"},
                                     "textAlign": "right"}],
            style_header={"fontWeight": "bold"}),
    ])


def _compare_section(others: Sequence[str]) -> html.Section:
    """Another study's front over this one's, on one reference point."""
    return html.Section(style=_SECTION, children=[
        html.H3("Compare with another study"),
        html.P("Both studies' fronts in the two objectives chosen above, and their "
               "hypervolumes against one shared reference point (each study's own may "
               "differ: the numbers compare only on one point).",
               style={"color": "#666"}),
        dcc.Dropdown(_options(list(others)), None, id=COMPARE_WITH,
                     placeholder="choose a study", style={"width": "360px"}),
        _graph(COMPARE, 450),
    ])


def study_summary(info: StudyInfo, counts: Mapping[str, int], best: Mapping[str, Any],
                  hypervolume: float, last_activity: Any,
                  unreadable: Sequence[int] = (),
                  convergence: Mapping[str, Any] | None = None) -> html.Div:
    """The study's summary table; ``unreadable``: the numbers of the trials with a stored value
    that does not parse; ``convergence``: ``dashboard.data.load_convergence``'s (a row where
    the study's sampler records gains)."""
    objectives = ", ".join(f"{n} ({d})" for n, d in zip(info.objectives, info.directions,
                                                       strict=True))
    rows: list[list[Any]] = [
        ["task", info.task or "-"], ["objectives", objectives],
        ["constraints", ", ".join(f"{k} {fmt(v, k.removesuffix('_max'))}"
                                  for k, v in info.constraints.items()) or "-"],
        ["trials", by_status(counts)],
        ["best values", "; ".join(f"{k} {fmt(v, k, info.objectives)}"
                                  for k, v in best.items()) or "-"],
        ["hypervolume", f"{hypervolume:.4f}"], ["last activity", fmt(last_activity)],
    ]
    if convergence is not None:
        rows.append(["convergence", html.Span(convergence_text(convergence),
                                              id="summary-convergence")])
    if unreadable:
        shown = ", ".join(str(n) for n in unreadable[:20]) + (", ..." if len(unreadable) > 20
                                                               else "")
        many = len(unreadable) != 1
        rows.append(["unreadable", html.Span(
            f"{len(unreadable)} trial{'s' if many else ''} ({shown}) hold{'' if many else 's'} "
            "stored values that do not parse: those fields are blank, the table's "
            "`unreadable` column names them, and each trial's page says why.",
            id="summary-unreadable", style=_PROBLEM)])
    return html.Div(_table(["", ""], rows, id="summary-table"))


def knob_options(data: StudyData) -> list[dict[str, str]]:
    """The knob drop-down's options: one per knob column, labelled as the table heads it."""
    return [{"label": header(k), "value": k} for k in data.knobs]


def default_knob(data: StudyData) -> str | None:
    """The knob shown first: the group count where the space has one."""
    knobs = list(data.knobs)
    return "groups" if "groups" in knobs else (knobs[0] if knobs else None)


def table_columns(data: StudyData) -> list[dict[str, Any]]:
    """The trial table's columns: number (a link), front membership, status, objectives, knobs
    and the rest."""
    numeric = {"type": "numeric"}
    text = {"type": "text"}  # typing in its filter cell keeps the rows that contain the text
    columns: list[dict[str, Any]] = [
        {"id": "number", "name": "trial", "presentation": "markdown", **numeric},
        {"id": "pareto", "name": "Pareto", **text}, {"id": "status", "name": "status", **text}]
    columns += [{"id": o, "name": header(o), **numeric} for o in data.objectives]
    columns += [{"id": k, "name": header(data.knobs[k]) if k == data.knobs[k] else header(k),
                 **(numeric if _numeric_knob(data, k) else text)} for k in data.knobs]
    columns += [{"id": "reason", "name": "reason", **text},
                {"id": "epochs_reached", "name": header("epochs_reached"), **numeric},
                {"id": "duration_s", "name": header("duration_s"), **numeric},
                {"id": "started", "name": "started", **text},
                {"id": "arch_id", "name": header("arch_id"), **text}]
    if data.trials.unreadable.notna().any():  # the keys of each trial's odd values
        columns.append({"id": "unreadable", "name": "unreadable", **text})
    return columns


def _numeric_knob(data: StudyData, knob: str) -> bool:
    return type(data.distributions.get(knob)).__name__ in ("IntDistribution", "FloatDistribution")


# ----------------------------------------------------------------------------- one trial
def trial_page(name: str, number: int, running: bool, refresh_ms: int) -> list[Any]:
    return [
        dcc.Store(id=TRIAL, data={"name": name, "number": number}),
        dcc.Interval(id=TRIAL_TICK, interval=refresh_ms, disabled=not running),
        html.P(dcc.Link(["← study ", name], href=study_href(name))),
        html.Div(id=TRIAL_BODY),
    ]


def _kv(mapping: Mapping[str, Any] | None, id_: str) -> Any:
    if not mapping:
        return html.P("-", id=id_)
    return _table(["key", "value"], [[k, fmt(v, k) if not isinstance(v, (dict, list)) else str(v)]
                                     for k, v in mapping.items()], id=id_)


def trial_body(name: str, trial: Mapping[str, Any], formats: Sequence[str],
               cost_figure: Any, curves_figure: Any, *,
               no_exports: str | None = None) -> list[Any]:
    """Everything about one trial: state and reason, values, architecture, training settings,
    cost by part, per-epoch curves and the export buttons (``no_exports``: why the study's
    trials cannot be exported, shown in their place)."""
    cost = trial.get("cost") or {}
    parts = {p: v for p, v in (cost.get("parts") or {}).items() if isinstance(v, Mapping)}
    keys = ("params", "params_matrix", "madds")
    cost_rows = [[p, *(fmt(v.get(k), k) for k in keys)] for p, v in parts.items()]
    if cost:
        cost_rows.append(["total", *(fmt(cost.get(k), k) for k in keys)])
    state = [["status", trial["status"]]]
    if trial.get("reason"):
        state.append(["reason", trial["reason"]])
    state += [[header(k), fmt(v, k, list(trial["values"]))] for k, v in trial["values"].items()]
    state += [["epochs reached", fmt(trial["attrs"].get(TrialKey.EPOCHS_REACHED))],
              [header("arch_id"), trial.get("arch_id") or "-"], ["started", fmt(trial["started"])],
              ["finished", fmt(trial["completed"])]]
    if trial["attrs"].get(TrialKey.CHECKPOINT):  # the study kept weights (`checkpoints:`)
        state.append(["checkpoint", str(trial["attrs"][TrialKey.CHECKPOINT])])
    exports: list[Any] = [html.Span("Download the config as")]
    exports += [html.Button(f, id={"type": EXPORT, "format": f}, style=_BUTTON)
                for f in formats]
    exports += [dcc.Download(id=TRIAL_DOWNLOAD), html.Span(id=TRIAL_MESSAGE)]
    return [
        html.H2(["Trial ", html.Span(str(trial["number"]), id="trial-number"), " of study ",
                 html.Span(name, id="trial-study")]),
        _table(["", ""], state, id="trial-state"),
        html.Div(style={**_ROW, **_SECTION}, children=(
            [problem(no_exports, id_="trial-no-exports")] if no_exports else exports
            if trial.get("arch") else [
                html.Span("This trial has no architecture yet: nothing to export.")])),
        html.Div(style={"display": "grid", "gridTemplateColumns": "1fr 1fr", "gap": "24px"},
                 children=[
            html.Section([html.H3("Architecture"), _kv(trial.get("arch"), "trial-arch")]),
            html.Section([html.H3("Training settings"), _kv(trial.get("train"), "trial-train"),
                          html.H3("Knobs (trial parameters)"),
                          _kv(trial.get("params"), "trial-params")]),
        ]),
        html.Section(style=_SECTION, children=[
            html.H3("Cost by part"),
            _table(["part", "params", "weight-matrix params", "MAdds"], cost_rows,
                   id="trial-cost") if cost_rows else html.P("-"),
            dcc.Graph(figure=cost_figure, id="trial-cost-figure")]),
        html.Section(style=_SECTION, children=[
            html.H3("Per-epoch curves"), dcc.Graph(figure=curves_figure, id="trial-curves")]),
    ]
