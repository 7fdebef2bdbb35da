"""The fixed hypervolume reference point: hand-computed volumes, the reference a study stores
(chance accuracy, the constraint or the space's largest model) and what `nas status` prints."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import study_helpers as h

from nas.cost import estimate_cost
from nas_cli.main import main as nas_main
from search_spaces import SearchSpace
from studies import StudySpec, create_study, load_existing, run_study
from studies._progress import Progress
from studies.pareto import (
    fill_reference,
    hypervolume_history,
    nondominated_mask,
    normalized_hypervolume,
    pareto_sweep,
    scale_to_reference,
    to_minimization,
)
from studies.reference import largest_cost, study_reference, uniform_chance
from studies.store import StudyKey

ray_local = h.ray_local
ACC_PARAMS = ["maximize", "minimize"]
THREE = ["maximize", "minimize", "minimize"]


# ----------------------------------------------------------------------------- pure functions
def test_one_trial_is_the_product_of_its_scaled_objectives() -> None:
    # accuracy (0.82 - 0.1) / (1 - 0.1) = 0.8; params 1 - 50k / 200k = 0.75; madds 1 - 1/4
    value = normalized_hypervolume([[0.82, 50_000, 1e6]], THREE, [0.1, 200_000, 4e6])
    assert value == pytest.approx(0.8 * 0.75 * 0.75, abs=1e-12)


def test_two_trials_in_two_objectives() -> None:
    # g = (0.55, 0.75) and (0.9, 0.25): 0.55 * 0.75 + (0.9 - 0.55) * 0.25 = 0.5
    values = [[0.55, 100.0], [0.9, 300.0]]
    assert normalized_hypervolume(values, ACC_PARAMS, [0.0, 400.0]) == pytest.approx(0.5)
    assert hypervolume_history(values, ACC_PARAMS, [0.0, 400.0]) == pytest.approx(
        [0.4125, 0.5])
    # A dominated third trial changes nothing; one beyond the reference adds nothing.
    more = [*values, [0.5, 200.0], [0.99, 500.0]]
    assert normalized_hypervolume(more, ACC_PARAMS, [0.0, 400.0]) == pytest.approx(0.5)


def test_the_ideal_scores_one_and_the_reference_zero() -> None:
    assert normalized_hypervolume([[1.0, 0.0, 0.0]], THREE, [0.1, 10.0, 10.0]) == 1.0
    assert normalized_hypervolume([[0.1, 1.0, 1.0]], THREE, [0.1, 10.0, 10.0]) == 0.0
    assert normalized_hypervolume([[0.9, 10.0, 1.0]], THREE, [0.1, 10.0, 10.0]) == 0.0
    assert normalized_hypervolume([], THREE, [0.1, 10.0, 10.0]) == 0.0


def test_better_than_ideal_counts_as_ideal_and_keeps_the_front() -> None:
    # CIDEr-D may pass 1: both captioners score g = 1 on it, but the front is the values' own.
    values = np.array([[1.3, 40.0], [1.2, 40.0], [0.5, 10.0]])
    assert scale_to_reference(values, ACC_PARAMS, [0.0, 80.0])[:, 0].tolist() == [0, 0, 0.5]
    sweep = pareto_sweep(values, ACC_PARAMS, reference=[0.0, 80.0])
    assert sweep.front.tolist() == nondominated_mask(
        to_minimization(values, ACC_PARAMS)).tolist() == [True, False, True]
    # 1 * 0.5 + (0.5 - 0) ... g = (1, 0.5) and (0.5, 0.875): 0.5 + 0.5 * 0.375
    assert sweep.hypervolume == pytest.approx(0.5 + 0.5 * 0.375)


def test_missing_entries_come_from_the_trials() -> None:
    values = [[0.5, 10.0, 3.0], [0.7, 20.0, 5.0]]
    directions = ["maximize", "minimize", "minimize"]
    assert fill_reference([0.1, None, 8.0], values, directions).tolist() == pytest.approx(
        [0.1, 22.0, 8.0])
    assert fill_reference(None, values, directions).tolist() == pytest.approx([0.0, 22.0, 5.5])
    assert fill_reference(None, [], directions).tolist() == [0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="one entry per objective"):
        fill_reference([0.1], values, directions)
    # Without a stored reference, a single trial no longer scores the top of the scale.
    assert 0.0 < normalized_hypervolume(values[:1], directions) < 1.0


@pytest.mark.parametrize("seed", range(4))
def test_history_sweep_and_progress_agree(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = np.column_stack([rng.random(25), rng.integers(1, 100, 25), rng.random(25) * 9])
    reference = [0.1, 90.0, None]
    history = hypervolume_history(values, THREE, reference)
    assert all(0.0 <= v <= 1.0 for v in history)
    assert all(b >= a for a, b in itertools.pairwise(history))
    assert pareto_sweep(values, THREE, reference=reference).volumes == pytest.approx(history)
    bar = Progress(25, THREE, reference=reference, stream=io.StringIO())
    assert f"hypervolume {history[-1]:.4f}" in bar.line(25, 0, 0, values.tolist())


# ----------------------------------------------------------------------------- a study's reference
SPACE = SearchSpace.from_dict(h.SMALL_SPACE)


def _every_config_cost(key: str) -> int:
    choices = [[(k, v) for v in d.values()] for k, d in SPACE.arch.items()]
    sizes = []
    for combo in itertools.product(*choices):
        config, _ = SPACE.suggest(optuna.trial.FixedTrial(dict(combo)))
        sizes.append(int(getattr(estimate_cost(config, h.GEOMETRY), key)))
    return max(sizes)


@pytest.mark.parametrize("key", ["params", "madds"])
def test_largest_cost_is_the_largest_of_every_config(key: str) -> None:
    assert largest_cost(SPACE, h.GEOMETRY, key) == _every_config_cost(key)  # type: ignore[arg-type]


def test_reference_from_chance_constraints_and_the_space() -> None:
    spec = StudySpec.from_dict(h.study_dict(
        "ref", objectives=["accuracy", "params", "madds", "latency_ms"],
        constraints={"madds_max": 5e6}))
    assert uniform_chance(h.GEOMETRY) == 0.1
    assert study_reference(spec, SPACE, h.GEOMETRY, 0.1) == [
        0.1, float(_every_config_cost("params")), 5e6, None]
    limited = StudySpec.from_dict(h.study_dict(
        "ref", objectives=["accuracy", "params", "latency_ms"],
        constraints={"params_max": 3e4, "latency_ms_max": 20}))
    assert study_reference(limited, SPACE, h.GEOMETRY, 0.25) == [0.25, 3e4, 20.0]


def _status(url: str, name: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert nas_main(["status", name, "--storage", url, "--json"]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_one_trial_study_scores_below_one(tmp_path: Path, ray_local: None,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "one", objectives=["accuracy", "params", "madds"], budget={"trials": 1}))
    run = create_study(spec, url, geometry=h.GEOMETRY)
    largest = [_every_config_cost("params"), _every_config_cost("madds")]
    assert run.study.user_attrs[StudyKey.REFERENCE] == [0.1, *map(float, largest)]
    # As if created before references were stored: the run stores one, and says so.
    run.study.set_user_attr(StudyKey.REFERENCE, None)
    capsys.readouterr()
    run_study(load_existing("one", url, write=True), evaluator=h.instant, progress=False)
    assert "had no stored hypervolume reference" in capsys.readouterr().err
    study = optuna.load_study(study_name="one", storage=url)
    stored = study.user_attrs[StudyKey.REFERENCE]
    assert stored == [0.1, *map(float, largest)]  # the uniform chance of the given geometry
    (trial,) = study.best_trials
    accuracy, params, madds = trial.values
    expected = ((accuracy - 0.1) / 0.9) * (1 - params / largest[0]) * (1 - madds / largest[1])

    status = _status(url, "one", capsys)
    assert status["reference"] == dict(zip(["accuracy", "params", "madds"], stored,
                                           strict=True))
    assert status["reference_source"] == "stored"
    assert status["hypervolume"] == pytest.approx(expected, rel=1e-12)
    assert 0.0 < status["hypervolume"] < 1.0
    assert nas_main(["status", "one", "--storage", url]) == 0
    assert f"hypervolume {expected:.4f}" in capsys.readouterr().out

    # Without a stored reference, `nas status` derives one from the trials and says so.
    study.set_user_attr(StudyKey.REFERENCE, None)
    derived = _status(url, "one", capsys)
    assert derived["reference_source"] == "derived"
    assert derived["reference"]["params"] == pytest.approx(1.1 * params)
    assert derived["hypervolume"] == pytest.approx(accuracy * (1 - 1 / 1.1) ** 2, rel=1e-12)
    assert nas_main(["status", "one", "--storage", url]) == 0
    assert "derived from its trials" in capsys.readouterr().out
