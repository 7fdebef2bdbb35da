"""Calibrating the convergence rule (``studies.convergence``) on the tabular benchmarks: when
the default sampler's runs would stop, and the hypervolume each gives up against its whole
budget, for several patiences.

    .venv/bin/python benchmarks/convergence.py [--quick] [--datasets cora,...] [--seeds 10]
        [--budget 200] [--patiences 20,30,50] [--factors 1,0.5,0.25]

Each run is the default arm of ``benchmarks/tabular.py`` (the shipped sampler, two trials at
once, the oldest told first) up to ``--budget`` trials; it records the expected gain of each
trial it chose. The hypervolume's noise at each ask is taken as the sampler takes it
(``hypervolume_noise`` of the front told so far), with each accuracy's noise estimated from the
table (``tabular.measurement_noise``: the spread of validation minus test accuracy over the
table, over the square root of 2). For each patience (and each factor: the noise scaled by it)
the rule stops a run at the first trial whose last ``patience`` gains add up to less than that
noise; printed per dataset: the runs
stopped, the median stop, and the hypervolume given up (what the run had at its budget minus
what it had at the stop, as a share of what it had at its budget: median and max over seeds).

``--quick``: 3 datasets, 4 seeds. The default: 8 datasets, 10 seeds, 200 trials.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import optuna

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tabular import DATASETS, extract, load
from tabular import measurement_noise, run_default, thresholds

from studies.convergence import convergence


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 datasets, 4 seeds")
    parser.add_argument("--datasets", default=None)
    parser.add_argument("--seeds", type=int, default=None, help="default 10")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--patiences", default="20,30,50")
    parser.add_argument("--factors", default="1,0.5,0.25", help="the noise scaled by each")
    parser.add_argument("--bench-python", type=Path,
                        default=Path(__file__).resolve().parent.parent / ".venv-bench/bin/python")
    args = parser.parse_args()
    datasets = (args.datasets.split(",") if args.datasets else
                (["cora", "photo", "pubmed"] if args.quick else list(DATASETS)))
    seeds = args.seeds or (4 if args.quick else 10)
    patiences = [int(p) for p in args.patiences.split(",")]
    factors = [float(f) for f in args.factors.split(",")]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    print(f"convergence rule on NAS-Bench-Graph: {seeds} seeds, {args.budget} trials each; "
          "HV given up = (HV at the budget - HV at the stop) / HV at the budget")
    print(f"{'dataset':<11}{'acc sd':>8}{'patience':>9}{'factor':>8}{'stopped':>9}"
          f"{'median stop':>13}{'given up: median':>18}{'max':>8}")
    for name in datasets:
        with tempfile.TemporaryDirectory() as folder:
            path = extract(name, args.bench_python, Path(folder))
            t = load(path)
            rows = np.asarray(json.loads(path.read_text())["rows"], dtype=float)
        sd = measurement_noise(t, rows[:, :2])
        runs = []
        for seed in range(seeds):
            told, gains = run_default(t, seed, args.budget)
            volumes = [t.hypervolume([v for v in told[:n] if v is not None])
                       for n in range(args.budget + 1)]
            runs.append((gains, thresholds(t, told, sd), volumes))
        for patience in patiences:
            for factor in factors:
                stops, lost = [], []
                for gains, noise, volumes in runs:
                    c = convergence(gains, [factor * n for n in noise], patience=patience)
                    at = args.budget if c.at is None else c.at + 1
                    stops.append(at)
                    final = volumes[args.budget]
                    lost.append((final - volumes[at]) / final if final > 0 else 0.0)
                stopped = sum(s < args.budget for s in stops)
                print(f"{name:<11}{sd:>8.4f}{patience:>9}{factor:>8g}"
                      f"{f'{stopped}/{seeds}':>9}{statistics.median(stops):>13.0f}"
                      f"{statistics.median(lost):>17.1%}{max(lost):>8.1%}", flush=True)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
