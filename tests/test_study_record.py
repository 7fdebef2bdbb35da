"""The study record (``studies.store``'s writes), the searcher's tally and its pace, without Ray.

A trial's record is written for each way it can end and read back with Optuna alone; the tally
the searcher keeps as it tells equals the one rebuilt from the stored trials; the pace keeps
twins of a trial in flight waiting and releases them by that trial's outcome.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from studies._pace import MAX_REJECTED_IN_A_ROW, Pace
from studies._tally import Tally
from studies._trials import StudyRun, counted_trials
from studies.objectives import OBJECTIVES, Objective, objective_values
from studies.spec import StudySpec
from studies.store import STATE_OF, Status, StudyStore, TrialKey, read_epochs


# ----------------------------------------------------------------------------- objectives
def test_each_objective_is_declared_once_with_its_source() -> None:
    assert {n: (o.direction, o.source) for n, o in OBJECTIVES.items()} == {
        "accuracy": ("maximize", "metric"), "params": ("minimize", "cost"),
        "madds": ("minimize", "cost"), "latency_ms": ("minimize", "measured")}
    spec = StudySpec.from_dict(h.study_dict("o", objectives=[
        {"name": "params", "direction": "maximize"}, "accuracy", "latency_ms"]))
    # A study's direction replaces the default; the source stays the table's.
    assert spec.objectives == (Objective("params", "maximize", "cost"), OBJECTIVES["accuracy"],
                               OBJECTIVES["latency_ms"])


def test_objective_values_come_from_their_sources() -> None:
    objectives = [OBJECTIVES[n] for n in ("accuracy", "madds", "latency_ms", "params")]
    cost = {"params": 1200, "madds": 3400, "params_matrix": 1000}
    result = {"value": 0.75, "latency_ms": 2.5, "params": 1}  # a reported `params` is ignored
    assert objective_values(objectives, cost, result) == [0.75, 3400.0, 2.5, 1200.0]
    assert objective_values(objectives, cost, {"value": float("nan"), "latency_ms": 1.0}) == (
        "the evaluator returned accuracy=nan")
    assert objective_values(objectives, cost, {"value": 0.5}) == (
        "the evaluator returned latency_ms=None")


# ----------------------------------------------------------------------------- trial records
@pytest.fixture
def run(tmp_path: Path) -> StudyRun:
    spec = StudySpec.from_dict(h.study_dict("rec"))
    store = StudyStore.open(f"sqlite:///{tmp_path / 'r.db'}")
    study = optuna.create_study(storage=store.storage, study_name="rec",
                                directions=spec.directions)
    return StudyRun(spec, None, study, store)  # type: ignore[arg-type]  # no space needed


def test_each_ending_is_stored_with_its_status_and_state(run: StudyRun) -> None:
    study, store, tally = run.study, run.store, Tally()
    trials = [study.ask({"x": optuna.distributions.IntDistribution(0, 9)}) for _ in range(8)]
    for t in trials[:7]:  # each configuration wholly drawn; trial 7 stopped while drawing its own
        store.record_sampled(t, {TrialKey.ARCH: {"x": t.params["x"]}})
    attrs = {TrialKey.ARCH_ID: "abc"}
    store.record_completed(study, trials[0], [0.9, 100.0], attrs)
    tally.add(Status.COMPLETED, [0.9, 100.0])
    store.record_reused(study, trials[1], [0.9, 100.0], source=trials[0].number, attrs=attrs)
    tally.add(Status.REUSED, [0.9, 100.0])
    store.record_stopped(study, trials[2], {TrialKey.EPOCHS_REACHED: 1})
    tally.add(Status.STOPPED)
    store.record_rejected(study, trials[3], "params 9 breaks params_max=1", attrs)
    tally.add(Status.REJECTED)
    store.record_failed(study, trials[4], {TrialKey.REASON: "boom"})
    tally.add(Status.FAILED)
    # A promoted trial's links and seed (set when it was enqueued) survive its re-run.
    promoted = {TrialKey.SOURCE_TRIAL: 3, TrialKey.SOURCE_VALUE: 0.5, TrialKey.SEED: 7}
    for key, value in promoted.items():
        trials[6].set_user_attr(key, value)
    # One left by this run (closed by name), one left RUNNING by a crash (found in the database).
    assert store.close_interrupted(study, [trials[5]], reason="the run ended") == 1
    tally.add(Status.INTERRUPTED)
    assert store.close_interrupted(study, reason="crashed") == 2
    tally.add(Status.INTERRUPTED)
    tally.add(Status.INTERRUPTED)
    assert store.close_interrupted(study) == 0  # nothing is RUNNING any more

    stored = h.load(run.storage.url, "rec")
    ended = stored[:8]
    assert [t.user_attrs[TrialKey.STATUS] for t in ended] == [
        Status.COMPLETED, Status.REUSED, Status.STOPPED, Status.REJECTED, Status.FAILED,
        Status.INTERRUPTED, Status.INTERRUPTED, Status.INTERRUPTED]
    assert all(t.state.name == STATE_OF[t.user_attrs[TrialKey.STATUS]] for t in ended)
    assert ended[0].values == ended[1].values == [0.9, 100.0]
    assert ended[1].user_attrs[TrialKey.REUSED_FROM] == 0
    assert ended[3].user_attrs[TrialKey.REASON] == "params 9 breaks params_max=1"
    assert [t.user_attrs[TrialKey.REASON] for t in ended[5:]] == [
        "the run ended", "crashed", "crashed"]
    # Each interrupted trial whose configuration was drawn is enqueued again, naming the one
    # it reruns, with the same parameters; trial 7 (parameters, but no configuration yet) not.
    reruns = [t for t in stored[8:] if t.state == TrialState.WAITING]
    assert [t.user_attrs[TrialKey.RERUN_OF] for t in reruns] == [5, 6]
    assert [t.system_attrs["fixed_params"] for t in reruns] == [stored[5].params, stored[6].params]
    assert not set(promoted) & set(reruns[0].user_attrs)
    assert {k: reruns[1].user_attrs.get(k) for k in promoted} == promoted
    assert Tally.of(stored) == tally
    assert tally.counted == counted_trials(stored) == 4 and tally.rejected == 1


def test_an_epoch_is_one_row_and_one_intermediate_value(run: StudyRun) -> None:
    trial = run.study.ask()
    for epoch, value in ((1, 0.5), (2, None), (1, 0.1)):  # a re-sent epoch replaces nothing
        run.store.record_epoch(run.study, trial, {
            "epoch": epoch, "train_loss": 1.0, "metric": "accuracy", "value": value,
            "seconds": 0.5, "extra": {"lr": 0.1}})
    rows = read_epochs(run.storage.engine, "rec")
    assert [(r["epoch"], r["value"], r["extra"]) for r in rows] == [
        (1, 0.5, {"lr": 0.1}), (2, None, {"lr": 0.1})]
    # The intermediate values hold the finite ones, as first reported (the same record).
    assert h.load(run.storage.url, "rec")[0].intermediate_values == {1: 0.5}


# ----------------------------------------------------------------------------- pace
@dataclasses.dataclass
class _C:
    key: str


def test_twins_wait_for_their_leader_and_follow_its_outcome() -> None:
    pace: Pace[_C] = Pace(budget=4)
    pace.started("a", 0)
    pace.started("b", 1)
    a2, b2, c = _C("a"), _C("b"), _C("c")
    assert pace.defer(a2) and pace.defer(b2) and not pace.defer(c)
    assert pace.waiting() and pace.room(counted=0, training=1)  # 0 + 1 + 2 waiting < 4
    assert not pace.room(counted=1, training=1)
    assert pace.release(known=set()) == []  # both leaders still in flight
    pace.ended("a")  # completed: its twin reuses the result
    pace.ended("b")  # did not complete: its twin trains
    assert pace.release(known={"a"}) == [a2]
    assert not pace.waiting() and pace.next_ready() == b2 and pace.next_ready() is None


def test_a_hopeless_space_and_a_spent_deadline_close_the_pace() -> None:
    pace: Pace[_C] = Pace(budget=10)
    assert not pace.closed()
    for _ in range(MAX_REJECTED_IN_A_ROW - 1):
        pace.rejected("s", "params 9 breaks params_max=1")
    pace.accepted()  # one within the constraints resets the streak
    for _ in range(MAX_REJECTED_IN_A_ROW - 1):
        pace.rejected("s", "params 9 breaks params_max=1")
    assert not pace.closed()
    pace.rejected("s", "params 9 breaks params_max=1")
    assert pace.closed() and f"{MAX_REJECTED_IN_A_ROW} architectures in a row" in pace.halted
    assert Pace[_C](budget=10, deadline=0.0).closed()
