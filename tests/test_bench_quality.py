"""``benchmarks/_quality.py``: the statistics the search benchmarks print (wins, the paired
Wilcoxon test, ranks by median, the issue's three targets) and ``benchmarks/_tabular.py``'s
scoring of a table (hypervolume as a fraction of the table's, networks by row)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

_path = list(sys.path)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
try:
    from _quality import p_better, ranks, targets, wins
    from _tabular import Table, curve, run_arm, variant
finally:
    sys.path[:] = _path


def test_wins_and_the_one_sided_paired_test() -> None:
    mine = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4]
    assert wins(mine, [0.8, 0.8, 0.8, 0.5, 0.4, 0.3]) == (4, 1, 1)
    assert p_better(mine, [m - 0.1 for m in mine]) == pytest.approx(1 / 64)
    assert p_better([m - 0.1 for m in mine], mine) > 0.9
    assert p_better(mine, mine) == 1.0


def test_ranks_by_median_share_ties_and_the_targets_are_judged_per_cell() -> None:
    seeds = range(6)
    cell = {"default": {s: 0.9 + 0.01 * s for s in seeds}, "gp": {s: 0.8 for s in seeds},
            "tpe": {s: 0.8 for s in seeds}}
    assert ranks(cell) == {"default": 1.0, "gp": 2.5, "tpe": 2.5}
    close = {"default": {s: 0.8 for s in seeds},
             "gp": {s: 0.85 + 0.001 * s for s in seeds}}
    lines = targets({"a@50": cell, "b@50": close}, "default")
    assert lines[1].endswith("met") and "NOT" not in lines[1]
    assert "NOT met in b@50" in lines[2]  # gp ahead by 0.0525, its spread 0.0019
    assert lines[3].endswith("1 (met)")  # significant on a@50 only: one of two


def _table() -> Table:
    # two links, two operations: combos (link, op1..op4) -> rows 0..3, -1 for all "skip"
    ops = ("conv", "skip")
    combos = np.arange(2 * 2**4) % 4
    combos[[i * 16 + 15 for i in range(2)]] = -1
    values = np.array([[0.9, 3.0, 3.0], [0.5, 1.0, 1.0], [0.4, 2.0, 2.0], [0.2, 3.0, 3.0]])
    return Table("toy", 2, ops, values, combos)


def test_a_table_scores_a_search_against_its_own_front() -> None:
    t = _table()
    assert t.reference == [0.2, 3.0, 3.0]
    assert t.row_of({"link": 0, "op1": "conv", "op2": "conv", "op3": "conv", "op4": "skip"}) == 1
    assert t.row_of({"link": 1, "op1": "skip", "op2": "skip", "op3": "skip",
                     "op4": "skip"}) == -1
    told = run_arm(t, optuna.samplers.RandomSampler(seed=0), 12, 2)
    fractions = curve(t, told, [1, 12])
    assert 0.0 <= fractions[0] <= fractions[1] <= 1.0 + 1e-12
    assert curve(t, [list(v) for v in t.values], [4]) == [pytest.approx(1.0)]


def test_a_variant_arm_is_the_default_sampler_with_its_options_checked_up_front() -> None:
    from nas.errors import ConfigError
    from studies.costaware import CostAwareSampler

    assert variant("default") is None and variant("tpe@x=1") is None
    make = variant("default@early_trials=0+candidates=12")
    assert make is not None
    inner = make(3).inner  # type: ignore[attr-defined]  # wrapped as the engine wraps it
    assert isinstance(inner, CostAwareSampler)
    assert (inner.early_trials, inner.candidates, inner.draws(0)) == (0, 12, (12, 8))
    told = run_arm(_table(), make(0), 6, 2)  # it runs as an arm
    assert len(told) == 6
    with pytest.raises(ConfigError, match="'early_trial'"):
        variant("default@early_trial=0")
    with pytest.raises(ConfigError, match="OPTION=VALUE"):
        variant("default@early_trials")
