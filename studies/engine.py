"""The study engine: an Optuna multi-objective study in SQL, trials trained on Ray workers.

The driver is the only process that writes to the database. It asks Optuna for a trial, maps the
trial's parameters to an architecture (the search space), computes the cheap objectives on the
meta device, rejects constraint violations before any training, reuses the result of an
architecture already trained with the same settings, and sends the rest to a pool of reused Ray
actors, spread over the cluster's nodes. Epoch reports flow back through a coordinator actor that
also makes the early-stopping decisions (multi-objective ASHA). ``resume`` rebuilds everything
from the database alone.

Trial bookkeeping lives in Optuna's trial user attributes:
- ``nas.arch``: the architecture config; ``nas.arch_id``; ``nas.cost``: params, params_matrix,
  MAdds and their split by part; ``nas.train``: the training settings;
- ``nas.status``: ``completed``, ``stopped`` (early-stopped; Optuna state PRUNED), ``failed``,
  ``rejected`` (broke a constraint, never trained; Optuna state FAIL), ``interrupted`` (a crash
  left it RUNNING; closed as FAIL and its parameters enqueued again) or ``reused``;
- ``nas.reason``, ``nas.epochs_reached``, ``nas.seconds``, ``nas.node``, ``nas.reused_from``.
Rejected and interrupted trials do not count against the trial budget.

An architecture and its training settings (``nas.arch_id`` + ``nas.train``) are trained at most
once to completion: a re-sampled one reuses the completed result, and one sampled while its twin
is still training waits for it. The study's user attributes hold the study file (``nas.spec``),
the search space (``nas.space``, ``nas.space_hash``), the objective names and the task geometry
the costs were computed on (``nas.geometry``).
"""

from __future__ import annotations

import importlib
import inspect
import json
import logging
import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna
from optuna.trial import TrialState

from nas.config import ArchConfig
from nas.cost import Cost, estimate_cost
from nas.errors import ConfigError, NasError
from nas.loading import load_arch
from nas.tasks import GEOMETRIES, TaskGeometry
from search_spaces import SearchSpace, load_space
from studies.asha import Rungs
from studies.pareto import normalized_hypervolume
from studies.samplers import make_sampler
from studies.spec import StudySpec
from studies.storage import open_storage, session, set_trial_user_attrs, write_epoch

__all__ = ["StudyRun", "counted_trials", "create_study", "load_existing", "run_study"]

optuna.logging.set_verbosity(optuna.logging.WARNING)

_COUNTED_EXCLUDED = ("rejected", "interrupted")
# A space whose every draw breaks the constraints would otherwise be sampled forever.
_MAX_REJECTED_IN_A_ROW = 200
_POLL_SECONDS = 0.5  # how often the driver writes epoch reports while trials run
Evaluator = Callable[..., dict[str, Any]]


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


def _load_evaluator(target: str) -> Evaluator:
    """The function a study's ``evaluator: module:function`` names."""
    module_name, _, name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"Study key `evaluator`: cannot import {module_name!r} ({exc}); put "
                          "its folder on PYTHONPATH, for the driver and the Ray workers.") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ConfigError(f"Study key `evaluator`: module {module_name!r} has no function "
                          f"{name!r}.")
    return function


def _check_task(spec: StudySpec) -> None:
    """The task's name and option names, checked before anything is written (its data is built
    when the study runs)."""
    from trainers.tasks import list_tasks, task_options

    if spec.task in list_tasks():
        options = task_options(spec.task)
        unknown = sorted(set(spec.task_options) - set(options))
        if unknown:
            raise ConfigError(f"Unknown option {unknown[0]!r} for task {spec.task!r}; valid "
                              f"options are {sorted(options)}.")
        missing = [k for k, v in options.items()
                   if v is inspect.Parameter.empty and k not in spec.task_options]
        if missing:
            raise ConfigError(f"Task {spec.task!r} needs the option {missing[0]!r}; its options "
                              f"are {sorted(options)}.")
    elif spec.task not in GEOMETRIES:
        raise ConfigError(f"Unknown task {spec.task!r}; trainable tasks are {list_tasks()}.")


def _task_geometry(spec: StudySpec) -> TaskGeometry:
    """The geometry costs are computed on: a cost-only geometry when a study's own evaluator
    trains on it, else the trainable task's, by building it."""
    if spec.evaluator and spec.task in GEOMETRIES and not spec.task_options:
        return GEOMETRIES[spec.task]
    from trainers import get_task

    return get_task(spec.task, **spec.task_options).geometry


def create_study(spec: StudySpec, storage_url: str | None = None, *,
                 geometry: TaskGeometry | None = None) -> StudyRun:
    """Create the study in the database (refusing an existing name) with its first trials.

    The space, sampler, enqueued architectures, evaluator and task are checked before the
    database is opened, so a bad study file writes nothing. ``geometry`` (tests, benchmarks)
    is stored as the geometry the study's costs are computed on.
    """
    space = _space_for(spec)
    sampler = make_sampler(spec.sampler, spec.seed)
    enqueued = [_enqueue_params(space, item) for item in spec.enqueue]
    if spec.evaluator:
        _load_evaluator(spec.evaluator)
    _check_task(spec)
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
    with session(storage.url):
        study = optuna.create_study(storage=storage, study_name=spec.name,
                                    directions=spec.directions, sampler=sampler)
        study.set_user_attr("nas.spec", spec.to_dict())
        study.set_user_attr("nas.space", space.to_dict())
        study.set_user_attr("nas.space_hash", space.hash)
        study.set_user_attr("nas.training_key", spec.training_key())
        study.set_user_attr("nas.objectives", spec.objective_names)
        if geometry is not None:
            study.set_user_attr("nas.geometry", asdict(geometry))
        for label, params in enqueued:
            study.enqueue_trial(params, user_attrs={"nas.enqueued": label})
    return StudyRun(spec, space, study, storage, geometry=geometry)


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
    stored = attrs.get("nas.geometry")
    geometry = TaskGeometry(**stored) if isinstance(stored, dict) else None
    return StudyRun(spec, space, study, storage, geometry=geometry)


def close_interrupted(run: StudyRun) -> int:
    """Close trials a crash left RUNNING as failed, and enqueue their parameters again."""
    storage, n = run.storage, 0
    with session(storage.url):
        for t in run.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            set_trial_user_attrs(storage, t._trial_id, {
                "nas.status": "interrupted",
                "nas.reason": "the driver stopped while this trial ran"})
            storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
            run.study.enqueue_trial(t.params, user_attrs={"nas.rerun_of": t.number},
                                    skip_if_exists=False)
            n += 1
    return n


# ----------------------------------------------------------------------------- small pieces
def _objective_values(spec: StudySpec, cost: Cost, result: dict[str, Any]) -> list[float] | str:
    """The trial's objective vector, or why there is none (a value missing or not finite)."""
    values = {"accuracy": result.get("value"), "params": cost.params, "madds": cost.madds,
              "latency_ms": result.get("latency_ms")}
    out = []
    for o in spec.objectives:
        value = values[o.name]
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"the evaluator returned {o.name}={value!r}"
        out.append(float(value))
    return out


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


def _result_key(arch_id: str, settings: dict[str, Any]) -> str:
    """Equal keys, equal results: the architecture and everything it is trained with."""
    return arch_id + json.dumps(settings, sort_keys=True, default=str)


def _tell(run: StudyRun, trial: Any, state: TrialState, values: list[float] | None,
          attrs: dict[str, Any]) -> None:
    with session(run.storage.url):
        set_trial_user_attrs(run.storage, trial._trial_id, attrs)
        run.study.tell(trial, values if state == TrialState.COMPLETE else None, state=state)


def _mark_interrupted(run: StudyRun, trial: Any) -> None:
    try:
        _tell(run, trial, TrialState.FAIL, None, {
            "nas.status": "interrupted", "nas.reason": "the driver was interrupted"})
        run.study.enqueue_trial(trial.params, user_attrs={"nas.rerun_of": trial.number})
    except NasError:
        pass


@dataclass
class _Candidate:
    """A sampled trial within the constraints: what a worker needs to train it."""

    trial: optuna.trial.Trial
    cost: Cost
    arch: dict[str, Any]
    settings: dict[str, Any]
    key: str


@dataclass(frozen=True)
class _Known:
    """A completed training, by result key: what a re-sampled twin reuses."""

    number: int
    values: list[float]
    epochs_reached: int | None


class _Tally:
    """Trial counts by ``nas.status`` and the values of complete trials, read from the database
    once and then kept in memory (the driver is the only writer)."""

    def __init__(self, trials: list[optuna.trial.FrozenTrial]) -> None:
        self.statuses = Counter(t.user_attrs.get("nas.status") for t in trials
                                if t.state.is_finished())
        self.values = [list(t.values) for t in trials if t.state == TrialState.COMPLETE]
        self.counted = counted_trials(trials)

    def add(self, status: str, values: list[float] | None = None) -> None:
        self.statuses[status] += 1
        if values is not None:
            self.values.append(values)
        if status not in _COUNTED_EXCLUDED:
            self.counted += 1


class _Progress:
    def __init__(self, run: StudyRun, tally: _Tally, enabled: bool) -> None:
        self.run, self.tally, self.enabled, self.last = run, tally, enabled, ""
        self.tty = sys.stderr.isatty()
        self.hv, self.hv_points = 0.0, 0

    def show(self, running: int) -> None:
        if not self.enabled:
            return
        tally = self.tally
        if len(tally.values) != self.hv_points:  # only a new complete trial moves it
            self.hv = normalized_hypervolume(tally.values, self.run.spec.directions)
            self.hv_points = len(tally.values)
        s = tally.statuses
        line = (f"trials {tally.counted}/{self.run.spec.budget.trials} | running {running} | "
                f"completed {len(tally.values)} | pruned {s['stopped']} | "
                f"failed {s['failed']} | rejected {s['rejected']} | hypervolume {self.hv:.4f}")
        if line != self.last:
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
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            else:
                ray.init(include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
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


# ----------------------------------------------------------------------------- the driver
def run_study(
    run: StudyRun,
    *,
    address: str | None = None,
    progress: bool = True,
    evaluator: Evaluator | None = None,
    geometry: TaskGeometry | None = None,
) -> StudyRun:
    """Run ``run`` until its trial budget is spent or its timeout passes.

    ``evaluator`` replaces the training function on the workers (tests, benchmarks; a study
    file's ``evaluator`` key does the same from the database); ``geometry`` is then the task
    geometry used for costs (otherwise the one stored with the study, else the task is built).
    """
    spec = run.spec
    close_interrupted(run)
    with session(run.storage.url):
        if counted_trials(run.study.get_trials(deepcopy=False)) >= spec.budget.trials:
            return run  # a finished study: nothing to start Ray for
    if evaluator is None and spec.evaluator:
        evaluator = _load_evaluator(spec.evaluator)
    run.geometry = geometry or run.geometry or _task_geometry(spec)
    if "nas.geometry" not in run.study.user_attrs:
        with session(run.storage.url):
            run.study.set_user_attr("nas.geometry", asdict(run.geometry))
    ray, pool = _init_ray(address, spec)
    driver = _Driver(run, run.geometry, ray, pool, evaluator, progress)
    try:
        driver.loop()
    except KeyboardInterrupt:
        driver.interrupt_all()
        raise
    finally:
        driver.close()
    if driver.halted:
        raise NasError(driver.halted)
    return run


class _Driver:
    """The loop of ``run_study``: sample, reject or reuse, dispatch, collect, record."""

    def __init__(self, run: StudyRun, geometry: TaskGeometry, ray: Any, pool: int,
                 evaluator: Evaluator | None, progress: bool) -> None:
        from studies.worker import Coordinator, TrialWorker

        spec = run.spec
        self.run, self.ray, self.pool, self.evaluator = run, ray, pool, evaluator
        self.geometry = geometry
        trials = run.study.get_trials(deepcopy=False)
        self.tally = _Tally(trials)
        self.known = _trained_results(trials)
        self.bar = _Progress(run, self.tally, progress)
        self.settings_base = {**spec.train, "epochs": spec.fidelity.epochs, "seed": spec.seed}
        self.latency = "latency_ms" in spec.objective_names or "latency_ms_max" in spec.constraints
        self.costs: dict[str, Cost] = {}
        self.in_flight: dict[str, int] = {}  # result key -> number of the trial training it
        self.deferred: list[_Candidate] = []  # twins of a trial in flight: wait for its result
        self.ready: list[_Candidate] = []  # twins whose leader did not complete: train them
        self.running: dict[Any, tuple[_Candidate, Any]] = {}
        self.workers: list[Any] = []
        self.idle: list[Any] = []
        self.rejected_in_a_row = 0
        self.halted = ""  # why no more trials start: a hopeless space, workers that cannot start
        rungs = None
        if spec.fidelity.early_stopping == "asha" and "accuracy" in spec.objective_names:
            rungs = _rebuild_rungs(run, trials)
        self.coordinator = ray.remote(num_cpus=0)(Coordinator).remote(rungs)
        # SPREAD: a pool on a cluster uses every node, not the first one with room.
        self.worker_cls = ray.remote(num_cpus=spec.resources.cpu, num_gpus=spec.resources.gpu,
                                     max_restarts=0)(TrialWorker).options(
                                         scheduling_strategy="SPREAD")

    # ------------------------------------------------------------------ the loop
    def loop(self) -> None:
        spec = self.run.spec
        deadline = (time.monotonic() + 60 * spec.budget.timeout_minutes
                    if spec.budget.timeout_minutes else math.inf)
        while True:
            self.release_deferred()
            stop = time.monotonic() > deadline or bool(self.halted)
            while self.idle or len(self.workers) < self.pool:
                candidate: _Candidate | None
                if self.ready:
                    candidate = self.ready.pop(0)
                elif stop or (self.tally.counted + len(self.running) + len(self.deferred)
                              >= spec.budget.trials):
                    break
                else:
                    candidate = self.sample()
                    self.bar.show(len(self.running))
                if candidate is None:
                    continue
                if stop:
                    self.interrupt(candidate)
                else:
                    self.dispatch(candidate)
            if stop:
                while self.ready:
                    self.interrupt(self.ready.pop(0))
            if not self.running:
                break
            self.wait()

    def sample(self) -> _Candidate | None:
        """Ask for a trial; reject it, reuse a result, or return it to be trained."""
        run, spec = self.run, self.run.spec
        with session(run.storage.url):
            trial = run.study.ask()
        try:
            config, train_overrides = run.space.suggest(trial)
            cost = self.costs.get(config.arch_id) or estimate_cost(config, self.geometry)
        except NasError as exc:  # a space that lets an invalid config through: record, go on
            self.reject(trial, str(exc), {})
            return None
        self.costs[config.arch_id] = cost
        settings = {**self.settings_base, **train_overrides}
        attrs = {"nas.arch": config.to_dict(), "nas.arch_id": config.arch_id,
                 "nas.cost": _cost_dict(cost), "nas.train": settings}
        reason = _violations(spec, cost)
        if reason is not None:
            self.reject(trial, reason, attrs)
            return None
        self.rejected_in_a_row = 0
        candidate = _Candidate(trial, cost, config.to_dict(), settings,
                               _result_key(config.arch_id, settings))
        if candidate.key in self.known:
            self.reuse(candidate, attrs)
            return None
        with session(run.storage.url):
            set_trial_user_attrs(run.storage, trial._trial_id, attrs)
        if candidate.key in self.in_flight:
            self.deferred.append(candidate)
            return None
        return candidate

    def reject(self, trial: Any, reason: str, attrs: dict[str, Any]) -> None:
        _tell(self.run, trial, TrialState.FAIL, None,
              {**attrs, "nas.status": "rejected", "nas.reason": reason})
        self.tally.add("rejected")
        self.rejected_in_a_row += 1
        if self.rejected_in_a_row >= _MAX_REJECTED_IN_A_ROW:
            self.halted = (
                f"Study {self.run.spec.name!r}: {self.rejected_in_a_row} architectures in a row "
                f"were rejected (the last: {reason}); loosen `constraints` or narrow the space.")

    def reuse(self, candidate: _Candidate, attrs: dict[str, Any]) -> None:
        previous = self.known[candidate.key]
        _tell(self.run, candidate.trial, TrialState.COMPLETE, list(previous.values),
              {**attrs, "nas.status": "reused", "nas.reused_from": previous.number,
               "nas.epochs_reached": previous.epochs_reached})
        self.tally.add("reused", list(previous.values))

    def release_deferred(self) -> None:
        """Twins whose leader finished: reuse its result, or train them if it did not
        complete."""
        waiting = []
        for candidate in self.deferred:
            if candidate.key in self.in_flight:
                waiting.append(candidate)
            elif candidate.key in self.known:
                self.reuse(candidate, {})
            else:
                self.ready.append(candidate)
        self.deferred = waiting

    def dispatch(self, candidate: _Candidate) -> None:
        spec = self.run.spec
        if not self.idle:
            self.workers.append(self.worker_cls.remote(self.evaluator))
            self.idle.append(self.workers[-1])
        worker = self.idle.pop()
        cost_vector = [float(getattr(candidate.cost, o.name)) for o in spec.objectives
                       if o.name in ("params", "madds")]
        number = candidate.trial.number
        self.coordinator.register.remote(number, cost_vector)
        future = worker.run.remote(number, candidate.arch, candidate.settings, spec.task,
                                   spec.task_options, self.latency, self.coordinator)
        self.running[future] = (candidate, worker)
        self.in_flight[candidate.key] = number
        self.bar.show(len(self.running))

    def wait(self) -> None:
        done, _ = self.ray.wait(list(self.running), num_returns=1, timeout=_POLL_SECONDS)
        # Workers report each epoch synchronously before returning, so this drain holds every
        # report of the trials that just finished: they are written before their result.
        self.write_reports(self.ray.get(self.coordinator.drain.remote()))
        for future in done:
            candidate, worker = self.running.pop(future)
            self.in_flight.pop(candidate.key, None)
            try:
                result = self.ray.get(future)
                self.idle.append(worker)
            except Exception as exc:  # the trial raised, or its worker died
                lines = [line for line in str(exc).strip().splitlines() if line.strip()]
                message = lines[-1].strip() if lines else repr(exc)
                if not isinstance(exc, self.ray.exceptions.RayActorError):
                    self.idle.append(worker)
                else:
                    self.workers.remove(worker)
                    if "creation task" in str(exc):  # not the trial's fault: do not count it
                        self.halted = f"Ray workers cannot start: {message}"
                        self.interrupt(candidate)
                        continue
                result = {"status": "failed", "reason": f"worker error: {message}"}
            status, values = _finish_trial(self.run, candidate, result)
            self.tally.add(status, values)
            if status == "completed" and values is not None:
                self.known[candidate.key] = _Known(candidate.trial.number, values,
                                                   len(result.get("epochs") or []))
        self.bar.show(len(self.running))

    def write_reports(self, reports: list[tuple[int, dict[str, Any]]]) -> None:
        if not reports:
            return
        run = self.run
        ids = {c.trial.number: c.trial._trial_id for c, _ in self.running.values()}
        for number, epoch in reports:
            write_epoch(run.storage, run.spec.name, number, epoch)
            value = epoch.get("value")
            if number in ids and isinstance(value, (int, float)) and math.isfinite(value):
                with session(run.storage.url):
                    run.storage.set_trial_intermediate_value(ids[number], int(epoch["epoch"]),
                                                             float(value))

    # ------------------------------------------------------------------ endings
    def interrupt(self, candidate: _Candidate) -> None:
        _mark_interrupted(self.run, candidate.trial)
        self.tally.add("interrupted")

    def interrupt_all(self) -> None:
        for candidate, _ in self.running.values():
            _mark_interrupted(self.run, candidate.trial)
        for candidate in self.deferred + self.ready:
            _mark_interrupted(self.run, candidate.trial)
        self.running, self.deferred, self.ready = {}, [], []

    def close(self) -> None:
        self.bar.close()
        for worker in self.workers:
            self.ray.kill(worker)
        self.ray.kill(self.coordinator)


def _rebuild_rungs(run: StudyRun, trials: list[optuna.trial.FrozenTrial]) -> Rungs:
    """ASHA's rung records from the per-epoch table (interrupted trials left no result)."""
    from studies.storage import read_epochs

    spec = run.spec
    directions = [o.direction for o in spec.objectives if o.name == "accuracy"] + [
        o.direction for o in spec.objectives if o.name in ("params", "madds")]
    rungs = Rungs(spec.fidelity.grace_epochs, spec.fidelity.reduction_factor,
                  spec.fidelity.epochs, directions)
    costs = {t.number: [float(t.user_attrs.get("nas.cost", {}).get(o.name, 0))
                        for o in spec.objectives if o.name in ("params", "madds")]
             for t in trials if t.user_attrs.get("nas.status") not in _COUNTED_EXCLUDED}
    with session(run.storage.url):
        rows = read_epochs(run.storage.engine, spec.name)
    for row in rows:
        if row["trial_number"] in costs and row["value"] is not None:
            rungs.record(row["trial_number"], row["epoch"],
                         [row["value"], *costs[row["trial_number"]]])
    return rungs


def _trained_results(trials: list[optuna.trial.FrozenTrial]) -> dict[str, _Known]:
    """Completed trials by result key: a re-sampled architecture reuses their result."""
    out: dict[str, _Known] = {}
    for t in trials:
        arch_id, settings = t.user_attrs.get("nas.arch_id"), t.user_attrs.get("nas.train")
        if t.state == TrialState.COMPLETE and arch_id and isinstance(settings, dict):
            key = _result_key(arch_id, settings)
            if key not in out:
                out[key] = _Known(t.number, list(t.values), t.user_attrs.get("nas.epochs_reached"))
    return out


def _finish_trial(run: StudyRun, candidate: _Candidate,
                  result: dict[str, Any]) -> tuple[str, list[float] | None]:
    """Record a worker's result; the trial's final ``nas.status`` and its values if complete."""
    trial = candidate.trial
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
        values = _objective_values(run.spec, candidate.cost, result)
        if isinstance(values, str):
            status = "failed"
            attrs["nas.reason"] = values
        else:
            limit = run.spec.constraints.get("latency_ms_max")
            if limit is not None and result.get("latency_ms", 0.0) > limit:
                attrs.update({"nas.status": "rejected",
                              "nas.reason": f"latency_ms {result['latency_ms']:.2f} breaks "
                                            f"latency_ms_max={limit:g}"})
                _tell(run, trial, TrialState.FAIL, None, attrs)
                return "rejected", None
            _tell(run, trial, TrialState.COMPLETE, values, attrs)
            return "completed", values
    if status == "stopped":
        _tell(run, trial, TrialState.PRUNED, None, attrs)
        return "stopped", None
    _tell(run, trial, TrialState.FAIL, None, {**attrs, "nas.status": "failed"})
    return "failed", None
