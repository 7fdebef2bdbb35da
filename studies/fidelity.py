"""A promoted study's rank agreement with its proxy study (``StudyKey.FIDELITY``).

Below both the engine, which stores it when a promoted study's run ends, and ``studies.promote``,
which creates promoted studies: neither imports the other for it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial, TrialState

from studies._trials import StudyRun
from studies.store import StudyKey, trial_attrs

__all__ = ["TARGET_GAP", "NoiseCeiling", "Replicate", "Resolved", "fidelity", "kendall_rows",
           "meets_target", "noise_ceiling", "rank_agreement", "record_fidelity", "replicate",
           "resolved_pairs", "target_chance"]


def rank_agreement(proxy: Sequence[float], promoted: Sequence[float]) -> tuple[
    float | None, float | None
]:
    """Kendall's tau-b and Spearman's rho between two rankings (``None`` where undefined: fewer
    than two pairs, or one side constant)."""
    from scipy.stats import kendalltau, spearmanr

    if len(proxy) != len(promoted):
        raise ValueError(f"Pairs need two sides of one length, but got {len(proxy)} and "
                         f"{len(promoted)}.")
    if len(proxy) < 2 or len(set(proxy)) < 2 or len(set(promoted)) < 2:
        return None, None
    tau = float(kendalltau(proxy, promoted).statistic)
    rho = float(spearmanr(proxy, promoted).statistic)
    return (tau if np.isfinite(tau) else None), (rho if np.isfinite(rho) else None)


def kendall_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between each row of ``a`` and the same row of ``b`` (arrays of one shape,
    rows x items), as ``scipy.stats.kendalltau`` gives it; 0 where a row is constant."""
    i, j = np.triu_indices(a.shape[1], k=1)
    da, db = np.sign(a[:, i] - a[:, j]), np.sign(b[:, i] - b[:, j])
    pairs = len(i)
    scale = np.sqrt(((pairs - (da == 0).sum(1)) * (pairs - (db == 0).sum(1))).astype(float))
    concordance = (da * db).sum(1).astype(float)
    return np.divide(concordance, scale, out=np.zeros(len(a)), where=scale > 0)


@dataclass(frozen=True)
class NoiseCeiling:
    """The rank agreement a proxy can expect against a mean of ``seeds`` noisy trainings.

    ``noise_free``: a proxy that knew each configuration's true score; ``one_seed``: one more
    training of each configuration at the full fidelity used as the proxy. Each is the median
    and the 5th and 95th percentiles of Kendall's tau over the simulated draws of the noise.
    ``seed_std`` is the pooled standard deviation of one training's score around its
    configuration's mean.
    """

    seeds: int
    seed_std: float
    noise_free: tuple[float, float, float]
    one_seed: tuple[float, float, float]


def _seeded(scores: Sequence[Sequence[float]]) -> tuple[int, list[float], float] | None:
    """The seeds each configuration has (``k``, the same for all), their means and the seeds'
    pooled standard deviation; ``None`` with fewer than two configurations or two seeds each."""
    k = len(scores[0]) if scores else 0
    if any(len(row) != k for row in scores):
        raise ValueError(f"Every configuration needs the same number of seeds, but got "
                         f"{sorted({len(row) for row in scores})}.")
    if len(scores) < 2 or k < 2:
        return None
    std = math.sqrt(statistics.fmean(statistics.variance(row) for row in scores))
    return k, [statistics.fmean(row) for row in scores], std


def _simulate(scores: Sequence[Sequence[float]], draws: int, seed: int) -> tuple[
    int, float, np.ndarray, np.ndarray, np.ndarray
] | None:
    """The parametric bootstrap behind :func:`noise_ceiling` and :func:`replicate`: the seeds
    ``k``, their pooled std, the observed means, and ``draws`` simulated ``k``-seed truths and
    single trainings (rows) around those means."""
    seeded = _seeded(scores)
    if seeded is None:
        return None
    k, listed, std = seeded
    means = np.array(listed)
    rng = np.random.default_rng(seed)
    truth = means + rng.normal(0.0, std / math.sqrt(k), (draws, len(means)))
    proxy = means + rng.normal(0.0, std, (draws, len(means)))
    return k, std, means, truth, proxy


def noise_ceiling(scores: Sequence[Sequence[float]], *, draws: int = 2000,
                  seed: int = 0) -> NoiseCeiling | None:
    """How far seed noise alone caps Kendall's tau against a mean of seeds (a parametric
    bootstrap); ``None`` with fewer than two configurations or two seeds each.

    ``scores[i]`` holds configuration ``i``'s score from each of its ``k`` seeds (the same
    ``k`` for all). The observed means stand for the true scores and the seeds' pooled spread
    ``s`` for the noise: each draw adds Gaussian noise of ``s / sqrt(k)`` to the means (a new
    ``k``-seed truth) and compares it with the true scores (a noise-free proxy) and with the
    true scores plus noise ``s`` (one more training as the proxy). The observed means spread
    more than the true ones (they hold noise too), so both figures lean high: a proxy that
    misses them is not shown to be bad, one that misses ``noise_free`` by far is.
    """
    simulated = _simulate(scores, draws, seed)
    if simulated is None:
        return None
    k, std, means, truth, proxy = simulated
    free = kendall_rows(np.broadcast_to(means, truth.shape), truth)
    one = kendall_rows(proxy, truth)

    def summary(taus: np.ndarray) -> tuple[float, float, float]:
        lo, mid, hi = np.quantile(taus, [0.05, 0.5, 0.95])
        return float(mid), float(lo), float(hi)

    return NoiseCeiling(k, std, summary(free), summary(one))


#: How far below "one more full training" (the noise ceiling's ``one_seed`` median) a proxy's
#: tau may lie and still meet the target (issue 35).
TARGET_GAP = 0.1
#: A tau level with the bar meets it: the subtraction's rounding error is forgiven.
_LEVEL = 1e-9


def meets_target(tau: float, ceiling: float, costs: Sequence[float | None], *,
                 gap: float = TARGET_GAP) -> bool:
    """The target a proxy is held to: its Kendall's tau within ``gap`` of ``ceiling`` (what one
    more full training reaches) and above the tau of each ranking by cost alone in ``costs``
    (parameters, MAdds; ``None`` where unknown). For one draw, or for means over draws. A tau
    level with the bar meets it."""
    return tau >= ceiling - gap - _LEVEL and all(c is None or tau > c for c in costs)


@dataclass(frozen=True)
class Replicate:
    """One more full training of each configuration used as the proxy, over ``tau.size``
    simulated noises of a draw's truth (:func:`noise_ceiling`'s bootstrap, the same draws for
    the same seed): its tau against each simulated truth, each cost ranking's tau against the
    same truth (``costs``, rows), and the ceiling the target counts from (the median of
    ``tau``)."""

    ceiling: float
    tau: np.ndarray
    costs: np.ndarray


def replicate(scores: Sequence[Sequence[float]], costs: Sequence[Sequence[float]] = (), *,
              draws: int = 2000, seed: int = 0) -> Replicate | None:
    """The truth's own replicate on one draw (:class:`Replicate`); ``None`` with fewer than
    two configurations or two seeds each. ``costs``: each cost ranking (more ranked as more
    accurate), one value per configuration."""
    simulated = _simulate(scores, draws, seed)
    if simulated is None:
        return None
    *_, truth, proxy = simulated
    if any(len(c) != truth.shape[1] for c in costs):
        raise ValueError(f"Each cost ranking needs one value per configuration "
                         f"({truth.shape[1]}), but got {sorted({len(c) for c in costs})}.")
    tau = kendall_rows(proxy, truth)
    by_cost = np.array([kendall_rows(np.broadcast_to(np.asarray(c, dtype=float), truth.shape),
                                     truth) for c in costs]).reshape(len(costs), draws)
    return Replicate(float(np.median(tau)), tau, by_cost)


def target_chance(replicates: Sequence[Replicate], *, pooled: bool,
                  gap: float = TARGET_GAP) -> float:
    """How often the truth's own replicate meets :func:`meets_target`: on every draw of
    ``replicates`` at once, or (``pooled``) by its mean tau over them against the mean
    ceiling and the mean of each cost's tau. The draws are independent, so the i-th simulated
    noise of each draw together make one joint outcome. Every replicate needs the same number
    of simulated noises and of cost rankings."""
    if not replicates:
        raise ValueError("The target's chance needs at least one draw.")
    tau = np.stack([r.tau for r in replicates])
    costs = np.stack([r.costs for r in replicates])  # draws x cost rankings x noises
    ceilings = np.array([r.ceiling for r in replicates])
    if pooled:
        mean = tau.mean(0)
        ok = (mean >= ceilings.mean() - gap - _LEVEL) & (mean > costs.mean(0)).all(0)
    else:
        ok = ((tau >= (ceilings - gap - _LEVEL)[:, None])
              & (tau[:, None, :] > costs).all(1)).all(0)
    return float(ok.mean())


@dataclass(frozen=True)
class Resolved:
    """The pairs of configurations whose order the truth (a mean of ``seeds`` trainings each)
    resolves: those whose means differ by more than ``z`` standard errors of a difference
    (``margin``, from the seeds' pooled spread), each as ``(better, worse)``, out of ``of``."""

    seeds: int
    z: float
    margin: float
    pairs: tuple[tuple[int, int], ...]
    of: int

    def agreeing(self, ranking: Sequence[float]) -> float:
        """How many resolved pairs ``ranking`` (more is better) orders as the truth does; a tie
        counts a half."""
        return sum(1.0 if ranking[a] > ranking[b] else 0.5 if ranking[a] == ranking[b] else 0.0
                   for a, b in self.pairs)


def resolved_pairs(scores: Sequence[Sequence[float]], *, z: float = 1.96) -> Resolved | None:
    """The pairs whose order the truth resolves (:class:`Resolved`); ``None`` with fewer than
    two configurations or two seeds each. ``scores[i]``: configuration ``i``'s score from each
    of its ``k`` seeds (the same ``k`` for all). Where the seeds' noise swamps the gaps between
    configurations, few pairs are resolved, and no proxy can be judged on the others."""
    seeded = _seeded(scores)
    if seeded is None:
        return None
    k, means, std = seeded
    margin = z * std * math.sqrt(2.0 / k)
    n = len(means)
    pairs = tuple((i, j) if means[i] > means[j] else (j, i)
                  for i in range(n) for j in range(i + 1, n)
                  if abs(means[i] - means[j]) > margin)
    return Resolved(k, z, margin, pairs, n * (n - 1) // 2)


def fidelity(trials: Sequence[FrozenTrial], objective_names: Sequence[str], *, epochs: int,
             task: str, proxy_epochs: int | None = None, study: str = "") -> dict[str, Any]:
    """The rank agreement of a promoted study's completed trials (``StudyKey.FIDELITY``), one
    pair per source trial (its seeds' mean promoted accuracy, after ``--seeds``); ``study``
    names the study in the error about a stored value that does not parse."""
    names = list(objective_names)
    # One pair per source trial: its proxy accuracy and its promoted accuracy (the mean over
    # its seeds when it was trained with several, ``nas promote --seeds``), and the promoted
    # architecture's cost (``None`` where a trial holds none).
    by_source: dict[tuple[bool, int], tuple[float, list[float], dict[str, Any] | None]] = {}
    if "accuracy" in names:  # a study promote made has one; a foreign one may not
        accuracy = names.index("accuracy")
        for t in trials:
            if t.state != TrialState.COMPLETE or t.values is None:
                continue
            p = trial_attrs(study, t.number, t.user_attrs)
            if p.source_value is not None:
                key = (False, t.number) if p.source_trial is None else (True, p.source_trial)
                by_source.setdefault(key, (p.source_value, [], p.cost))[1].append(
                    float(t.values[accuracy]))
    truth = [math.fsum(acc) / len(acc) for _, acc, _ in by_source.values()]
    tau, rho = rank_agreement([proxy for proxy, _, _ in by_source.values()], truth)
    costs = [cost for _, _, cost in by_source.values()]
    seeds = [acc for _, acc, _ in by_source.values()]
    by_params, by_madds = _cost_tau(costs, "params", truth), _cost_tau(costs, "madds", truth)
    return {"kendall_tau": tau, "spearman_rho": rho, "pairs": len(truth), "epochs": epochs,
            "task": task, "proxy_epochs": proxy_epochs,
            "params_kendall_tau": by_params, "madds_kendall_tau": by_madds,
            "noise_ceiling": _ceiling(seeds),
            "resolved": _resolved(seeds, [proxy for proxy, _, _ in by_source.values()], costs),
            "target": _target(seeds, tau, costs, (by_params, by_madds))}


def _cost_tau(costs: Sequence[dict[str, Any] | None], key: str,
              truth: Sequence[float]) -> float | None:
    """Kendall's tau of the ranking by cost ``key`` alone (more ranked as more accurate)
    against ``truth``: the free baseline a proxy has to beat. ``None`` unless every pair's
    promoted trial holds that cost."""
    counts = _cost_counts(costs, key)
    return None if counts is None else rank_agreement(counts, truth)[0]


def _cost_counts(costs: Sequence[dict[str, Any] | None], key: str) -> list[float] | None:
    """Each pair's cost ``key`` (stored data: a number or nothing); ``None`` unless every pair
    holds it as a number."""
    counts = [None if cost is None else cost.get(key) for cost in costs]
    if any(not isinstance(c, (int, float)) or isinstance(c, bool) for c in counts):
        return None
    return [float(c) for c in counts if c is not None]


def _ceiling(seeds: list[list[float]]) -> dict[str, Any] | None:
    """The noise ceiling of a seeded promotion (``nas promote --seeds``): each source trial's
    promoted accuracies, one per seed. ``None`` unless every pair has the same two or more
    seeds (a run cut short leaves some with fewer)."""
    if len({len(acc) for acc in seeds}) != 1:
        return None
    ceiling = noise_ceiling(seeds)
    if ceiling is None:
        return None
    return {"seeds": ceiling.seeds, "seed_std": ceiling.seed_std,
            "noise_free": ceiling.noise_free[0], "one_seed": ceiling.one_seed[0]}


def _target(seeds: list[list[float]], tau: float | None,
            costs: Sequence[dict[str, Any] | None],
            cost_taus: tuple[float | None, float | None]) -> dict[str, Any] | None:
    """After a seeded promotion (each pair the same two or more seeds) with a defined tau: the
    target (:func:`meets_target`: the bar, ``TARGET_GAP`` below one more training's tau, and
    whether the proxy meets it) and how often one more training itself would
    (:func:`target_chance`). ``None`` otherwise."""
    if tau is None or len({len(acc) for acc in seeds}) != 1:
        return None
    known = [c for c in (_cost_counts(costs, "params"), _cost_counts(costs, "madds"))
             if c is not None]
    twin = replicate(seeds, known)
    if twin is None:
        return None
    return {"gap": TARGET_GAP, "bar": twin.ceiling - TARGET_GAP,
            "meets": meets_target(tau, twin.ceiling, cost_taus),
            "one_seed_meets": target_chance([twin], pooled=False)}


def _resolved(seeds: list[list[float]], proxy: Sequence[float],
              costs: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    """After a seeded promotion (each pair the same two or more seeds): the pairs its mean
    promoted accuracy resolves (:func:`resolved_pairs`), and how many of them the proxy, and
    the parameters and MAdds alone (``None`` unless every pair holds that cost), order as it
    does. ``None`` otherwise."""
    if len({len(acc) for acc in seeds}) != 1:
        return None
    resolved = resolved_pairs(seeds)
    if resolved is None:
        return None

    def by_cost(key: str) -> float | None:
        counts = _cost_counts(costs, key)
        return None if counts is None else resolved.agreeing(counts)

    return {"seeds": resolved.seeds, "margin": resolved.margin, "pairs": len(resolved.pairs),
            "of": resolved.of, "proxy": resolved.agreeing(proxy), "params": by_cost("params"),
            "madds": by_cost("madds")}


def record_fidelity(run: StudyRun) -> None:
    """Store the rank agreement of a promoted study's trials as they stand (``run_study`` calls
    it when a promoted study's run ends, so a resumed promotion updates it too)."""
    stored = run.store.user_attrs(run.study).get(StudyKey.FIDELITY) or {}
    trials = run.store.trials(run.study)
    result = fidelity(trials, run.spec.objective_names, epochs=run.spec.fidelity.epochs,
                      task=run.spec.task, proxy_epochs=stored.get("proxy_epochs"),
                      study=run.spec.name)
    run.store.set_study_attrs(run.study, {StudyKey.FIDELITY: result})
