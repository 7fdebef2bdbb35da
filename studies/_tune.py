"""One run of a study as a Ray Tune experiment: the Tuner, its loggers, its folder.

``fit`` builds the ``ray.tune.Tuner`` that ``studies.engine.run_study`` runs: the function
trainable of ``studies.worker`` with the study's resources and each trial's memory
(``studies.cluster.TrialResources``), ``StudySearcher`` behind Tune's
``ConcurrencyLimiter``, ``MultiObjectiveASHA`` when the study stops early, the logger callbacks
of the study key ``tune`` and a ``FaultStopper``. A fault outside the study (the database or the
disk, Ray going away under Tune) ends the run as ``RunAborted`` with its trials closed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas.errors import ConfigError, NasError, RunAborted, first_line
from studies._trials import Evaluator, StudyRun
from studies.spec import StudySpec
from studies.store import COUNTED_EXCLUDED, StudyKey, parsed_trials

if TYPE_CHECKING:  # Ray Tune is imported when a study runs, not by `nas status`
    from studies.asha import Rungs
    from studies.cluster import TrialResources

__all__ = ["fit", "run_folders", "trial_resources", "tune_callbacks", "tune_storage_path"]


def tune_callbacks(spec: StudySpec) -> list[Any]:
    """Tune's logger callbacks the study file names (``tune.callbacks``).

    Raises:
        ConfigError: a callback's package is not installed (named, with the pip command).
    """
    packages = {"tensorboard": "tensorboardX", "mlflow": "mlflow", "wandb": "wandb"}
    for name in spec.tune.callbacks:
        package = packages.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise ConfigError(f"Study key `tune.callbacks`: {name!r} needs the {package} "
                              f"package; install it with `pip install {package}`.")
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback, TBXLoggerCallback

    out: list[Any] = []
    for name in spec.tune.callbacks:
        if name == "csv":
            out.append(CSVLoggerCallback())
        elif name == "json":
            out.append(JsonLoggerCallback())
        elif name == "tensorboard":
            out.append(TBXLoggerCallback())
        elif name == "mlflow":
            from ray.air.integrations.mlflow import MLflowLoggerCallback

            out.append(MLflowLoggerCallback(experiment_name=spec.name))
        elif name == "wandb":
            from ray.air.integrations.wandb import WandbLoggerCallback

            out.append(WandbLoggerCallback(project=spec.name))
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^\w.-]", "_", name).strip("._") or "study"


def tune_storage_path(spec: StudySpec) -> Path:
    """Where this run's Tune experiment folder goes: ``tune.storage_path``, else
    ``<$NAS_RUNS or nas_runs>/<study>`` under the current folder."""
    if spec.tune.storage_path:
        return Path(spec.tune.storage_path)
    return Path(os.environ.get("NAS_RUNS") or "nas_runs").absolute() / _safe(spec.name)


def run_folders(spec: StudySpec) -> list[tuple[str, Path]]:
    """The folders a run of ``spec`` writes besides the database, each with the phrase that
    names it in an error: Tune's experiment folder (the trials' logs, and TensorBoard's and
    W&B's files, are inside it), and MLflow's local store in the current folder unless
    ``MLFLOW_TRACKING_URI`` sends its logs elsewhere. (``checkpoints`` is the engine's.)"""
    if spec.tune.storage_path:
        tune_dir = "Study key `tune.storage_path`"
    else:
        tune_dir = ("Tune's folder of the study (under $NAS_RUNS, else nas_runs/ in the current "
                    "folder; set `tune.storage_path` to move it)")
    out = [(tune_dir, tune_storage_path(spec))]
    if "mlflow" in spec.tune.callbacks and not os.environ.get("MLFLOW_TRACKING_URI"):
        out.append(("Study key `tune.callbacks`: MLflow's local store (set "
                    "MLFLOW_TRACKING_URI to log elsewhere)", Path("mlruns").absolute()))
    if "wandb" in spec.tune.callbacks and os.environ.get("WANDB_DIR"):
        out.append(("W&B's folder $WANDB_DIR", Path(os.environ["WANDB_DIR"]).absolute()))
    return out


@contextlib.contextmanager
def _tune_environment(verbose: bool) -> Iterator[None]:
    """Tune's own loggers only as the study file names them; no Tune output on the console
    unless ``verbose`` (Tune's newer console output prints its configuration table at any
    verbosity, the classic one is silent at verbosity 0)."""
    saved = {k: os.environ.get(k) for k in ("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS",
                                            "RAY_AIR_NEW_OUTPUT", "TUNE_DISABLE_SIGINT_HANDLER")}
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    if not verbose:
        os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # Ctrl-C interrupts the run (its trials are closed as interrupted) instead of Tune's own
    # graceful stop, which would return as if the study had ended.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    try:
        with contextlib.ExitStack() as quiet:
            if not verbose:
                quiet.enter_context(_quiet_ray())
            yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: Loggers whose records (a failed trial's traceback, "Trials did not complete") are Tune's own
#: output: shown with ``--verbose`` only; the run prints its own one-line summaries.
_TUNE_LOGGERS = ("ray.tune", "ray.train", "ray.air")


@contextlib.contextmanager
def _quiet_ray() -> Iterator[None]:
    """While a run without ``--verbose`` lives: Tune's loggers only for critical records, and
    none of the raylet's messages that Ray's driver prints on stdout (a dead worker's 40-line
    state dump). Ray prints those from a thread of its own through
    ``ray._private.worker.print_to_stdstream`` whatever ``log_to_driver`` says; that function is
    swapped for one that drops the raylet's messages, and put back afterwards."""
    import logging

    from ray._private import worker as ray_worker

    levels = {name: logging.getLogger(name).level for name in _TUNE_LOGGERS}
    for name in _TUNE_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)
    printer = getattr(ray_worker, "print_to_stdstream", None)

    def without_raylet(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        if data.get("pid") != "raylet" and printer is not None:
            printer(data, *args, **kwargs)

    if printer is not None:
        ray_worker.print_to_stdstream = without_raylet
    try:
        yield
    finally:
        if printer is not None:
            ray_worker.print_to_stdstream = printer
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


def fit(run: StudyRun, evaluator: Evaluator | None, pool: int, deadline: float,
         progress: Any, verbose: bool) -> str:
    """One ``Tuner.fit`` over the study; returns why no more trials could start ('' if none)."""
    from ray import cloudpickle, tune
    from ray.tune.search import ConcurrencyLimiter

    from studies.asha import MultiObjectiveASHA
    from studies.costaware import cost_aware
    from studies.searcher import FaultStopper, StudyCallback, StudySearcher
    from studies.worker import trainable

    spec = run.spec
    assert run.geometry is not None
    asha = spec.fidelity.early_stopping == "asha" and "accuracy" in spec.objective_names
    # The metric's noise: the rungs compare within it, the default sampler records the
    # hypervolume's with each choice (studies.convergence); the task is built only for them.
    samples = (validation_samples(spec) if asha or cost_aware(run.study.sampler) else None)
    searcher = StudySearcher(run, run.geometry, deadline=deadline, progress=progress,
                             samples=samples)
    scheduler: Any = None
    if asha:
        scheduler = MultiObjectiveASHA(_rebuild_rungs(run, samples), on_stop=searcher.on_stop)
    blob = cloudpickle.dumps(evaluator) if evaluator is not None else None
    function = tune.with_parameters(trainable, evaluator=blob,
                                    threads=max(1, int(spec.resources.cpu)),
                                    gpu=spec.resources.gpu)
    resources, pool = trial_resources(run, evaluator, pool)
    searcher.resources = resources  # the memory estimate: from costing, sent with the trial
    searcher.pool = pool  # from ASK_AHEAD_FROM at once, the next trial is asked ahead
    storage_path = tune_storage_path(spec)
    name = "tune-" + datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    run.store.set_study_attrs(run.study, {StudyKey.TUNE_DIR: str(storage_path / name)})
    tuner = tune.Tuner(
        tune.with_resources(function, resources),
        tune_config=tune.TuneConfig(
            search_alg=ConcurrencyLimiter(searcher, max_concurrent=pool), scheduler=scheduler,
            num_samples=-1, reuse_actors=True,
            trial_name_creator=lambda t: f"trial-{t.config['number']}",
            trial_dirname_creator=lambda t: f"trial-{t.config['number']}"),
        run_config=tune.RunConfig(
            name=name, storage_path=str(storage_path), verbose=2 if verbose else 0,
            failure_config=tune.FailureConfig(max_failures=spec.tune.max_failures),
            callbacks=[StudyCallback(searcher), *tune_callbacks(spec)],
            stop=FaultStopper(searcher)),
    )
    error: Exception | None = None
    try:
        with _tune_environment(verbose):
            tuner.fit()
    except (KeyboardInterrupt, NasError):
        raise
    except Exception as exc:  # Ray went away under Tune, Tune's folder could not be written
        error = exc
    finally:
        searcher.close()
        left = searcher.unclosed + _close_leftovers(run)
    fault = searcher.fault or (first_line(error, typed=True) if error is not None else "")
    if fault:
        if left:
            closed = ("Trials it could not close (the database could not be written) are "
                      "closed as interrupted by")
        else:
            closed = "Its running trials were closed as interrupted; continue with"
        raise RunAborted(f"Study {spec.name!r} stopped: {fault}. {closed} "
                         f"`nas resume {spec.name}`.") from error
    if searcher.pace.finished:  # budget.until: converged
        print(searcher.pace.finished, file=sys.stderr)
    return searcher.halted


def _close_leftovers(run: StudyRun) -> int:
    """After ``Tuner.fit``, under the study's lease: close every trial the database still holds
    as RUNNING (none is live any more: one the searcher could not close while the database was
    down, one whose creation was retried). Returns how many may still be left (0, or 1 when
    the database cannot be written now: the next resume closes them)."""
    try:
        run.store.close_interrupted(run.study, space=run.space,
                                    reason="the run ended while this trial was waiting or "
                                           "training")
    except NasError:
        return 1
    return 0


def trial_resources(run: StudyRun, evaluator: Evaluator | None,
                    pool: int) -> tuple[TrialResources, int]:
    """Each trial's request (``studies.cluster.TrialResources``) and the pool of trials run at
    once, lowered to what the cluster's memory holds at the trial process's baseline: the
    built-in trainer's (torch imported) without ``evaluator``, else the light one."""
    import ray

    from studies.cluster import (
        TRAINING_WORKER_BASELINE_BYTES,
        WORKER_BASELINE_BYTES,
        TrialResources,
        count_slots,
    )

    assert run.geometry is not None
    baseline = TRAINING_WORKER_BASELINE_BYTES if evaluator is None else WORKER_BASELINE_BYTES
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    cap = max((n.get("memory", 0.0) for n in nodes), default=float(baseline))
    resources = TrialResources(run.spec.resources, baseline, run.geometry, cap)
    return resources, max(1, min(pool, count_slots(nodes, run.spec.resources, baseline)))


def validation_samples(spec: StudySpec) -> int | None:
    """The validation samples the built-in trainer measures a trial's accuracy on (its
    task's validation split, built as the trials build it): the rungs' noise
    (``studies.asha.Rungs.samples``). None where the study's own evaluator measures it, or
    where this process cannot build the task (a driver without the data its workers read, on
    a resume): the rungs then compare exactly, as before the noise rule."""
    if spec.evaluator:
        return None
    from studies.worker import task_data
    from trainers.tasks import PREPARED_TASKS, prepare_task

    try:
        if spec.task in PREPARED_TASKS:  # its size alone, from the node's prepared data
            return prepare_task(spec.task, **spec.task_options).items("val")
        return len(task_data(spec.task, spec.task_options).val)
    except (NasError, OSError):
        return None


def _rebuild_rungs(run: StudyRun, samples: int | None) -> Rungs:
    """ASHA's rung records from the per-epoch table (interrupted trials left no result),
    comparing accuracies within the noise of the task's validation split (``samples``:
    :func:`validation_samples`)."""
    from studies.asha import Rungs

    spec = run.spec
    cost_names = [o.name for o in spec.objectives if o.source == "cost"]
    directions = [o.direction for o in spec.objectives if o.source == "metric"] + [
        o.direction for o in spec.objectives if o.source == "cost"]
    rungs = Rungs(spec.fidelity.grace_epochs, spec.fidelity.reduction_factor,
                  spec.fidelity.epochs, directions, samples=samples)
    trials = run.store.trials(run.study)
    rows = run.store.epochs(spec.name)
    costs = {a.number: [float((a.cost or {}).get(n) or 0) for n in cost_names]
             for a in parsed_trials(spec.name, trials) if a.status not in COUNTED_EXCLUDED}
    for row in rows:
        if row["trial_number"] in costs and row["value"] is not None:
            rungs.record(row["trial_number"], row["epoch"],
                         [row["value"], *costs[row["trial_number"]]])
    return rungs
