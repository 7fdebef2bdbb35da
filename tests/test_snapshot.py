"""studies.store._snapshot: one read of the study's trials per suggestion, the same draws."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import TrialState

from studies.store._snapshot import SnapshotStorage, asking_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(trial: optuna.Trial) -> tuple[float, float]:
    x = trial.suggest_float("x", 0.0, 1.0)
    k = trial.suggest_categorical("k", ["a", "b", "c"])
    n = trial.suggest_int("n", 1, 8)
    return x + n, float(len(k)) - x


def _study(path: Path, name: str) -> tuple[optuna.Study, RDBStorage]:
    storage = RDBStorage(f"sqlite:///{path / (name + '.db')}")
    study = optuna.create_study(study_name=name, storage=storage,
                                directions=["maximize", "minimize"],
                                sampler=optuna.samplers.NSGAIISampler(population_size=4, seed=3))
    return study, storage


def _draws(study: optuna.Study, told: optuna.Study, asking: SnapshotStorage | None,
           n: int) -> list[dict[str, object]]:
    """``n`` trials asked through ``study`` (in a snapshot where one is given), told through
    ``told``; their parameters."""
    out = []
    for _ in range(n):
        if asking is None:
            trial = study.ask()
            values = _objective(trial)
        else:
            with asking.snapshot():
                trial = study.ask()
                values = _objective(trial)
        told.tell(trial, values)
        out.append(dict(trial.params))
    return out


def test_the_snapshot_implements_every_abstract_method_of_optunas_storage() -> None:
    """Fails (TypeError: abstract methods) where an Optuna version adds one to BaseStorage."""
    base = optuna.storages.InMemoryStorage()
    wrapped = SnapshotStorage(base)
    assert isinstance(wrapped, BaseStorage)
    missing = [m for m in BaseStorage.__abstractmethods__ if m not in vars(SnapshotStorage)]
    assert not missing


def test_one_read_of_all_trials_per_suggestion_and_the_same_draws(tmp_path: Path) -> None:
    """NSGA-II past its first generation asks through the snapshot with one read of the
    study's trials per suggestion (Optuna alone reads them several times), and draws exactly
    what the study draws without it (same seed, same history)."""
    plain, _ = _study(tmp_path, "plain")
    counting = SnapshotStorage(optuna.storages.get_storage(plain._storage))  # type: ignore[attr-defined]
    plain_counted = optuna.Study(study_name="plain", storage=counting, sampler=plain.sampler)
    expected = _draws(plain_counted, plain, None, 16)
    reads_without = counting.reads

    snap, storage = _study(tmp_path, "snap")
    asking, wrapped = asking_study(snap, optuna.storages.get_storage(storage))
    got = _draws(asking, snap, wrapped, 16)
    assert got == expected
    assert wrapped.reads == 16  # one per suggestion
    assert reads_without > 2 * 16  # what it saves: Optuna's own reads per suggestion


def test_a_waiting_trial_is_taken_once_and_shows_running_in_the_snapshot(
        tmp_path: Path) -> None:
    study, storage = _study(tmp_path, "queue")
    study.enqueue_trial({"x": 0.25, "k": "b", "n": 3})
    asking, wrapped = asking_study(study, optuna.storages.get_storage(storage))
    with wrapped.snapshot():
        trial = asking.ask()
        assert trial.suggest_float("x", 0.0, 1.0) == 0.25
        seen = wrapped.get_all_trials(asking._study_id, deepcopy=False)
        assert [(t.number, t.state) for t in seen] == [(0, TrialState.RUNNING)]
        other = asking.ask()  # the queue is empty now: a new trial, also in the snapshot
        seen = wrapped.get_all_trials(asking._study_id, deepcopy=False,
                                      states=(TrialState.RUNNING,))
        assert [t.number for t in seen] == [0, 1] and other.number == 1
    assert wrapped.reads == 1
    study.tell(trial, _objective(trial))
    study.tell(other, state=TrialState.FAIL)
    # Outside a snapshot every read goes to the storage and sees the study as it is now.
    states = [t.state for t in wrapped.get_all_trials(asking._study_id)]
    assert states == [TrialState.COMPLETE, TrialState.FAIL] and wrapped.reads == 2


def test_a_snapshot_does_not_outlive_its_block(tmp_path: Path) -> None:
    study, storage = _study(tmp_path, "scope")
    _, wrapped = asking_study(study, optuna.storages.get_storage(storage))
    with pytest.raises(RuntimeError), wrapped.snapshot():
        wrapped.get_all_trials(study._study_id)
        raise RuntimeError("the suggestion failed")
    study.tell(study.ask(), state=TrialState.FAIL)
    assert len(wrapped.get_all_trials(study._study_id)) == 1
