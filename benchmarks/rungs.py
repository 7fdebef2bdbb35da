"""What multi-objective ASHA's rungs stop and promote, replayed on trials trained to the end.

    python benchmarks/rungs.py [--tasks digits,vqa] [--seeds 2] [--trials 12] [--keep DIR]
                               [--replay DIR] [--budget EPOCHS] [--orders N]

Per task and seed the engine trains ``--trials`` random architectures of ``benchmarks/search.py``'s
task to the full epochs, without early stopping, two at once; each trial's per-epoch values are
its learning curve. The rules of ``studies.asha.Rungs`` (and the variants named in ``RULES``) are
then replayed on those curves in the order the trials were drawn, as the scheduler would have
met them, and for each rule the table gives: the trials stopped at each rung, the trials of the
final front (at the full epochs, all trials) that it stopped, the normalised hypervolume of the
trials it lets finish against that of all trials, and the epochs it trains (a stopped trial the
epochs it reached). Also printed: the rank correlation (Spearman) between each rung's accuracy
and the final accuracy, i.e. how much a rung's comparison says about the end.

``--keep DIR`` writes the curves as JSON (one file per task and seed) and ``--replay DIR``
replays such files without training.

``--budget EPOCHS`` replays each rule as ``benchmarks/search.py`` scores an arm: the trials come
in ``--orders`` random orders drawn from each seed's curves, two train at once (one epoch a
step each, rung decisions as each reaches a rung), everything stops once ``EPOCHS`` epochs are
trained, and the rule is scored by the normalised hypervolume of the trials that finished the
full epochs by then (mean over the orders and seeds, with the mean number of trials started and
finished). The sampler is random here: the rule alone decides. Besides ``studies.asha.Rungs``'
variants it replays Tune's ``ASHAScheduler`` rule on accuracy alone and Syne Tune's MOASHA rule
(both re-implemented here from their sources: a rung's first record passes; Tune stops a trial
below the ``1 - 1/eta`` quantile of the accuracies recorded before it; MOASHA stops one whose
position among the rung's records and itself, by non-dominated rank then crowding, is past
``1/eta`` of them).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _search_arms import DIRECTIONS, Task
from search import TASKS

from studies import create_study, run_study
from studies._tune import validation_samples
from studies.asha import Rungs, priority_order
from studies.pareto import nondominated_mask, normalized_hypervolume, to_minimization
from studies.store import trial_attrs

Curve = dict[str, Any]  # {"number", "cost": [params, madds], "values": [acc per epoch]}
Rule = Callable[[int, int, int, Sequence[str], int | None], Rungs]

#: The rules replayed: the shipped one (accuracies compared within the noise of the task's
#: ``samples`` validation samples) and the variants ``studies.asha.Rungs`` offers.
RULES: dict[str, Rule] = {
    "shipped": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions, samples=samples),
    "exact dominance": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions),
    "ranked only": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions, keep_nondominated=False),
    "min 4 peers": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions, min_peers=4, samples=samples),
    "min 6 peers": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions, min_peers=6, samples=samples),
    "no stopping": lambda grace, eta, epochs, directions, samples: Rungs(
        grace, eta, epochs, directions, min_peers=10**9),
}


def samples_of(task: Task) -> int | None:
    """The validation samples the engine's rungs compare ``task``'s accuracies within."""
    return validation_samples(task.spec("samples", 0, 1, task.sampler))


def train_curves(task: Task, seed: int, trials: int, tmp: Path) -> list[Curve]:
    """``trials`` random architectures of ``task`` trained to the full epochs."""
    spec = task.spec(f"rungs{task.key}{seed}", seed, trials, {"name": "random"},
                     early_stopping="none")
    run = create_study(spec, f"sqlite:///{tmp / f'{task.key}{seed}.db'}")
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        run_study(run)
    out = []
    for t in sorted(run.study.get_trials(deepcopy=False), key=lambda t: t.number):
        attrs = trial_attrs(spec.name, t.number, t.user_attrs)
        if attrs.status != "completed" or attrs.cost is None:
            continue
        values = [t.intermediate_values[e] for e in sorted(t.intermediate_values)]
        if len(values) == task.epochs:
            out.append({"number": t.number, "values": values,
                        "cost": [float(attrs.cost["params"]), float(attrs.cost["madds"])]})
    return out


def replay(rungs: Rungs, curves: list[Curve]) -> dict[int, int]:
    """The epoch each trial stops at under ``rungs`` (its full epochs where it finishes), the
    trials meeting each rung in the order they were drawn."""
    reached = {c["number"]: rungs.max_epochs for c in curves}
    for epoch in rungs.epochs:  # every trial meets rung 1 before any meets rung 2: two at once
        for c in curves:
            if reached[c["number"]] < rungs.max_epochs:
                continue
            vector = [c["values"][epoch - 1], *c["cost"]]
            if rungs.should_stop(c["number"], epoch, vector):
                reached[c["number"]] = epoch
    return reached


class TuneAsha:
    """Tune's ``ASHAScheduler`` rule at one bracket (``ray.tune.schedulers.async_hyperband``):
    a trial stops at a rung when its accuracy is below the ``1 - 1/eta`` quantile of those
    recorded there before it."""

    def __init__(self, grace: int, eta: int, epochs: int) -> None:
        self.epochs = Rungs(grace, eta, epochs, DIRECTIONS).epochs
        self.eta = eta
        self.records: dict[int, list[float]] = {}

    def should_stop(self, trial: int, epoch: int, vector: Sequence[float]) -> bool:
        if epoch not in self.epochs:
            return False
        recorded = self.records.setdefault(epoch, [])
        stop = bool(recorded) and vector[0] < float(
            np.nanpercentile(recorded, (1 - 1 / self.eta) * 100))
        recorded.append(float(vector[0]))
        return stop


class MoashaRule:
    """Syne Tune's MOASHA rule (``syne_tune.optimizer.schedulers.asha.Bracket`` with a
    non-dominated priority; crowding stands in for its epsilon-net tie-break): a trial stops
    when its position among the rung's records and itself is past ``1/eta`` of them."""

    def __init__(self, grace: int, eta: int, epochs: int) -> None:
        self.epochs = Rungs(grace, eta, epochs, DIRECTIONS).epochs
        self.eta = eta
        self.records: dict[int, list[tuple[float, ...]]] = {}

    def should_stop(self, trial: int, epoch: int, vector: Sequence[float]) -> bool:
        if epoch not in self.epochs:
            return False
        recorded = self.records.setdefault(epoch, [])
        stop = False
        if recorded:
            _, order = priority_order(to_minimization([*recorded, tuple(vector)], DIRECTIONS))
            stop = order.index(len(recorded)) / (len(recorded) + 1) > 1 / self.eta
        recorded.append(tuple(float(v) for v in vector))
        return stop


def _rungs_rule(rule: Rule) -> Callable[[int, int, int, int | None], Rungs]:
    return lambda grace, eta, epochs, samples: rule(grace, eta, epochs, DIRECTIONS, samples)


#: Every rule under a budget: made from (grace, eta, epochs, the task's validation samples).
BUDGET_RULES: dict[str, Callable[[int, int, int, int | None], Any]] = {
    **{name: _rungs_rule(rule) for name, rule in RULES.items()},
    "Tune ASHA (accuracy)": lambda grace, eta, epochs, samples: TuneAsha(grace, eta, epochs),
    "Syne MOASHA": lambda grace, eta, epochs, samples: MoashaRule(grace, eta, epochs),
}


def under_budget(rule: Any, curves: list[Curve], budget: int, epochs: int,
                 workers: int = 2) -> tuple[list[list[float]], int]:
    """``curves`` (in this order) under ``rule`` with ``workers`` at once until ``budget``
    epochs are trained: the final vectors of the trials that finished the full epochs, and the
    number of trials started."""
    queue = list(curves)
    running: list[list[Any]] = []  # [curve, epochs trained]
    finished: list[list[float]] = []
    used = started = 0
    while used < budget:
        while len(running) < workers and queue:
            running.append([queue.pop(0), 0])
            started += 1
        if not running:
            break
        for slot in list(running):
            if used >= budget:
                break
            c = slot[0]
            slot[1] += 1
            used += 1
            epoch = slot[1]
            vector = [c["values"][epoch - 1], *c["cost"]]
            if epoch >= epochs:
                finished.append(vector)
                running.remove(slot)
            elif rule.should_stop(c["number"], epoch, vector):
                running.remove(slot)
    return finished, started


def summarise_budget(task: Task, runs: list[list[Curve]], reference: list[float], budget: int,
                     orders: int) -> None:
    print(f"\n{task.key}: {budget} epochs per run, {orders} random orders of each seed's "
          f"{[len(r) for r in runs]} trials; grace {task.grace}, reduction "
          f"{task.reduction_factor}, {task.epochs} epochs")
    samples = samples_of(task)
    print(f"  {'rule':<24}{'HV at budget':>14}{'[p10-p90]':>18}{'started':>9}{'finished':>10}")
    for name, make in BUDGET_RULES.items():
        hvs, started, done = [], [], []
        for seed, curves in enumerate(runs):
            rng = np.random.default_rng(seed)
            for _ in range(orders):
                order = [curves[i] for i in rng.permutation(len(curves))]
                rule = make(task.grace, task.reduction_factor, task.epochs, samples)
                finals, n = under_budget(rule, order, budget, task.epochs)
                hvs.append(normalized_hypervolume(finals, DIRECTIONS, reference))
                started.append(n)
                done.append(len(finals))
        lo, hi = np.percentile(hvs, [10, 90])
        print(f"  {name:<24}{statistics.mean(hvs):>14.4f}{f'[{lo:.4f}-{hi:.4f}]':>18}"
              f"{statistics.mean(started):>9.1f}{statistics.mean(done):>10.1f}")


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    if len(x) < 3 or np.std(rx) == 0 or np.std(ry) == 0:
        return float("nan")
    return float(np.corrcoef(rx, ry)[0, 1])


def summarise(task: Task, runs: list[list[Curve]], reference: list[float]) -> None:
    samples = samples_of(task)
    print(f"\n{task.key}: {task.epochs} epochs, grace {task.grace}, reduction "
          f"{task.reduction_factor}; {len(runs)} seeds, {[len(r) for r in runs]} trials "
          f"trained to the end; accuracies compared within {samples} validation samples")
    probe = Rungs(task.grace, task.reduction_factor, task.epochs, DIRECTIONS)
    for epoch in probe.epochs:
        rho = [spearman([c["values"][epoch - 1] for c in r], [c["values"][-1] for c in r])
               for r in runs]
        print(f"  Spearman(accuracy at epoch {epoch}, at epoch {task.epochs}) per seed: "
              + ", ".join(f"{v:.2f}" for v in rho))
    print(f"  {'rule':<22}{'stopped per rung':>20}{'front stopped':>15}{'HV kept':>10}"
          f"{'epochs':>9}")
    for name, rule in RULES.items():
        per_rung: dict[int, int] = {}
        lost = front_size = 0
        kept, full, epochs, all_epochs = [], [], 0, 0
        for curves in runs:
            if not curves:
                continue
            rungs = rule(task.grace, task.reduction_factor, task.epochs, DIRECTIONS, samples)
            reached = replay(rungs, curves)
            finals = [[c["values"][-1], *c["cost"]] for c in curves]
            front = nondominated_mask(to_minimization(finals, DIRECTIONS))
            front_size += int(front.sum())
            lost += sum(bool(f) and reached[c["number"]] < task.epochs
                        for f, c in zip(front, curves, strict=True))
            for c in curves:
                if reached[c["number"]] < task.epochs:
                    per_rung[reached[c["number"]]] = per_rung.get(reached[c["number"]], 0) + 1
            survivors = [v for v, c in zip(finals, curves, strict=True)
                         if reached[c["number"]] == task.epochs]
            kept.append(normalized_hypervolume(survivors, DIRECTIONS, reference))
            full.append(normalized_hypervolume(finals, DIRECTIONS, reference))
            epochs += sum(reached.values())
            all_epochs += task.epochs * len(curves)
        stops = ", ".join(f"{e}: {n}" for e, n in sorted(per_rung.items())) or "none"
        share = statistics.mean(k / f if f else 1.0 for k, f in zip(kept, full, strict=True))
        print(f"  {name:<22}{stops:>20}{f'{lost}/{front_size}':>15}{share:>10.2f}"
              f"{f'{epochs}/{all_epochs}':>9}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", default="digits,vqa")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--keep", type=Path, default=None, help="write the curves here")
    parser.add_argument("--budget", type=int, default=None,
                        help="also replay each rule under this budget of epochs")
    parser.add_argument("--orders", type=int, default=200,
                        help="random trial orders per seed under --budget")
    parser.add_argument("--replay", type=Path, default=None,
                        help="replay the curves kept here instead of training")
    args = parser.parse_args()
    tasks = [TASKS[t.strip()] for t in args.tasks.split(",") if t.strip()]
    runs: dict[str, list[list[Curve]]] = {}
    if args.replay is not None:
        for task in tasks:
            files = sorted(args.replay.glob(f"{task.key}-*.json"))
            runs[task.key] = [json.loads(f.read_text()) for f in files]
    else:
        import ray

        here = str(Path(__file__).resolve().parent)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [here, *filter(None, [os.environ.get("PYTHONPATH")])])
        ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False, num_cpus=2)
        with tempfile.TemporaryDirectory() as tmp_name:
            tmp = Path(tmp_name)
            os.environ["NAS_RUNS"] = str(tmp / "nas_runs")
            for task in tasks:
                for seed in range(args.seeds):
                    curves = train_curves(task, seed, args.trials, tmp)
                    runs.setdefault(task.key, []).append(curves)
                    if args.keep is not None:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        (args.keep / f"{task.key}-{seed}.json").write_text(json.dumps(curves))
                    print(f"{task.key} seed {seed}: {len(curves)} trials trained", flush=True)
        ray.shutdown()
    for task in tasks:
        summarise(task, runs.get(task.key, []), task.reference())
        if args.budget:
            summarise_budget(task, runs.get(task.key, []), task.reference(), args.budget,
                             args.orders)


if __name__ == "__main__":
    main()
