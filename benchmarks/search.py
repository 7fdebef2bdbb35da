"""Hypervolume reached against epochs consumed: this engine against Ray Tune + OptunaSearch.

    python benchmarks/search.py [--seeds 3] [--trials 24] [--epochs 4] [--steps 0]

Three arms on the ``quickstart`` space and task (tiny ViTs on digits, three objectives: accuracy,
params, MAdds, and its constraint params <= 2e5), on the same budget of epochs per seed: (b) and
(c) train ``--trials`` trials to the full epochs; (a) stops trials early, so it is given up to
twice the trials and its curve is cut where it has consumed (b)'s epochs:

(a) this engine as shipped: its default sampler (the quickstart study's NSGA-II), constraint
    checks before training, reuse of re-sampled architectures and multi-objective ASHA early
    stopping (``early_stopping: asha``);
(b) Ray Tune + Ray's own ``OptunaSearch`` written by hand: the same space as a define-by-run
    function, NSGA-II with the same population, every trial trained to the full epochs (Tune's
    ASHA takes one metric), costs computed in the trainable;
(c) random search: this engine with the random sampler and no early stopping.

Epochs consumed is the fair budget when trials stop early: a rejected or reused trial costs
none, a stopped one the epochs it ran. The hypervolume is computed over the feasible trials
(params <= 2e5) with every objective scaled over all arms' trials of that seed (reference point
1.1), so the arms are comparable. Printed: each arm's final hypervolume and epochs per seed, the
epochs (a) needed to reach (b)'s final hypervolume, and the ratio to (b)'s epochs (target: at
most 0.70). ``--steps N`` caps the batches of an epoch (0: whole epochs, as the quickstart
study trains); the defaults take about 20 minutes on two cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from nas.cost import estimate_cost
from nas.tasks import TaskGeometry
from search_spaces import load_space
from studies import StudySpec, create_study, run_study
from studies.pareto import hypervolume, normalise
from studies.record import Status, TrialKey

GEOMETRY = TaskGeometry("digits", "image", 10, image_size=32, in_chans=1)
DIRECTIONS = ["maximize", "minimize", "minimize"]
PARAMS_MAX = 2.0e5

Point = tuple[int, list[float] | None]  # epochs consumed by then, objective values (None: none)


def _train(steps: int) -> dict[str, Any]:
    return {"batch_size": 64, "warmup_epochs": 0.5,
            **({"max_steps_per_epoch": steps} if steps > 0 else {})}


def _study(name: str, seed: int, trials: int, epochs: int, steps: int, *,
           sampler: dict[str, Any], asha: bool) -> StudySpec:
    return StudySpec.from_dict({
        "name": name, "task": "digits", "space": "quickstart",
        "objectives": ["accuracy", "params", "madds"], "constraints": {"params_max": PARAMS_MAX},
        "sampler": sampler, "budget": {"trials": trials},
        "fidelity": {"epochs": epochs, "early_stopping": "asha" if asha else "none",
                     "grace_epochs": 1, "reduction_factor": 2},
        "resources": {"cpu": 1}, "seed": seed,
        "train": _train(steps),
    })


def engine_arm(url: str, spec: StudySpec) -> list[Point]:
    """The engine's trials in completion order: (epochs consumed so far, values or None)."""
    run = create_study(spec, url, geometry=GEOMETRY)
    with contextlib.redirect_stderr(io.StringIO()):
        run_study(run)
    trials = sorted(run.study.get_trials(deepcopy=False),
                    key=lambda t: t.datetime_complete or t.datetime_start or datetime.min)
    out: list[Point] = []
    used = 0
    for t in trials:
        status = t.user_attrs.get(TrialKey.STATUS)
        if status in (Status.COMPLETED, Status.STOPPED, Status.FAILED):
            used += int(t.user_attrs.get(TrialKey.EPOCHS_REACHED) or 0)
        values = list(t.values) if t.values is not None else None
        out.append((used, values))
    return out


class QuickstartSpace:
    """The ``quickstart`` space as OptunaSearch's define-by-run function (a module-level class:
    Tune pickles its searcher with the standard pickle)."""

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        config, overrides = load_space("quickstart").suggest(trial)
        return {"arch": config.to_dict(), "overrides": overrides}


def tune_arm(tmp: Path, name: str, seed: int, trials: int, epochs: int,
             steps: int) -> list[Point]:
    """Ray Tune + OptunaSearch (NSGA-II) by hand, every trial trained to ``epochs``."""
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    define_by_run = QuickstartSpace()
    settings = {**_train(steps), "epochs": epochs, "seed": seed}

    def trainable(config: dict[str, Any]) -> None:
        from nas.config import ArchConfig
        from studies.worker import evaluate_trial

        cost = estimate_cost(ArchConfig.from_dict(config["arch"]), GEOMETRY)

        def report(epoch: dict[str, Any]) -> bool:
            tune.report({"accuracy": float(epoch["value"]), "params": float(cost.params),
                         "madds": float(cost.madds), "epoch": int(epoch["epoch"])})
            return False

        evaluate_trial(config["arch"], {**settings, **config["overrides"]}, "digits", {},
                       report=report)

    searcher = OptunaSearch(define_by_run, metric=["accuracy", "params", "madds"],
                            mode=["max", "min", "min"],
                            sampler=optuna.samplers.NSGAIISampler(population_size=6, seed=seed))
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=trials, reuse_actors=True,
                                    max_concurrent_trials=2),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp / "tune"), verbose=0))
    grid = tuner.fit()
    results = [grid[i] for i in range(len(grid)) if grid[i].metrics]
    results.sort(key=lambda r: (r.metrics or {}).get("timestamp", 0))
    out: list[Point] = []
    used = 0
    for r in results:
        m = r.metrics or {}
        used += int(m.get("epoch", 0))
        feasible = m.get("params", np.inf) <= PARAMS_MAX
        out.append((used, [m["accuracy"], m["params"], m["madds"]] if feasible else None))
    return out


def _curves(arms: dict[str, list[Point]]) -> dict[str, list[tuple[int, float]]]:
    """Hypervolume after each trial of each arm, scaled over all arms' feasible points."""
    union = [v for points in arms.values() for _, v in points if v is not None]
    if not union:
        return {k: [] for k in arms}
    scaled, ref = normalise(union, DIRECTIONS)
    curves: dict[str, list[tuple[int, float]]] = {}
    start = 0
    for name, points in arms.items():
        feasible = [v for _, v in points if v is not None]
        mine = scaled[start:start + len(feasible)]
        start += len(feasible)
        curve, seen = [], 0
        for used, v in points:
            if v is not None:
                seen += 1
            curve.append((used, hypervolume(mine[:seen], ref) if seen else 0.0))
        curves[name] = curve
    return curves


def _epochs_to_reach(curve: list[tuple[int, float]], target: float) -> int | None:
    for used, volume in curve:
        if volume >= target - 1e-12:
            return used
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=24, help="trials per arm and seed")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=0,
                        help="batches per epoch at most (0: whole epochs)")
    args = parser.parse_args()

    import ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # Tune's classic console output: silent at verbose=0
    ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
             num_cpus=2)
    rows = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        os.environ["NAS_RUNS"] = str(tmp / "nas_runs")
        for seed in range(args.seeds):
            arms = {
                "(a) engine, NSGA-II + MO-ASHA": engine_arm(
                    f"sqlite:///{tmp / f'a{seed}.db'}",
                    _study(f"a{seed}", seed, 2 * args.trials, args.epochs, args.steps,
                           sampler={"name": "nsga2", "population_size": 6}, asha=True)),
                "(b) Tune + OptunaSearch NSGA-II": tune_arm(
                    tmp, f"b{seed}", seed, args.trials, args.epochs, args.steps),
                "(c) random search": engine_arm(
                    f"sqlite:///{tmp / f'c{seed}.db'}",
                    _study(f"c{seed}", seed, args.trials, args.epochs, args.steps,
                           sampler={"name": "random"}, asha=False)),
            }
            names = list(arms)
            b_total = arms[names[1]][-1][0] if arms[names[1]] else 0
            # The same budget of epochs: (a)'s trials after it consumed (b)'s epochs do not count.
            arms[names[0]] = [p for p in arms[names[0]] if p[0] <= b_total]
            curves = _curves(arms)
            target = curves[names[1]][-1][1] if curves[names[1]] else 0.0
            reach = _epochs_to_reach(curves[names[0]], target)
            b_epochs = curves[names[1]][-1][0] if curves[names[1]] else 0
            rows.append((seed, curves, reach, b_epochs))
            print(f"seed {seed} done after {time.perf_counter() - start:.0f} s", flush=True)
    ray.shutdown()

    cap = f"at most {args.steps} batches each" if args.steps > 0 else "whole epochs"
    print(f"\n{args.trials} trials for (b) and (c), (a) up to {2 * args.trials} within (b)'s "
          f"epochs; {args.epochs} epochs ({cap}), quickstart space on digits; hypervolume "
          "scaled over all arms per seed")
    print(f"{'seed':<5}{'arm':<34}{'asked':>7}{'final HV':>9}{'epochs':>8}")
    for seed, curves, _, _ in rows:
        for name, curve in curves.items():
            hv, used = (curve[-1][1], curve[-1][0]) if curve else (0.0, 0)
            print(f"{seed:<5}{name:<34}{len(curve):>7}{hv:>9.4f}{used:>8}")
    ratios = []
    for seed, _, reach, b_epochs in rows:
        if reach is None:
            print(f"seed {seed}: (a) did not reach (b)'s final hypervolume within its budget")
        else:
            ratios.append(reach / b_epochs)
            print(f"seed {seed}: (a) reached (b)'s final hypervolume after {reach} epochs, "
                  f"(b) used {b_epochs}: ratio {reach / b_epochs:.2f}")
    if ratios:
        print(f"median ratio over the seeds that reached it: {statistics.median(ratios):.2f} "
              f"(target <= 0.70); {len(ratios)} of {len(rows)} seeds reached it")
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
