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


# ----------------------------------------------------------------------------- batched writes
def _counting_commits(storage: RDBStorage) -> list[int]:
    import sqlalchemy as sa

    commits = [0]
    sa.event.listen(storage.engine, "commit", lambda *a: commits.__setitem__(0, commits[0] + 1))
    return commits


def test_a_trials_parameters_are_written_in_one_transaction_as_optuna_writes_them(
        tmp_path: Path) -> None:
    """Inside ``Asking.draw`` the parameters Optuna would commit one at a time are written
    together: one commit, and the trial read back holds the parameters and distributions a
    plain Optuna ask stores for the same draws (same seed)."""
    from studies.store._snapshot import Asking

    plain, _ = _study(tmp_path, "plain")
    batched, storage = _study(tmp_path, "batched")
    for study in (plain, batched):  # a sampler that writes nothing of its own while drawing
        study.sampler = optuna.samplers.RandomSampler(seed=5)
    asking = Asking(batched, storage)
    commits = _counting_commits(storage)
    for _ in range(6):
        expected = plain.ask()
        plain.tell(expected, _objective(expected))
        with asking.snapshot():
            trial = asking.ask()
            before = commits[0]
            values = asking.draw(lambda t=trial: _objective(t))  # type: ignore[misc]
            assert commits[0] - before == 1  # three parameters, one transaction
        batched.tell(trial, values)
        stored = storage.get_trial(trial._trial_id)
        assert stored.params == expected.params == trial.params
        assert stored.distributions == plain.trials[-1].distributions


class _Recording(optuna.samplers.RandomSampler):
    """A sampler that records its choice with the trial when asked, as the default one does
    (its gain, noise and seconds: ``studies.costaware``), through the storage's batched call."""

    def before_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        study._storage.set_trial_system_attrs(  # type: ignore[attr-defined]
            trial._trial_id, {"gain": 0.5, "noise": 0.25})


def test_what_a_sampler_records_when_asked_is_written_with_the_parameters(
        tmp_path: Path) -> None:
    """System attributes set while the snapshot is open: with the drawn parameters, in their
    one transaction; where nothing is drawn, when the snapshot closes; and dropped where the
    suggestion failed (its trial is given up)."""
    from studies.store._snapshot import Asking

    study, storage = _study(tmp_path, "recorded")
    study.sampler = _Recording(seed=1)
    asking = Asking(study, storage)
    commits = _counting_commits(storage)
    with asking.snapshot():
        trial = asking.ask()
        assert storage.get_trial(trial._trial_id).system_attrs == {}  # not yet written
        before = commits[0]
        asking.draw(lambda: _objective(trial))
        assert commits[0] - before == 1  # parameters and attributes, one transaction
    stored = storage.get_trial(trial._trial_id)
    assert stored.system_attrs == {"gain": 0.5, "noise": 0.25}
    assert set(stored.params) == {"x", "k", "n"}
    with asking.snapshot():
        undrawn = asking.ask()
    assert storage.get_trial(undrawn._trial_id).system_attrs == {"gain": 0.5, "noise": 0.25}
    with pytest.raises(RuntimeError), asking.snapshot():
        failed = asking.ask()
        raise RuntimeError("the suggestion failed")
    assert storage.get_trial(failed._trial_id).system_attrs == {}
    asking.snapshots.set_trial_system_attrs(failed._trial_id, {"gain": 0.5, "noise": 0.25})
    assert storage.get_trial(failed._trial_id).system_attrs == {"gain": 0.5, "noise": 0.25}


def test_a_parameter_against_another_distribution_of_its_name_is_refused(
        tmp_path: Path) -> None:
    """The check Optuna makes on each parameter (the distribution earlier trials hold under
    its name) is made on the batched write too, from the snapshot or the database."""
    from studies.store._snapshot import Asking

    study, storage = _study(tmp_path, "mixed")
    asking = Asking(study, storage)
    with asking.snapshot():
        first = asking.ask()
        asking.draw(lambda: first.suggest_int("n", 1, 8))
    study.tell(first, [1.0, 1.0])
    with asking.snapshot():
        second = asking.ask()
        with pytest.raises(ValueError, match="Cannot set different distribution kind"):
            asking.draw(lambda: second.suggest_categorical("n", ["a", "b"]))
    assert storage.get_trial(second._trial_id).params == {}


def test_a_draw_whose_write_failed_writes_its_parameters_on_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lost connection at the batched write: the draw is retried (its trial returns the
    values it drew without writing them again) and the same parameters are written once."""
    import studies.store._snapshot as snapshot_module
    from studies.store._snapshot import Asking
    from studies.store.storage import StorageError

    study, storage = _study(tmp_path, "retry")
    asking = Asking(study, storage)
    real, calls = snapshot_module.set_trial_params, []

    def flaky(rdb: RDBStorage, trial_id: int, params: list[object], **kwargs: object) -> None:
        calls.append(len(params))
        if len(calls) == 1:
            raise StorageError("the connection was lost", transient=True)
        real(rdb, trial_id, params, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(snapshot_module, "set_trial_params", flaky)
    monkeypatch.setattr("studies.store.storage._FIRST_DELAY", 0.01)
    monkeypatch.setattr("studies.store.storage._connection_lost", lambda url, cause: True)
    with asking.snapshot():
        trial = asking.ask()
        values = asking.draw(lambda: _objective(trial))
    assert calls == [3, 3]
    study.tell(trial, values)
    assert storage.get_trial(trial._trial_id).params == trial.params


def test_an_asked_trial_is_read_once_and_a_write_makes_it_read_again(tmp_path: Path) -> None:
    """The read that puts a new trial in the snapshot also opens it (``optuna.Trial`` reads
    it by id): one ``get_trial`` of the storage per ask; after any write, it is read again."""
    study, storage = _study(tmp_path, "reads")
    base = optuna.storages.get_storage(storage)
    asking, wrapped = asking_study(study, base, storage)
    reads = []
    real = base.get_trial
    base.get_trial = lambda trial_id: reads.append(trial_id) or real(trial_id)  # type: ignore[method-assign]
    with wrapped.snapshot():
        trial = asking.ask()
        assert reads == [trial._trial_id]
        wrapped.set_trial_system_attrs(trial._trial_id, {"a": 1, "b": [2.0]})
        assert wrapped.get_trial(trial._trial_id).system_attrs == {"a": 1, "b": [2.0]}
    assert reads == [trial._trial_id] * 2
