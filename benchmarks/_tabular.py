"""Tabular benchmarks shipped inside a registry package, and the arms that search them by
ask/tell (``benchmarks/tabular.py``, ``benchmarks/sampler_speed.py``).

NAS-Bench-Graph (``nas-bench-graph`` on PyPI, installed in the benchmark's own environment by
``make bench-env``) ships, for 8 node-classification datasets, every one of 26,206 graph
networks' validation and test accuracy, parameters and latency. A network is a link pattern (9)
and four operations (9 each): five categorical parameters; isomorphic combinations are the same
network (the package's ``valid_hash``), the combinations with every operation ``skip`` none.
``_tabular_extract.py`` reads the package's data in that environment and writes it as JSON;
nothing is downloaded at run time.

Objectives: validation accuracy (maximised), parameters and latency (minimised): three, with
the costs, as in this system, known for an architecture before it is evaluated (the cost-aware
sampler looks them up; the other arms see them only with the accuracy). The reference point is
the table's worst value of each (lowest accuracy, most parameters, slowest), the ideal as in
``studies.pareto`` (accuracy 1, costs 0); a search's hypervolume is printed as a fraction of the
whole table's.
"""

from __future__ import annotations

import json
import subprocess
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from nas.errors import ConfigError
from studies.costaware import Costing, bind
from studies.pareto import hypervolume, nondominated_mask, scale_to_reference, to_minimization
from studies.samplers import make_sampler
from studies.spec import DEFAULT_SAMPLER

DATASETS = ("cora", "citeseer", "pubmed", "cs", "physics", "photo", "computers", "arxiv")
DIRECTIONS = ["maximize", "minimize", "minimize"]
PARAMS = ("link", "op1", "op2", "op3", "op4")


@dataclass(frozen=True)
class Table:
    """One dataset's table: ``values`` (rows: accuracy, params, latency), ``combos`` the row of
    each combination (index ``link * 9**4 + ops in base 9``; -1: no network)."""

    name: str
    links: int
    ops: tuple[str, ...]
    values: np.ndarray
    combos: np.ndarray

    @property
    def reference(self) -> list[float]:
        return [float(self.values[:, 0].min()), float(self.values[:, 1].max()),
                float(self.values[:, 2].max())]

    def hypervolume(self, values: list[list[float]] | np.ndarray) -> float:
        """Normalised hypervolume of ``values`` against the table's reference."""
        if not len(values):
            return 0.0
        return hypervolume(scale_to_reference(values, DIRECTIONS, self.reference), np.ones(3))

    def best(self) -> float:
        """The whole table's hypervolume: the most any search can reach."""
        front = self.values[nondominated_mask(to_minimization(self.values, DIRECTIONS))]
        return self.hypervolume(front)

    def suggest(self, trial: optuna.Trial) -> int:
        """Draw the five parameters on ``trial``: the row of the network, -1 for none."""
        link = trial.suggest_categorical("link", list(range(self.links)))
        index = int(link)
        for name in PARAMS[1:]:
            op = trial.suggest_categorical(name, list(self.ops))
            index = index * len(self.ops) + self.ops.index(str(op))
        return int(self.combos[index])

    def row_of(self, params: dict[str, Any]) -> int:
        try:
            return self.suggest(optuna.trial.FixedTrial(params))
        except (ValueError, KeyError):
            return -1


def extract(dataset: str, bench_python: Path, folder: Path) -> Path:
    """``folder/DATASET.json`` from the package in the benchmark environment (written once)."""
    out = folder / f"{dataset}.json"
    if not out.exists():
        here = Path(__file__).resolve().parent
        try:
            proc = subprocess.run([str(bench_python), str(here / "_tabular_extract.py"),
                                   dataset, str(out)], capture_output=True, text=True,
                                  check=False)
        except OSError as exc:
            raise RuntimeError(f"cannot run {bench_python} ({exc.strerror}): make bench-env "
                               "makes it, or pass --bench-python") from None
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"cannot read NAS-Bench-Graph's {dataset} with {bench_python} "
                               f"(make bench-env): {tail}")
    return out


def load(path: Path) -> Table:
    data = json.loads(path.read_text())
    rows = np.asarray(data["rows"], dtype=float)
    return Table(data["dataset"], len(data["links"]), tuple(data["ops"]),
                 rows[:, [0, 2, 3]], np.asarray(data["combos"], dtype=int))


# ----------------------------------------------------------------------------- the arms
def costing(table: Table) -> Costing:
    """The cost-aware sampler's view of the table: a candidate's costs looked up before it is
    evaluated, its key the network's row."""

    def cost_of(trial: optuna.Trial) -> tuple[str, list[float]] | None:
        row = table.suggest(trial)
        return None if row < 0 else (str(row), [float(v) for v in table.values[row, 1:]])

    def key_of(params: dict[str, Any]) -> str | None:
        row = table.row_of(params)
        return None if row < 0 else str(row)

    return Costing(cost_of, key_of, 0, DIRECTIONS, table.reference, full_epochs=1)


def _tpe(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, constant_liar=True)


def _gp(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.GPSampler(seed=seed, deterministic_objective=True,
                                     warn_independent_sampling=False)


def _nsga2(seed: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=20)


def _default(seed: int) -> optuna.samplers.BaseSampler:
    """The sampler a study file without ``sampler`` gets, built as the engine builds it."""
    return make_sampler(DEFAULT_SAMPLER, seed)


#: How an arm that is the default sampler with other options begins (:func:`variant`).
VARIANT = "default@"


def variant(arm: str) -> Callable[[int], optuna.samplers.BaseSampler] | None:
    """Arm ``default@OPTION=VALUE[+OPTION=VALUE...]``: the default sampler with those options
    (``default@early_trials=0``: without the wider look of small studies), built as the engine
    builds it; None where ``arm`` is not of that form. An unknown option or a bad value raises
    ``nas.errors.ConfigError``, as in a study file."""
    import yaml

    if not arm.startswith(VARIANT):
        return None
    rest = arm.removeprefix(VARIANT)
    options: dict[str, Any] = {}
    for item in rest.split("+"):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ConfigError(f"arm {arm!r}: options are written OPTION=VALUE joined by '+'")
        options[key] = yaml.safe_load(value)
    spec = {**DEFAULT_SAMPLER, **options}
    make_sampler(spec, 0)  # checked now, not in the middle of a run
    return lambda seed: make_sampler(spec, seed)


#: The arms run in this process, as each peer's expert would set it up for these budgets:
#: GP told the table is noise-free, TPE multivariate with a constant liar (OptunaHub's
#: AutoSampler's pick for a categorical space under 250 trials), NSGA-II with a population
#: of 20 (10 generations in 200 trials).
ARMS: dict[str, Callable[[int], optuna.samplers.BaseSampler]] = {
    "default": _default,
    "gp": _gp,
    "tpe": _tpe,
    "nsga2": _nsga2,
    "random": lambda seed: optuna.samplers.RandomSampler(seed=seed),
}


def run_arm(table: Table, sampler: optuna.samplers.BaseSampler, trials: int, workers: int,
            on_ask: Callable[[float, float], None] | None = None,
            on_study: Callable[[optuna.Study], None] | None = None
            ) -> list[list[float] | None]:
    """Ask/tell ``trials`` evaluations, ``workers`` at once (the oldest told first); each
    trial's values in the order told (None: no network). ``on_ask`` gets each ask's wall and
    process CPU seconds (the sampler's work: the ask and the draw of the parameters),
    ``on_study`` the study."""
    import time

    bind(sampler, costing(table))  # the cost-aware sampler looks the costs up
    study = optuna.create_study(directions=DIRECTIONS, sampler=sampler)
    if on_study is not None:
        on_study(study)
    running: deque[tuple[optuna.Trial, int]] = deque()
    out: list[list[float] | None] = []
    asked = 0
    while len(out) < trials:
        while len(running) < workers and asked < trials:
            start, cpu = time.perf_counter(), time.process_time()
            trial = study.ask()
            row = table.suggest(trial)
            if on_ask is not None:
                on_ask(time.perf_counter() - start, time.process_time() - cpu)
            running.append((trial, row))
            asked += 1
        trial, row = running.popleft()
        if row < 0:
            study.tell(trial, state=TrialState.FAIL)
            out.append(None)
        else:
            values = [float(v) for v in table.values[row]]
            study.tell(trial, values)
            out.append(values)
    return out


def curve(table: Table, told: list[list[float] | None], at: list[int]) -> list[float]:
    """The hypervolume after the first ``n`` trials for each ``n`` of ``at``, as a fraction of
    the table's."""
    best = table.best()
    return [table.hypervolume([v for v in told[:n] if v is not None]) / best for n in at]
