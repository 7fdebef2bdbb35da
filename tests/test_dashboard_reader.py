"""The dashboard over an injected reader: ``create_app(reader=...)`` with an in-memory
:class:`~dashboard.reader.StudyReader` that holds its studies as the typed objects the pages
read (``StudyInfo``, ``StudyData``, a trial's dict), with no database and no stored rows. Every
page, view and the live refresh work over it, and what they show is what it holds.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import pytest

from dashboard import create_app, layout
from dashboard.analysis import StudyView
from dashboard.data import FIXED_COLUMNS, StudyData, StudyInfo
from dashboard.pages.studies import rows
from dashboard.reader import Listing, StudyReader, listing_of
from dashboard.testing import (
    callback_body,
    components,
    first_render,
    open_every_view,
    post_callback,
)
from studies.pareto import nondominated_mask, normalized_hypervolume, to_minimization
from studies.store import Status, StorageError

NAME, OTHER = "in-memory", "in-memory-b"
START = datetime(2026, 1, 1, 12, 0)
DIRECTIONS = ("maximize", "minimize")


def _trial(number: int, status: str, accuracy: float | None, params: float | None,
           width: int, mixer: str) -> dict[str, Any]:
    """One trial as ``StudyReader.load_trial`` gives it."""
    state = {Status.COMPLETED: "complete", Status.STOPPED: "pruned", "running": "running"}.get(
        status, "fail")
    started = START + timedelta(minutes=10 * number)
    done = None if state == "running" else started + timedelta(minutes=8)
    epochs = [{"epoch": e, "train_loss": 1.0 / e, "metric": "accuracy",
               "value": (accuracy or 0.3) * e / 3} for e in range(1, 4 if accuracy else 2)]
    return {"number": number, "state": state, "status": status,
            "reason": "loss became nan" if status == Status.FAILED else None,
            "values": {"accuracy": accuracy, "params": params},
            "params": {"width": width, "mixer": mixer}, "attrs": {}, "arch": None,
            "cost": None, "train": None, "arch_id": f"arch-{width}-{mixer}", "epochs": epochs,
            "intermediate": [(e["epoch"], e["value"]) for e in epochs],
            "started": started, "completed": done}


def _data(info: StudyInfo, trials: list[dict[str, Any]]) -> StudyData:
    """The study page's frame of ``trials`` (see ``StudyData``)."""
    frame = pd.DataFrame({
        "trial_id": [100 * info.study_id + t["number"] for t in trials],
        "number": [t["number"] for t in trials], "state": [t["state"] for t in trials],
        "status": [t["status"] for t in trials], "reason": [t["reason"] for t in trials],
        "arch_id": [t["arch_id"] for t in trials],
        "epochs_reached": [len(t["epochs"]) for t in trials],
        "cost_params": [t["values"]["params"] or np.nan for t in trials],
        "cost_madds": np.nan,
        "started": pd.to_datetime([t["started"] for t in trials]),
        "completed": pd.to_datetime([t["completed"] for t in trials]),
        "unreadable": None,
        **{o: [t["values"][o] if t["state"] == "complete" else np.nan for t in trials]
           for o in info.objectives},
        "width": pd.Series([t["params"]["width"] for t in trials], dtype=object),
        "mixer": pd.Series([t["params"]["mixer"] for t in trials], dtype=object)})
    frame["duration_s"] = (frame.completed - frame.started).dt.total_seconds()
    frame = frame[["trial_id", *FIXED_COLUMNS, *info.objectives, "width", "mixer"]]
    return StudyData(info, frame.astype({o: float for o in info.objectives}),
                     {"width": "width", "mixer": "mixer"}, {})


class MemoryReader:
    """A :class:`StudyReader` over studies held in memory; counts its study loads."""

    label = "memory"

    def __init__(self) -> None:
        self.trials: dict[str, list[dict[str, Any]]] = {}
        self.infos: dict[str, StudyInfo] = {}
        self.loads = 0

    def add(self, name: str, trials: list[dict[str, Any]]) -> None:
        self.infos[name] = StudyInfo(len(self.infos) + 1, name, ("accuracy", "params"),
                                     DIRECTIONS)
        self.trials[name] = trials

    def _data(self, name: str) -> StudyData:
        return _data(self.infos[name], self.trials[name])

    def study_names(self) -> list[str]:
        return list(self.infos)

    def list_studies(self) -> Listing:
        return listing_of([self._data(n) for n in self.infos])

    def study_info(self, name: str) -> StudyInfo:
        if name not in self.infos:
            raise StorageError(f"Unknown study {name!r}; studies here: {sorted(self.infos)}.")
        return self.infos[name]

    def fingerprint(self, info: StudyInfo) -> str:
        return str(len(self.trials[info.name]))

    def load_study(self, info: StudyInfo, version: str = "") -> StudyData:
        self.loads += 1
        return self._data(info.name)

    def _trial(self, info: StudyInfo, number: int) -> dict[str, Any]:
        found = [t for t in self.trials[info.name] if t["number"] == number]
        if not found:
            raise StorageError(f"Unknown trial {number} of study {info.name!r}.")
        return found[0]

    def trial_state(self, info: StudyInfo, number: int) -> str:
        return str(self._trial(info, number)["state"])

    def load_trial(self, info: StudyInfo, number: int) -> dict[str, Any]:
        return self._trial(info, number)

    def load_curves(self, info: StudyInfo) -> pd.DataFrame:
        return pd.DataFrame([(t["number"], e["epoch"], e["value"]) for t in self.trials[
            info.name] for e in t["epochs"]], columns=["number", "step", "value"])

    def load_promotion(self, info: StudyInfo) -> pd.DataFrame:
        return pd.DataFrame({"number": [], "source_trial": [], "proxy": []})

    def load_convergence(self, info: StudyInfo) -> dict[str, Any] | None:
        return None

    def export_storage(self) -> Any:
        return None


TRIALS = [_trial(0, Status.COMPLETED, 0.70, 5000.0, 32, "attn"),
          _trial(1, Status.COMPLETED, 0.80, 9000.0, 64, "attn"),
          _trial(2, Status.COMPLETED, 0.60, 7000.0, 48, "conv"),  # dominated by trial 0
          _trial(3, Status.STOPPED, None, None, 16, "conv"),
          _trial(4, Status.FAILED, None, None, 64, "conv"),
          _trial(5, Status.COMPLETED, 0.55, 2000.0, 16, "attn")]


@pytest.fixture
def reader() -> MemoryReader:
    made = MemoryReader()
    made.add(NAME, list(TRIALS))
    made.add(OTHER, TRIALS[:2])
    return made


def _completed(trials: list[dict[str, Any]]) -> np.ndarray:
    return np.array([[t["values"]["accuracy"], t["values"]["params"]] for t in trials
                     if t["status"] == Status.COMPLETED])


def _ok(results: list[Any]) -> None:
    assert [r.status for r in results] == [200] * len(results), [
        (r.output, r.status) for r in results]


def test_the_memory_reader_is_a_study_reader(reader: MemoryReader) -> None:
    typed: StudyReader = reader  # a static check of the protocol (mypy on this file)
    assert isinstance(typed, StudyReader) and typed.study_names() == [NAME, OTHER]
    with pytest.raises(ValueError, match="not both"):
        create_app("sqlite:///x.db", reader=reader)
    with pytest.raises(TypeError, match="StudyReader, but got a dict"):
        create_app(reader={NAME: TRIALS})  # type: ignore[arg-type]


def test_studies_page_over_the_reader(reader: MemoryReader) -> None:
    listed = {r["name"]: r for r in rows(reader.list_studies(), {})}
    values = _completed(TRIALS)
    mine = listed[NAME]
    assert (mine["trials"], mine[Status.COMPLETED], mine[Status.STOPPED],
            mine[Status.FAILED]) == (6, 4, 1, 1)
    assert mine["hypervolume"] == normalized_hypervolume(values, list(DIRECTIONS))
    assert mine["best"] == {"accuracy": 0.80, "params": 2000.0}
    assert mine["last_activity"] == pd.Timestamp(TRIALS[-1]["completed"])
    assert listed[OTHER]["trials"] == 2
    app = create_app(reader=reader, refresh_seconds=1)
    client = app.server.test_client()
    _ok(first_render(client, app, "/"))
    table = post_callback(client, callback_body(app, "studies-table.children",
                                                {"studies-tick.n_intervals": None}))
    _ok([table])
    assert NAME in json.dumps(table.response) and OTHER in json.dumps(table.response)


def test_study_page_over_the_reader(reader: MemoryReader) -> None:
    app = create_app(reader=reader, refresh_seconds=1)
    client = app.server.test_client()
    results = first_render(client, app, layout.study_href(NAME))
    _ok(results)
    assert reader.loads == 1  # every callback of the page shared one load
    graph = next(c for c in components(results[0].response)
                 if c["props"].get("id") == layout.PARETO_2D)
    front = graph["props"]["figure"]["data"][1]
    expected = nondominated_mask(to_minimization(_completed(TRIALS), DIRECTIONS))
    complete = [t["number"] for t in TRIALS if t["status"] == Status.COMPLETED]
    assert sorted(front["customdata"]) == [n for n, f in zip(complete, expected, strict=True)
                                           if f] == [0, 1, 5]
    table = next(r for r in results if r.output.startswith("..trial-table.data"))
    shown = table.response["response"]["trial-table"]["data"]
    assert [r["id"] for r in shown] == [t["number"] for t in TRIALS]
    assert shown[4]["reason"] == "loss became nan"
    summary = next(r for r in results if r.output.startswith("study-summary"))
    assert "completed 4" in json.dumps(summary.response)
    store = {"study.data": {"name": NAME}}
    for tab, answer in open_every_view(client, app, NAME, "width"):
        _ok([answer])
        box = answer.response["response"]["view"]["children"]
        assert box["props"]["id"] == tab and "problem" not in json.dumps(box)
    curves = post_callback(client, callback_body(app, "..view.children", {
        **store, "views.value": layout.CURVES, "front-drawn.data": "x"}, changed="views.value"))
    lines = next(c for c in components(curves.response) if c["type"] == "Graph")
    # The reader's curves, one trace per status (every trial here reported an epoch).
    assert {t["name"] for t in lines["props"]["figure"]["data"]} == {
        f"{Status.COMPLETED} (4)", f"{Status.STOPPED} (1)", f"{Status.FAILED} (1)"}
    missing = first_render(client, app, layout.study_href("nope"))
    _ok(missing)
    assert "Unknown study 'nope'" in json.dumps(missing[0].response)


def test_trial_page_and_refresh_over_the_reader(reader: MemoryReader) -> None:
    app = create_app(reader=reader, refresh_seconds=1)
    client = app.server.test_client()
    page = first_render(client, app, layout.trial_href(NAME, 4))
    _ok(page)
    body = json.dumps(page[-1].response)
    assert "trial-state" in body and "loss became nan" in body
    unknown = first_render(client, app, layout.trial_href(NAME, 99))
    assert "Unknown trial 99" in json.dumps(unknown[0].response)
    # An export of a study that nas did not create: refused in one line, no file.
    button = {"format": "yaml", "type": "export"}
    request = callback_body(app, "..trial-download", {"trial.data": {"name": NAME, "number": 1}},
                            changed=json.dumps(button, separators=(",", ":")) + ".n_clicks")
    request["inputs"][0] = [{"id": button, "property": "n_clicks", "value": 1}]
    refused = post_callback(client, request)
    _ok([refused])
    assert "trial-download" not in refused.response["response"]
    assert "not created by nas" in refused.response["response"]["trial-message"]["children"]
    # Live refresh: a new trial changes the reader's fingerprint, and the page follows it.
    first = first_render(client, app, layout.study_href(NAME))[0]
    data = next(c for c in components(first.response)
                if c["props"].get("id") == layout.STUDY)["props"]["data"]
    reader.trials[NAME].append(_trial(6, Status.COMPLETED, 0.9, 8000.0, 64, "attn"))
    changed = post_callback(client, callback_body(app, "study.data", {
        "study-tick.n_intervals": 1, "study.data": data}))
    new = changed.response["response"]["study"]["data"]
    assert new["version"] != data["version"]
    summary = post_callback(client, callback_body(app, "study-summary.children",
                                                  {"study.data": new}))
    assert "completed 5" in json.dumps(summary.response)
    assert StudyView(reader.load_study(reader.infos[NAME])).best["accuracy"] == 0.9
