"""The loop of ``run_study``: sample, reject or reuse, dispatch to Ray, collect, record.

One ``Driver`` per run: it asks Optuna for trials, computes their cheap objectives, rejects
constraint violations, reuses completed results (and makes a twin of a trial in flight wait for
it), keeps a pool of Ray actors busy, writes epoch reports and results, and keeps the trial
counts in memory (the driver is the database's only writer, so it reads them once).
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from nas.errors import NasError
from nas.tasks import TaskGeometry
from studies._trials import COUNTED_EXCLUDED, StudyRun, counted_trials, mark_interrupted, tell
from studies.asha import Rungs
from studies.pareto import normalized_hypervolume
from studies.spec import StudySpec
from studies.storage import session, set_trial_user_attrs, write_epoch

if TYPE_CHECKING:  # the cost model (torch) is imported when the first trial is costed
    from nas.cost import Cost

__all__ = ["Driver", "Evaluator", "init_ray"]

# A space whose every draw breaks the constraints would otherwise be sampled forever.
_MAX_REJECTED_IN_A_ROW = 200
_POLL_SECONDS = 0.5  # how often the driver writes epoch reports while trials run
Evaluator = Callable[..., dict[str, Any]]


def _estimate_cost(config: Any, geometry: TaskGeometry) -> Cost:
    from nas.cost import estimate_cost

    return estimate_cost(config, geometry)


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
    checkpoint: str | None = None


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
        if status not in COUNTED_EXCLUDED:
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


def check_ray_address(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast, in one line, when ``address`` names a host:port where nothing listens (Ray
    itself retries for minutes). ``auto``, ``local`` and no address are left to ``ray.init``."""
    if not address or address in ("auto", "local"):
        return
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        raise NasError(f"--address must be 'auto', 'host:port' or 'ray://host:port', but got "
                       f"{address!r}.")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise NasError(f"Cannot reach the Ray cluster at {address!r}: {why}. Start it with "
                       "`ray start --head`, or leave out --address for a local Ray.") from None


def init_ray(address: str | None, spec: StudySpec) -> tuple[Any, int]:
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


class Driver:
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
        self.threads = max(1, int(spec.resources.cpu))  # torch threads of one trial
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
            out_of_time = time.monotonic() > deadline
            while self.idle or len(self.workers) < self.pool:
                stop = out_of_time or bool(self.halted)
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
            if out_of_time or self.halted:
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
            cost = self.costs.get(config.arch_id) or _estimate_cost(config, self.geometry)
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
        tell(self.run, trial, TrialState.FAIL, None,
              {**attrs, "nas.status": "rejected", "nas.reason": reason})
        self.tally.add("rejected")
        self.rejected_in_a_row += 1
        if self.rejected_in_a_row >= _MAX_REJECTED_IN_A_ROW:
            self.halted = (
                f"Study {self.run.spec.name!r}: {self.rejected_in_a_row} architectures in a row "
                f"were rejected (the last: {reason}); loosen `constraints` or narrow the space.")

    def reuse(self, candidate: _Candidate, attrs: dict[str, Any]) -> None:
        previous = self.known[candidate.key]
        tell(self.run, candidate.trial, TrialState.COMPLETE, list(previous.values),
              {**attrs, "nas.status": "reused", "nas.reused_from": previous.number,
               "nas.epochs_reached": previous.epochs_reached,
               **({"nas.checkpoint": previous.checkpoint} if previous.checkpoint else {})})
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
            self.workers.append(self.worker_cls.remote(self.evaluator, self.threads))
            self.idle.append(self.workers[-1])
        worker = self.idle.pop()
        cost_vector = [float(getattr(candidate.cost, o.name)) for o in spec.objectives
                       if o.name in ("params", "madds")]
        number = candidate.trial.number
        future = worker.run.remote(number, candidate.arch, candidate.settings, spec.task,
                                   spec.task_options, self.latency, self.coordinator,
                                   cost_vector, spec.checkpoint_dir(number))
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
                                                   len(result.get("epochs") or []),
                                                   result.get("checkpoint"))
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
        mark_interrupted(self.run, candidate.trial)
        self.tally.add("interrupted")

    def interrupt_all(self) -> None:
        for candidate, _ in self.running.values():
            mark_interrupted(self.run, candidate.trial)
        for candidate in self.deferred + self.ready:
            mark_interrupted(self.run, candidate.trial)
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
             for t in trials if t.user_attrs.get("nas.status") not in COUNTED_EXCLUDED}
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
                out[key] = _Known(t.number, list(t.values), t.user_attrs.get("nas.epochs_reached"),
                                  t.user_attrs.get("nas.checkpoint"))
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
    if result.get("checkpoint"):
        attrs["nas.checkpoint"] = result["checkpoint"]
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
                tell(run, trial, TrialState.FAIL, None, attrs)
                return "rejected", None
            tell(run, trial, TrialState.COMPLETE, values, attrs)
            return "completed", values
    if status == "stopped":
        tell(run, trial, TrialState.PRUNED, None, attrs)
        return "stopped", None
    tell(run, trial, TrialState.FAIL, None, {**attrs, "nas.status": "failed"})
    return "failed", None
