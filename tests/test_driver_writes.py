"""The driver's writes per trial, batched: an epoch's row and Optuna's intermediate value in
one transaction, a launched trial's attributes in one (issue 22, item 2)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy as sa
import study_helpers as h

from studies import StudySpec, create_study
from studies._trials import StudyRun
from studies.store import TrialKey, read_epochs
from studies.store.storage import _optuna_transaction


@pytest.fixture()
def run(tmp_path: Path) -> StudyRun:
    spec = StudySpec.from_dict(h.study_dict("writes"))
    return create_study(spec, f"sqlite:///{tmp_path / 's.db'}", geometry=h.GEOMETRY,
                        claim_folders=False)


class _Commits:
    def __init__(self, engine: sa.Engine) -> None:
        self.engine, self.n = engine, 0

    def __call__(self, *args: object) -> None:
        self.n += 1


@pytest.fixture()
def commits(run: StudyRun) -> Iterator[_Commits]:
    counter = _Commits(run.storage.engine)
    sa.event.listen(run.storage.engine, "commit", counter)
    yield counter
    sa.event.remove(run.storage.engine, "commit", counter)


def test_optunas_private_steps_that_batch_the_writes_are_there(run: StudyRun) -> None:
    """Fails where an Optuna version drops what ``_optuna_transaction`` and ``tell`` use (the
    writes would still be right, one commit each, but the batching would be gone)."""
    from optuna.study import _tell

    with _optuna_transaction(run.storage) as db:
        assert db is not None
    assert callable(_tell._tell_with_warning)


def test_an_ending_writes_the_kept_epochs_and_its_attributes_in_one_transaction(
        run: StudyRun, commits: _Commits, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept epochs (of this trial and of another one still running) and the ending's
    attributes in one transaction, then Optuna's tell: its read of the trial (its check that
    the trial runs; Optuna's storage commits its reads too) and its state, one each. The tell
    does not read the trial again after (``Study.tell``'s returned copy, unused here)."""
    ending, other = run.study.ask(), run.study.ask()
    storage = run.study._storage
    reads = {"n": 0}
    real_get_trial = storage.get_trial

    def get_trial(trial_id: int) -> optuna.trial.FrozenTrial:
        reads["n"] += 1
        return real_get_trial(trial_id)

    monkeypatch.setattr(storage, "get_trial", get_trial)
    commits.n = 0
    values = [0.5] + [100.0] * (len(run.spec.objectives) - 1)
    run.store.record_completed(
        run.study, ending, values, {TrialKey.SECONDS: 2.0},
        epochs=[(ending, {"epoch": 1, "value": 0.25}), (other, {"epoch": 1, "value": 0.75}),
                (ending, {"epoch": 2, "value": 0.5})])
    assert (commits.n, reads["n"]) == (3, 1)
    monkeypatch.undo()
    stored = run.storage.get_trial(ending._trial_id)
    assert stored.state == optuna.trial.TrialState.COMPLETE
    assert stored.values == values
    assert stored.intermediate_values == {1: 0.25, 2: 0.5}
    assert stored.user_attrs[TrialKey.SECONDS] == 2.0
    assert run.storage.get_trial(other._trial_id).intermediate_values == {1: 0.75}
    assert [(r["trial_number"], r["epoch"]) for r in read_epochs(run.storage.engine, "writes")] \
        == sorted([(ending.number, 1), (other.number, 1), (ending.number, 2)])


def test_a_trial_told_through_the_store_is_stored_as_study_tell_stores_it(
        run: StudyRun) -> None:
    """``studies.store.storage.tell`` (Optuna's tell without its closing read) against
    ``Study.tell``: the same state, values and sampler call, for each way a trial ends."""
    from studies.store.storage import tell

    seen: list[tuple[int, optuna.trial.TrialState]] = []
    sampler = run.study.sampler
    real_after = sampler.after_trial

    def after_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: optuna.trial.TrialState, values: object) -> None:
        seen.append((trial.number, state))
        real_after(study, trial, state, values)

    sampler.after_trial = after_trial  # type: ignore[method-assign]
    values = [0.5] + [100.0] * (len(run.spec.objectives) - 1)
    for state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED,
                  optuna.trial.TrialState.FAIL):
        ours, optunas = run.study.ask(), run.study.ask()
        told = values if state == optuna.trial.TrialState.COMPLETE else None
        tell(run.study, ours, told, state)
        run.study.tell(optunas, told, state=state)
        a, b = (run.storage.get_trial(t._trial_id) for t in (ours, optunas))
        assert (a.state, a.values) == (b.state, b.values) == (state, told)
        assert seen[-2:] == [(ours.number, state), (optunas.number, state)]
    with pytest.raises(ValueError, match="Cannot tell a FAIL trial"):  # told twice
        tell(run.study, ours.number, values, optuna.trial.TrialState.COMPLETE)


def test_an_epoch_is_one_transaction_and_a_resent_one_changes_nothing(
        run: StudyRun, commits: _Commits) -> None:
    trial = run.study.ask()
    commits.n = 0
    run.store.record_epoch(run.study, trial, {"epoch": 1, "train_loss": 0.5, "metric": "accuracy",
                              "value": 0.75, "seconds": 1.0, "extra": {"lr": 0.1}})
    assert commits.n == 1
    store, study = run.store, run.study
    store.record_epoch(study, trial, {"epoch": 1, "value": 0.25})  # re-sent (a retried trial)
    store.record_epoch(study, trial, {"epoch": 2, "value": float("nan")})  # no intermediate value
    rows = read_epochs(run.storage.engine, "writes", trial.number)
    assert [(r["epoch"], r["value"], r["extra"]) for r in rows][:1] == [(1, 0.75, {"lr": 0.1})]
    assert len(rows) == 2
    stored = run.storage.get_trial(trial._trial_id)
    assert stored.intermediate_values == {1: 0.75}


def test_a_launched_trial_writes_its_attributes_in_one_transaction(
        run: StudyRun, commits: _Commits) -> None:
    trial = run.study.ask()
    attrs = {TrialKey.ARCH_ID: "abc", TrialKey.TRAIN: {"epochs": 2}, TrialKey.COST: {"p": 1}}
    commits.n = 0
    run.store.record_launched(trial, "tune-1", attrs=attrs)
    assert commits.n == 1
    stored = run.storage.get_trial(trial._trial_id).user_attrs
    assert stored == {**attrs, TrialKey.TUNE_TRIAL: "tune-1"}


def test_without_the_private_steps_the_same_record_is_written(
        run: StudyRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback (Optuna's public calls) writes the same rows and values."""
    monkeypatch.setattr("studies.store.storage._OPTUNA_STEPS", ("_no_such_step",))
    trial = run.study.ask()
    run.store.record_epoch(run.study, trial, {"epoch": 1, "value": 0.5})
    run.store.record_epoch(run.study, trial, {"epoch": 1, "value": 0.9})
    run.store.record_launched(trial, "tune-2", attrs={TrialKey.ARCH_ID: "x"})
    stored = run.storage.get_trial(trial._trial_id)
    assert stored.intermediate_values == {1: 0.5}
    assert stored.user_attrs == {TrialKey.ARCH_ID: "x", TrialKey.TUNE_TRIAL: "tune-2"}
    assert len(read_epochs(run.storage.engine, "writes", trial.number)) == 1
    assert isinstance(run.study, optuna.Study)


def test_the_memory_estimate_sent_with_a_trial_is_not_computed_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The searcher estimates a trial's memory from the profile costing its architecture gave
    (``cost_and_memory``: one pass) and sends it as ``memory_estimate``; Tune's copy of the
    TrialResources asks for the same memory without building the architecture again. Without
    a sent estimate, TrialResources profiles an architecture once (its cache) and gives the
    same figure as ``nas.memory.estimate_training_memory``."""
    import copy

    import nas.memory
    from nas.config import ArchConfig
    from nas.cost import cost_and_memory
    from studies.cluster import TRAINING_WORKER_BASELINE_BYTES, TrialResources
    from studies.spec import Resources

    arch_config = ArchConfig.from_dict({**h.SMALL_SPACE["base"], "groups": 1})
    settings = {"batch_size": 32, "eval_batch_size": 64}
    config = {"arch": arch_config.to_dict(), "settings": settings}
    resources = TrialResources(Resources(cpu=1), TRAINING_WORKER_BASELINE_BYTES, h.GEOMETRY,
                               64 * 2**30)
    tunes_copy = copy.deepcopy(resources)
    expected = nas.memory.estimate_training_memory(arch_config, h.GEOMETRY, 32,
                                                   eval_batch_size=64)
    _, profile = cost_and_memory(arch_config, h.GEOMETRY)
    sent_estimate = resources.from_profile(profile, settings)
    assert sent_estimate == expected > 0
    builds = {"n": 0}
    real = nas.memory.memory_profile

    def counted(*args: object, **kwargs: object) -> nas.memory.MemoryProfile:
        builds["n"] += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(nas.memory, "memory_profile", counted)
    sent = {**config, "memory_estimate": sent_estimate}
    assert tunes_copy.memory(sent) == resources.memory(sent) == resources.memory(config)
    assert builds["n"] == 1  # resources.memory(config): profiled once, for the check above
    assert resources.estimate(dict(config)) == expected
    assert resources.estimate({**config, "settings": {"batch_size": 64}}) > expected
    assert builds["n"] == 1  # one profile per architecture serves every batch size
    gpu = TrialResources(Resources(cpu=1, gpu=0.5), TRAINING_WORKER_BASELINE_BYTES,
                         h.GEOMETRY, 64 * 2**30)
    assert gpu.from_profile(profile, settings) == 0 == gpu.estimate(config)


class _TuneTrial:
    """The Tune trial ``_launched`` launched, as Tune's callbacks are given it."""

    trial_id = "t1"


def _launched(run: StudyRun) -> tuple[Any, Any, Any]:
    """A searcher and its callback over ``run``, with one trial asked and launched as Tune
    trial ``t1``."""
    from studies.searcher import StudyCallback, StudySearcher

    searcher = StudySearcher(run, h.GEOMETRY)
    callback = StudyCallback(searcher)
    candidate = searcher._ask()
    assert candidate is not None
    searcher._launch("t1", candidate)
    return searcher, callback, candidate


def test_epoch_reports_are_written_at_the_steps_end_and_before_the_trials_ending(
        run: StudyRun) -> None:
    """The searcher keeps an epoch report until the end of Tune's step (Tune sends the trial
    its next step first), then writes the rows in the order received, at most once in
    ``EPOCH_WRITE_SECONDS``; a trial's kept epochs, the last one carried by its final report
    included, are written with its ending."""
    from studies.tune_report import EpochResult, FinalResult

    searcher, callback, candidate = _launched(run)

    def epoch(n: int) -> EpochResult:
        return EpochResult(epoch=n, metric="accuracy", value=n / 8, train_loss=1.0 / n)

    def rows() -> list[tuple[int, float]]:
        return [(r["epoch"], r["value"]) for r in read_epochs(run.storage.engine, "writes")]

    for n in (1, 2):
        callback.on_trial_result(0, [], _TuneTrial(), epoch(n).to_tune())
    assert rows() == []  # kept: the step has not ended
    callback.on_step_end(0, [])
    assert rows() == [(1, 0.125), (2, 0.25)]
    callback.on_trial_result(0, [], _TuneTrial(), epoch(3).to_tune())
    callback.on_step_end(0, [])  # within EPOCH_WRITE_SECONDS of the last write: kept
    assert rows() == [(1, 0.125), (2, 0.25)]
    final = FinalResult("completed", value=0.35, epoch=epoch(4), epochs_reached=4).to_tune()
    callback.on_trial_result(0, [], _TuneTrial(), final)
    searcher.on_trial_complete("t1", final)  # its kept epochs with its ending
    assert rows() == [(1, 0.125), (2, 0.25), (3, 0.375), (4, 0.5)]
    trial = run.storage.get_trial(candidate.trial._trial_id)
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.intermediate_values == {1: 0.125, 2: 0.25, 3: 0.375, 4: 0.5}


def test_a_trial_whose_ending_cannot_be_written_is_closed_with_the_run(
        run: StudyRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ending's transaction (its kept epochs and attributes) fails as on a full disk: the
    run's fault is set, and the trial, still running in the database, is closed as
    interrupted when the run closes (not left RUNNING)."""
    import studies.store.record as record_module
    from studies.store import StorageError
    from studies.tune_report import EpochResult, FinalResult

    searcher, callback, candidate = _launched(run)

    def full(*args: object, **kwargs: object) -> int:
        raise StorageError("database or disk is full")

    monkeypatch.setattr(record_module, "write_epochs", full)
    last = EpochResult(epoch=1, metric="accuracy", value=0.5, train_loss=1.0)
    final = FinalResult("completed", value=0.5, epoch=last, epochs_reached=1).to_tune()
    callback.on_trial_result(0, [], _TuneTrial(), final)
    searcher.on_trial_complete("t1", final)
    assert "database or disk is full" in searcher.fault
    searcher.close()
    stored = run.storage.get_trial(candidate.trial._trial_id)
    assert stored.state == optuna.trial.TrialState.FAIL  # interrupted is stored as FAIL
    assert stored.user_attrs[TrialKey.STATUS] == "interrupted"
