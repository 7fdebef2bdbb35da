"""Early-stopping decisions (the Tune scheduler, called directly) and the progress hypervolume."""

from __future__ import annotations

import random
from typing import Any

import pytest
from ray.tune.schedulers import TrialScheduler

from studies.asha import MultiObjectiveASHA, Rungs
from studies.pareto import hypervolume_history, normalized_hypervolume

CONTINUE, STOP = TrialScheduler.CONTINUE, TrialScheduler.STOP


class _Trial:
    """What the scheduler reads of a Tune trial: its id and its config."""

    def __init__(self, number: int, cost: float) -> None:
        self.trial_id = f"t{number}"
        self.config = {"number": number, "cost_vector": [cost]}


def _epoch(epoch: int, value: float | None) -> dict[str, Any]:
    return {"kind": "epoch", "epoch": epoch, "value": value}


def test_the_scheduler_stops_dominated_trials_at_a_rung() -> None:
    """Each trial's cost objectives come from its config, so a decision needs no registration
    that could arrive after the first report."""
    rungs = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"])
    stopped: list[tuple[str, int]] = []
    scheduler = MultiObjectiveASHA(rungs, on_stop=lambda trial_id, epoch: stopped.append(
        (trial_id, epoch)))
    t0, t1, t2, t3 = _Trial(0, 100.0), _Trial(1, 50.0), _Trial(2, 200.0), _Trial(3, 10.0)
    assert scheduler.on_trial_result(None, t0, _epoch(1, 0.8)) == CONTINUE
    assert scheduler.on_trial_result(None, t1, _epoch(1, 0.9)) == CONTINUE  # dominates t0
    assert scheduler.on_trial_result(None, t2, _epoch(1, 0.7)) == STOP  # dominated by both
    assert scheduler.on_trial_result(None, t3, _epoch(1, 0.5)) == CONTINUE  # the smallest
    assert scheduler.on_trial_result(None, t1, _epoch(3, 0.95)) == CONTINUE  # no rung at 3
    assert stopped == [("t2", 1)]
    # The final report of a trial and a report without a value decide nothing.
    assert scheduler.on_trial_result(None, t2, {"kind": "final", "epoch": 1, "value": 0.1}) \
        == CONTINUE
    assert scheduler.on_trial_result(None, t2, _epoch(1, None)) == CONTINUE


def test_with_samples_a_rung_stops_only_what_beats_the_validation_noise() -> None:
    """On 360 validation samples an accuracy of 0.12 against 0.10 is within one standard error
    of the difference (0.023): the costlier trial continues where exact dominance stops it; a
    peer better by 0.10 at no higher cost still stops it, as does any peer of an exact rung."""
    def decide(samples: int | None, first: float, second: float) -> bool:
        rungs = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"],
                      samples=samples)
        assert not rungs.should_stop(0, 1, [first, 10.0])
        return rungs.should_stop(1, 1, [second, 20.0])

    assert decide(None, 0.12, 0.10)  # exact: dominated, outside the best half
    assert not decide(360, 0.12, 0.10)  # 0.02 apart: within the noise
    assert decide(360, 0.20, 0.10)  # 0.10 apart: beyond it
    assert not decide(360, 0.10, 0.12)  # the costlier one is better: not dominated either way
    assert not decide(None, 0.10, 0.12)
    # One standard error of the difference of two accuracies p on n samples: sqrt(2 p (1-p) / n).
    edge = (0.5 * 0.5 / 100 * 2) ** 0.5  # 0.0707 at p = 0.5, n = 100
    assert not decide(100, 0.5 + edge - 0.01, 0.5)
    assert decide(100, 0.5 + edge + 0.03, 0.5)


def test_a_studys_rungs_know_its_validation_split(tmp_path) -> None:
    """The engine builds a study's rungs (and the default sampler's noise) with the size of the
    validation split its trials are measured on (digits: 360 of 1,797 images), and none for a
    study whose own evaluator measures accuracy."""
    import study_helpers as h

    from studies import StudySpec, create_study
    from studies._tune import _rebuild_rungs, validation_samples
    from trainers import get_task

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("v", fidelity={"epochs": 4, "early_stopping": "asha"}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    samples = validation_samples(run.spec)
    assert samples == len(get_task("digits").val) == 360
    assert _rebuild_rungs(run, samples).samples == 360
    own = StudySpec.from_dict(h.study_dict("o", evaluator="study_helpers:instant"))
    assert validation_samples(own) is None
    # A driver that cannot build the task (its files are elsewhere) compares exactly.
    missing = StudySpec.from_dict(h.study_dict(
        "m", task={"name": "coco-files", "root": str(tmp_path / "nowhere")}))
    assert validation_samples(missing) is None


@pytest.mark.parametrize("directions", [["maximize", "minimize"],
                                        ["maximize", "minimize", "minimize"]])
def test_the_progress_hypervolume_is_the_last_of_the_history(directions) -> None:
    rng = random.Random(0)
    values = [[rng.random() for _ in directions] for _ in range(30)]
    assert normalized_hypervolume(values, directions) == pytest.approx(
        hypervolume_history(values, directions)[-1])
    assert normalized_hypervolume([], directions) == 0.0


def test_a_rung_with_min_peers_stops_no_trial_before_it_holds_that_many() -> None:
    """``min_peers``: the first trials at a rung are judged against enough peers, not one."""
    eager = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"])
    patient = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"],
                    min_peers=3)
    arrivals = [(0, (0.9, 10.0)), (1, (0.5, 20.0)), (2, (0.4, 30.0))]
    assert [eager.should_stop(n, 1, v) for n, v in arrivals] == [False, True, True]
    assert [patient.should_stop(n, 1, v) for n, v in arrivals] == [False, False, True]


def test_without_keep_nondominated_a_rung_keeps_only_its_best_share() -> None:
    """``keep_nondominated=False``: a trial on the rung's front but outside its best ``1/eta``
    (by rank, then crowding) stops; by default every trial on the front continues."""
    arrivals = [(0, (0.9, 40.0)), (1, (0.8, 30.0)), (2, (0.7, 20.0)), (3, (0.6, 25.0))]
    kept = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"])
    ranked = Rungs(grace=1, eta=2, max_epochs=4, directions=["maximize", "minimize"],
                   keep_nondominated=False)
    assert [kept.should_stop(n, 1, v) for n, v in arrivals] == [False, False, False, True]
    # Each of trials 1 and 2 is on its rung's front but outside its best one (2 // 2, 3 // 2):
    # the front's ends are equally crowded and the earlier trial is ahead.
    assert [ranked.should_stop(n, 1, v) for n, v in arrivals] == [False, True, True, True]


def test_rungs_rebuilt_on_resume_read_costs_as_data(tmp_path) -> None:
    """The rung records a resume rebuilds come from the stored epochs and each trial's stored
    cost, read through ``studies.store.stored``: a cost another program wrote as something else is
    one line naming the study, trial and key, not a traceback."""
    import study_helpers as h

    from studies import StudySpec, create_study
    from studies._tune import _rebuild_rungs
    from studies.store import Status, StoredValueError, TrialKey
    from studies.store.storage import write_epoch

    url = f"sqlite:///{tmp_path / 's.db'}"
    spec = StudySpec.from_dict(h.study_dict("r", fidelity={"epochs": 4, "early_stopping": "asha"}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    trial = run.study.ask()
    trial.set_user_attr(TrialKey.STATUS, Status.STOPPED)
    trial.set_user_attr(TrialKey.COST, {"params": 1200, "madds": 5})
    write_epoch(run.storage, "r", trial.number, {"epoch": 1, "train_loss": 1.0,
                                                 "metric": "accuracy", "value": 0.5})
    params = float(h.load(url, "r")[0].user_attrs[TrialKey.COST]["params"])
    assert _rebuild_rungs(run, None).records == {1: {trial.number: (0.5, params)}}
    trial.set_user_attr(TrialKey.COST, "not a mapping")
    with pytest.raises(StoredValueError, match=r"`nas\.cost` of study 'r', trial 0 is not valid"):
        _rebuild_rungs(run, None)
