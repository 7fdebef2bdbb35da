"""The searcher asks the next trial ahead of a free slot from ``ASK_AHEAD_FROM`` trials at once
(issue 34, item 3): at the end of a Tune step in which every slot is busy it asks, maps, costs
and records one trial, and the next ``suggest`` launches that trial without asking; the budget
counts it, a run that ends closes it, and below ``ASK_AHEAD_FROM`` nothing is asked ahead."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
from optuna.trial import TrialState

from studies import StudySpec, counted_trials, create_study, run_study
from studies._trials import StudyRun
from studies.searcher import ASK_AHEAD_FROM, StudyCallback, StudySearcher
from studies.store import TrialKey
from studies.tune_report import EpochResult, FinalResult

ray_local = h.ray_local

# The small space with a learning rate: every trial trains a result of its own (no twins).
SPACE = {**h.SMALL_SPACE, "train": {"lr": {"low": 1e-3, "high": 3e-3, "log": True}}}


def _run(tmp_path: Path, budget: int = 40) -> StudyRun:
    spec = StudySpec.from_dict(h.study_dict("ahead", space=SPACE, budget={"trials": budget}))
    return create_study(spec, f"sqlite:///{tmp_path / 's.db'}", geometry=h.GEOMETRY,
                        claim_folders=False)


def _searcher(run: StudyRun, pool: int = ASK_AHEAD_FROM, **kwargs: Any) -> StudySearcher:
    searcher = StudySearcher(run, h.GEOMETRY, **kwargs)
    searcher.pool = pool
    return searcher


def _fill(searcher: StudySearcher, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        assert isinstance(searcher.suggest(f"t{i}"), dict)


def _trials(run: StudyRun) -> list[optuna.trial.FrozenTrial]:
    return run.storage.get_all_trials(run.study._study_id, deepcopy=False)


def _complete(searcher: StudySearcher, trial_id: str) -> None:
    final = FinalResult("completed", value=0.5, seconds=1.0, epochs_reached=1,
                        epoch=EpochResult(epoch=1, metric="accuracy", value=0.5))
    searcher.on_trial_complete(trial_id, final.to_tune())


def test_with_every_slot_busy_the_next_trial_is_asked_ahead_and_a_freed_slot_takes_it(
        tmp_path: Path) -> None:
    run = _run(tmp_path)
    searcher = _searcher(run)
    callback = StudyCallback(searcher)
    _fill(searcher, ASK_AHEAD_FROM - 1)
    callback.on_step_end(0, [])  # a slot is free: Tune's next step asks through suggest
    assert searcher.ahead is None and len(_trials(run)) == ASK_AHEAD_FROM - 1
    _fill(searcher, 1, first=ASK_AHEAD_FROM - 1)
    callback.on_step_end(1, [])  # every slot busy: one is asked ahead, recorded, not launched
    ahead = searcher.ahead
    assert ahead is not None
    stored = run.storage.get_trial(ahead.trial._trial_id)
    assert stored.state == TrialState.RUNNING and len(_trials(run)) == ASK_AHEAD_FROM + 1
    assert stored.user_attrs[TrialKey.ARCH_ID] == ahead.attrs[TrialKey.ARCH_ID]
    assert TrialKey.TUNE_TRIAL not in stored.user_attrs
    callback.on_step_end(2, [])  # one ahead at most
    assert searcher.ahead is ahead and len(_trials(run)) == ASK_AHEAD_FROM + 1

    _complete(searcher, "t0")  # a slot is freed: suggest launches the trial asked ahead
    config = searcher.suggest("t-next")
    assert isinstance(config, dict) and config["number"] == ahead.trial.number
    assert searcher.ahead is None and len(_trials(run)) == ASK_AHEAD_FROM + 1
    assert run.storage.get_trial(ahead.trial._trial_id).user_attrs[TrialKey.TUNE_TRIAL] \
        == "t-next"
    assert searcher.live["t-next"] is ahead
    callback.on_step_end(3, [])  # every slot busy again: the next one is asked ahead
    assert searcher.ahead is not None and searcher.ahead is not ahead


def test_below_ask_ahead_from_nothing_is_asked_ahead(tmp_path: Path) -> None:
    assert ASK_AHEAD_FROM > 1
    run = _run(tmp_path)
    searcher = _searcher(run, pool=ASK_AHEAD_FROM - 1)
    _fill(searcher, ASK_AHEAD_FROM - 1)  # every slot of the smaller pool busy
    searcher.ask_ahead()
    assert searcher.ahead is None and len(_trials(run)) == ASK_AHEAD_FROM - 1


def test_the_budget_counts_the_trial_asked_ahead(tmp_path: Path) -> None:
    """With room for one trial more than the slots, it is the one asked ahead: the freed slot
    takes it and no trial is asked past the budget; with no room, none is asked ahead."""
    run = _run(tmp_path, budget=ASK_AHEAD_FROM + 1)
    searcher = _searcher(run)
    _fill(searcher, ASK_AHEAD_FROM)
    searcher.ask_ahead()
    ahead = searcher.ahead
    assert ahead is not None
    _complete(searcher, "t0")
    config = searcher.suggest("t-last")
    assert isinstance(config, dict) and config["number"] == ahead.trial.number
    searcher.ask_ahead()  # every slot busy, the budget's last trial launched
    assert searcher.ahead is None
    _complete(searcher, "t1")
    assert searcher.suggest("t-more") == "FINISHED"
    assert len(_trials(run)) == ASK_AHEAD_FROM + 1
    assert searcher.tally.counted == 2


def _asked_ahead(tmp_path: Path) -> tuple[StudyRun, StudySearcher, Any]:
    """A searcher with every slot of ``ASK_AHEAD_FROM`` busy and one trial asked ahead."""
    run = _run(tmp_path)
    searcher = _searcher(run)
    _fill(searcher, ASK_AHEAD_FROM)
    searcher.ask_ahead()
    assert searcher.ahead is not None
    return run, searcher, searcher.ahead


def test_a_run_that_ends_closes_the_trial_asked_ahead_and_enqueues_only_those_that_trained(
        tmp_path: Path) -> None:
    run, searcher, ahead = _asked_ahead(tmp_path)
    searcher.close()
    stored = run.storage.get_trial(ahead.trial._trial_id)
    assert stored.state == TrialState.FAIL
    assert "asked ahead" in stored.user_attrs[TrialKey.REASON]
    assert searcher.ahead is None
    states = [t.state for t in _trials(run)]
    assert TrialState.RUNNING not in states
    assert states.count(TrialState.FAIL) == ASK_AHEAD_FROM + 1  # interrupted, not counted
    # The trials that were training run again in the next run; the one asked ahead does not.
    assert states.count(TrialState.WAITING) == ASK_AHEAD_FROM
    assert searcher.tally.counted == 0


def test_past_the_deadline_a_freed_slot_does_not_start_the_trial_asked_ahead(
        tmp_path: Path) -> None:
    run, searcher, ahead = _asked_ahead(tmp_path)
    searcher.pace.deadline = -math.inf
    _complete(searcher, "t0")
    assert searcher.suggest("t-late") == "FINISHED"
    assert searcher.ahead is None
    assert run.storage.get_trial(ahead.trial._trial_id).state == TrialState.FAIL


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_run_of_eight_at_once_trains_the_trials_it_asked_ahead_and_holds_its_budget(
        tmp_path: Path, ray_local: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through Ray Tune (a quarter CPU a trial on this 2-CPU Ray: 8 at once, half a second
    an epoch): trials are asked ahead, each of them trains and completes, and the run ends
    with its budget counted and no trial more, none left running."""
    asked: list[int] = []
    real = StudySearcher.ask_ahead

    def ask_ahead(self: StudySearcher) -> None:
        before = self.ahead
        real(self)
        if self.ahead is not None and self.ahead is not before:
            asked.append(self.ahead.trial.number)

    monkeypatch.setattr(StudySearcher, "ask_ahead", ask_ahead)
    monkeypatch.setenv("NAS_FAKE_SLEEP", "0.5")
    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "eight", space=SPACE, budget={"trials": 24}, resources={"cpu": 0.25},
        tune={"storage_path": str(tmp_path / "tune")}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    run_study(run, evaluator=h.slow, progress=False)
    trials = h.load(url, "eight")
    assert counted_trials(trials) == 24 and len(trials) == 24
    assert asked, "no trial was asked ahead"
    by_number = {t.number: t for t in trials}
    for number in asked:
        assert by_number[number].state == TrialState.COMPLETE
        assert by_number[number].user_attrs[TrialKey.TUNE_TRIAL]
