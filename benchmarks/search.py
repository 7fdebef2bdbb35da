"""Hypervolume against epochs trained: this engine against the strongest set-ups of its peers.

    python benchmarks/search.py [--quick] [--seeds 5] [--tasks digits,vqa]
                                [--arms a,b,c,d,e] [--trials N] [--budget EPOCHS]
                                [--sampler tpe] [--samplers tpe,gp,auto,nsga2] [--keep DIR]

Five arms, each on two tasks and the same seeds, each with two trials at once:

(a) this engine as shipped: the study's sampler (``--sampler`` tries another), constraint checks
    before training, reuse of re-sampled architectures, multi-objective ASHA early stopping;
(b) Ray Tune + ``OptunaSearch`` (NSGA-II: population 6 on digits, Optuna's 50 on vqa) + Tune's
    ``ASHAScheduler`` on accuracy (the engine's grace and reduction factor), the params
    constraint checked in the define-by-run function before training (a violation trains
    nothing);
(c) the same with Optuna's multi-objective TPE, multivariate with a constant liar for the trials
    still running (what OptunaHub's AutoSampler picks for a categorical space of few trials);
(d) random search with this engine's multi-objective early stopping;
(e) Syne Tune's ``MOASHA`` in the benchmark's own environment (``make bench-env``); skipped,
    with the reason, where that environment is missing or fails;
(a:NAME) with ``--samplers``: arm (a) again with each sampler named (``studies.samplers``),
    side by side in the same tables: how the default sampler is chosen.

Tasks: ``digits`` (the quickstart study: tiny ViTs on digits, its sampler (``costaware``),
params <= 2e5, at most 10 batches an epoch) and ``vqa`` (the ``lw_transformer`` space on
``synthetic-vqa`` at ``smoke`` scale, the engine's default sampler, params <= 3.2e5: about half
the space's draws). Of the smoke-scale captioning and VQA spaces, VQA was chosen: on two busy
cores an ``acort`` epoch on ``synthetic-captions`` took about 100 s and scored 0 after two
epochs (no hypervolume to compare), an ``lw_transformer`` epoch 6-30 s, past the task's chance
(0.139) by the third epoch.

Every arm gets the same budget of epochs per task and seed (``--budget``; by default
``--trials`` x the task's epochs / 2: 24 epochs, what 12 trials cost if half their epochs were
stopped early) and runs until its trials have trained that many (a trial's cost is the epochs
it trained: a rejected or reused one none, a stopped one the epochs it ran), or until it has
started 4 x ``--trials`` trials; each stops the way its tool stops a run (``_search_arms``).
Its hypervolume is read at the budget: trials that finished after the budget was spent count
nothing, and an arm that ended before it is read at its own end. The hypervolume is the
normalised one against the study's fixed reference point (``nas.reference``, computed once per
task with the engine's ``study_reference`` and checked against what the engine stores), over
the trials trained to the full epochs. Printed per task and arm: the median final hypervolume
with its min-max, its mean rank over the seeds, the epochs it trained (median; the budget unless it
ended before), the seeds on which (a) is at least that arm, and the epochs (a) needed to reach
that arm's median final hypervolume with the ratio to that arm's epochs; and the issue's
targets for (a) and each ``a:NAME``; then the statistics of ``benchmarks/tabular.py``
(``_quality``: spread, (a)'s wins, ties and losses per seed and a one-sided paired Wilcoxon p
against each arm).

Time: the default (5 seeds, 24 epochs per arm, task and seed, arms a-e, both tasks: 50
arm-runs) took 43 min 38 s on an idle two-core machine (2026-11-27; digits 19 min, VQA 25 min;
93 min earlier that day with two proxy-fidelity trainings beside it at normal priority: Ray runs
its workers at a lower one). ``--keep DIR`` writes each task's and
seed's curves as JSON. ``--quick`` (1 seed, 12 epochs) took 4.5 minutes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quality import table as quality_table
from _search_arms import (
    DIRECTIONS,
    WORKERS,
    Budget,
    PicklableNSGAII,
    Point,
    Task,
    engine_arm,
    syne_arm,
    tune_arm,
)

from studies.pareto import hypervolume_history
from studies.samplers import SAMPLERS
from studies.spec import DEFAULT_SAMPLER

TASKS = {
    "digits": Task("digits", "digits", "quickstart", smoke=False, epochs=4, params_max=2.0e5,
                   sampler={"name": "costaware"}, population=6,
                   train={"batch_size": 64, "warmup_epochs": 0.5, "max_steps_per_epoch": 10}),
    "vqa": Task("vqa", "synthetic-vqa", "lw_transformer", smoke=True, epochs=4,
                params_max=3.2e5, sampler=dict(DEFAULT_SAMPLER)),
}
ARMS = {
    "a": "(a) engine as shipped",
    "b": "(b) Tune+OptunaSearch NSGA-II+ASHA",
    "c": "(c) Tune+OptunaSearch mvTPE+ASHA",
    "d": "(d) random + engine MO-ASHA",
    "e": "(e) Syne Tune MOASHA",
}
WINS_NEEDED, EPOCH_RATIO_MAX = 0.8, 0.60  # the targets: 4 of 5 seeds, 60% of epochs

Curve = list[tuple[int, float]]  # (epochs trained, hypervolume after that trial)


def curve(points: list[Point], reference: list[float]) -> Curve:
    values = [v for _, v in points if v is not None]
    history = hypervolume_history(values, DIRECTIONS, reference)
    out: Curve = []
    seen = 0
    for used, v in points:
        seen += v is not None
        out.append((used, history[seen - 1] if seen else 0.0))
    return out


def final(c: Curve, budget: int) -> float:
    inside = [hv for used, hv in c if used <= budget]
    return inside[-1] if inside else 0.0


def epochs_to_reach(c: Curve, target: float, budget: int) -> int | None:
    """The epochs after which ``c`` first reached ``target`` within ``budget``; None if not."""
    return next((used for used, hv in c if hv >= target - 1e-12 and used <= budget), None)


@dataclass
class SeedRun:
    curves: dict[str, Curve]
    budget: int  # the epochs every arm may train: each is read there

    def used(self, arm: str) -> int:
        """The epochs ``arm`` trained within the budget (fewer where it ended before)."""
        c = self.curves[arm]
        return min(self.budget, c[-1][0]) if c else 0


def label(arm: str) -> str:
    """An arm's name in the tables: ``a:tpe`` is arm (a) with sampler ``tpe``."""
    return ARMS.get(arm) or f"(a) engine, sampler {arm.partition(':')[2]}"


def engine_arms(arms: list[str]) -> list[str]:
    """The arms that are this engine with its own early stopping: (a) and its ``a:NAME``."""
    return [a for a in arms if a == "a" or a.startswith("a:")]


def candidate(task: Task, name: str) -> dict[str, Any]:
    """Sampler ``name`` as arm ``a:name`` runs it: the study's own options where the study
    ships that sampler, else the sampler's defaults."""
    return dict(task.sampler) if task.sampler.get("name") == name else {"name": name}


def run_seed(task: Task, arms: list[str], seed: int, budget: Budget, tmp: Path,
             sampler: dict[str, Any] | None, syne_python: Path,
             skipped: dict[str, str]) -> SeedRun:
    reference = task.reference()
    tag = f"{task.key}{seed}"
    points: dict[str, list[Point]] = {}
    for arm in arms:
        if arm in skipped:
            continue
        if arm == "a":
            points[arm] = engine_arm(task, f"sqlite:///{tmp / f'a{tag}.db'}", f"a{tag}", seed,
                                     budget, sampler or task.sampler, reference)
        elif arm.startswith("a:"):
            name = arm.partition(":")[2]
            points[arm] = engine_arm(task, f"sqlite:///{tmp / f'a{name}{tag}.db'}",
                                     f"a{name}{tag}", seed, budget, candidate(task, name),
                                     reference)
        elif arm == "b":
            points[arm] = tune_arm(task, tmp / "tune", f"b{tag}", seed, budget,
                                   PicklableNSGAII(population_size=task.population, seed=seed))
        elif arm == "c":
            points[arm] = tune_arm(task, tmp / "tune", f"c{tag}", seed, budget,
                                   optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                              constant_liar=True))
        elif arm == "d":
            points[arm] = engine_arm(task, f"sqlite:///{tmp / f'd{tag}.db'}", f"d{tag}", seed,
                                     budget, {"name": "random"}, reference)
        elif arm == "e":
            got = syne_arm(task, tmp, f"e{tag}", seed, budget, syne_python)
            if isinstance(got, str):
                skipped[arm] = got
            else:
                points[arm] = got
        if arm in points:
            c = curve(points[arm], reference)
            print(f"  {tag} {label(arm)}: {len(c)} trials, {c[-1][0] if c else 0} epochs, "
                  f"hypervolume {final(c, budget.epochs):.4f} at {budget.epochs} epochs",
                  flush=True)
    return SeedRun({arm: curve(p, reference) for arm, p in points.items()}, budget.epochs)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.4f} [{min(values):.4f}-{max(values):.4f}]"


def _wins(mine: list[float], theirs: list[float]) -> int:
    return sum(x >= y - 1e-12 for x, y in zip(mine, theirs, strict=True))


def _rank(runs: list[SeedRun], arms: list[str], arm: str) -> float:
    """``arm``'s mean rank by final hypervolume over the seeds (1: best; a tie shares the
    better rank)."""
    ranks = []
    for r in runs:
        mine = final(r.curves[arm], r.budget)
        ranks.append(1 + sum(final(r.curves[o], r.budget) > mine + 1e-12 for o in arms))
    return statistics.mean(ranks)


def report(task: Task, runs: list[SeedRun], skipped: dict[str, str]) -> None:
    arms = [a for a in runs[0].curves if all(a in r.curves for r in runs)] if runs else []
    finals = {a: [final(r.curves[a], r.budget) for r in runs] for a in arms}
    engines = engine_arms(arms)
    peers = [a for a in arms if a not in engines]
    me = "a" if "a" in arms else (engines[0] if engines else None)
    print(f"\n{task.key}: {task.space} on {task.task}{' (smoke)' if task.smoke else ''}, "
          f"{task.epochs} epochs, grace {task.grace}, reduction {task.reduction_factor}; "
          f"{len(runs)} seeds; budget {sorted({r.budget for r in runs})} epochs per seed; "
          f"(a) below is {me}")
    print(f"{'arm':<37}{'median HV [min-max]':>26}{'rank':>6}{'epochs':>8}{'(a)>=':>7}"
          f"{'(a) reach':>11}{'ratio':>7}")
    for arm in arms:
        target = statistics.median(finals[arm])
        spent = statistics.median([r.used(arm) for r in runs])
        wins = reach = ratio = ""
        if me is not None and arm != me:
            wins = f"{_wins(finals[me], finals[arm])}/{len(runs)}"
            hits = [epochs_to_reach(r.curves[me], target, r.budget) for r in runs]
            if sum(h is not None for h in hits) * 2 > len(hits):  # the median seed reached it
                needed = statistics.median([h if h is not None else float("inf") for h in hits])
                reach = f"{needed:.0f}"
                ratio = f"{needed / spent:.2f}" if spent else ""
            else:
                reach = "not"
        print(f"{label(arm):<37}{_spread(finals[arm]):>26}{_rank(runs, arms, arm):>6.1f}"
              f"{spent:>8.0f}{wins:>7}{reach:>11}{ratio:>7}")
    for arm, reason in skipped.items():
        print(f"{label(arm):<37} skipped: {reason}")
    if me is not None and len(arms) > 1:
        cell = {arm: dict(enumerate(finals[arm])) for arm in arms}
        print("\n".join(quality_table(cell, me)))
    if not peers:
        return
    best_peer = max(peers, key=lambda p: statistics.median(finals[p]))
    need = WINS_NEEDED * len(runs)
    for arm in engines:
        beaten = all(_wins(finals[arm], finals[p]) >= need for p in peers)
        hits = [epochs_to_reach(r.curves[arm], statistics.median(finals[best_peer]), r.budget)
                for r in runs]
        ratios = [h / r.used(best_peer) if h is not None and r.used(best_peer) else float("inf")
                  for h, r in zip(hits, runs, strict=True)]
        share = statistics.median(ratios)
        print(f"target {arm} >= every peer on >= {need:g} of {len(runs)} seeds: "
              f"{'met' if beaten else 'NOT met'}; {arm} reaches the best peer's ({best_peer}) "
              f"median final HV with {share:.2f} of its epochs (<= {EPOCH_RATIO_MAX}): "
              f"{'met' if share <= EPOCH_RATIO_MAX else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="1 seed, 6 trials per arm and task: minutes on an idle machine")
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 5)")
    parser.add_argument("--trials", type=int, default=None,
                        help="sets the default budget (trials x epochs / 2) and the trial cap "
                             "(4 x trials) per arm, task and seed (default 12)")
    parser.add_argument("--budget", type=int, default=None,
                        help="epochs every arm trains per task and seed (default trials x the "
                             "task's epochs / 2)")
    parser.add_argument("--tasks", default=",".join(TASKS), help="comma-separated: "
                        + ", ".join(TASKS))
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated: a,b,c,d,e")
    parser.add_argument("--sampler", default=None,
                        help="arm (a)'s sampler name instead of the study's (tpe, gp, ...)")
    parser.add_argument("--samplers", default="",
                        help="comma-separated: also run arm (a) with each of these samplers, as "
                             "arms a:NAME side by side (e.g. tpe,gp,auto,nsga2)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="also write each task's and seed's curves (epochs trained, "
                             "hypervolume, per arm) to DIR/TASK-SEED.json")
    parser.add_argument("--syne-python", type=Path,
                        default=Path(__file__).resolve().parent.parent / ".venv-bench/bin/python",
                        help="the python of the Syne Tune environment (make bench-env)")
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    candidates = [n.strip() for n in args.samplers.split(",") if n.strip()]
    bad = [t for t in tasks if t not in TASKS] + [a for a in arms if a not in ARMS]
    if bad or not tasks or not arms:
        parser.error(f"unknown task or arm {bad}; tasks: {', '.join(TASKS)}; arms: a,b,c,d,e")
    unknown = [n for n in [args.sampler, *candidates] if n is not None and n not in SAMPLERS]
    if unknown:
        parser.error(f"unknown sampler {unknown[0]!r}; one of {', '.join(SAMPLERS)}")
    arms += [f"a:{n}" for n in candidates if f"a:{n}" not in arms]
    seeds = args.seeds or (1 if args.quick else 5)
    trials = args.trials or (6 if args.quick else 12)
    sampler = {"name": args.sampler} if args.sampler else None

    import ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # Tune's classic console output: silent at verbose=0
    here = str(Path(__file__).resolve().parent)  # Ray's workers import _search_arms from here
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])
    ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, num_cpus=2)
    start = time.perf_counter()
    skipped: dict[str, str] = {}
    results: dict[str, list[SeedRun]] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NAS_RUNS"] = str(tmp / "nas_runs")
        for key in tasks:
            for seed in range(seeds):
                task = TASKS[key]
                budget = Budget(args.budget or trials * task.epochs // 2, 4 * trials)
                run = run_seed(task, arms, seed, budget, tmp, sampler, args.syne_python,
                               skipped)
                results.setdefault(key, []).append(run)
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / f"{key}-{seed}.json").write_text(json.dumps(
                        {"budget": run.budget, "curves": run.curves}))
                print(f"{key} seed {seed} done after {time.perf_counter() - start:.0f} s",
                      flush=True)
                if seed + 1 < seeds:  # the tables so far: a run cut short keeps them
                    report(TASKS[key], results[key], skipped)
    ray.shutdown()
    print(f"\nbudget: {args.budget or f'{trials} x epochs / 2'} epochs per arm, task and seed "
          f"(at most {4 * trials} trials); {WORKERS} at once; arm (a)'s "
          f"sampler: {args.sampler or 'the study' + chr(39) + 's'}; hypervolume normalised "
          "against the study's fixed reference point")
    for key, runs in results.items():
        report(TASKS[key], runs, skipped)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
