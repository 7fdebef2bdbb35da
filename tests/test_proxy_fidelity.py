"""How far a proxy's rank agreement can go: ``studies.fidelity.noise_ceiling`` and the proxy
fidelity benchmark's seeds (``benchmarks/proxy_fidelity.py``, its trainings replaced by known
scores: the benchmark's own run trains for minutes to an hour)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from benchmarks import proxy_fidelity as pf
from studies.fidelity import (
    Replicate,
    kendall_rows,
    meets_target,
    noise_ceiling,
    rank_agreement,
    replicate,
    resolved_pairs,
    target_chance,
)


def test_kendall_rows_is_scipys_tau_b_row_by_row_ties_and_constant_rows_included() -> None:
    from scipy.stats import kendalltau

    rng = np.random.default_rng(3)
    a = rng.integers(0, 4, (200, 7)).astype(float)  # few values: many ties
    b = rng.normal(size=(200, 7))
    b[::5] = np.round(b[::5])
    a[7] = 1.0  # a constant row: scipy's nan, here 0
    got = kendall_rows(a, b)
    for row, tau in enumerate(got):
        want = float(kendalltau(a[row], b[row]).statistic)
        assert tau == pytest.approx(0.0 if np.isnan(want) else want, abs=1e-12)
    assert got[7] == 0.0


def test_without_seed_noise_the_ceiling_is_a_perfect_ranking() -> None:
    scores = [[0.1, 0.1], [0.2, 0.2], [0.3, 0.3], [0.4, 0.4]]
    ceiling = noise_ceiling(scores, draws=50)
    assert ceiling is not None
    assert ceiling.seeds == 2 and ceiling.seed_std == 0.0
    assert ceiling.noise_free == (1.0, 1.0, 1.0) and ceiling.one_seed == (1.0, 1.0, 1.0)


def test_noise_far_above_the_spread_leaves_no_ranking_to_reach() -> None:
    # means 0.50-0.511 apart by 0.001, seeds 0.1 apart: the mean of 3 seeds is noise
    scores = [[0.5 + i / 1000 - 0.05, 0.5 + i / 1000 + 0.05, 0.5 + i / 1000]
              for i in range(12)]
    ceiling = noise_ceiling(scores, draws=400)
    assert ceiling is not None and ceiling.seed_std == pytest.approx(0.05)
    assert abs(ceiling.noise_free[0]) < 0.2 and abs(ceiling.one_seed[0]) < 0.2
    assert ceiling.noise_free[1] < 0 < ceiling.noise_free[2]


def test_more_seeds_raise_the_ceiling_and_a_noisy_proxy_stays_below_a_noise_free_one() -> None:
    means = [0.40 + 0.01 * i for i in range(12)]

    def seeds(k: int) -> list[list[float]]:  # spread 0.02 around each mean, mean kept
        offsets = [(-1) ** j * 0.02 for j in range(k - k % 2)] + [0.0] * (k % 2)
        return [[m + o for o in offsets] for m in means]

    two, eight = noise_ceiling(seeds(2)), noise_ceiling(seeds(8))
    assert two is not None and eight is not None
    assert eight.noise_free[0] > two.noise_free[0]
    for c in (two, eight):
        assert c.one_seed[0] < c.noise_free[0]
        assert c.noise_free[1] <= c.noise_free[0] <= c.noise_free[2]
    assert noise_ceiling(seeds(2)) == two  # seeded: the same scores give the same ceiling


def test_the_ceiling_needs_two_configurations_of_two_seeds_each_and_equal_seeds() -> None:
    assert noise_ceiling([[0.5, 0.6]]) is None
    assert noise_ceiling([[0.5], [0.6]]) is None
    assert noise_ceiling([]) is None
    with pytest.raises(ValueError, match="same number of seeds"):
        noise_ceiling([[0.5, 0.6], [0.7]])


def test_the_resolved_pairs_are_those_further_apart_than_the_seeds_noise_allows() -> None:
    # Two seeds each, 0.02 apart, means 0.50, 0.51, 0.60 and 0.70: the margin is 1.96 standard
    # errors of a difference of two-seed means (0.028), so only the pairs 0.09 or more apart
    # are resolved.
    scores = [[0.49, 0.51], [0.50, 0.52], [0.59, 0.61], [0.69, 0.71]]
    resolved = resolved_pairs(scores)
    assert resolved is not None
    std = float(np.std([-0.01, 0.01], ddof=1))
    assert resolved.margin == pytest.approx(1.96 * std * np.sqrt(2 / 2))
    assert resolved.seeds == 2 and resolved.of == 6
    assert sorted(resolved.pairs) == [(2, 0), (2, 1), (3, 0), (3, 1), (3, 2)]
    assert resolved.agreeing([0.0, 1.0, 2.0, 3.0]) == 5  # the truth's order
    assert resolved.agreeing([3.0, 2.0, 1.0, 0.0]) == 0  # reversed
    assert resolved.agreeing([0.0, 0.0, 0.0, 0.0]) == 2.5  # all tied: a half each
    # The same means with a spread ten times wider: nothing is resolved.
    wide = resolved_pairs([[m - 0.1, m + 0.1] for m in (0.50, 0.51, 0.60, 0.70)])
    assert wide is not None and wide.pairs == () and wide.of == 6
    assert resolved_pairs([[0.5, 0.6]]) is None and resolved_pairs([[0.5], [0.6]]) is None
    with pytest.raises(ValueError, match="same number of seeds"):
        resolved_pairs([[0.5, 0.6], [0.7]])


def test_the_target_is_a_tau_within_the_gap_of_the_ceiling_and_above_every_cost() -> None:
    assert meets_target(0.70, 0.80, [0.1, 0.2])
    assert meets_target(0.70, 0.80, [0.1, None])  # an unknown cost is not a bar
    assert not meets_target(0.69, 0.80, [0.1, 0.2])  # more than 0.1 below the ceiling
    assert not meets_target(0.70, 0.80, [0.70, 0.2])  # level with a cost is not above it
    assert meets_target(0.5, 0.8, [], gap=0.3) and not meets_target(0.5, 0.8, [], gap=0.2)


def test_the_replicate_is_the_ceilings_one_more_training_and_costs_are_ranked_alike() -> None:
    means = [0.40 + 0.01 * i for i in range(8)]
    scores = [[m - 0.015, m + 0.015, m] for m in means]
    ceiling = noise_ceiling(scores, draws=300, seed=4)
    twin = replicate(scores, [means, means[::-1]], draws=300, seed=4)
    assert ceiling is not None and twin is not None
    assert twin.ceiling == pytest.approx(ceiling.one_seed[0])  # the same simulated noise
    assert twin.tau.shape == (300,) and twin.costs.shape == (2, 300)
    # A cost that ranks as the true means do is the noise-free proxy; reversed, its negative.
    assert np.median(twin.costs[0]) == pytest.approx(ceiling.noise_free[0])
    assert np.allclose(twin.costs[1], -twin.costs[0])
    assert replicate(scores, draws=10) is not None and replicate([[0.5, 0.6]]) is None
    with pytest.raises(ValueError, match="one value per configuration"):
        replicate(scores, [means[:3]])


def test_the_targets_chance_counts_joint_outcomes_on_every_draw_or_pooled() -> None:
    # Two draws, three simulated noises each; ceilings 0.8, so 0.7 or more meets the gap.
    one = Replicate(0.8, np.array([0.5, 0.9, 0.9]), np.array([[0.0, 0.0, 0.95]]))
    two = Replicate(0.8, np.array([0.9, 0.5, 0.9]), np.array([[0.0, 0.0, 0.0]]))
    # Every draw: noise 0 misses on draw one, noise 1 on draw two, noise 2 on draw one's cost.
    assert target_chance([one, two], pooled=False) == 0.0
    # Pooled: means 0.7, 0.7 and 0.9 against ceiling 0.8; costs' means 0, 0 and 0.475.
    assert target_chance([one, two], pooled=True) == 1.0
    assert target_chance([two], pooled=False) == pytest.approx(2 / 3)
    assert target_chance([two], pooled=True) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="at least one draw"):
        target_chance([], pooled=True)


class _KnownScores:
    """The benchmark's ``Runner`` with each training's score given by its configuration (in
    the order first seen), fidelity and seed."""

    def __init__(self, full_epochs: int) -> None:
        self.full_epochs = full_epochs
        self.archs: list[str] = []
        self.jobs: list[pf.Job] = []

    def score(self, job: pf.Job) -> float:
        key = pf.Job(job.task, job.arch, {}).key()
        if key not in self.archs:
            self.archs.append(key)
        i, seed = self.archs.index(key), job.settings["seed"]
        if job.settings["epochs"] == self.full_epochs:
            return 0.5 + 0.01 * i + 0.003 * ((i + seed) % 3)
        return 0.2 + 0.02 * ((i * (seed + 2)) % 5) + 0.001 * i

    def run(self, jobs: Sequence[pf.Job]) -> tuple[list[dict[str, Any]], float]:
        self.jobs += jobs
        return [{"value": self.score(j), "seconds": 1.0, "status": "completed"}
                for j in jobs], 0.0


def test_the_benchmark_scores_the_proxy_by_seed_0_and_prints_its_noise_and_ceiling(
        capsys: pytest.CaptureFixture[str]) -> None:
    setup = pf.SETUPS["digits"]
    args = argparse.Namespace(pairs=4, task_option=[], full_seeds=3, proxy_seeds=2)
    runner = _KnownScores(setup.full_epochs)
    pf.measure("digits", setup, args, runner, 0)  # type: ignore[arg-type]
    out = capsys.readouterr().out

    proxy = [j for j in runner.jobs if j.settings["epochs"] == setup.proxy_epochs]
    full = [j for j in runner.jobs if j.settings["epochs"] == setup.full_epochs]
    assert sorted(j.settings["seed"] for j in proxy) == [0] * 4 + [1] * 4
    assert sorted(j.settings["seed"] for j in full) == [0] * 4 + [1] * 4 + [2] * 4
    order = [pf.Job(j.task, j.arch, {}).key() for j in proxy[:4]]

    def scores(fidelity: list[pf.Job], seed: int) -> list[float]:
        by_arch = {pf.Job(j.task, j.arch, {}).key(): runner.score(j)
                   for j in fidelity if j.settings["seed"] == seed}
        return [by_arch[a] for a in order]

    truth = [sum(v) / 3 for v in zip(*(scores(full, s) for s in range(3)), strict=True)]
    tau = rank_agreement(scores(proxy, 0), truth)[0]
    seed1 = rank_agreement(scores(proxy, 1), truth)[0]
    between = rank_agreement(scores(proxy, 1), scores(proxy, 0))[0]
    assert tau is not None and seed1 is not None and between is not None
    assert f"digits: Kendall tau {tau:+.3f}" in out
    drawn = pf.draw(setup, 4, 0)  # the same draws: their cost alone against the same truth
    assert [pf.Job(setup.task, arch, {}).key() for arch, *_ in drawn] == order
    by_params = rank_agreement([float(d[2]) for d in drawn], truth)
    by_madds = rank_agreement([float(d[3]) for d in drawn], truth)
    assert by_params[0] is not None and by_madds[0] is not None
    assert (f"the cost alone against the same truth (more is ranked better): parameters tau "
            f"{by_params[0]:+.3f} (rho {by_params[1]:+.3f}), MAdds tau {by_madds[0]:+.3f}") in out
    assert (f"digits: proxy seed 1: tau {seed1:+.3f} against the full score, {between:+.3f} "
            "against proxy seed 0") in out
    ceiling = noise_ceiling([[runner.score(j) for j in full
                              if pf.Job(j.task, j.arch, {}).key() == a] for a in order])
    assert ceiling is not None
    line = re.search(r"noise ceiling against the mean of 3 seeds \(one training's std "
                     r"([0-9.]+)\): a noise-free proxy tau ([+-][0-9.]+)", out)
    assert line is not None
    assert float(line[1]) == pytest.approx(ceiling.seed_std, abs=5e-5)
    assert float(line[2]) == pytest.approx(ceiling.noise_free[0], abs=5e-4)
    resolved = resolved_pairs([[runner.score(j) for j in full
                                if pf.Job(j.task, j.arch, {}).key() == a] for a in order])
    assert resolved is not None
    agree = (f"the proxy {resolved.agreeing(scores(proxy, 0)):g}, its seed 1 "
             f"{resolved.agreeing(scores(proxy, 1)):g}, parameters "
             f"{resolved.agreeing([float(d[2]) for d in drawn]):g}, MAdds "
             f"{resolved.agreeing([float(d[3]) for d in drawn]):g}")
    assert (f"{len(resolved.pairs)} of 6; ordered as the truth orders them by {agree}") in out


class _MeasuredOnly(pf.Runner):
    """The trainings kept in ``benchmarks/measured/``: a job not there fails the test instead
    of training for an hour."""

    def run(self, jobs: Sequence[pf.Job]) -> tuple[list[dict[str, Any]], float]:
        missing = [job for job in jobs if job.key() not in self.known]
        assert not missing, f"{len(missing)} of {len(jobs)} trainings not measured"
        return super().run(jobs)


_CONSTANT_16 = {"schedule": "constant", "warmup_epochs": 0, "batch_size": 16}
_MEASURED: dict[tuple[int, str], tuple[str, pf.Judged | None]] = {}


def _measured(draw: int, proxy: dict[str, Any]) -> tuple[str, pf.Judged | None]:
    """What the benchmark prints for digits' ``draw`` with ``proxy`` from the measured trainings,
    and its judgement (once per test session: each draw builds the task and its 12 costs)."""
    key = (draw, json.dumps(proxy, sort_keys=True))
    if key not in _MEASURED:
        runner = _MeasuredOnly(workers=1, cache=pf.MEASURED)
        setup = pf._with(pf.SETUPS["digits"], proxy, {})
        args = argparse.Namespace(pairs=12, task_option=[], full_seeds=4, proxy_seeds=2)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            judged = pf.measure("digits", setup, args, runner, draw)
        _MEASURED[key] = printed.getvalue(), judged
    return _MEASURED[key]


@pytest.mark.parametrize(("draw", "proxy", "printed"), [
    (0, {}, "digits: Kendall tau +0.062"),
    (0, _CONSTANT_16, "digits: Kendall tau +0.431"),
    (1, {}, "digits: Kendall tau +0.344"),
    (1, _CONSTANT_16, "digits: Kendall tau +0.295"),
    (1, {"batch_size": 16}, "digits: proxy seed 1: tau +0.594 against the full score, +0.031"),
    (0, {}, "12 of 66; ordered as the truth orders them by the proxy 11, its seed 1 11, "
            "parameters 11, MAdds 10.5"),
    (1, _CONSTANT_16, "9 of 66; ordered as the truth orders them by the proxy 7, its seed 1 4, "
                      "parameters 8, MAdds 0.5"),
    (0, {}, "the proxy seed 0 +0.062 misses; seed 1 -0.047 misses; one more full training as "
            "the proxy meets it in 66% of the truth's simulated noise"),
    (0, _CONSTANT_16, "the proxy seed 0 +0.431 meets; seed 1 +0.400 meets; one more full"),
    (1, _CONSTANT_16, "(tau +0.233 or more: within 0.1 of one more full training's +0.333; and "
                      "above parameters +0.357 and MAdds -0.328): the proxy seed 0 +0.295 "
                      "misses; seed 1 +0.202 misses; one more full training as the proxy meets "
                      "it in 50%"),
    (2, {}, "(tau +0.173 or more: within 0.1 of one more full training's +0.273; and above "
            "parameters +0.339 and MAdds +0.378): the proxy seed 0 +0.233 misses; seed 1 +0.246 "
            "misses; one more full training as the proxy meets it in 32%"),
    (2, {}, "8 of 66; ordered as the truth orders them by the proxy 8, its seed 1 8, parameters "
            "7, MAdds 8"),
    (2, _CONSTANT_16, "the proxy seed 0 +0.125 misses; seed 1 -0.031 misses"),
])
def test_the_measured_digits_trainings_print_the_documented_taus(
        draw: int, proxy: dict[str, Any], printed: str) -> None:
    """``benchmarks/measured/proxy_fidelity.jsonl`` still holds every training the script
    builds for digits' draws 0, 1 and 2 (4 full seeds, 2 proxy seeds), and prints the
    docstring's figures from them."""
    out, _ = _measured(draw, proxy)
    assert printed in out, out
    ceiling, params = {0: ("+0.333", "+0.109"), 1: ("+0.333", "+0.357"),
                       2: ("+0.273", "+0.339")}[draw]
    assert f"one more full training as the proxy {ceiling}" in out
    assert f"parameters tau {params}" in out


@pytest.mark.parametrize(("draws", "proxy", "printed"), [
    ((0, 1), {}, "draws 0,1 together: the proxy's tau averages +0.159 over 2 draws (4 (draw, "
                 "seed) cases, of which 0 meet the draw's target) against one more full "
                 "training's +0.333, parameters +0.233, MAdds -0.116: pooled, the proxy misses "
                 "the target. One more full training as the proxy meets it on every draw in 38% "
                 "of the truth's simulated noise, pooled in 64%"),
    ((0, 1), _CONSTANT_16, "averages +0.332 over 2 draws (4 (draw, seed) cases, of which 2 meet "
                           "the draw's target) against one more full training's +0.333, "
                           "parameters +0.233, MAdds -0.116: pooled, the proxy meets the target"),
    ((0, 1, 2), {}, "draws 0,1,2 together: the proxy's tau averages +0.186 over 3 draws (6 "
                    "(draw, seed) cases, of which 0 meet the draw's target) against one more "
                    "full training's +0.313, parameters +0.268, MAdds +0.049: pooled, the proxy "
                    "misses the target. One more full training as the proxy meets it on every "
                    "draw in 18% of the truth's simulated noise, pooled in 62%"),
    ((0, 1, 2), _CONSTANT_16, "averages +0.237 over 3 draws (6 (draw, seed) cases, of which 2 "
                              "meet the draw's target) against one more full training's +0.313, "
                              "parameters +0.268, MAdds +0.049: pooled, the proxy misses"),
])
def test_the_measured_digits_draws_are_judged_together_against_the_truths_own_replicate(
        draws: tuple[int, ...], proxy: dict[str, Any], printed: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Draws together: the pooled target, and how rarely one more full training meets the
    per-draw target on every draw (the docstring's figures, from the measured trainings)."""
    judged = [_measured(d, proxy)[1] for d in draws]
    assert all(j is not None for j in judged)
    pf.pooled("digits", list(draws), [j for j in judged if j is not None])
    out = capsys.readouterr().out
    assert printed in out, out


def test_draw_seeds_parse_as_a_comma_separated_list_of_distinct_integers() -> None:
    assert pf._seeds("3") == [3] and pf._seeds("0,1,4") == [0, 1, 4]
    for bad in ("0,x", "1,1", ""):
        with pytest.raises(argparse.ArgumentTypeError):
            pf._seeds(bad)


def test_a_smoke_vqa_trial_trains_the_measured_proxy_and_the_truth_stays_pinned() -> None:
    """A smoke study's trial on ``synthetic-vqa`` trains the proxy the docstring's vqa tables
    measured best (batches of 16, constant rate, no warm-up: 40 batches a trial); the full side
    names its own settings, so its trainings (and their cache keys) do not move with it."""
    from studies._trials import base_settings

    setup = pf.SETUPS["vqa"]
    proxy = base_settings(setup.spec(full=False))
    assert {k: proxy[k] for k in ("batch_size", "schedule", "warmup_epochs", "epochs",
                                  "max_steps_per_epoch", "lr")} == {
        "batch_size": 16, "schedule": "constant", "warmup_epochs": 0.0, "epochs": 4,
        "max_steps_per_epoch": 10, "lr": 1e-3}
    full = base_settings(setup.spec(full=True))
    assert {k: full[k] for k in ("batch_size", "schedule", "warmup_epochs", "epochs", "lr")} == {
        "batch_size": 64, "schedule": "cosine", "warmup_epochs": 0.5, "epochs": 6, "lr": 1e-3}
