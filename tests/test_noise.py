"""A front that knows its noise: ``studies.noise`` on hand-made points, and a real seeded
promotion (``nas promote --seeds 2``) of a fake-evaluator study read back by ``nas pareto``.

The fake evaluator of ``study_helpers`` hashes the training settings, seed included, so each
seed of a promoted trial scores differently.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

import optuna
import pytest
import study_helpers as h
from dashboard_helpers import linked_studies
from optuna.trial import TrialState

from dashboard import create_app
from dashboard.layout import PARETO_3D, study_href
from dashboard.testing import (
    array_values,
    components,
    first_render,
    view_figure,
)
from nas.errors import ConfigError
from nas_cli._common import format_agreement
from nas_cli.main import main as nas_main
from studies import StudySpec, create_study, run_study
from studies.fidelity import (
    TARGET_GAP,
    meets_target,
    noise_ceiling,
    replicate,
    resolved_pairs,
    target_chance,
)
from studies.noise import noisy_front, seed_spread, spread_of, within_noise
from studies.promote import plan_promotion
from studies.store import StoredValueError, StudyKey, StudyStore, TrialKey, trial_attrs

pytestmark = [pytest.mark.timeout(600)]
ray_local = h.ray_local
MAX_MIN = ["maximize", "minimize"]  # accuracy, params


# ----------------------------------------------------------------------------- within_noise
def test_a_neighbour_cheaper_and_as_accurate_within_the_noise_marks_a_point() -> None:
    # p (index 1) costs more than q (index 0) and is more accurate by 0.02: with accuracy stds
    # of 0.02 each the noise between them is 0.028, so p does not stand out from q. q is the
    # cheapest: nothing costs less, so it stands out.
    means = [[0.80, 100.0], [0.82, 200.0]]
    stds = [[0.02, 0.0], [0.02, 0.0]]
    assert within_noise(means, stds, MAX_MIN) == [None, 0]


def test_a_lead_beyond_the_noise_survives() -> None:
    # The same points with stds of 0.005: noise 0.0071 < 0.02, p's lead is decisive.
    means = [[0.80, 100.0], [0.82, 200.0]]
    stds = [[0.005, 0.0], [0.005, 0.0]]
    assert within_noise(means, stds, MAX_MIN) == [None, None]


def test_the_noise_is_the_combined_std() -> None:
    # A lead of exactly sqrt(0.375**2 + 0.5**2) = 0.625 (all exact in binary) is decisive;
    # a hair less is not.
    stds = [[0.375, 0.0], [0.5, 0.0]]
    assert within_noise([[0.25, 1.0], [0.875, 2.0]], stds, MAX_MIN) == [None, None]
    assert within_noise([[0.25, 1.0], [0.8749, 2.0]], stds, MAX_MIN) == [None, 0]


def test_costs_decide_when_neither_costs_no_more() -> None:
    # Three objectives: p has fewer params, q fewer MAdds. Accuracy within the noise, yet
    # each has a decisive (deterministic) cost advantage over the other: both stand out.
    means = [[0.80, 100.0, 900.0], [0.81, 200.0, 800.0]]
    stds = [[0.05, 0.0, 0.0], [0.05, 0.0, 0.0]]
    assert within_noise(means, stds, ["maximize", "minimize", "minimize"]) == [None, None]


def test_a_dominated_point_and_identical_points_are_within_the_noise() -> None:
    # Point 2 is dominated outright by point 0 (cheaper, more accurate); 0 and 1 are equal.
    means = [[0.9, 100.0], [0.9, 100.0], [0.7, 300.0]]
    stds = [[0.0, 0.0]] * 3
    assert within_noise(means, stds, MAX_MIN) == [1, 0, 0]


def test_no_spread_means_plain_dominance() -> None:
    # Stds of 0: any lead is decisive, so only dominated points are marked.
    means = [[0.80, 100.0], [0.8001, 200.0], [0.79, 150.0]]
    stds = [[0.0, 0.0]] * 3
    assert within_noise(means, stds, MAX_MIN) == [None, None, 0]


def test_within_noise_refuses_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="One std per mean"):
        within_noise([[0.8, 1.0]], [], MAX_MIN)
    with pytest.raises(ValueError, match="needs 2 values"):
        within_noise([[0.8]], [[0.0]], MAX_MIN)
    with pytest.raises(ValueError, match="direction"):
        within_noise([[0.8, 1.0]], [[0.0, 0.0]], ["maximize", "up"])


# ----------------------------------------------------------------------------- spread_of
def _promoted(number: int, values: list[float], source: int | None,
              state: TrialState = TrialState.COMPLETE) -> optuna.trial.FrozenTrial:
    attrs = {} if source is None else {TrialKey.SOURCE_TRIAL: source,
                                       TrialKey.SOURCE_VALUE: 0.5}
    t = optuna.trial.create_trial(state=state, values=values if state == TrialState.COMPLETE
                                  else None, user_attrs=attrs)
    t.number = number
    return t


def test_spread_of_groups_the_seeds_of_each_source_trial() -> None:
    trials = [_promoted(0, [0.81, 10.0], 3), _promoted(1, [0.84, 10.0], 3),
              _promoted(2, [0.90, 10.0], 3), _promoted(3, [0.70, 20.0], 5),
              _promoted(4, [0.0, 0.0], 5, TrialState.FAIL),  # not counted
              _promoted(5, [0.1, 1.0], None)]  # no source: not a promoted trial
    spread = spread_of(trials, ["accuracy", "params"])
    assert sorted(spread) == [3, 5]
    s = spread[3]
    assert s.seeds == 3 and s.mean == pytest.approx(0.85)
    assert s.std == pytest.approx(statistics.stdev([0.81, 0.84, 0.90]))
    assert (s.min, s.max) == (0.81, 0.90) and s.means == pytest.approx((0.85, 10.0))
    one = spread[5]
    assert one.seeds == 1 and one.std is None and one.mean == 0.70
    assert spread_of(trials, ["params", "madds"]) == {}  # no accuracy: no spread


def test_a_stored_seed_is_parsed() -> None:
    assert trial_attrs("s", 0, {TrialKey.SEED: 7}).seed == 7
    for bad in ("7", -1, 2**32, 1.5):
        with pytest.raises(StoredValueError, match=r"nas\.seed"):
            trial_attrs("s", 0, {TrialKey.SEED: bad})


# ----------------------------------------------------------------------------- a promotion
def _source(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "src", objectives=["accuracy", "params", "madds"], budget={"trials": 6},
        evaluator="study_helpers:instant", seed=11))
    run_study(create_study(spec, url, geometry=h.GEOMETRY), progress=False)
    return url


def test_bad_seeds_are_refused_before_anything_is_written(tmp_path: Path, ray_local: None,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    url = _source(tmp_path)
    with pytest.raises(ConfigError, match="--seeds >= 1"):
        plan_promotion("src", url, seeds=0)
    capsys.readouterr()
    assert nas_main(["promote", "src", "--seeds", "0", "--evaluator", "study_helpers:instant",
                     "--storage", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--seeds >= 1" in err[0]
    assert {s.study_name for s in optuna.get_all_study_summaries(url)} == {"src"}


def test_a_seeded_promotion_stores_each_seed_and_pareto_shows_the_spread(
        tmp_path: Path, ray_local: None, capsys: pytest.CaptureFixture[str]) -> None:
    url = _source(tmp_path)
    plan = plan_promotion("src", url, top=2, epochs=3, seeds=2)
    chosen = [t.number for t in plan.chosen]
    assert plan.spec.budget.trials == 2 * len(chosen)
    capsys.readouterr()
    assert nas_main(["promote", "src", "--top", "2", "--epochs", "3", "--seeds", "2",
                     "--evaluator", "study_helpers:instant", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "seeded front trials stand out from the seed noise of 'src-promoted'" in out

    promoted = optuna.load_study(study_name="src-promoted", storage=url)
    trials = promoted.get_trials(states=(TrialState.COMPLETE,))
    # Two trainings of each chosen trial, with the study's seed and the next, in its settings.
    pairs = sorted((t.user_attrs[TrialKey.SOURCE_TRIAL], t.user_attrs[TrialKey.SEED],
                    t.user_attrs[TrialKey.TRAIN]["seed"]) for t in trials)
    assert pairs == sorted((n, s, s) for n in chosen for s in (11, 12))
    by_source: dict[int, list[float]] = {}
    for t in trials:
        by_source.setdefault(t.user_attrs[TrialKey.SOURCE_TRIAL], []).append(t.values[0])
    assert all(len(set(v)) == 2 for v in by_source.values())  # the seeds differ

    spread = seed_spread("src-promoted", StudyStore(optuna.storages.RDBStorage(url)))
    assert sorted(spread) == sorted(chosen)
    for n, acc in by_source.items():
        s = spread[n]
        assert s.seeds == 2 and s.mean == pytest.approx(statistics.fmean(acc))
        assert s.std == pytest.approx(statistics.stdev(acc))
        assert (s.min, s.max) == (min(acc), max(acc))
    # The rank agreement pairs each source trial once, with its seeds' mean, and says how far
    # the seeds' own noise lets a proxy agree with that mean.
    stored = promoted.user_attrs[StudyKey.FIDELITY]
    assert stored["pairs"] == len(chosen)
    ceiling = noise_ceiling([by_source[n] for n in sorted(by_source)])
    assert ceiling is not None and stored["noise_ceiling"]["seeds"] == 2
    assert stored["noise_ceiling"]["seed_std"] == pytest.approx(ceiling.seed_std)
    assert (f"against the mean of 2 seeds, the seed noise caps tau near "
            f"{stored['noise_ceiling']['noise_free']:+.3f} for a noise-free proxy") in out
    # And the pairs that mean resolves, with how many of them the proxy orders as it does.
    resolved = resolved_pairs([by_source[n] for n in sorted(by_source)])
    assert resolved is not None
    proxy = {t.user_attrs[TrialKey.SOURCE_TRIAL]: t.user_attrs[TrialKey.SOURCE_VALUE]
             for t in trials}
    kept = stored["resolved"]
    assert (kept["seeds"], kept["pairs"], kept["of"]) == (2, len(resolved.pairs), resolved.of)
    assert kept["proxy"] == resolved.agreeing([proxy[n] for n in sorted(by_source)])
    assert (f"the pairs the promoted accuracy resolves (means {resolved.margin:.4f} or more "
            f"apart over 2 seeds): {len(resolved.pairs)} of {resolved.of}; ordered as it orders "
            f"them by the proxy {kept['proxy']:g}") in out
    # And the target: the bar below one more training's tau, the proxy's verdict on it, and how
    # often one more training itself meets it (the same bootstrap, costs as stored).
    seeds = [by_source[n] for n in sorted(by_source)]
    source_costs = {t.user_attrs[TrialKey.SOURCE_TRIAL]: t.user_attrs[TrialKey.COST]
                    for t in trials}
    costs = [[float(source_costs[n][k]) for n in sorted(by_source)] for k in ("params", "madds")]
    twin = replicate(seeds, costs)
    target = stored["target"]
    assert twin is not None and target["gap"] == TARGET_GAP
    assert target["bar"] == pytest.approx(twin.ceiling - TARGET_GAP)
    assert target["meets"] == meets_target(
        stored["kendall_tau"], twin.ceiling,
        [stored["params_kendall_tau"], stored["madds_kendall_tau"]])
    assert target["one_seed_meets"] == pytest.approx(target_chance([twin], pooled=False))
    assert (f"the target (tau {target['bar']:+.3f} or more, within 0.1 of one more training, and "
            f"above the cost alone): the proxy {'meets' if target['meets'] else 'misses'} it; "
            f"one more training of each trial meets it in "
            f"{100 * target['one_seed_meets']:.0f}% of its seeds' simulated noise") in out

    capsys.readouterr()
    assert nas_main(["pareto", "src", "--storage", url, "--json"]) == 0
    front = json.loads(capsys.readouterr().out)
    source = optuna.load_study(study_name="src", storage=url)
    assert [t["number"] for t in front] == sorted(t.number for t in source.best_trials)
    means = [[spread[n].means[0], spread[n].means[1], spread[n].means[2]] for n in sorted(spread)]
    stds = [[spread[n].std or 0.0, 0.0, 0.0] for n in sorted(spread)]
    marks = dict(zip(sorted(spread), within_noise(means, stds,
                                                  ["maximize", "minimize", "minimize"]),
                     strict=True))
    for row in front:
        assert set(row) >= {"number", "values", "arch_id", "arch", "status"}
        assert row["noise_from"] == "src-promoted"
        n = row["number"]
        if n not in spread:
            assert row["seeds"] == 0 and row["within_noise"] is None
            continue
        assert row["seeds"] == 2
        assert row["accuracy_mean"] == pytest.approx(spread[n].mean)
        assert row["accuracy_std"] == pytest.approx(spread[n].std)
        assert (row["accuracy_min"], row["accuracy_max"]) == (spread[n].min, spread[n].max)
        neighbour = marks[n]
        assert row["within_noise"] is (neighbour is not None)
        assert row["noise_neighbour"] == (None if neighbour is None
                                          else sorted(spread)[neighbour])
    assert any(row["seeds"] == 2 for row in front)

    assert nas_main(["pareto", "src", "--storage", url]) == 0
    text = capsys.readouterr().out
    assert "promoted accuracy, mean ± std (seeds)" in text
    first = next(row for row in front if row["seeds"] == 2)
    assert f"{first['accuracy_mean']:.4f} ± {first['accuracy_std']:.4f} (2)" in text
    assert not math.isnan(first["accuracy_std"])


def test_one_seed_is_todays_promotion(tmp_path: Path, ray_local: None,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    url = _source(tmp_path)
    plan = plan_promotion("src", url, top=2, epochs=3)
    assert plan.seeds == 1 and plan.spec.budget.trials == len(plan.chosen)
    assert all(TrialKey.SEED not in links for _, links in plan.enqueued())
    assert nas_main(["promote", "src", "--top", "2", "--epochs", "3", "--evaluator",
                     "study_helpers:instant", "--storage", url]) == 0
    promoted = optuna.load_study(study_name="src-promoted", storage=url)
    assert {t.user_attrs[TrialKey.TRAIN]["seed"] for t in promoted.trials} == {11}
    capsys.readouterr()
    assert nas_main(["pareto", "src", "--storage", url, "--json"]) == 0
    front = json.loads(capsys.readouterr().out)
    assert front and all(set(row) == {"number", "values", "arch_id", "arch", "status"}
                         for row in front)


# ----------------------------------------------------------------------------- the dashboard
# Trial 1 is 0.01 more accurate than the cheaper trial 0 on average, with seed stds of
# 0.0141 each: within the noise. Trial 2 leads by 0.135: it stands out.
SEEDS = [[0.80, 0.82], [0.81, 0.83], [0.95, 0.96]]


def seeded_promotion(url: str) -> None:
    """A source study ``src`` (accuracy, params; its MAdds stored as costs) with a seeded
    promotion of its three trials (``SEEDS``, as nas promote --seeds 2 links them), and a study
    ``plain`` of the same trials without one."""
    source, promoted = linked_studies(url)
    plain = optuna.create_study(storage=url, study_name="plain",
                                directions=["maximize", "minimize"])
    plain.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
    proxy = [0.80, 0.82, 0.95]
    for i, (p, accs) in enumerate(zip(proxy, SEEDS, strict=True)):
        cost = {"params": 1000 * (i + 1), "params_matrix": 1000 * (i + 1),
                "madds": 50_000 * (3 - i)}
        for s in (source, plain):
            s.add_trial(optuna.trial.create_trial(values=[p, 1000.0 * (i + 1)],
                                                  user_attrs={TrialKey.COST: cost}))
        for seed, acc in enumerate(accs):
            promoted.add_trial(optuna.trial.create_trial(
                values=[acc, 1000.0 * (i + 1)],
                user_attrs={TrialKey.SOURCE_TRIAL: i, TrialKey.SOURCE_VALUE: p,
                            TrialKey.SEED: seed}))


def test_the_dashboards_front_draws_the_seed_spread(tmp_path: Path) -> None:
    """A source study with a seeded promotion (as nas promote --seeds 2 links them): the
    front has error bars of each trial's seed std on accuracy, and the point within the noise
    is a trace of its own; a study without one draws no error bars."""
    url = f"sqlite:///{tmp_path / 'noise.db'}"
    seeded_promotion(url)
    app = create_app(url, refresh_seconds=1)
    client = app.server.test_client()

    def front(name: str) -> dict[str, dict[str, Any]]:
        results = first_render(client, app, study_href(name))
        graph = next(c for c in components(results[0].response)
                     if c["props"].get("id") == "pareto-2d")
        return {t["name"]: t for t in graph["props"]["figure"]["data"]}

    traces = front("src")
    stands, noisy = traces["Pareto-optimal (2)"], traces[
        "Pareto-optimal, within the seed noise (1)"]
    # The page opens on params across, accuracy up (layout.front_axes).
    _assert_spread_on(stands, noisy, "y")
    assert "error_x" not in stands
    assert all("error_y" not in t and "error_x" not in t for t in front("plain").values())


def _assert_spread_on(stands: dict[str, Any], noisy: dict[str, Any], axis: str) -> None:
    """The seeded promotion's front traces: accuracy along ``axis`` with error bars of each
    trial's seed std, the point within the noise an open diamond naming its neighbour."""
    assert array_values(stands[axis]) == [0.80, 0.95]
    assert stands[f"error_{axis}"]["visible"] is True
    assert array_values(stands[f"error_{axis}"]["array"]) == pytest.approx(
        [statistics.stdev(SEEDS[0]), statistics.stdev(SEEDS[2])])
    assert array_values(noisy[axis]) == [0.82]
    assert array_values(noisy[f"error_{axis}"]["array"]) == pytest.approx(
        [statistics.stdev(SEEDS[1])])
    assert noisy["marker"]["symbol"] == "diamond-open"
    assert "within the noise of trial 0" in str(noisy["hovertext"])


def test_a_deleted_promotion_is_skipped(tmp_path: Path) -> None:
    """The front's noise comes from the latest seeded promotion that is still there: a
    promoted study deleted since (``optuna.delete_study``) is passed over, not a KeyError."""
    url = f"sqlite:///{tmp_path / 'noise.db'}"
    seeded_promotion(url)
    store = StudyStore.open(url, read_only=True)
    attrs = store.completed("src")[0]
    name, points = noisy_front(attrs, store)
    assert name == "src-promoted" and sorted(points) == [0, 1, 2]
    assert [points[s].within_noise for s in (0, 1, 2)] == [False, True, False]
    optuna.delete_study(study_name="src-promoted", storage=url)
    assert noisy_front(attrs, StudyStore.open(url, read_only=True)) == (None, {})


def test_the_3d_front_draws_the_seed_spread(tmp_path: Path) -> None:
    """The 3-D front of the same studies (accuracy across, params and the stored MAdds): the
    trials of the seeded promotion have error bars of their accuracy seed std along the
    accuracy axis, the seeds in their hover text, and the point within the noise a trace of
    its own; the study without a promotion draws none."""
    url = f"sqlite:///{tmp_path / 'noise.db'}"
    seeded_promotion(url)
    app = create_app(url, refresh_seconds=1)
    client = app.server.test_client()

    def front(name: str) -> dict[str, dict[str, Any]]:
        traces = view_figure(client, app, name, PARETO_3D)["data"]
        assert all(t["type"] == "scatter3d" for t in traces)
        return {t["name"]: t for t in traces}

    traces = front("src")
    stands, noisy = traces["Pareto-optimal (2)"], traces[
        "Pareto-optimal, within the seed noise (1)"]
    _assert_spread_on(stands, noisy, "x")
    assert array_values(stands["z"]) == [150_000, 50_000]  # the stored MAdds
    assert "error_y" not in stands and "error_z" not in stands
    assert "stands out from the noise" in str(stands["hovertext"])
    plain = front("plain")
    assert "Pareto-optimal (3)" in plain
    assert all(k not in t for t in plain.values() for k in ("error_x", "error_y", "error_z"))


def test_a_rank_agreement_prints_a_stored_noise_ceiling_only_when_it_is_sound() -> None:
    base = {"kendall_tau": 0.5, "spearman_rho": 0.6, "pairs": 8}
    sound = {"seeds": 3, "seed_std": 0.01, "noise_free": 0.81, "one_seed": 0.7}
    assert format_agreement({**base, "noise_ceiling": sound}).endswith(
        "over 8 pairs (against the mean of 3 seeds, the seed noise caps tau near +0.810 for a "
        "noise-free proxy and +0.700 for one more training)")
    for bad in (None, "0.9", {"seeds": 3}, {**sound, "noise_free": "high"},
                {**sound, "one_seed": True}, {**sound, "noise_free": math.nan}):
        assert format_agreement({**base, "noise_ceiling": bad}) == (
            "Kendall tau +0.500, Spearman rho +0.600 over 8 pairs")


def test_a_stored_target_prints_only_what_is_sound() -> None:
    """``nas promote`` prints the stored target back from the database: a value another tool
    wrote there in another shape prints as ``-``, never raises."""
    from nas_cli.promote_cmd import _meets, _number, _share, _tau

    assert (_tau(0.6333), _number(0.1), _meets(True), _meets(False), _share(0.664)) == (
        "+0.633", "0.1", "meets", "misses", "66%")
    for bad in (None, "0.5", True, math.nan, math.inf, [0.5]):
        assert _tau(bad) == "-" and _number(bad) == "-" and _share(bad) == "-"
    for bad in (None, "yes", 1, 0.0):
        assert _meets(bad) == "-"
    assert _share(1.5) == "-" and _share(-0.1) == "-"
