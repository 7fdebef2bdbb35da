"""The study page's front first: the part of a study its 2-D front draws, read apart from the
rest (``dashboard.data.load_front`` / ``load_rest``), a view completed from it, and a large
study's page that sends its front with brief hover labels and patches the full ones in after.

Everything the two reads give together is checked against the one read of ``load_study``, on
SQLite and PostgreSQL; the patched figure against the figure drawn whole.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest
import sqlalchemy as sa
from dashboard_helpers import EngineStudy, write_engine_study
from postgres_fixture import postgres_url

from dashboard import create_app, figures, layout
from dashboard.analysis import StudyView
from dashboard.data import (
    StudyData,
    fingerprint,
    load_front,
    load_rest,
    load_study,
    open_readonly,
    study_info,
)
from dashboard.testing import components, first_render
from studies.store import Status

__all__ = ["postgres_url"]  # a fixture, imported for this module's tests


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> EngineStudy:
    path = tmp_path_factory.mktemp("front") / "studies.db"
    return write_engine_study(f"sqlite:///{path}")


@pytest.fixture(scope="module")
def engine(study: EngineStudy) -> sa.Engine:
    return open_readonly(study.url)


def _same_study(front: StudyData, whole: StudyData, engine: sa.Engine) -> None:
    """``front`` is ``whole``'s part, and completing it gives ``whole``."""
    assert not front.whole and whole.whole and front.knobs == {}
    shared = ["trial_id", "number", "state", "status", *whole.objectives]
    pd.testing.assert_frame_equal(front.trials[shared], whole.trials[shared])
    unfinished = whole.trials.state != "complete"
    for column in ("cost_params", "cost_madds"):  # where a rejected trial is drawn
        pd.testing.assert_series_equal(front.trials[column][unfinished],
                                       whole.trials[column][unfinished])
    assert front.trials.reason.isna().all() and front.trials.started.isna().all()
    rest = load_rest(engine, front)
    pd.testing.assert_frame_equal(rest.trials, whole.trials)
    assert (rest.knobs, rest.distributions, rest.version) == (
        whole.knobs, whole.distributions, whole.version)
    assert load_rest(engine, whole) is whole  # a whole study needs nothing more


def test_front_then_rest_is_the_study(study: EngineStudy, engine: sa.Engine) -> None:
    info = study_info(engine, study.name)
    version = fingerprint(engine, info.study_id, info.name)
    _same_study(load_front(engine, info, version), load_study(engine, info, version), engine)


def test_a_view_from_the_front_completes_itself_once(study: EngineStudy,
                                                     engine: sa.Engine) -> None:
    info = study_info(engine, study.name)
    whole = StudyView(load_study(engine, info))
    reads: list[StudyData] = []

    def rest(front: StudyData) -> StudyData:
        reads.append(front)
        return load_rest(engine, front)

    view = StudyView(load_front(engine, info), rest=rest)
    assert np.array_equal(view.front, whole.front)
    assert np.array_equal(view.front, whole.sweep.front)  # the mask the sweep finds
    assert (view.counts, view.best, view.hypervolume, view.curve) == (
        whole.counts, whole.best, whole.hypervolume, whole.curve)
    assert not reads  # none of those needs the rest
    assert view.data is view.data and len(reads) == 1
    assert view.last_activity == whole.last_activity
    pd.testing.assert_frame_equal(view.table, whole.table)
    with pytest.raises(ValueError, match="rest"):
        StudyView(load_front(engine, info))


def test_labels_past_the_limit_are_the_fronts_only(study: EngineStudy, engine: sa.Engine,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    view = StudyView(load_study(engine, study_info(engine, study.name)))
    complete = view.complete
    monkeypatch.setattr(figures, "FULL_LABELS_MAX", 2)
    labels = figures.hover_labels(view.data, view.front)
    assert set(labels.index) == set(complete.index[view.front])
    fig = figures.pareto_2d(view.data, "params", "accuracy", view.front, labels=labels)
    dominated, front, rejected = fig.data
    assert front.hovertext is not None and all("groups = " in t for t in front.hovertext)
    for trace in (dominated, rejected):  # brief: the number and the two values, names in meta
        assert trace.hovertext is None and "trial %{customdata}" in trace.hovertemplate
        assert list(trace.meta) == ["params", "accuracy"]
        assert "%{x:.3s}" in trace.hovertemplate and "%{y:.4f}" in trace.hovertemplate
    fig3 = figures.pareto_3d(view.data, view.front, labels=labels)
    assert fig3.data[0].hovertext is None and fig3.data[1].hovertext is not None


def _apply(figure: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Dash's patch operations (the two the labels use) applied to a figure's JSON."""
    for op in patch["operations"]:
        *path, last = op["location"]
        target: Any = figure
        for key in path:
            target = target[key]
        if op["operation"] == "Assign":
            target[last] = op["params"]["value"]
        elif op["operation"] == "Delete":
            target.pop(last, None)
        else:
            raise AssertionError(f"unexpected patch operation {op['operation']}")
    return figure


def _first_render_of_a_large_study(url: str, name: str,
                                   monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """The route's front and the labels' patch, on a study the page takes for large."""
    monkeypatch.setattr(figures, "WEBGL_FROM", 3)
    app = create_app(url)
    results = first_render(app.server.test_client(), app, layout.study_href(name))
    assert [r.status for r in results] == [200] * len(results)
    page = results[0].response["response"]["page"]["children"]
    graph = next(c for c in components(page) if c["props"].get("id") == layout.PARETO_2D)
    store = next(c for c in components(page) if c["props"].get("id") == layout.FRONT_LABELS)
    patched = [r for r in results if r.output.startswith(f"{layout.PARETO_2D}.figure")]
    assert len(patched) == 1 and store["props"]["data"]
    return graph["props"]["figure"], patched[0].response["response"][layout.PARETO_2D]["figure"]


def test_a_large_front_comes_first_and_its_labels_after(study: EngineStudy, engine: sa.Engine,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    first, patch = _first_render_of_a_large_study(study.url, study.name, monkeypatch)
    assert all("hovertext" not in t and "trial %{customdata}" in t["hovertemplate"]
               for t in first["data"])
    view = StudyView(load_study(engine, study_info(engine, study.name)))
    whole = figures.pareto_2d(view.data, "params", "accuracy", view.front).to_plotly_json()
    patched = _apply(first, patch)
    for mine, drawn in zip(patched["data"], whole["data"], strict=True):
        assert list(mine["customdata"]) == list(drawn["customdata"])
        assert list(mine["hovertext"]) == list(drawn["hovertext"])
        assert mine["hoverinfo"] == "text" and "hovertemplate" not in mine


def test_a_small_front_comes_whole(study: EngineStudy) -> None:
    app = create_app(study.url)
    results = first_render(app.server.test_client(), app, layout.study_href(study.name))
    page = results[0].response["response"]["page"]["children"]
    assert not any(c["props"].get("id") == layout.FRONT_LABELS for c in components(page))
    graph = next(c for c in components(page) if c["props"].get("id") == layout.PARETO_2D)
    assert all("hovertext" in t for t in graph["props"]["figure"]["data"])
    assert not any(r.output.startswith(f"{layout.PARETO_2D}.") for r in results)


def test_reading_a_study_imports_no_torch(study: EngineStudy) -> None:
    """The study's space searches ``train`` settings, whose types are the trainer's
    (``trainers.config``): reading it, listing and showing it load no torch."""
    code = (
        "import sys\n"
        "from dashboard import create_app, layout\n"
        "from dashboard.testing import first_render\n"
        "from studies.report import list_studies, study_status\n"
        f"url, name = {study.url!r}, {study.name!r}\n"
        "app = create_app(url)\n"
        "assert all(r.status == 200 for r in first_render(app.server.test_client(), app, "
        "layout.study_href(name)))\n"
        "assert list_studies(url) and study_status(name, url)['train_searched']\n"
        "print(sorted(m for m in ('torch', 'ray', 'timm') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_on_postgresql(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made = write_engine_study(postgres_url, name="front-on-postgres")
    engine = open_readonly(postgres_url)
    info = study_info(engine, made.name)
    front, whole = load_front(engine, info), load_study(engine, info)
    _same_study(front, whole, engine)
    assert (front.trials.status == Status.REJECTED).sum() == 1
    first, patch = _first_render_of_a_large_study(postgres_url, made.name, monkeypatch)
    assert any("hovertext" in t for t in _apply(first, patch)["data"])
    engine.dispose()
