"""The statistics ``benchmarks/tabular.py`` prints for each benchmark and budget (a *cell*):
each arm's median final hypervolume and seed spread, and, against every other arm, the seeds
the default wins and a paired Wilcoxon signed-rank test; and over all cells the issue's
targets for the default.

Spread is the sample standard deviation over the seeds. Wins count the seeds on which the
default's hypervolume is higher (ties: equal to 1e-9, counted apart). The Wilcoxon test is
one-sided (the default's hypervolume higher), on the seeds both arms ran, zero differences
dropped (``zero_method="wilcox"``); p is 1 where every difference is zero.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from scipy.stats import wilcoxon

TIE = 1e-9

#: seed -> final hypervolume (a fraction of the best reachable), per arm, for one cell.
Cell = dict[str, dict[int, float]]


def spread(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) > 1 else 0.0


def paired(cell: Cell, me: str, other: str) -> tuple[list[float], list[float]]:
    seeds = sorted(set(cell[me]) & set(cell[other]))
    return [cell[me][s] for s in seeds], [cell[other][s] for s in seeds]


def wins(mine: Sequence[float], theirs: Sequence[float]) -> tuple[int, int, int]:
    """Seeds won, tied and lost."""
    won = sum(a > b + TIE for a, b in zip(mine, theirs, strict=True))
    lost = sum(b > a + TIE for a, b in zip(mine, theirs, strict=True))
    return won, len(mine) - won - lost, lost


def p_better(mine: Sequence[float], theirs: Sequence[float]) -> float:
    """One-sided paired Wilcoxon signed-rank p that ``mine`` is higher."""
    if all(abs(a - b) <= TIE for a, b in zip(mine, theirs, strict=True)):
        return 1.0
    return float(wilcoxon(mine, theirs, alternative="greater", zero_method="wilcox").pvalue)


def ranks(cell: Cell) -> dict[str, float]:
    """Each arm's rank by median (1 best; ties share the mean of their places)."""
    medians = {arm: statistics.median(v.values()) for arm, v in cell.items()}
    out = {}
    for arm, m in medians.items():
        above = sum(o > m + TIE for o in medians.values())
        level = sum(abs(o - m) <= TIE for o in medians.values())
        out[arm] = above + (level + 1) / 2
    return out


def table(cell: Cell, me: str) -> list[str]:
    """The lines of one cell's table."""
    lines = [f"{'arm':<10}{'seeds':>6}{'median':>9}{'spread':>9}{'rank':>6}"
             f"{me + ' won/tied/lost':>24}{'p (' + me + ' better)':>20}"]
    rank = ranks(cell)
    for arm, by_seed in cell.items():
        values = list(by_seed.values())
        versus = p = ""
        if arm != me:
            mine, theirs = paired(cell, me, arm)
            w, t, lost = wins(mine, theirs)
            versus, p = f"{w}/{t}/{lost}", f"{p_better(mine, theirs):.4f}"
        lines.append(f"{arm:<10}{len(values):>6}{statistics.median(values):>9.4f}"
                     f"{spread(values):>9.4f}{rank[arm]:>6.1f}{versus:>24}{p:>20}")
    return lines


def targets(cells: dict[str, Cell], me: str) -> list[str]:
    """The issue's three targets for ``me`` over every cell, each met or not, with figures."""
    arms = sorted({a for c in cells.values() for a in c})
    median_rank = {a: statistics.median([ranks(c)[a] for c in cells.values() if a in c])
                   for a in arms}
    best_rank = min(median_rank.values())
    lines = ["median rank over every benchmark and budget: " + ", ".join(
        f"{a} {median_rank[a]:.1f}" for a in sorted(arms, key=median_rank.__getitem__))]
    lines.append(f"target: {me} has the best median rank: "
                 f"{'met' if median_rank[me] <= best_rank + TIE else 'NOT met'}")
    short, significant = [], 0
    for name, cell in cells.items():
        peers = [a for a in cell if a != me]
        best = max(peers, key=lambda a: statistics.median(cell[a].values()))
        gap = statistics.median(cell[best].values()) - statistics.median(cell[me].values())
        allowed = spread(list(cell[best].values()))
        if gap > allowed + TIE:
            short.append(f"{name} ({best} ahead by {gap:.4f}, spread {allowed:.4f})")
        mine, theirs = paired(cell, me, best)
        significant += p_better(mine, theirs) < 0.05
    lines.append(f"target: {me} never below the best peer's median by more than its spread: "
                 + ("met" if not short else "NOT met in " + "; ".join(short)))
    need = (len(cells) + 1) // 2
    lines.append(f"target: {me} better than the best peer with p < 0.05 in at least {need} of "
                 f"{len(cells)}: {significant} ({'met' if significant >= need else 'NOT met'})")
    return lines
