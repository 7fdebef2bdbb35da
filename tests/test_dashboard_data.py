"""The dashboard's data, analysis and figure functions on an engine-shaped study, and its app
in-process (Flask's test client).

The study (``dashboard_helpers.write_engine_study``) has completed, early-stopped, rejected,
failed and running trials with every ``nas.*`` attribute and per-epoch rows; what the dashboard
computes is checked against Optuna's own answers (``best_trials``), ``studies.pareto`` and
brute-force computations.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import itertools
import json
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pandas as pd
import pytest
import sqlalchemy as sa
import yaml
from dashboard_helpers import PLAN, EngineStudy, linked_studies, write_engine_study
from optuna.trial import TrialState
from postgres_fixture import postgres_url

import studies.export
import studies.export._record as export_record
from dashboard import create_app
from dashboard.analysis import (
    StudyView,
    filter_trials,
    front_mask,
    importances,
    knob_groups,
    omega_squared,
    sort_trials,
)
from dashboard.data import (
    StudyData,
    StudyInfo,
    fingerprint,
    list_studies,
    load_study,
    load_trial,
    open_readonly,
    readonly_optuna_storage,
    study_info,
)
from dashboard.exports import trial_record
from dashboard.figures import (
    compare_fronts,
    cost_parts,
    empty,
    epoch_curves,
    hypervolume_history,
    importance,
    knob_effect,
    parallel_coordinates,
    pareto_2d,
    pareto_3d,
)
from dashboard.formatting import count, header
from dashboard.formatting import number as format_number
from dashboard.layout import study_href, trial_body, trial_href
from dashboard.reader import listing_of
from dashboard.testing import (
    array_values,
    callback_body,
    components,
    first_render,
    post_callback,
    view_figure,
)
from nas.config import ArchConfig
from nas.errors import NasError
from nas_cli.dashboard_cmd import register
from studies.pareto import hypervolume_history as pareto_history
from studies.pareto import nondominated_mask, normalized_hypervolume, pareto_sweep, to_minimization
from studies.report import study_status
from studies.store import Status, StorageError, StudyKey, TrialKey, epochs_table

__all__ = ["postgres_url"]  # a fixture, imported for this module's tests

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> EngineStudy:
    path = tmp_path_factory.mktemp("dash") / "studies.db"
    made = write_engine_study(f"sqlite:///{path}")
    # A second study, made with Optuna alone (no nas.* attributes), with a hostile name.
    storage = optuna.storages.RDBStorage(made.url)
    other = optuna.create_study(storage=storage, study_name=EVIL,
                                directions=["maximize", "minimize"])
    other.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
    for i in range(4):
        other.add_trial(optuna.trial.create_trial(
            params={"groups": [1, 2][i % 2], "note": ["<b>x</b>", "y"][i % 2]},
            distributions={"groups": optuna.distributions.CategoricalDistribution([1, 2]),
                           "note": optuna.distributions.CategoricalDistribution(
                               ["<b>x</b>", "y"])},
            values=[0.5 + 0.1 * i, 20000.0 - 1000 * i * i],
            # A status that is no Status word (unreadable: the trial reads its state's) and a
            # reason that is hostile text.
            user_attrs={TrialKey.STATUS: EVIL, TrialKey.REASON: EVIL}))
    storage.engine.dispose()
    return made


@pytest.fixture(scope="module")
def engine(study: EngineStudy) -> sa.Engine:
    return open_readonly(study.url)


@pytest.fixture(scope="module")
def view(study: EngineStudy, engine: sa.Engine) -> StudyView:
    return StudyView(load_study(engine, study_info(engine, study.name)))


@pytest.fixture(scope="module")
def optuna_study(study: EngineStudy) -> optuna.Study:
    return optuna.load_study(study_name=study.name, storage=study.url)


def _db_digest(url: str) -> str:
    path = Path(sa.make_url(url).database or "")
    digest = hashlib.sha256()
    for part in (path, path.with_name(path.name + "-wal")):
        if part.exists():
            digest.update(part.read_bytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------- storage
def test_engine_cannot_write(study: EngineStudy, engine: sa.Engine) -> None:
    with pytest.raises(sa.exc.OperationalError, match="readonly"), engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM trials"))
    storage = readonly_optuna_storage(study.url)
    with pytest.raises((sa.exc.OperationalError, optuna.exceptions.StorageInternalError)):
        storage.set_study_user_attr(storage.get_study_id_from_name(study.name), "x", 1)


def test_unusable_storage_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="does not exist"):
        open_readonly(f"sqlite:///{tmp_path / 'missing.db'}")
    assert not (tmp_path / "missing.db").exists()
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(StorageError, match="no Optuna studies"):
        open_readonly(f"sqlite:///{tmp_path / 'other.db'}")
    with pytest.raises(StorageError, match="not an SQLAlchemy URL"):
        open_readonly("no-such-scheme")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.storages.RDBStorage(empty).engine.dispose()
    with pytest.raises(StorageError, match="Unknown study 'nope'; studies in this database: "
                                           "none"):
        study_info(open_readonly(empty), "nope")


def test_reads_while_a_writer_holds_the_lock(study: EngineStudy, engine: sa.Engine) -> None:
    """WAL: the dashboard reads (the last committed state) while the driver writes."""
    info = study_info(engine, study.name)
    before = fingerprint(engine, info.study_id, info.name)
    writer = sqlite3.connect(sa.make_url(study.url).database or "", timeout=1)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(f"INSERT INTO {epochs_table.name} (study_name, trial_number, epoch, "
                       "value) VALUES (?, 9, 3, 0.5)", (study.name,))
        assert fingerprint(engine, info.study_id, info.name) == before
        assert len(load_study(engine, info).trials) == len(PLAN)
        writer.rollback()
    finally:
        writer.close()
    assert fingerprint(engine, info.study_id, info.name) == before


def test_on_postgresql(postgres_url: str) -> None:
    made = write_engine_study(postgres_url, name="dash-on-postgres")
    engine = open_readonly(postgres_url)
    info = study_info(engine, made.name)
    view = StudyView(load_study(engine, info, fingerprint(engine, info.study_id, info.name)))
    reference = optuna.load_study(study_name=made.name, storage=postgres_url)
    assert set(view.complete.number[view.front]) == {t.number for t in reference.best_trials}
    assert view.counts == {Status.COMPLETED: 6, Status.REJECTED: 1, Status.STOPPED: 1,
                           Status.FAILED: 1, "running": 1}
    costs = view.data.trials.set_index("number").cost_params
    assert all(costs[t.number] == t.user_attrs[TrialKey.COST]["params"] for t in reference.trials)
    assert view.hypervolume == study_status(made.name, postgres_url)["hypervolume"]
    with pytest.raises(sa.exc.DBAPIError, match="read-only"), engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM trial_values"))
    assert load_trial(engine, info, 1)["epochs"]
    _, frame = list_studies(engine)
    row = frame.set_index("name").loc[made.name]
    assert (row.completed, row.rejected, row.failed, row.running) == (6, 1, 1, 1)
    app = create_app(postgres_url)
    results = first_render(app.server.test_client(), app, study_href(made.name))
    assert [r.status for r in results] == [200] * len(results)


# ----------------------------------------------------------------------------- data
def test_load_study_matches_optuna(view: StudyView, optuna_study: optuna.Study) -> None:
    df = view.data.trials.set_index("number")
    assert list(view.data.objectives) == ["accuracy", "params", "madds"]
    assert set(view.data.knobs) == {"groups", "group_ffn", "attention_sharing", "lr"}
    for t in optuna_study.trials:
        row = df.loc[t.number]
        assert row.state == t.state.name.lower()
        assert row.status == t.user_attrs.get(TrialKey.STATUS, t.state.name.lower())
        assert row.reason == t.user_attrs.get(TrialKey.REASON)
        assert row.arch_id == t.user_attrs[TrialKey.ARCH_ID]
        assert row.cost_params == t.user_attrs[TrialKey.COST]["params"]
        for name in view.data.knobs:
            value = row[name]
            assert (value == t.params[name]) if name in t.params else value is None
        if t.state == TrialState.COMPLETE:
            assert [row.accuracy, row.params, row.madds] == t.values
        else:
            assert np.isnan([row.accuracy, row.params, row.madds]).all()
    statuses = view.counts
    assert statuses == {Status.COMPLETED: 6, Status.REJECTED: 1, Status.STOPPED: 1,
                        Status.FAILED: 1, "running": 1}


def test_front_is_optunas_best_trials(view: StudyView, optuna_study: optuna.Study) -> None:
    ours = set(view.complete.number[view.front])
    assert ours == {t.number for t in optuna_study.best_trials} == {1, 6}


def _brute_force_front(points: np.ndarray) -> np.ndarray:
    """Row i is on the front unless some row is <= everywhere and < somewhere (every pair)."""
    return np.array([
        not np.any(np.all(points <= p, axis=1) & np.any(points < p, axis=1)) for p in points
    ], dtype=bool)


@pytest.mark.parametrize(("n", "m", "ties"), [(3000, 2, False), (2000, 3, True), (1200, 4, False)])
def test_front_over_many_chunks_equals_brute_force(n: int, m: int, ties: bool) -> None:
    # Thousands of rows: the front is built over many chunks (the small cases fit in one).
    rng = np.random.default_rng(n)
    points = rng.random((n, m))
    # A trade-off (the last objective falls as the others rise) makes a front of many rows.
    points[:, -1] = 1.0 - points[:, :-1].mean(axis=1) + 0.05 * rng.random(n)
    if ties:  # on a grid: ties and duplicates
        points = np.round(points * 12)
    expected = _brute_force_front(points)
    assert expected.sum() > 20
    assert (nondominated_mask(points) == expected).all()
    if m == 2:  # (the sweep's hypervolumes of a front this size are cheap in 2-d only)
        assert (pareto_sweep(points, ["minimize"] * m).front == expected).all()


@pytest.mark.parametrize("seed", range(12))
def test_front_and_hypervolume_equal_studies_pareto(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 80)), int(rng.integers(2, 4))
    values = (rng.integers(0, 5, (n, m)).astype(float) if seed % 2  # ties and duplicates
              else rng.random((n, m)))
    directions = list(rng.choice(["minimize", "maximize"], m))
    points = to_minimization(values, directions)
    expected = _brute_force_front(points)
    assert (nondominated_mask(points) == expected).all()
    assert (front_mask(values, directions) == expected).all()
    history = pareto_history(values.tolist(), directions)
    full = pareto_sweep(values, directions)
    assert (full.positions, full.volumes) == (list(range(n)), history)
    sweep = pareto_sweep(values, directions, max_points=7)
    assert sweep.volumes == [history[i] for i in sweep.positions]
    assert sweep.positions[-1] == n - 1 and (sweep.front == expected).all()
    assert normalized_hypervolume(values, directions) == history[-1]


def _brute_force_hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """Volume dominated by ``points`` (minimisation) below ``ref``: the grid cells between
    consecutive coordinates, each counted if some point is at or below its lower corner."""
    axes = [np.unique(np.append(points[:, k], ref[k])) for k in range(points.shape[1])]
    total = 0.0
    for cell in itertools.product(*(range(len(a) - 1) for a in axes)):
        low = np.array([a[i] for a, i in zip(axes, cell, strict=True)])
        high = np.array([a[i + 1] for a, i in zip(axes, cell, strict=True)])
        if np.any(np.all(points <= low, axis=1)):
            total += float(np.prod(high - low))
    return total


@pytest.mark.parametrize("seed", range(8))
def test_hypervolume_against_brute_force(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n, m = int(rng.integers(1, 10)), int(rng.integers(2, 4))
    values = rng.random((n, m))
    directions = list(rng.choice(["minimize", "maximize"], m))
    # A fixed reference (raw units): a maximised objective's at 0.2, a minimised one's at 0.9,
    # ideals at 1 and 0; the scaled coordinates, to minimise, are 1 - g with the reference at 1.
    reference = [0.2 if d == "maximize" else 0.9 for d in directions]
    scaled = np.column_stack([
        1 - (values[:, k] - 0.2) / 0.8 if d == "maximize" else values[:, k] / 0.9
        for k, d in enumerate(directions)])
    expected = _brute_force_hypervolume(np.minimum(scaled, 1.0), np.ones(m))
    assert normalized_hypervolume(values, directions, reference) == pytest.approx(expected,
                                                                                  rel=1e-12)
    curve = pareto_sweep(values, directions, reference=reference).volumes
    assert curve[-1] == pytest.approx(expected, rel=1e-12)
    assert all(b >= a for a, b in itertools.pairwise(curve))


def test_study_hypervolume_equals_nas_status(study: EngineStudy, view: StudyView) -> None:
    status = study_status(study.name, study.url)
    assert view.hypervolume == status["hypervolume"]
    numbers, volumes = view.curve
    assert numbers == [int(n) for n in view.complete.number]
    assert volumes[-1] == status["hypervolume"]


def test_importance_for_each_objective(view: StudyView) -> None:
    scores = importances(view.data)
    assert set(scores) == {"accuracy", "params", "madds"}
    for per_knob in scores.values():
        assert set(per_knob) == set(view.data.knobs)
        assert all(0.0 <= v <= 1.0 for v in per_knob.values())
    # params depend on the architecture only: the learning rate explains none of them.
    assert scores["params"]["lr"] == 0.0
    assert max(scores["params"].values()) > 0.3


def test_importance_finds_the_knob_that_matters() -> None:
    rng = np.random.default_rng(0)
    n = 300
    trials = pd.DataFrame({
        "number": range(n), "state": "complete", "status": Status.COMPLETED,
        "a": rng.choice([1, 2, 4], n).astype(object), "b": rng.choice([True, False], n),
        "c": rng.random(n).astype(object)})
    trials["loss"] = trials.a.astype(float) * 3 + rng.normal(0, 0.5, n)
    info = StudyInfo(1, "synthetic", ("loss",), ("minimize",))
    data = StudyData(info, trials, {"a": "a", "b": "b", "c": "c"}, {})
    scores = importances(data)["loss"]
    assert scores["a"] > 0.8 and scores["b"] < 0.05 and scores["c"] < 0.05


def test_omega_squared_by_hand() -> None:
    values = np.array([1.0, 2.0, 3.0, 7.0, 8.0, 9.0])
    groups = np.array(["x", "x", "x", "y", "y", "y"])
    # SS_total 58, SS_between 54, MS_within 4 / (6 - 2) = 1: (54 - 1 * 1) / (58 + 1)
    assert omega_squared(values, groups) == pytest.approx(53 / 59)
    assert omega_squared(values, np.array(["x"] * 6)) == 0.0
    column = pd.Series([1, None, 2, 2], dtype=object)
    assert list(knob_groups(column)) == ["1", "not drawn", "2", "2"]


def test_list_studies(study: EngineStudy, engine: sa.Engine) -> None:
    infos, frame = list_studies(engine)
    assert [i.name for i in infos] == [study.name, EVIL]
    row = frame.set_index("name").loc[study.name]
    assert (row.trials, row.completed, row.stopped, row.failed, row.rejected, row.running) == (
        10, 6, 1, 1, 1, 1)
    assert row.task == "digits"
    assert infos[1].objectives == ("accuracy", "params")
    # A status word that is not one of studies.store.Status' counts by the trial's state.
    evil = frame.set_index("name").loc[EVIL]
    assert (evil.trials, evil.completed, evil.stopped) == (4, 4, 0)


def test_a_listing_of_loaded_studies_equals_the_sql_listing(engine: sa.Engine) -> None:
    """``listing_of`` (for a reader holding its studies in memory) lists loaded studies as the
    SQL listing lists them: the same counts by status, last activity and completed values."""
    infos, frame = list_studies(engine)
    loaded = [load_study(engine, study_info(engine, i.name)) for i in infos]
    ours_infos, ours = listing_of(loaded)
    assert [i.name for i in ours_infos] == [i.name for i in infos]
    pd.testing.assert_frame_equal(ours, frame, check_dtype=False)
    key = ["study_id", "number", "objective"]
    pd.testing.assert_frame_equal(
        ours.attrs["values"].sort_values(key).reset_index(drop=True),
        frame.attrs["values"].sort_values(key).reset_index(drop=True), check_dtype=False)


@pytest.mark.parametrize(("value", "kind", "shown"), [
    (950, "count", "950"), (1234, "count", "1.23k"), (123_456, "count", "123k"),
    (999_950, "count", "1M"), (1_234_567.0, "count", "1.23M"), (4.5e9, "count", "4.5G"),
    (0.82, "metric", "0.8200"), (0.15833333333333333, "metric", "0.1583"),
    (12345, "plain", "12,345"), (3.0, "plain", "3"), (0.00123, "plain", "0.00123"),
    (None, "count", "-"), (float("nan"), "metric", "-"), (True, "plain", "True"),
])
def test_number_formats(value: Any, kind: Any, shown: str) -> None:
    assert format_number(value, kind) == shown


def test_headers_are_words() -> None:
    assert [header(k) for k in ("arch_id", TrialKey.ARCH_ID, "epochs_reached", "madds",
                                "attention_sharing", "param:groups")] == [
        "architecture id", "architecture id", "epochs", "MAdds", "attention sharing",
        "param groups"]
    assert count(-2500) == "-2.5k"


def test_load_trial(study: EngineStudy, engine: sa.Engine,
                    optuna_study: optuna.Study) -> None:
    info = study_info(engine, study.name)
    trial = load_trial(engine, info, 1)
    frozen = optuna_study.trials[1]
    assert trial["arch"] == frozen.user_attrs[TrialKey.ARCH]
    assert trial["cost"] == frozen.user_attrs[TrialKey.COST]
    assert trial["params"] == frozen.params
    assert [e["epoch"] for e in trial["epochs"]] == [1, 2, 3]
    assert [v for _, v in trial["intermediate"]] == [
        frozen.intermediate_values[s] for s in sorted(frozen.intermediate_values)]
    assert trial["values"] == dict(zip(info.objectives, frozen.values, strict=True))
    rejected = load_trial(engine, info, 0)
    assert rejected["status"] == Status.REJECTED and "params_max" in rejected["reason"]
    with pytest.raises(StorageError, match="trials are 0-9"):
        load_trial(engine, info, 10)


def test_table_filter_and_sort(view: StudyView) -> None:
    table = view.table
    assert list(table.number[table.pareto == "yes"]) == [1, 6]
    assert set(filter_trials(table, "{accuracy} > 0.7").number) == {1, 2, 4}
    assert set(filter_trials(table, '{status} contains "rej"').number) == {0}
    assert set(filter_trials(table, "{groups} = 1 && {accuracy} s< 0.7").number) == {8}
    assert set(filter_trials(table, "{nope} > 1").number) == set(range(10))
    # What the table sends for text typed in a filter cell: an operator prefixed s or i.
    kv = {n for n, (knobs, _, _) in enumerate(PLAN) if knobs["attention_sharing"] == "kv"}
    assert set(filter_trials(table, "{attention_sharing} scontains kv").number) == kv
    assert set(filter_trials(table, "{attention_sharing} icontains KV").number) == kv
    assert not len(filter_trials(table, "{attention_sharing} scontains KV"))
    assert set(filter_trials(table, "{groups} s= 1").number) == {
        n for n, (knobs, _, _) in enumerate(PLAN) if knobs["groups"] == 1}
    ordered = sort_trials(table, [{"column_id": "accuracy", "direction": "desc"}])
    assert list(ordered.number[:3]) == [1, 4, 2]
    assert ordered.accuracy.iloc[-1:].isna().all()  # missing values last


# ----------------------------------------------------------------------------- figures
def _points(fig: Any) -> dict[str, int]:
    return {t.name.split(" (")[0]: len(t.x) for t in fig.data}


def test_pareto_figures(view: StudyView) -> None:
    fig = pareto_2d(view.data, "params", "accuracy", view.front)
    assert _points(fig) == {"dominated": 4, "Pareto-optimal": 2, "rejected by a constraint": 1}
    front = fig.data[1]
    assert sorted(front.customdata) == [1, 6]
    assert all("trial" in label and "groups = " in label for label in front.hovertext)
    # A knob the architecture does not have (group_ffn with one group) is left out, not "-".
    one_group = dict(zip(front.customdata, front.hovertext, strict=True))[1]
    assert "groups = 1" in one_group and "group ffn" not in one_group
    assert "group ffn = " in dict(zip(fig.data[0].customdata, fig.data[0].hovertext,
                                      strict=True))[2]
    limit = [s for s in fig.layout.shapes if s.line.dash == "dash"]
    assert len(limit) == 1  # params_max
    rejected = fig.data[2]
    assert rejected.y[0] == view.complete.accuracy.min()  # never trained: at the worst value
    fig3 = pareto_3d(view.data, view.front)
    assert _points(fig3) == _points(fig)
    assert fig3.layout.scene.xaxis.title.text == "accuracy (higher is better)"
    assert fig3.layout.scene.zaxis.title.text == "MAdds (lower is better)"


def test_log_axes_for_the_costs(view: StudyView) -> None:
    """The front's params and MAdds axes are logarithmic when asked, linear when asked, and by
    themselves when the values span more than 30x; accuracy never becomes logarithmic."""
    def types(fig: Any) -> tuple[Any, Any]:
        return fig.layout.xaxis.type, fig.layout.yaxis.type

    assert types(pareto_2d(view.data, "params", "accuracy", view.front)) == (None, None)
    assert types(pareto_2d(view.data, "params", "accuracy", view.front, scale="log")) == (
        "log", None)
    assert types(pareto_2d(view.data, "accuracy", "madds", view.front, scale="log")) == (
        None, "log")
    scene = pareto_3d(view.data, view.front, scale="log").layout.scene
    assert (scene.xaxis.type, scene.yaxis.type, scene.zaxis.type) == (None, "log", "log")
    wide = view.data.trials.copy()
    wide.loc[wide.params.notna(), "params"] *= np.where(
        wide.number[wide.params.notna()] % 2 == 0, 1.0, 100.0)
    spread = dataclasses.replace(view.data, trials=wide)
    assert types(pareto_2d(spread, "params", "accuracy", view.front)) == ("log", None)
    assert types(pareto_2d(spread, "params", "accuracy", view.front, scale="linear")) == (
        None, None)


def test_other_figures(view: StudyView, engine: sa.Engine, study: EngineStudy) -> None:
    numbers, volumes = view.curve
    hv = hypervolume_history(numbers, volumes)
    assert list(hv.data[0].y) == volumes
    parcoords = parallel_coordinates(view.data)
    assert [d.label for d in parcoords.data[0].dimensions] == [
        header(c) for c in (*view.data.knobs, *view.data.objectives)]
    bars = importance(view.importances)
    assert [b.name for b in bars.data] == ["accuracy", "params", "madds"]
    effect = knob_effect(view.data, "groups", "accuracy")
    assert [b.name for b in effect.data] == ["1", "2"]
    assert sum(len(b.y) for b in effect.data) == len(view.complete)
    other = StudyView(load_study(engine, study_info(engine, EVIL)))
    both = compare_fronts([view.data, other.data], "params", "accuracy")
    assert len(both.data) == 4
    assert all("<script>" not in t.name for t in both.data)
    trial = load_trial(engine, study_info(engine, study.name), 1)
    parts = cost_parts(trial["cost"])
    assert sum(parts.data[0].y) == trial["cost"]["params"]
    curves = epoch_curves(trial["epochs"], trial["intermediate"])
    assert list(curves.data[0].x) == [1, 2, 3]
    assert empty("<b>no</b>").layout.annotations[0].text == "&lt;b&gt;no&lt;/b&gt;"


def test_hostile_strings_are_escaped_in_figures(engine: sa.Engine) -> None:
    other = StudyView(load_study(engine, study_info(engine, EVIL)))
    fig = pareto_2d(other.data, "params", "accuracy", other.front)
    labels = [label for trace in fig.data for label in trace.hovertext]
    assert labels and all("<script>" not in x and "<b>x</b>" not in x for x in labels)
    assert any("&lt;script&gt;" in x for x in labels)
    assert any("&lt;b&gt;x&lt;/b&gt;" in x for x in labels)


# ----------------------------------------------------------------------------- the app
@pytest.fixture(scope="module")
def app(study: EngineStudy) -> Any:
    return create_app(study.url, refresh_seconds=1)


def test_study_page_first_render(app: Any, study: EngineStudy) -> None:
    before = _db_digest(study.url)
    client = app.server.test_client()
    results = first_render(client, app, study_href(study.name))
    assert [r.status for r in results] == [200] * len(results)
    rendered = {r.output.strip(".").split(".")[0] for r in results}
    assert {"page", "study-summary", "view", "compare"} <= rendered
    # The front comes with the page itself; only the open view (the hypervolume) is sent.
    assert "pareto-2d" not in rendered
    shown = next(r for r in results if r.output.startswith("..view.children"))
    box = shown.response["response"]["view"]["children"]
    assert box["props"]["id"] == "hypervolume"
    assert not any(c["props"].get("id") in ("pareto-3d", "parcoords", "importance")
                   for r in results if r.response for c in components(r.response))
    graph = next(c for c in components(results[0].response)
                 if c["props"].get("id") == "pareto-2d")
    traces = graph["props"]["figure"]["data"]
    assert [_length(t["x"]) for t in traces] == [4, 2, 1]
    table = next(r for r in results if r.output.startswith("..trial-table.data"))
    rows = table.response["response"]["trial-table"]["data"]
    assert len(rows) == 10 and rows[1]["number"] == f"[1]({trial_href(study.name, 1)})"
    assert _db_digest(study.url) == before


def _length(array: Any) -> int:
    """Points in a serialised plotly array (a list, or a base64 typed array)."""
    if isinstance(array, dict):
        itemsize = np.dtype(array["dtype"]).itemsize
        return len(base64.b64decode(array["bdata"])) // itemsize
    return len(array)


def test_pages_of_a_hostile_name(app: Any) -> None:
    client = app.server.test_client()
    results = first_render(client, app, study_href(EVIL))
    assert [r.status for r in results] == [200] * len(results)
    body = json.dumps(results[0].response)
    assert EVIL in body  # as text of a component (React escapes it), never as markup
    assert "dangerously" not in body.lower()
    studies = post_callback(client, callback_body(app, "studies-table.children",
                                                  {"studies-tick.n_intervals": None}))
    assert EVIL in json.dumps(studies.response)
    missing = first_render(client, app, study_href("nope"))[0]
    assert "Unknown study" in json.dumps(missing.response)
    bad = first_render(client, app, "/study/x/trial/abc")[0]
    assert "not a trial number" in json.dumps(bad.response)


@pytest.fixture
def _no_git(monkeypatch: pytest.MonkeyPatch) -> None:
    # Both paths build their records with studies.export's build_record, which reads it there.
    monkeypatch.setattr(export_record, "git_commit", lambda root=None: None)


def test_export_records_equal_studies_export(study: EngineStudy, engine: sa.Engine,
                                             _no_git: None) -> None:
    storage = readonly_optuna_storage(study.url)
    info = study_info(engine, study.name)
    for number in range(len(PLAN)):
        ours = trial_record(info, load_trial(engine, info, number), storage)
        assert ours == studies.export.trial_record(study.name, number, storage)


def test_trial_page_and_exports(app: Any, study: EngineStudy, _no_git: None) -> None:
    before = _db_digest(study.url)
    client = app.server.test_client()
    page = first_render(client, app, trial_href(study.name, 1))
    assert [r.status for r in page] == [200] * len(page)
    body = json.dumps(page[-1].response)
    assert "Trial " in body and "backbone" in body
    store = {"trial.data": {"name": study.name, "number": 1}}
    for fmt in ("yaml", "json", "hf-config", "timm"):
        button = {"format": fmt, "type": "export"}
        request = callback_body(app, "..trial-download", store,
                                changed=json.dumps(button, separators=(",", ":")) + ".n_clicks")
        request["inputs"][0] = [{"id": button, "property": "n_clicks", "value": 1}]
        answer = post_callback(client, request)
        assert answer.status == 200, answer
        download = answer.response["response"]["trial-download"]["data"]
        assert download["filename"].startswith("trial-1")
        if fmt == "yaml":
            doc = yaml.safe_load(download["content"])
            assert ArchConfig.from_dict(doc["arch"]).arch_id == doc["provenance"]["arch_id"]
    csv = post_callback(client, callback_body(app, "..csv-download", {
        "csv-button.n_clicks": 1, "study.data": {"name": study.name},
        "trial-table.filter_query": f"{{status}} = {Status.COMPLETED}", "trial-table.sort_by": []}))
    content = csv.response["response"]["csv-download"]["data"]["content"]
    assert content.count("\n") == 1 + 6
    pareto = post_callback(client, callback_body(app, "..pareto-download", {
        "pareto-button.n_clicks": 1, "pareto-format.value": "json",
        "study.data": {"name": study.name}}))
    assert pareto.status == 200
    assert pareto.response["response"]["pareto-download"]["data"]["base64"]
    assert _db_digest(study.url) == before


def test_trial_body_shows_a_kept_checkpoint() -> None:
    trial = {"number": 3, "state": "complete", "status": Status.COMPLETED, "reason": None,
             "values": {"accuracy": 0.5}, "attrs": {TrialKey.EPOCHS_REACHED: 2}, "arch": None,
             "cost": None, "train": None, "arch_id": "abc", "started": None, "completed": None}

    def state_rows(trial: dict[str, Any]) -> dict[str, Any]:
        body = trial_body("s", trial, ["yaml"], empty("cost"), empty("curves"))
        table = next(c for c in body if getattr(c, "id", None) == "trial-state")
        rows = table.children[1].children
        return {row.children[0].children: row.children[1].children for row in rows}

    assert "checkpoint" not in state_rows(trial)
    kept = {**trial, "attrs": {**trial["attrs"], TrialKey.CHECKPOINT: "/w/s/trial-3/abc.pt"}}
    assert state_rows(kept)["checkpoint"] == "/w/s/trial-3/abc.pt"


def test_live_refresh_sees_new_trials(app: Any, study: EngineStudy) -> None:
    client = app.server.test_client()
    first = first_render(client, app, study_href(study.name))[0]
    store = next(c for c in _components(first.response) if c["props"].get("id") == "study")
    data = store["props"]["data"]
    same = post_callback(client, callback_body(app, "study.data", {
        "study-tick.n_intervals": 1, "study.data": data}))
    assert same.response["response"] == {}  # nothing changed: no update, nothing recomputed
    writer = optuna.load_study(study_name=study.name, storage=study.url)
    writer.add_trial(optuna.trial.create_trial(
        params={"groups": 1, "attention_sharing": "kv", "lr": 0.002},
        distributions=writer.trials[1].distributions, values=[0.9, 18026.0, 313792.0],
        user_attrs={TrialKey.STATUS: Status.COMPLETED}))
    changed = post_callback(client, callback_body(app, "study.data", {
        "study-tick.n_intervals": 2, "study.data": data}))
    assert changed.status == 200
    new = changed.response["response"]["study"]["data"]
    assert new["version"] != data["version"]
    summary = post_callback(client, callback_body(app, "study-summary.children",
                                                  {"study.data": new}))
    assert "completed 7" in json.dumps(summary.response)


def _components(response: Any) -> list[dict[str, Any]]:
    from dashboard.testing import components

    return list(components(response))


# ----------------------------------------------------------------------------- the command
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nas")
    register(parser.add_subparsers(dest="command"))
    return parser


def test_command_defaults_and_errors(tmp_path: Path) -> None:
    args = _parser().parse_args(["dashboard"])
    assert (args.host, args.port, args.storage) == ("127.0.0.1", 8050, None)
    args = _parser().parse_args(["dashboard", "--storage", f"sqlite:///{tmp_path}/none.db"])
    with pytest.raises(NasError, match="does not exist") as info:
        args.func(args)
    assert "\n" not in str(info.value)
    args = _parser().parse_args(["dashboard", "--storage", "sqlite:////no/such/dir/x.db"])
    with pytest.raises(NasError, match="does not exist"):
        args.func(args)


def test_command_refuses_a_taken_port(study: EngineStudy) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = _parser().parse_args(["dashboard", "--storage", study.url, "--port", str(port)])
        with pytest.raises(NasError, match=f"Cannot serve on 127.0.0.1:{port}"):
            args.func(args)


@pytest.mark.slow
def test_command_serves_on_localhost(study: EngineStudy) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    script = ("import argparse, sys; from nas_cli.dashboard_cmd import register; "
              "p = argparse.ArgumentParser(); register(p.add_subparsers()); "
              "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))")
    proc = subprocess.Popen([sys.executable, "-c", script, "dashboard", "--storage", study.url,
                             "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
                    assert answer.status == 200 and b"nas dashboard" in answer.read()
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                time.sleep(0.3)
        else:
            raise AssertionError("the dashboard did not answer")
        outside = _outside_address()
        if outside is not None:  # bound to loopback only: not reachable on another address
            with pytest.raises(OSError):
                socket.create_connection((outside, port), timeout=2).close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert proc.stdout is not None
    assert f"nas dashboard on http://127.0.0.1:{port}/" in proc.stdout.read()


def _outside_address() -> str | None:
    """This machine's address on its outbound interface (no packet is sent), if it has one."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            address = str(probe.getsockname()[0])
    except OSError:
        return None
    return None if address.startswith("127.") else address


def test_promotion_view_pairs_proxy_and_promoted_accuracy(tmp_path: Path) -> None:
    """A source study and its promoted study (as nas promote links them): both pages show the
    promoted trials' proxy against promoted accuracy, the diagonal and Kendall's tau."""
    url = f"sqlite:///{tmp_path / 'promoted.db'}"
    source, promoted = linked_studies(url)
    promoted.set_user_attr(StudyKey.FIDELITY, {"proxy_epochs": 4, "epochs": 16})
    proxy, after = [0.5, 0.6, 0.7, 0.8], [0.62, 0.71, 0.69, 0.9]  # one pair swapped
    for i, (p, q) in enumerate(zip(proxy, after, strict=True)):
        source.add_trial(optuna.trial.create_trial(values=[p, 1000.0 * (i + 1)]))
        promoted.add_trial(optuna.trial.create_trial(
            values=[q, 1000.0 * (i + 1)],
            user_attrs={TrialKey.SOURCE_TRIAL: i, TrialKey.SOURCE_VALUE: p}))
    app = create_app(url, refresh_seconds=1)
    client = app.server.test_client()
    for name in ("src", "src-promoted"):
        page = first_render(client, app, study_href(name))[0]
        assert "Proxy vs promoted" in json.dumps(page.response)
        fig = view_figure(client, app, name, "promotion")
        diagonal, points = fig["data"]
        assert _length(diagonal["x"]) == 2 and diagonal["x"] == diagonal["y"]
        assert array_values(points["x"]) == proxy and array_values(points["y"]) == after
        assert "Kendall tau +0.67 over 4 pairs" in fig["layout"]["title"]["text"]
        assert "4 epochs" in fig["layout"]["xaxis"]["title"]["text"]


def test_compare_puts_both_hypervolumes_on_one_reference(tmp_path: Path) -> None:
    """Two studies with different stored references: the compare view's hypervolumes are
    taken against one point (per objective the least demanding), not each study's own."""
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    values = {"a": [(0.6, 400.0), (0.8, 900.0)], "b": [(0.7, 300.0), (0.75, 2000.0)]}
    references = {"a": [0.1, 1000.0], "b": [0.2, 5000.0]}
    for name, rows in values.items():
        s = optuna.create_study(storage=url, study_name=name,
                                directions=["maximize", "minimize"])
        s.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
        s.set_user_attr(StudyKey.REFERENCE, references[name])
        for row in rows:
            s.add_trial(optuna.trial.create_trial(values=list(row)))
    app = create_app(url, refresh_seconds=1)
    client = app.server.test_client()
    answer = post_callback(client, callback_body(app, "compare.figure", {
        "study.data": {"name": "a"}, "compare-with.value": "b", "pareto-x.value": "params",
        "pareto-y.value": "accuracy"}))
    title = answer.response["response"]["compare"]["figure"]["layout"]["title"]["text"]
    shared = [0.1, 5000.0]
    dirs = ["maximize", "minimize"]
    for name in ("a", "b"):
        own = normalized_hypervolume(values[name], dirs, references[name])
        on_shared = normalized_hypervolume(values[name], dirs, shared)
        assert f"{name} {on_shared:.4f}" in title and f"{own:.4f}" != f"{on_shared:.4f}"
    other = optuna.create_study(storage=url, study_name="c", directions=["maximize"])
    other.set_user_attr(StudyKey.OBJECTIVES, ["accuracy"])
    other.add_trial(optuna.trial.create_trial(values=[0.5]))
    answer = post_callback(client, callback_body(app, "compare.figure", {
        "study.data": {"name": "a"}, "compare-with.value": "c", "pareto-x.value": "params",
        "pareto-y.value": "accuracy"}))
    assert answer.status == 200
