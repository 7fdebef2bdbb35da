"""The arms of ``benchmarks/search.py`` on one :class:`Task`: this engine, Ray Tune +
``OptunaSearch`` + Tune's ``ASHAScheduler`` written by hand, and Syne Tune's MOASHA.

Every arm returns its trials in the order they finished as :data:`Point`\\ s: the epochs the arm
had trained by then (a rejected or reused trial trains none, a stopped one the epochs it ran)
and the trial's values where it trained to the full epochs (else ``None``: a stopped, rejected or
failed trial adds nothing to the front), so the arms are scored the same way.

Every arm runs on the same budget of epochs (:class:`Budget`): it starts trials until it has
trained that many epochs or counted ``cap`` trials, each the way its tool stops a run: this
engine by growing its study's trial budget as ``nas resume --trials`` does until the epochs are
spent, Tune by a ``Stopper`` whose ``stop_all`` fires at the budget, Syne Tune by its cost
budget, ``StoppingCriterion(max_cost=...)`` over the epochs each trial reports trained.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import optuna
from ray.tune.stopper import Stopper

from nas.cost import estimate_cost
from search_spaces import load_space
from studies import StudySpec, create_study, run_study
from studies._trials import base_settings, counted_trials, suggest
from studies.engine import prepare_resume
from studies.reference import study_reference
from studies.store import Status, StudyKey, TrialKey
from trainers import get_task

OBJECTIVES = ["accuracy", "params", "madds"]
DIRECTIONS = ["maximize", "minimize", "minimize"]
WORKERS = 2  # trials at once in every arm: the engine's (resources cpu 1 on two CPUs)

Point = tuple[int, list[float] | None]


@dataclass(frozen=True)
class Budget:
    """What every arm may spend on one task and seed: ``epochs`` trained in all, at most
    ``cap`` trials (a rejected trial counts toward Tune's and Syne Tune's cap, which count
    samples, not toward the engine's, which counts what its budget counts)."""

    epochs: int
    cap: int


@dataclass(frozen=True)
class Task:
    """A study the arms search: its task, space, smoke scale, training and fidelity."""

    key: str
    task: str
    space: str
    smoke: bool
    epochs: int
    params_max: float
    sampler: dict[str, Any]  # the engine's sampler as the study ships it: arm (a)'s default
    train: dict[str, Any] = field(default_factory=dict)
    grace: int = 1
    reduction_factor: int = 2
    population: int = 50  # arm (b)'s NSGA-II population

    def spec(self, name: str, seed: int, trials: int, sampler: dict[str, Any], *,
             early_stopping: str = "asha") -> StudySpec:
        return StudySpec.from_dict({
            "name": name, "task": self.task, "space": self.space,
            "objectives": OBJECTIVES, "constraints": {"params_max": self.params_max},
            "sampler": sampler, "budget": {"trials": trials},
            "fidelity": {"epochs": self.epochs, "early_stopping": early_stopping,
                         "grace_epochs": self.grace, "reduction_factor": self.reduction_factor},
            "resources": {"cpu": 1}, "seed": seed, "train": self.train,
            **({"smoke": True} if self.smoke else {}),
        })

    def settings(self, seed: int) -> dict[str, Any]:
        """Every trial's training settings before the space's own, as the engine trains."""
        return base_settings(self.spec("settings", seed, 1, self.sampler))

    def reference(self) -> list[float]:
        """The study's fixed hypervolume reference point (``nas.reference``), computed with the
        engine's own function: accuracy at the task's chance, params at ``params_max``, MAdds
        at the space's largest model at this scale."""
        spec = self.spec("reference", 0, 1, self.sampler)
        data = get_task(self.task)
        ref = study_reference(spec, load_space(self.space), data.geometry, float(data.chance))
        return [float(v) for v in ref if v is not None]


def _full(status: Any) -> bool:
    return status in (Status.COMPLETED, Status.REUSED)


def _points(study: optuna.Study) -> tuple[list[Point], int]:
    """A study's trials in the order they finished as points, and how many it counted."""
    trials = study.get_trials(deepcopy=False)
    done = sorted(trials, key=lambda t: t.datetime_complete or t.datetime_start or datetime.min)
    out: list[Point] = []
    used = 0
    for t in done:
        status = t.user_attrs.get(TrialKey.STATUS)
        if status in (Status.COMPLETED, Status.STOPPED, Status.FAILED):
            used += int(t.user_attrs.get(TrialKey.EPOCHS_REACHED) or 0)
        full = _full(status) and t.values is not None
        out.append((used, list(t.values) if full else None))
    return out, counted_trials(trials)


def engine_arm(task: Task, url: str, name: str, seed: int, budget: Budget,
               sampler: dict[str, Any], reference: list[float]) -> list[Point]:
    """This engine: its sampler, constraint checks, reuse and multi-objective ASHA, run until
    ``budget.epochs`` are trained: the study asks enough trials to spend what is left if each
    trained to the full epochs (at least one per worker), and is grown again, as ``nas resume
    --trials`` grows it, while epochs are left and fewer than ``budget.cap`` trials counted."""
    first = max(WORKERS, math.ceil(budget.epochs / task.epochs))
    run = create_study(task.spec(name, seed, min(first, budget.cap), sampler), url)
    stored = run.study.user_attrs.get(StudyKey.REFERENCE)
    if stored != reference:
        raise RuntimeError(f"the engine stored the reference {stored}, the benchmark computed "
                           f"{reference}")
    while True:
        with contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()):
            run_study(run)
        out, counted = _points(run.study)
        used = out[-1][0] if out else 0
        if used >= budget.epochs or counted >= budget.cap:
            return out
        more = max(WORKERS, math.ceil((budget.epochs - used) / task.epochs))
        run, _ = prepare_resume(name, url, trials=min(budget.cap, counted + more))


class DefineByRun:
    """The study's space as ``OptunaSearch``'s define-by-run function, with the params constraint
    checked here, before any training: the architecture's cost is computed on the meta device
    and returned as constants with a ``feasible`` flag the trainable reads to skip training. A
    module-level class: Tune pickles its searcher with the standard pickle."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.geometry = get_task(task.task).geometry

    def __call__(self, trial: optuna.Trial) -> dict[str, Any]:
        spec = self.task.spec("suggest", 0, 1, self.task.sampler)
        config, overrides = suggest(load_space(self.task.space), trial, spec.smoke)
        cost = estimate_cost(config, self.geometry)
        return {"arch": config.to_dict(), "overrides": overrides,
                "params": float(cost.params), "madds": float(cost.madds),
                "feasible": cost.params <= self.task.params_max}


class PicklableNSGAII(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II as Tune can keep it: Optuna 5's holds a ``threading.Lock`` (its
    generation cache), which Tune's ``Tuner`` cannot pickle with its searcher ("cannot pickle
    '_thread.lock' object"). The lock is left out of the pickle and a new one made on loading;
    the sampling is Optuna's own."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_thread_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()


class EpochBudget(Stopper):
    """Tune's ``Stopper`` for an epoch budget: every trial ends once the trials have reported
    ``epochs`` trained epochs in all (a report with ``epoch`` >= 1 is one epoch trained). A
    module-level class: Tune pickles its stopper."""

    def __init__(self, epochs: int) -> None:
        self.epochs = epochs
        self.trained = 0

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.trained += int(result.get("epoch", 0)) >= 1
        return False

    def stop_all(self) -> bool:
        return self.trained >= self.epochs


def tune_arm(task: Task, storage: Path, name: str, seed: int, budget: Budget,
             sampler: optuna.samplers.BaseSampler) -> list[Point]:
    """Ray Tune + ``OptunaSearch`` (``sampler``) + Tune's ``ASHAScheduler`` on accuracy, as an
    expert writes it, stopped by :class:`EpochBudget` (at most ``budget.cap`` samples); a trial
    that breaks the params constraint reports chance accuracy at once and trains no epoch."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    settings = task.settings(seed)
    chance = float(get_task(task.task).chance)
    task_name = task.task

    def trainable(config: dict[str, Any]) -> None:
        from studies.worker import evaluate_trial

        costs = {"params": config["params"], "madds": config["madds"]}
        if not config["feasible"]:
            tune.report({"accuracy": chance, **costs, "epoch": 0})
            return

        def report(epoch: dict[str, Any]) -> bool:
            tune.report({"accuracy": float(epoch["value"]), **costs, "epoch": int(epoch["epoch"])})
            return False

        evaluate_trial(config["arch"], {**settings, **config["overrides"]}, task_name, {},
                       report=report)

    searcher = OptunaSearch(DefineByRun(task), metric=OBJECTIVES, mode=["max", "min", "min"],
                            sampler=sampler)
    scheduler = ASHAScheduler(metric="accuracy", mode="max", max_t=task.epochs,
                              grace_period=task.grace, reduction_factor=task.reduction_factor)
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        tune_config=tune.TuneConfig(search_alg=searcher, scheduler=scheduler,
                                    num_samples=budget.cap, reuse_actors=True,
                                    max_concurrent_trials=WORKERS),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0,
                                  stop=EpochBudget(budget.epochs)))
    grid = tuner.fit()
    results: list[dict[str, Any]] = [m for i in range(len(grid)) if (m := grid[i].metrics)]
    results.sort(key=lambda m: m.get("timestamp", 0))
    out: list[Point] = []
    used = 0
    for m in results:
        used += int(m.get("epoch", 0))
        full = int(m.get("epoch", 0)) >= task.epochs
        out.append((used, [m["accuracy"], m["params"], m["madds"]] if full else None))
    return out


def syne_arm(task: Task, tmp: Path, name: str, seed: int, budget: Budget,
             syne_python: Path) -> list[Point] | str:
    """Syne Tune's MOASHA (``benchmarks/_syne_arm.py`` in the benchmark's own environment,
    ``make bench-env``); its trials train with this python. A reason string where it cannot
    run."""
    if not syne_python.exists():
        return f"no Syne Tune environment at {syne_python} (make bench-env)"
    here = Path(__file__).resolve().parent
    task_file, job_file, out_file = (tmp / f"{name}-{k}.json" for k in ("task", "job", "out"))
    task_file.write_text(json.dumps({
        "task": task.task, "space": task.space, "smoke": True if task.smoke else None,
        "settings": task.settings(seed), "params_max": task.params_max,
        "chance": float(get_task(task.task).chance)}))
    job_file.write_text(json.dumps({
        "name": name, "python": sys.executable, "trial_script": str(here / "_syne_trial.py"),
        "task_file": str(task_file), "trials": budget.cap, "budget": budget.epochs,
        "epochs": task.epochs,
        "workers": WORKERS, "grace": task.grace, "reduction_factor": task.reduction_factor,
        "seed": seed}))
    proc = subprocess.run([str(syne_python), str(here / "_syne_arm.py"), str(job_file),
                           str(out_file)], capture_output=True, text=True, check=False,
                          cwd=tmp)  # Syne Tune writes files into its working folder
    if proc.returncode != 0 or not out_file.exists():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Syne Tune's run failed (exit {proc.returncode}): {tail}"
    out: list[Point] = []
    used = 0
    for row in json.loads(out_file.read_text()):
        used += int(row["trained"])
        out.append((used, [float(v) for v in row["values"]] if row["full"] else None))
    return out
