"""The Dash app: ``create_app(storage_url)`` or ``create_app(reader=...)``, and its routing.

Pages: ``/`` (studies), ``/study/<name>`` and ``/study/<name>/trial/<number>`` (names
percent-encoded), each in ``dashboard.pages``, registering its own callbacks. Callbacks are
registered on the app instance, never on Dash's global registry, so two apps (tests) never
share them.

Every callback that reads the studies turns a ``NasError`` (an unknown study, the database
gone, a stored value that does not parse: ``studies.store.StoredValueError``) into its one line
in the page, and one line in the log (``dashboard.app``): never a server error. Downloads serve
only what the app renders (CSV through one function, configs through ``dashboard.exports``):
no file named by the database is read here.
"""

from __future__ import annotations

import html
import urllib.parse
from typing import Any

import dash
from dash import Input, Output

from dashboard import figures, layout
from dashboard._cache import StudyCache
from dashboard.pages import studies, study, trial, views
from dashboard.pages._common import guarded, page_error
from dashboard.reader import SqlReader, StudyReader

__all__ = ["create_app"]

# Where Dash serves plotly.js from (its renderer's ``_dashPlotlyJSURL`` where it serves locally).
_PLOTLY_JS = "_dash-component-suites/plotly/package_data/plotly.min.js"


def create_app(storage_url: str | None = None, *, reader: StudyReader | None = None,
               refresh_seconds: float = 5.0) -> dash.Dash:
    """The dashboard over the study database at ``storage_url`` (resolved as ``--storage``),
    or over ``reader``, any :class:`~dashboard.reader.StudyReader` (one of the two).

    The studies are only read. Raises ``StorageError`` (a ``NasError``) when the database
    cannot be. ``refresh_seconds``: how often open pages look for new trials.
    """
    if not refresh_seconds > 0:
        raise ValueError(f"`refresh_seconds > 0` must hold, but got {refresh_seconds=}.")
    if reader is not None and storage_url is not None:
        raise ValueError("Give `storage_url` or `reader`, not both, but got "
                         f"{storage_url=} and a reader.")
    if reader is not None and not isinstance(reader, StudyReader):
        raise TypeError(f"`reader` must have the methods of dashboard.reader.StudyReader, but "
                        f"got a {type(reader).__name__}.")
    cache = StudyCache(reader if reader is not None else SqlReader(storage_url))
    figures.warm_up()
    app = dash.Dash(__name__, title="nas dashboard", update_title="",
                    suppress_callback_exceptions=True)
    refresh_ms = int(refresh_seconds * 1000)
    _preload_plotly(app)
    app.layout = layout.shell(cache.reader.label, refresh_ms)
    _register_routes(app, cache, refresh_ms)
    for page in (studies, study, views, trial):
        page.register(app, cache)
    return app


def _preload_plotly(app: dash.Dash) -> None:
    """Have the browser fetch plotly.js (4.8 MB) as it reads the page's head, beside Dash's own
    scripts: Dash asks for it only once its renderer has started and drawn the frame
    (``layout.PLOTLY_PRELOAD``), and compiling it then waits for the download."""
    url = f"{app.config.requests_pathname_prefix}{_PLOTLY_JS}"  # as Dash's renderer names it
    link = f'<link rel="preload" as="script" href="{html.escape(url)}">'
    if "{%css%}" in app.index_string:
        app.index_string = app.index_string.replace("{%css%}", "{%css%}\n        " + link, 1)


def _parse(pathname: str | None) -> list[str]:
    parts = [p for p in (pathname or "/").split("/") if p]
    return [urllib.parse.unquote(p) for p in parts]


def _register_routes(app: dash.Dash, cache: StudyCache, refresh_ms: int) -> None:
    @app.callback(Output(layout.PAGE, "children"), Input(layout.URL, "pathname"))
    @guarded(page_error)
    def route(pathname: str | None) -> Any:
        parts = _parse(pathname)
        if not parts:
            return layout.studies_page(refresh_ms)
        if parts[0] == "study" and len(parts) == 2:
            return study.page(cache, parts[1], refresh_ms)
        if parts[0] == "study" and len(parts) == 4 and parts[2] == "trial":
            return trial.page(cache, parts[1], parts[3], refresh_ms)
        return layout.page_not_found(f"No page at {pathname!r}.")
