"""Engine overhead per trial against plain Optuna and against Ray Tune + OptunaSearch, side by side.

    python benchmarks/overhead.py [--trials 50] [--repeats 3] [--real-trials 3]

Both sides run the same multi-objective study on SQLite (a fresh file each): the same search
space (``quickstart``), the same sampler (random, seeded), the same number of trials, and an
objective that returns at once. Plain Optuna calls ``study.optimize`` with an objective that
draws the architecture from the space and returns made-up values. Ray Tune + OptunaSearch is
what a Tune user would write by hand for the same study: ``OptunaSearch`` over a define-by-run
space (the same ``quickstart`` mapping), the same multi-objective directions and sampler, an
Optuna RDB storage on SQLite, and a function trainable that computes the architecture's cost on
the meta device and reports the made-up accuracy with it (the cost model runs on the worker
there, in the driver here). The engine runs ``run_study`` (Ray Tune, its own searcher) with an
evaluator that returns at once, so what it measures is the engine's own work per trial: asking
Optuna, the cost on the meta device, the constraint and reuse checks, the trial's attributes,
Tune's trial start on a reused actor, its reports, and telling Optuna the result. Ray is
started once, before the timed runs (each Tune run's own start is inside them).

``--real-trials N`` trains N architectures of the quickstart study with the real trainer at its
full fidelity and with the threads one of its trials holds, to put the overhead next to a real
trial's time (the target: at most 2% of it; trials the study stops early take less).

Printed per side: milliseconds per trial over the whole run, and steady (from the first trial's
completion to the last's, divided by the trials between: the cost of one more trial once the
pool is up); the ratios of the engine to plain Optuna, with SQLite as Optuna opens it and in
write-ahead-log mode as the engine opens it (fewer fsyncs per commit), and the steady ratio
without the meta-device cost model, which plain Optuna does not run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import logging
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from nas.cost import estimate_cost
from nas.tasks import TaskGeometry
from search_spaces import load_space
from studies import StudySpec, create_study, load_study_spec, run_study

GEOMETRY = TaskGeometry("digits", "image", 10, image_size=32, in_chans=1)


def _value(arch: dict[str, Any]) -> float:
    return hashlib.sha1(json.dumps(arch, sort_keys=True).encode()).digest()[0] / 256


def noop(arch: dict[str, Any], settings: dict[str, Any], task: str,
         task_options: dict[str, Any], *, latency: bool = False, report: Any = None,
         ) -> dict[str, Any]:
    """The trivial evaluator (runs on a Ray worker; pickled by value from ``__main__``)."""
    return {"status": "completed", "value": _value(arch), "epochs": [], "seconds": 0.0}


def _spec(name: str, trials: int) -> StudySpec:
    return StudySpec.from_dict({
        "name": name, "task": "digits", "space": "quickstart",
        "objectives": [{"name": "accuracy"}, {"name": "params"}],
        "sampler": {"name": "random"}, "budget": {"trials": trials},
        "fidelity": {"epochs": 1}, "resources": {"cpu": 1}, "seed": 0,
    })


def _steady(study: optuna.Study) -> float:
    """Seconds per trial between the first and the last trial's completion (what a trial costs
    once everything is started)."""
    done = sorted(t.datetime_complete for t in study.trials if t.datetime_complete)
    return (done[-1] - done[0]).total_seconds() / (len(done) - 1)


def plain_optuna(url: str, trials: int, *, wal: bool = False) -> tuple[float, float]:
    """Seconds per trial of ``study.optimize`` on the trivial objective, whole and steady
    (``wal``: on a SQLite file in write-ahead-log mode, as the engine's storage opens it)."""
    space = load_space("quickstart")
    if wal:
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            conn.execute("PRAGMA journal_mode=WAL")

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        config, _ = space.suggest(trial)
        return _value(config.to_dict()), float(len(trial.params))

    study = optuna.create_study(storage=url, study_name="plain", sampler=optuna.samplers.
                                RandomSampler(seed=0), directions=["maximize", "minimize"])
    start = time.perf_counter()
    study.optimize(objective, n_trials=trials)
    return (time.perf_counter() - start) / trials, _steady(study)


def engine(url: str, trials: int, name: str) -> tuple[float, float]:
    """Seconds per trial of ``run_study`` with the trivial evaluator, whole and steady."""
    run = create_study(_spec(name, trials), url, geometry=GEOMETRY)
    start = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # the progress lines `nas run` shows
        run_study(run, evaluator=noop)
    return (time.perf_counter() - start) / trials, _steady(run.study)


class QuickstartSpace:
    """The ``quickstart`` space as OptunaSearch's define-by-run function (a module-level class:
    Tune pickles its searcher with the standard pickle)."""

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        config, overrides = load_space("quickstart").suggest(trial)
        return {"arch": config.to_dict(), "overrides": overrides}


def tune_optuna_search(url: str, trials: int, name: str) -> tuple[float, float]:
    """Seconds per trial of Ray Tune + OptunaSearch written by hand, whole and steady."""
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    define_by_run = QuickstartSpace()

    def trainable(config: dict[str, Any]) -> None:
        from nas.config import ArchConfig
        from nas.cost import estimate_cost

        arch = config["arch"]
        cost = estimate_cost(ArchConfig.from_dict(arch), GEOMETRY)
        tune.report({"accuracy": _value(arch), "params": float(cost.params)})

    storage = optuna.storages.RDBStorage(url)
    searcher = OptunaSearch(define_by_run, metric=["accuracy", "params"], mode=["max", "min"],
                            sampler=optuna.samplers.RandomSampler(seed=0), storage=storage,
                            study_name=name)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        tune_config=tune.TuneConfig(search_alg=searcher, num_samples=trials, reuse_actors=True,
                                    max_concurrent_trials=2),
        run_config=tune.RunConfig(name=name, storage_path=str(Path(url[10:]).parent / "tune"),
                                  verbose=0))
    start = time.perf_counter()
    tuner.fit()
    elapsed = (time.perf_counter() - start) / trials
    return elapsed, _steady(optuna.load_study(study_name=name, storage=url))


def real_trial_seconds(count: int) -> list[float]:
    """Wall seconds of ``count`` real quickstart trials (its first architectures, its fidelity)."""
    import studies
    from studies.worker import evaluate_trial

    spec = load_study_spec(Path(studies.__file__).parent / "quickstart.yaml")
    space = load_space(spec.space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0),
                                directions=spec.directions)
    settings = {**spec.train, "epochs": spec.fidelity.epochs, "seed": spec.seed}
    import torch

    torch.set_num_threads(max(1, int(spec.resources.cpu)))  # the CPUs a study trial holds
    out = []
    for _ in range(count):
        trial = study.ask()
        config, overrides = space.suggest(trial)
        start = time.perf_counter()
        evaluate_trial(config.to_dict(), {**settings, **overrides}, spec.task, spec.task_options)
        out.append(time.perf_counter() - start)
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    return out


def cost_only(trials: int) -> float:
    """Seconds per architecture of the cost model alone (part of the engine's work)."""
    space = load_space("quickstart")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    configs = []
    for _ in range(trials):
        trial = study.ask()
        configs.append(space.suggest(trial)[0])
        study.tell(trial, 0.0)
    start = time.perf_counter()
    for config in configs:
        estimate_cost(config, GEOMETRY)
    return (time.perf_counter() - start) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved runs of each side")
    parser.add_argument("--real-trials", type=int, default=3,
                        help="real quickstart trials timed for scale (0: skip)")
    args = parser.parse_args()

    import ray

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"  # Tune's classic console output: silent at verbose=0
    ray.init(address="local", include_dashboard=False, logging_level=logging.ERROR,
             log_to_driver=False, num_cpus=2)
    cost_only(2)  # imports (timm, the model families) outside the timed runs
    plain, wal, hand, ours = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["NAS_RUNS"] = str(Path(tmp) / "nas_runs")
        for i in range(args.repeats):
            db = Path(tmp)
            plain.append(plain_optuna(f"sqlite:///{db / f'plain{i}.db'}", args.trials))
            wal.append(plain_optuna(f"sqlite:///{db / f'wal{i}.db'}", args.trials, wal=True))
            hand.append(tune_optuna_search(f"sqlite:///{db / f'tune{i}.db'}", args.trials,
                                           f"tune{i}"))
            ours.append(engine(f"sqlite:///{db / f'nas{i}.db'}", args.trials, f"nas{i}"))
    ray.shutdown()
    print(f"{args.trials} trials, median of {args.repeats} interleaved runs, SQLite; ms per trial "
          "over the whole run, and steady (first to last completion, pool started)")
    rows = {"plain optuna study.optimize": plain, "plain optuna, SQLite in WAL mode": wal,
            "ray tune + OptunaSearch by hand": hand, "nas engine run_study (Tune, WAL)": ours}
    whole = {k: statistics.median(v[0] for v in runs) for k, runs in rows.items()}
    steady = {k: statistics.median(v[1] for v in runs) for k, runs in rows.items()}
    for k, runs in rows.items():
        print(f"{k:<34}: whole {whole[k] * 1e3:7.1f}  steady {steady[k] * 1e3:7.1f}  "
              f"(runs {_ms([r[0] for r in runs])})")
    costs = cost_only(args.trials)
    print(f"{'  of which meta-device costs':<34}: {costs * 1e3:7.1f}")
    ours_k = "nas engine run_study (Tune, WAL)"
    for k in list(rows)[:3]:
        print(f"ratio engine / {k[:19]:<19}: whole {whole[ours_k] / whole[k]:5.2f}  "
              f"steady {steady[ours_k] / steady[k]:5.2f}  steady without the cost model "
              f"{(steady[ours_k] - costs) / steady[k]:5.2f}")
    if args.real_trials > 0:
        real = statistics.median(real_trial_seconds(args.real_trials))
        print(f"median real quickstart trial ({args.real_trials} trained): {real:.1f} s; engine "
              f"overhead per trial (whole) = {whole[ours_k] / real * 100:.2f}% of it, Tune + "
              f"OptunaSearch {whole['ray tune + OptunaSearch by hand'] / real * 100:.2f}%")


def _ms(values: list[float]) -> str:
    return ", ".join(f"{v * 1e3:.1f}" for v in values)


if __name__ == "__main__":
    main()
