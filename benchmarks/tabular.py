"""Search quality on tabular benchmarks shipped in a registry package, with statistics: the
default sampler (``costaware``) against the samplers a careful user picks today.

    .venv/bin/python benchmarks/tabular.py [--quick] [--datasets cora,photo,...] [--seeds 20]
        [--budgets 10,20,50,200] [--arms default,gp,tpe,nsga2,random,ax,default@OPTION=VALUE]
        [--slow-seeds 5]
        [--slow-budget 50] [--keep FILE] [--from FILE]

Benchmarks: NAS-Bench-Graph's datasets (``benchmarks/_tabular.py``: 26,206 graph networks
each, validation accuracy, parameters and latency; ``make bench-env`` installs the package that
ships the tables). Every arm searches by ask/tell, two trials at once (the oldest told first),
for the largest budget; its hypervolume (a fraction of the whole table's, against the table's
worst values) is read after each budget's trials. Arms, each set up as its expert would for
these budgets (``_tabular.ARMS``): ``default`` (this engine's ``costaware``: it looks the costs
up before choosing, as the engine computes them before training), Optuna's ``gp`` (told the
table is noise-free), multivariate ``tpe`` with a constant liar, ``nsga2`` (population 20),
``random``, and ``ax`` (Ax's Client, qLogNEHVI, in the benchmark's own environment; skipped
with the reason where it cannot run). ``default@OPTION=VALUE[+OPTION=VALUE]`` is the default
sampler with those options, in the same tables (``default@early_trials=0``: the default without
its wider look while a study is small).

The slow arms (``gp``: seconds per suggestion; ``ax``: tens of seconds, so only when named in
``--arms``) run only on the first ``--slow-datasets`` datasets, ``--slow-seeds`` seeds and up
to ``--slow-budget`` trials; their medians are over those seeds and each paired test over the
seeds both arms ran. Printed per benchmark and budget: each arm's median
hypervolume fraction, its spread (sample standard deviation over seeds), its rank by median,
and the default's wins per seed and one-sided paired Wilcoxon p against it
(``benchmarks/_quality.py``); then the issue's targets over every benchmark and budget; then
when the default's convergence rule (``studies.convergence``) would have stopped each run and
the hypervolume given up against the whole largest budget (``benchmarks/convergence.py``
calibrates the rule).

``--quick``: 3 datasets, 5 seeds, ``gp`` on the first dataset, 2 seeds, up to 50 trials. The
default: 8 datasets, 20 seeds, budgets 10, 20, 50 and 200 (a small study and a team's), ``gp``
on the first 2, 5 seeds, up to 50 trials. On a two-core machine (2026-11-28) the default run
with ``default@early_trials=0`` beside it took 686 s (a ``gp`` seed of 50 trials 22-38 s);
budgets 50 and 200 alone took 652 s and ``--quick`` 99 s. The table is in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _quality import Cell, table, targets
from _tabular import (
    ARMS,
    DATASETS,
    DIRECTIONS,
    VARIANT,
    Table,
    curve,
    extract,
    load,
    run_arm,
    variant,
)

from nas.errors import ConfigError
from studies.convergence import (
    DEFAULT_PATIENCE,
    NOISE_FRACTION,
    convergence,
    hypervolume_noise,
)
from studies.costaware import GAIN_KEY

SLOW = ("gp", "ax")
ALL_ARMS = ("default", "gp", "tpe", "nsga2", "random", "ax")
DEFAULT_ARMS = ("default", "gp", "tpe", "nsga2", "random")
WORKERS = 2


def measurement_noise(t: Table, valid_test: np.ndarray) -> float:
    """The noise of one measured accuracy, from the table itself: two held-out estimates of
    each network (validation and test accuracy) disagree by the noise of both, so the spread
    of their difference over the table, over the square root of 2 (an upper estimate: it also
    holds what differs between the splits)."""
    diff = valid_test[:, 0] - valid_test[:, 1]
    return float(np.std(diff - diff.mean()) / np.sqrt(2))


def ax_arm(t: Table, table_json: Path, seed: int, trials: int, bench_python: Path,
           folder: Path) -> list[list[float] | None] | str:
    """Ax's arm in the benchmark environment: the values told, or why it could not run."""
    job, out = folder / f"ax-{t.name}-{seed}.json", folder / f"ax-{t.name}-{seed}-out.json"
    job.write_text(json.dumps({"table": str(table_json), "seed": seed, "trials": trials,
                               "workers": WORKERS}))
    if not bench_python.exists():
        return f"no benchmark environment at {bench_python} (make bench-env)"
    here = Path(__file__).resolve().parent
    proc = subprocess.run([str(bench_python), str(here / "_ax_arm.py"), str(job), str(out)],
                          capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if proc.returncode != 0 or not out.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Ax's run failed (exit {proc.returncode}): {tail}"
    return [row["values"] for row in json.loads(out.read_text())]


def run_default(t: Table, seed: int, trials: int) -> tuple[list[list[float] | None],
                                                            list[float | None]]:
    """The default arm's values told and the expected gain it recorded for each trial."""
    studies: list[optuna.Study] = []
    told = run_arm(t, ARMS["default"](seed), trials, WORKERS, on_study=studies.append)
    # the order told (two at once, the oldest first) is the order asked: trial numbers
    gains = [x.system_attrs.get(GAIN_KEY) for x in sorted(
        studies[0].get_trials(deepcopy=False), key=lambda x: x.number)]
    return told, gains


def thresholds(t: Table, told: list[list[float] | None], sd: float) -> list[float]:
    """The hypervolume's noise when each trial was asked, as the sampler takes it: the front of
    the trials told by then (``WORKERS`` at once, the oldest told first: all but the last
    ``WORKERS - 1`` asked), each accuracy's noise ``sd``."""
    out = []
    for i in range(len(told)):
        seen = [v for v in told[:max(0, i - WORKERS + 1)] if v is not None]
        out.append(hypervolume_noise(seen, DIRECTIONS, t.reference, 0, sd) if seen else 0.0)
    return out


def stop_report(runs: dict[str, dict[int, tuple[list[Any], list[float | None]]]],
                tables: dict[str, Table], noise: dict[str, float], budget: int) -> list[str]:
    """When the convergence rule would have stopped each default run, and what it gave up (a
    share of the hypervolume the run reached at ``budget``)."""
    lines = [f"convergence of the default (patience {DEFAULT_PATIENCE}, {NOISE_FRACTION:g} x "
             "the hypervolume's noise from each front point's accuracy noise, measured per "
             f"table) within {budget} trials:",
             f"{'benchmark':<11}{'acc noise':>10}{'stopped':>9}{'median stop':>13}"
             f"{'HV given up (median, max)':>28}"]
    for name, by_seed in runs.items():
        t = tables[name]
        stops, lost = [], []
        for told, gains in by_seed.values():
            found = convergence(gains[:budget], [NOISE_FRACTION * n for n in
                                                 thresholds(t, told, noise[name])[:budget]])
            at = budget if found.at is None else found.at + 1
            stops.append(at)
            final = curve(t, told, [budget])[0]
            lost.append((final - curve(t, told, [at])[0]) / final if final > 0 else 0.0)
        stopped = sum(s < budget for s in stops)
        lines.append(f"{name:<11}{noise[name]:>10.4f}{f'{stopped}/{len(stops)}':>9}"
                     f"{statistics.median(stops):>13.0f}"
                     f"{f'{statistics.median(lost):.1%}, {max(lost):.1%}':>28}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="3 datasets, 5 seeds, slow arms 2 seeds")
    parser.add_argument("--datasets", default=None, help="comma-separated: " + ",".join(DATASETS))
    parser.add_argument("--seeds", type=int, default=None, help="seeds 0..N-1 (default 20)")
    parser.add_argument("--budgets", default="10,20,50,200")
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS),
                        help="comma-separated: " + ",".join(ALL_ARMS) + " (ax: minutes per "
                        "trial on two busy cores, so not by default), or default@OPTION=VALUE"
                        "[+OPTION=VALUE]: the default sampler with those options")
    parser.add_argument("--slow-seeds", type=int, default=None,
                        help="seeds of the slow arms gp and ax (default 5)")
    parser.add_argument("--slow-budget", type=int, default=50,
                        help="the most trials a slow arm runs")
    parser.add_argument("--slow-datasets", type=int, default=None,
                        help="the slow arms run on the first N datasets (default 2; quick 1)")
    parser.add_argument("--keep", type=Path, default=None, help="write every curve to FILE")
    parser.add_argument("--bench-python", type=Path,
                        default=Path(__file__).resolve().parent.parent / ".venv-bench/bin/python")
    args = parser.parse_args()
    datasets = (args.datasets.split(",") if args.datasets else
                (["cora", "photo", "arxiv"] if args.quick else list(DATASETS)))
    arms = [a for a in args.arms.split(",") if a]
    budgets = sorted(int(b) for b in args.budgets.split(","))
    factories = dict(ARMS)
    try:
        factories.update({a: f for a in arms if (f := variant(a)) is not None})
    except ConfigError as exc:
        parser.error(str(exc))
    bad = [d for d in datasets if d not in DATASETS] + [
        a for a in arms if a not in ALL_ARMS and a not in factories]
    if bad or "default" not in arms:
        parser.error(f"unknown dataset or arm {bad} (the arms must include default)")
    seeds = args.seeds or (5 if args.quick else 20)
    slow_seeds = min(seeds, args.slow_seeds or (2 if args.quick else 5))
    slow_datasets = datasets[:args.slow_datasets or (1 if args.quick else 2)]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import torch

    torch.set_num_threads(1)  # GPSampler's: the machine's two cores are shared
    start = time.perf_counter()
    curves: dict[str, dict[str, dict[int, list[float]]]] = {}
    runs: dict[str, dict[int, tuple[list[Any], list[float | None]]]] = {}
    tables: dict[str, Table] = {}
    noise: dict[str, float] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in datasets:
            try:
                path = extract(name, args.bench_python, folder)
            except RuntimeError as exc:
                raise SystemExit(f"tabular.py: {exc}") from None
            t = tables[name] = load(path)
            rows = np.asarray(json.loads(path.read_text())["rows"], dtype=float)
            noise[name] = measurement_noise(t, rows[:, :2])
            for arm in arms:
                if arm in skipped:
                    continue
                slow = arm in SLOW
                arm_budgets = [b for b in budgets if not slow or b <= args.slow_budget]
                if not arm_budgets or (slow and name not in slow_datasets):
                    continue
                for seed in range(slow_seeds if slow else seeds):
                    began = time.perf_counter()
                    if arm == "ax":
                        got = ax_arm(t, path, seed, max(arm_budgets), args.bench_python, folder)
                        if isinstance(got, str):
                            skipped[arm] = got
                            break
                        told = got
                    elif arm == "default":
                        told, gains = run_default(t, seed, max(arm_budgets))
                        runs.setdefault(name, {})[seed] = (told, gains)
                    else:
                        told = run_arm(t, factories[arm](seed), max(arm_budgets), WORKERS)
                    curves.setdefault(name, {}).setdefault(arm, {})[seed] = curve(
                        t, told, arm_budgets)
                    print(f"  {name} {arm} seed {seed}: "
                          + ", ".join(f"{v:.4f}" for v in curves[name][arm][seed])
                          + f" ({time.perf_counter() - began:.1f} s)", flush=True)
    if args.keep is not None:
        args.keep.write_text(json.dumps({"budgets": budgets, "curves": curves}))
    report(curves, budgets, args.slow_budget, skipped)
    if runs:
        print()
        print("\n".join(stop_report(runs, tables, noise, max(budgets))))
    print(f"total {time.perf_counter() - start:.0f} s")


def report(curves: dict[str, dict[str, dict[int, list[float]]]], budgets: list[int],
           slow_budget: int, skipped: dict[str, str]) -> None:
    cells: dict[str, Cell] = {}
    for name, by_arm in curves.items():
        for k, budget in enumerate(budgets):
            cell: Cell = {}
            for arm, by_seed in by_arm.items():
                if arm in SLOW and budget > slow_budget:
                    continue
                cell[arm] = {seed: c[k] for seed, c in by_seed.items()}
            cells[f"{name}@{budget}"] = cell
            print(f"\n{name}, {budget} trials: hypervolume as a fraction of the table's")
            print("\n".join(table(cell, "default")))
    for arm, reason in skipped.items():
        print(f"{arm} skipped: {reason}")
    print()
    # the targets are against the peers: a default@ arm is the default itself, otherwise set
    peers = {name: {a: v for a, v in cell.items() if not a.startswith(VARIANT)}
             for name, cell in cells.items()}
    print("\n".join(targets(peers, "default")))


if __name__ == "__main__":
    main()
