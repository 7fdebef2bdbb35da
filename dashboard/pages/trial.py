"""A trial's page (``/study/<name>/trial/<number>``): its state, values, architecture, cost by
part and per-epoch curves, refreshed while it runs, and its config downloads."""

from __future__ import annotations

import re
from typing import Any

import dash
from dash import ALL, Input, Output, State, ctx, dcc, no_update

from dashboard import exports, figures, layout
from dashboard._cache import StudyCache
from dashboard.pages._common import formats, guarded, line, refused, trial_family
from nas.errors import NasError

__all__ = ["page", "register"]


def page(cache: StudyCache, name: str, number: str, refresh_ms: int) -> list[Any]:
    """The page's frame; its body comes from the body's callback (which reads the trial's
    stored values, and reports any that does not parse under the link back to the study)."""
    if not re.fullmatch(r"\d{1,18}", number):
        return layout.page_not_found(f"{number!r} is not a trial number.")
    info = cache.info(name)
    state = cache.reader.trial_state(info, int(number))
    return layout.trial_page(info.name, int(number), state == "running", refresh_ms)


def register(app: dash.Dash, cache: StudyCache) -> None:
    """The trial page's callbacks, on ``app``."""
    reader = cache.reader

    @app.callback(Output(layout.TRIAL_BODY, "children"), Output(layout.TRIAL_TICK, "disabled"),
                  Input(layout.TRIAL_TICK, "n_intervals"), State(layout.TRIAL, "data"))
    @guarded(lambda exc: (layout.problem(line(exc), id_=layout.TRIAL_PROBLEM), True))
    def trial(_tick: int | None, store: dict[str, Any]) -> Any:
        info = cache.info(store["name"])
        trial = reader.load_trial(info, int(store["number"]))
        body = layout.trial_body(info.name, trial, formats(trial_family(trial)),
                                 figures.cost_parts(trial.get("cost")),
                                 figures.epoch_curves(trial["epochs"], trial["intermediate"]),
                                 no_exports=line(info.space_problem) if info.space_problem
                                 else None)
        return body, trial["state"] != "running"

    # A download answers with the file or with why not (one line beside its button), never a
    # server error: a trial that does not parse, a checkpoint that the export code refuses
    # (``NasError``), a file it cannot read (``OSError``).
    @app.callback(Output(layout.TRIAL_DOWNLOAD, "data"), Output(layout.TRIAL_MESSAGE, "children"),
                  Input({"type": layout.EXPORT, "format": ALL}, "n_clicks"),
                  State(layout.TRIAL, "data"), prevent_initial_call=True)
    def export_trial(clicks: list[int | None], data: dict[str, Any]) -> Any:
        if not any(clicks) or not isinstance(ctx.triggered_id, dict):
            return no_update, no_update
        try:
            info = cache.info(data["name"])
            trial = reader.load_trial(info, int(data["number"]))
            record = exports.trial_record(info, trial, reader.export_storage())
            filename, content = exports.trial_file(record, ctx.triggered_id["format"])
        except (NasError, OSError) as exc:
            return no_update, refused("export_trial", exc)
        send = dcc.send_bytes if isinstance(content, bytes) else dcc.send_string
        return send(content, filename), f"Downloaded {filename}."
