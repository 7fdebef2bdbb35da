"""The study engine: an Optuna multi-objective study in SQL, trials trained on Ray workers.

The driver is the only process that writes to the database. It asks Optuna for a trial, maps the
trial's parameters to an architecture (the search space), computes the cheap objectives on the
meta device, rejects constraint violations before any training, reuses the result of an
architecture already trained with the same settings, and sends the rest to a pool of reused Ray
actors. Epoch reports flow back through a coordinator actor that also makes the early-stopping
decisions (multi-objective ASHA). ``resume`` rebuilds everything from the database alone.

Trial bookkeeping lives in Optuna's trial user attributes:
- ``nas.arch``: the architecture config; ``nas.arch_id``; ``nas.cost``: params, params_matrix,
  MAdds and their split by part; ``nas.train``: the training settings;
- ``nas.status``: ``completed``, ``stopped`` (early-stopped; Optuna state PRUNED), ``failed``,
  ``rejected`` (broke a constraint, never trained; Optuna state FAIL), ``interrupted`` (a crash
  left it RUNNING; closed as FAIL and its parameters enqueued again) or ``reused``;
- ``nas.reason``, ``nas.epochs_reached``, ``nas.seconds``, ``nas.node``, ``nas.reused_from``.
Rejected and interrupted trials do not count against the trial budget.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.cost import Cost, estimate_cost
from nas.errors import ConfigError, NasError
from nas.loading import load_arch
from nas.tasks import TaskGeometry
from search_spaces import SearchSpace, load_space
from studies.asha import Rungs
from studies.pareto import hypervolume_history
from studies.samplers import make_sampler
from studies.spec import StudySpec
from studies.storage import open_storage, session, write_epoch

__all__ = ["StudyRun", "counted_trials", "create_study", "load_existing", "run_study"]

optuna.logging.set_verbosity(optuna.logging.WARNING)

_COUNTED_EXCLUDED = ("rejected", "interrupted")


@dataclass
class StudyRun:
    """What a driver knows about one study while it runs."""

    spec: StudySpec
    space: SearchSpace
    study: optuna.Study
    storage: optuna.storages.RDBStorage
    geometry: TaskGeometry | None = None
    messages: list[str] = field(default_factory=list)


def counted_trials(trials: list[optuna.trial.FrozenTrial]) -> int:
    """Trials that count against the budget: completed, pruned or failed, not counting
    constraint-rejected ones nor those closed because a crash interrupted them."""
    return sum(
        1 for t in trials
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        and t.user_attrs.get("nas.status") not in _COUNTED_EXCLUDED
    )


# ----------------------------------------------------------------------------- create / load
def _space_for(spec: StudySpec) -> SearchSpace:
    return load_space(spec.space)


def create_study(spec: StudySpec, storage_url: str | None = None) -> StudyRun:
    """Create the study in the database (refusing an existing name) with its first trials."""
    space = _space_for(spec)
    storage = open_storage(storage_url)
    with session(storage.url):
        existing = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
    if spec.name in existing:
        run = load_existing(spec.name, storage)
        if run.space.hash != space.hash:
            raise ConfigError(
                f"Study {spec.name!r} already exists with a different search space (hash "
                f"{run.space.hash} there, {space.hash} now); choose another --name."
            )
        raise ConfigError(
            f"Study {spec.name!r} already exists; continue it with `nas resume {spec.name}` or "
            "choose another --name."
        )
    sampler = make_sampler(spec.sampler, spec.seed)
    enqueued = [_enqueue_params(space, item) for item in spec.enqueue]
    with session(storage.url):
        study = optuna.create_study(storage=storage, study_name=spec.name,
                                    directions=spec.directions, sampler=sampler)
        study.set_user_attr("nas.spec", spec.to_dict())
        study.set_user_attr("nas.space", space.to_dict())
        study.set_user_attr("nas.space_hash", space.hash)
        study.set_user_attr("nas.training_key", spec.training_key())
        study.set_user_attr("nas.objectives", spec.objective_names)
        for label, params in enqueued:
            study.enqueue_trial(params, user_attrs={"nas.enqueued": label})
    return StudyRun(spec, space, study, storage)


def _enqueue_params(space: SearchSpace, item: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(item, str):
        config, label = load_arch(item), item
    elif isinstance(item, dict):
        config, label = ArchConfig.from_dict(item), "inline"
    else:
        raise ConfigError(f"`enqueue` items are presets, files or mappings, got {item!r}.")
    try:
        return label, space.params_for(config)
    except ConfigError as exc:
        raise ConfigError(f"Cannot enqueue {label!r}: {exc}") from None


def load_existing(name: str, storage: optuna.storages.RDBStorage | str | None = None) -> StudyRun:
    """Load a study and its spec and space from the database alone."""
    if not isinstance(storage, optuna.storages.RDBStorage):
        storage = open_storage(storage, create=False)
    with session(storage.url):
        names = [s.study_name for s in optuna.study.get_all_study_summaries(storage)]
        if name not in names:
            raise NasError(f"Unknown study {name!r}; studies in this database: "
                           f"{', '.join(sorted(names)) or 'none'}.")
        study = optuna.load_study(study_name=name, storage=storage)
        attrs = study.user_attrs
    if "nas.spec" not in attrs:
        raise NasError(f"Study {name!r} was not created by nas (it has no stored study file).")
    spec = StudySpec.from_dict(attrs["nas.spec"])
    space = SearchSpace.from_dict(attrs["nas.space"])
    if space.hash != attrs.get("nas.space_hash"):
        raise ConfigError(
            f"Study {name!r}: its stored search space now hashes to {space.hash}, not "
            f"{attrs.get('nas.space_hash')} as when it was created (the meaning of a knob "
            "changed between versions); resuming would mix two spaces. Start a new study."
        )
    study.sampler = make_sampler(spec.sampler, spec.seed + len(study.trials))
    return StudyRun(spec, space, study, storage)


def close_interrupted(run: StudyRun) -> int:
    """Close trials a crash left RUNNING as failed, and enqueue their parameters again."""
    storage, n = run.storage, 0
    with session(storage.url):
        for t in run.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            storage.set_trial_user_attr(t._trial_id, "nas.status", "interrupted")
            storage.set_trial_user_attr(t._trial_id, "nas.reason",
                                        "the driver stopped while this trial ran")
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            run.study.enqueue_trial(t.params, user_attrs={"nas.rerun_of": t.number},
                                    skip_if_exists=False)
            n += 1
    return n


# ----------------------------------------------------------------------------- the driver
def _objective_values(spec: StudySpec, cost: Cost, result: dict[str, Any]) -> list[float]:
    values = {"accuracy": result.get("value"), "params": cost.params, "madds": cost.madds,
              "latency_ms": result.get("latency_ms")}
    return [float(values[o.name]) for o in spec.objectives]  # type: ignore[arg-type]


def _violations(spec: StudySpec, cost: Cost) -> str | None:
    for key, limit in spec.constraints.items():
        name, bound = key.rsplit("_", 1)
        value = getattr(cost, name, None)
        if value is None:  # latency is measured after training: checked then
            continue
        if (bound == "max" and value > limit) or (bound == "min" and value < limit):
            return f"{name} {value:,} breaks {key}={limit:,.0f}"
    return None


def _cost_dict(cost: Cost) -> dict[str, Any]:
    return {"params": cost.params, "params_matrix": cost.params_matrix, "madds": cost.madds,
            "parts": {k: vars(v) for k, v in cost.parts.items()}}


class _Progress:
    def __init__(self, run: StudyRun, enabled: bool) -> None:
        self.run, self.enabled, self.last = run, enabled, ""
        self.tty = sys.stderr.isatty()

    def show(self, running: int, force: bool = False) -> None:
        if not self.enabled:
            return
        trials = self.run.study.get_trials(deepcopy=False)
        states = [t.user_attrs.get("nas.status") for t in trials]
        done = counted_trials(trials)
        complete = [t for t in trials if t.state == TrialState.COMPLETE]
        hv = hypervolume_history([t.values for t in complete], self.run.spec.directions)
        line = (f"trials {done}/{self.run.spec.budget.trials} | running {running} | "
                f"completed {len(complete)} | pruned {states.count('stopped')} | "
                f"failed {states.count('failed')} | rejected {states.count('rejected')} | "
                f"hypervolume {hv[-1] if hv else 0.0:.4f}")
        if line != self.last or force:
            self.last = line
            print(("\r" + line) if self.tty else line, end="" if self.tty else "\n",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.enabled and self.tty:
            print(file=sys.stderr)


def _init_ray(address: str | None, spec: StudySpec) -> tuple[Any, int]:
    import ray

    if not ray.is_initialized():
        try:
            if address:
                ray.init(address=address, logging_level="ERROR", log_to_driver=False)
            else:
                ray.init(include_dashboard=False, logging_level="ERROR", log_to_driver=False,
                         num_cpus=os.cpu_count())
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise NasError(f"Cannot reach the Ray cluster at {address!r}: {first}") from None
    total = ray.cluster_resources()
    slots = []
    if spec.resources.cpu > 0:
        slots.append(int(total.get("CPU", 0) // spec.resources.cpu))
    if spec.resources.gpu > 0:
        slots.append(int(total.get("GPU", 0) // spec.resources.gpu))
    pool = max(0, min(slots))
    if pool < 1:
        raise NasError(
            f"The Ray cluster has {total.get('CPU', 0):g} CPUs and {total.get('GPU', 0):g} GPUs, "
            f"fewer than one trial needs (resources {spec.resources.cpu:g} cpu, "
            f"{spec.resources.gpu:g} gpu)."
        )
    return ray, pool


def run_study(
    run: StudyRun,
    *,
    address: str | None = None,
    progress: bool = True,
    evaluator: Callable[..., dict[str, Any]] | None = None,
    geometry: TaskGeometry | None = None,
) -> StudyRun:
    """Run ``run`` until its trial budget is spent or its timeout passes.

    ``evaluator`` replaces the training function on the workers (tests, benchmarks);
    ``geometry`` is then the task geometry used for costs (otherwise the task is built once).
    """
    spec, study, storage = run.spec, run.study, run.storage
    close_interrupted(run)
    if geometry is None:
        from trainers import get_task

        geometry = get_task(spec.task, **spec.task_options).geometry
    run.geometry = geometry
    ray, pool = _init_ray(address, spec)
    from studies.worker import Coordinator, TrialWorker

    rungs = None
    if spec.fidelity.early_stopping == "asha" and "accuracy" in spec.objective_names:
        rungs = _rebuild_rungs(run, spec)
    coordinator = ray.remote(num_cpus=0)(Coordinator).remote(rungs)
    worker_cls = ray.remote(num_cpus=spec.resources.cpu, num_gpus=spec.resources.gpu,
                            max_restarts=0)(TrialWorker)
    workers: list[Any] = []
    idle: list[Any] = []
    running: dict[Any, tuple[optuna.trial.Trial, Cost, Any]] = {}
    known = _trained_results(run)
    deadline = (time.monotonic() + 60 * spec.budget.timeout_minutes
                if spec.budget.timeout_minutes else math.inf)
    settings_base = {**spec.train, "epochs": spec.fidelity.epochs, "seed": spec.seed}
    latency = "latency_ms" in spec.objective_names or "latency_ms_max" in spec.constraints
    bar = _Progress(run, progress)
    try:
        while True:
            trials = study.get_trials(deepcopy=False)
            counted = counted_trials(trials)
            out_of_time = time.monotonic() > deadline
            while (not out_of_time and counted + len(running) < spec.budget.trials
                   and (idle or len(workers) < pool)):
                outcome = _start_trial(run, geometry, known, settings_base)
                if outcome is None:  # rejected or reused: the database has it already
                    counted = counted_trials(study.get_trials(deepcopy=False))
                    bar.show(len(running))
                    continue
                trial, cost, arch, settings = outcome
                if not idle:
                    workers.append(worker_cls.remote(evaluator))
                    idle.append(workers[-1])
                worker = idle.pop()
                cost_vector = [float(getattr(cost, o.name)) for o in spec.objectives
                               if o.name in ("params", "madds")]
                coordinator.register.remote(trial.number, cost_vector)
                future = worker.run.remote(trial.number, arch, settings, spec.task,
                                           spec.task_options, latency, coordinator)
                running[future] = (trial, cost, worker)
            if not running:
                break
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.5)
            _write_reports(run, ray.get(coordinator.drain.remote()))
            for future in done:
                trial, cost, worker = running.pop(future)
                try:
                    result = ray.get(future)
                    idle.append(worker)
                except Exception as exc:  # the trial raised, or its worker died
                    message = str(exc).strip().splitlines()
                    result = {"status": "failed",
                              "reason": f"worker error: {message[-1] if message else exc!r}"}
                    if "ActorDied" in type(exc).__name__ or "ActorError" in type(exc).__name__:
                        workers.remove(worker)
                    else:
                        idle.append(worker)
                _write_reports(run, ray.get(coordinator.drain.remote()))
                _finish_trial(run, trial, cost, result, known)
            bar.show(len(running))
    except KeyboardInterrupt:
        for trial, _, _ in running.values():
            _mark_interrupted(run, trial)
        raise
    finally:
        bar.close()
        for w in workers:
            ray.kill(w)
        ray.kill(coordinator)
    return run


def _rebuild_rungs(run: StudyRun, spec: StudySpec) -> Rungs:
    from studies.storage import read_epochs

    directions = [o.direction for o in spec.objectives if o.name == "accuracy"] + [
        o.direction for o in spec.objectives if o.name in ("params", "madds")]
    rungs = Rungs(spec.fidelity.grace_epochs, spec.fidelity.reduction_factor,
                  spec.fidelity.epochs, directions)
    costs = {t.number: [float(t.user_attrs.get("nas.cost", {}).get(o.name, 0))
                        for o in spec.objectives if o.name in ("params", "madds")]
             for t in run.study.get_trials(deepcopy=False)}
    for row in read_epochs(run.storage.engine, spec.name):
        if row["trial_number"] in costs and row["value"] is not None:
            rungs.record(row["trial_number"], row["epoch"],
                         [row["value"], *costs[row["trial_number"]]])
    return rungs


def _trained_results(run: StudyRun) -> dict[str, optuna.trial.FrozenTrial]:
    """Completed trials by arch_id: a re-sampled architecture reuses their result."""
    out: dict[str, optuna.trial.FrozenTrial] = {}
    for t in run.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        arch_id = t.user_attrs.get("nas.arch_id")
        if arch_id and arch_id not in out:
            out[arch_id] = t
    return out


def _start_trial(run: StudyRun, geometry: TaskGeometry,
                 known: dict[str, optuna.trial.FrozenTrial],
                 settings_base: dict[str, Any]) -> tuple[Any, Cost, dict, dict] | None:
    """Ask for a trial; reject or reuse it here, or return what a worker needs to train it."""
    study, storage, spec = run.study, run.storage, run.spec
    with session(storage.url):
        trial = study.ask()
    try:
        config, train_overrides = run.space.suggest(trial)
        cost = estimate_cost(config, geometry)
    except NasError as exc:  # a space that lets an invalid config through: record, go on
        _tell(run, trial, TrialState.FAIL, None, {"nas.status": "rejected",
                                                  "nas.reason": str(exc)})
        return None
    settings = {**settings_base, **train_overrides}
    attrs = {"nas.arch": config.to_dict(), "nas.arch_id": config.arch_id,
             "nas.cost": _cost_dict(cost), "nas.train": settings}
    reason = _violations(spec, cost)
    if reason is not None:
        _tell(run, trial, TrialState.FAIL, None, {**attrs, "nas.status": "rejected",
                                                  "nas.reason": reason})
        return None
    previous = known.get(config.arch_id)
    if previous is not None and previous.user_attrs.get("nas.train") == settings:
        _tell(run, trial, TrialState.COMPLETE, list(previous.values),
              {**attrs, "nas.status": "reused", "nas.reused_from": previous.number,
               "nas.epochs_reached": previous.user_attrs.get("nas.epochs_reached")})
        return None
    with session(storage.url):
        for key, value in attrs.items():
            storage.set_trial_user_attr(trial._trial_id, key, value)
    return trial, cost, config.to_dict(), settings


def _tell(run: StudyRun, trial: Any, state: TrialState, values: list[float] | None,
          attrs: dict[str, Any]) -> None:
    storage = run.storage
    with session(storage.url):
        for key, value in attrs.items():
            storage.set_trial_user_attr(trial._trial_id, key, value)
        run.study.tell(trial, values if state == TrialState.COMPLETE else None, state=state)


def _write_reports(run: StudyRun, reports: list[tuple[int, dict[str, Any]]]) -> None:
    if not reports:
        return
    trial_ids = {t.number: t._trial_id for t in run.study.get_trials(deepcopy=False)}
    for number, epoch in reports:
        write_epoch(run.storage, run.spec.name, number, epoch)
        if epoch.get("value") is not None and math.isfinite(epoch["value"]):
            with session(run.storage.url):
                run.storage.set_trial_intermediate_value(trial_ids[number], int(epoch["epoch"]),
                                                         float(epoch["value"]))


def _finish_trial(run: StudyRun, trial: Any, cost: Cost, result: dict[str, Any],
                  known: dict[str, optuna.trial.FrozenTrial]) -> None:
    status = result.get("status", "failed")
    epochs = result.get("epochs") or []
    attrs: dict[str, Any] = {
        "nas.status": status, "nas.epochs_reached": len(epochs),
        "nas.seconds": result.get("seconds"), "nas.node": result.get("node"),
        "nas.samples_per_second": result.get("samples_per_second"),
    }
    if result.get("reason"):
        attrs["nas.reason"] = result["reason"]
    if "latency_ms" in result:
        attrs["nas.latency_ms"] = result["latency_ms"]
    if status == "completed":
        limit = run.spec.constraints.get("latency_ms_max")
        if limit is not None and result.get("latency_ms", 0.0) > limit:
            attrs.update({"nas.status": "rejected",
                          "nas.reason": f"latency_ms {result['latency_ms']:.2f} breaks "
                                        f"latency_ms_max={limit:g}"})
            _tell(run, trial, TrialState.FAIL, None, attrs)
            return
        _tell(run, trial, TrialState.COMPLETE, _objective_values(run.spec, cost, result), attrs)
        frozen = run.study._storage.get_trial(trial._trial_id)
        known.setdefault(frozen.user_attrs.get("nas.arch_id", ""), frozen)
    elif status == "stopped":
        _tell(run, trial, TrialState.PRUNED, None, attrs)
    else:
        _tell(run, trial, TrialState.FAIL, None, {**attrs, "nas.status": "failed"})


def _mark_interrupted(run: StudyRun, trial: Any) -> None:
    try:
        _tell(run, trial, TrialState.FAIL, None, {
            "nas.status": "interrupted", "nas.reason": "the driver was interrupted"})
        run.study.enqueue_trial(trial.params, user_attrs={"nas.rerun_of": trial.number})
    except NasError:
        pass
