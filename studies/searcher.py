"""The study's Ray Tune searcher: it asks and tells the stored Optuna study.

``StudySearcher.suggest`` asks the study's own sampler for a trial, maps its parameters to an
architecture (the search space), computes the cheap objectives on the meta device and

- rejects a constraint violation before any training (recorded, not counted),
- reuses the result of the same architecture trained with the same settings,
- makes a twin of a trial in flight wait for its result,

and hands Tune only what must train. From ``ASK_AHEAD_FROM`` trials at once it asks the next
trial at the end of a Tune step in which every slot is busy (``ask_ahead``), so that a freed
slot is filled without waiting for the sampler. ``on_trial_complete`` tells the study how the
trial ended (complete, pruned by the scheduler, failed). Every ending is written through the
study's store (``studies.store.StudyStore``) and counted in one ``studies._tally.Tally``; the
budget, the deadline and the waiting twins are ``studies._pace.Pace``'s; the scheduler tells
what it stopped through ``on_stop``. ``StudyCallback`` is the searcher's view of what Tune does
not show a searcher: every epoch report (the one a scheduler stops on included; written to the
database at the end of Tune's step, once Tune has sent the trial on, at most once each
``EPOCH_WRITE_SECONDS`` in one transaction, and in the transaction of a trial's ending), the
error of a failed trial, and a clock for the progress line.

Optuna's storage is the record: Tune's trial ids are kept only while the run lives.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

import optuna
from optuna.trial import TrialState
from ray.tune import Callback
from ray.tune.search import Searcher
from ray.tune.stopper import Stopper

from nas.errors import NasError, first_line
from nas.tasks import TaskGeometry
from studies._pace import Pace
from studies._progress import Progress
from studies._tally import Tally
from studies._trials import StudyRun, base_settings, suggest
from studies.constraints import broken_bounds, cost_dict, violations
from studies.convergence import DEFAULT_PATIENCE, NOISE_FRACTION, recorded_convergence
from studies.costaware import Costing, bind
from studies.interrupts import check_signal
from studies.objectives import objective_values
from studies.store import Status, StorageError, StoredValueError, TrialKey, study_attrs
from studies.tune_report import EpochResult, FinalResult, kind_of

if TYPE_CHECKING:  # the cost model (torch) is imported when the first trial is costed
    from nas.config import ArchConfig
    from nas.cost import Cost
    from nas.memory import MemoryProfile
    from studies.cluster import TrialResources

__all__ = ["FaultStopper", "StudyCallback", "StudySearcher"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _guarded(method: _F) -> _F:
    """A database or disk fault inside a Tune hook stops the run instead of escaping into Tune:
    it is kept as ``fault`` (the ``FaultStopper`` then stops every trial) and the hook returns
    what ends the search. (Every database call of a hook goes through the study's store, which
    gives its driver errors as ``StorageError``.)"""
    @functools.wraps(method)
    def wrapper(self: StudySearcher, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except (StorageError, OSError) as exc:
            self.fault = self.fault or " ".join(str(exc).split())
            return Searcher.FINISHED if method.__name__ == "suggest" else None
    return wrapper  # type: ignore[return-value]


#: Times one configuration is run again after an infrastructure fault; the next such fault
#: fails it (counted): a network that Ray's memory monitor kills every time is too big.
MAX_INFRASTRUCTURE_RERUNS = 2

#: The epoch reports kept at the end of Tune's steps are written at most once in this many
#: seconds, together (one transaction); a trial's ending writes every kept report with it. A
#: study of short trials then commits a few times a second, not once per report; the dashboard
#: and ``nas status`` see an epoch at most this late.
EPOCH_WRITE_SECONDS = 1.0

#: From this many trials at once, the searcher asks the next trial ahead of a free slot: at the
#: end of a Tune step in which every slot is busy (:meth:`StudySearcher.ask_ahead`), so that
#: when a trial ends its slot is filled without the sampler's wait. The trial asked ahead is
#: chosen without the result of the one whose slot it takes, as one more trial at once would
#: be; below this many at once that costs the search more than the wait costs the cluster.
ASK_AHEAD_FROM = 8


def _cost_and_memory(config: Any, geometry: TaskGeometry) -> tuple[Cost, MemoryProfile]:
    """The cost and the training-memory profile of ``config``: one build and one traced pass
    on the meta device (``nas.cost.cost_and_memory``)."""
    from nas.cost import cost_and_memory

    return cost_and_memory(config, geometry)


def _params(config: Any, geometry: TaskGeometry) -> int:
    """The trainable parameters of ``config``, from its build on the meta device alone
    (``nas.cost.estimate_params``: the same count as its cost's, no traced pass)."""
    from nas.cost import estimate_params

    return estimate_params(config, geometry)


def _result_key(arch_id: str, settings: dict[str, Any]) -> str:
    """Equal keys, equal results: the architecture and everything it is trained with."""
    return arch_id + json.dumps(settings, sort_keys=True, default=str)


@dataclass
class _Candidate:
    """A sampled trial within the constraints: what a worker needs to train it."""

    trial: optuna.trial.Trial
    attrs: dict[str, Any]  # arch, arch_id, cost, train
    key: str
    epochs_reached: int = 0
    stored: bool = False  # its attrs written (a twin kept waiting); else written at launch


@dataclass(frozen=True)
class _Known:
    """A completed training, by result key: what a re-sampled twin reuses."""

    number: int
    values: list[float]
    epochs_reached: int | None
    checkpoint: str | None = None


def _known_results(trials: list[optuna.trial.FrozenTrial]) -> dict[str, _Known]:
    out: dict[str, _Known] = {}
    for t in trials:
        arch_id, settings = t.user_attrs.get(TrialKey.ARCH_ID), t.user_attrs.get(TrialKey.TRAIN)
        if t.state == TrialState.COMPLETE and arch_id and isinstance(settings, dict):
            key = _result_key(arch_id, settings)
            if key not in out:
                out[key] = _Known(t.number, list(t.values),
                                  t.user_attrs.get(TrialKey.EPOCHS_REACHED),
                                  t.user_attrs.get(TrialKey.CHECKPOINT))
    return out


def _reference(run: StudyRun) -> tuple[float | None, ...] | None:
    """The study's stored reference point as ``studies.store.stored`` parses it; None (derived
    from the trials) where it is missing or does not parse: a database value is only data."""
    try:
        return study_attrs(run.spec.name, run.store.user_attrs(run.study),
                           len(run.study.directions), full=False).reference
    except StoredValueError:
        return None


class StudySearcher(Searcher):
    """Tune searcher over a stored Optuna study, shaped as Ray's ``OptunaSearch``.

    ``suggest`` asks the study's sampler for a trial, maps its parameters to an architecture,
    costs it on the meta device, and rejects it (a constraint broken) or reuses a known result,
    else launches it; ``on_trial_complete`` tells the study how it ended. Each ending is written
    through the study's store and counted in ``tally``, both by the tell path alone. ``pace``
    holds the budget, ``deadline`` (a ``time.monotonic()`` after which no trial starts), the
    halt and the twins waiting for a trial in flight. The scheduler tells what it stopped
    through :meth:`on_stop`. ``samples`` is the validation samples the metric is measured on
    (``studies._tune.validation_samples``), told to a cost-aware sampler for its noise.
    """

    def __init__(self, run: StudyRun, geometry: TaskGeometry, *, deadline: float = math.inf,
                 progress: Progress | None = None, samples: int | None = None) -> None:
        super().__init__(metric=None, mode=None)
        spec = run.spec
        self.run, self.geometry, self.progress = run, geometry, progress
        self.store = run.store
        trials = self.store.trials(run.study)
        # Asked through a second handle on the study whose storage reads the study's trials
        # once per suggestion (studies.store._snapshot); told through run.study.
        self.asking = self.store.asking(run.study)
        self.tally = Tally.of(trials)
        self.known = _known_results(trials)
        #: With ``budget.until: converged``, each trial's system attributes in the order
        #: asked (the default sampler's gain and noise: ``studies.convergence``), else None.
        self.recorded: list[Mapping[str, Any]] | None = (
            [t.system_attrs for t in sorted(trials, key=lambda t: t.number)]
            if spec.budget.until == "converged" else None)
        self.checked = 0  # the records :meth:`_converged` read
        self.pace: Pace[_Candidate] = Pace(spec.budget.trials, deadline)
        self.settings_base = base_settings(spec)
        self.latency = ("latency_ms" in spec.objective_names
                        or "latency_ms_max" in spec.constraints)
        #: By arch_id: its cost and training-memory profile (Ray's memory request).
        self.costs: dict[str, tuple[Cost, MemoryProfile]] = {}
        #: By arch_id: the parameters of a candidate costed without its traced pass.
        self.params: dict[str, int] = {}
        #: Whether a candidate's cost needs the traced pass (MAdds an objective or constraint).
        self.needs_madds = ("madds" in spec.objective_names
                            or any(k.startswith("madds_") for k in spec.constraints))
        self.live: dict[str, _Candidate] = {}  # Tune trial id -> the trial it trains
        self.errored: dict[str, _Candidate] = {}  # failed in Tune, waiting for the error text
        self.stopped_at: dict[str, int] = {}  # Tune trial id -> the epoch the scheduler stopped
        #: Epoch reports received and not yet written (:meth:`record_epoch`, :meth:`write_epochs`).
        self.epochs: list[tuple[_Candidate, dict[str, Any]]] = []
        self.epochs_written = -math.inf  # time.monotonic() of the last write at a step's end
        self.fault = ""  # a database or disk fault met in a Tune hook: the run stops
        self.unclosed = 0  # trials this run could not close (the database was down)
        self.max_live = math.inf  # lowered by each infrastructure fault (never below 1)
        self.infrastructure: dict[str, int] = {}  # result key -> infrastructure faults
        #: What a trial asks Ray for: the memory beyond the baseline is computed here from the
        #: profile costing gave (``TrialResources.from_profile``) and sent in the config as
        #: ``memory_estimate``; None: not sent.
        self.resources: TrialResources | None = None
        #: Trials at once (Tune's concurrency limit, set by ``studies._tune.fit``): from
        #: ``ASK_AHEAD_FROM`` a trial is asked ahead of a free slot and kept in ``ahead``.
        self.pool = 1
        self.ahead: _Candidate | None = None
        metric = [i for i, o in enumerate(spec.objectives) if o.source == "metric"]
        if metric:  # a cost-aware sampler costs its candidates as this searcher costs a trial
            bind(run.study.sampler, Costing(self._cost_of, self._key_of, metric[0],
                                            list(spec.directions), _reference(run),
                                            spec.fidelity.epochs, samples))

    @property
    def halted(self) -> str:
        """Why no more trials start ('' while they may): a hopeless space, workers that cannot
        start."""
        return self.pace.halted

    # ------------------------------------------------------------------ Tune's interface
    # Tune pickles its searcher into the experiment folder to restore a run; a study resumes
    # from its database instead, so only a marker is kept (the live connection cannot pickle).
    def __getstate__(self) -> dict[str, Any]:
        return {"study": self.run.spec.name, "record": "the study's database"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def save_to_dir(self, checkpoint_dir: str, session_str: str = "default") -> None:
        return None

    @_guarded
    def suggest(self, trial_id: str) -> dict[str, Any] | None:  # or Searcher.FINISHED
        if self.fault:
            return Searcher.FINISHED  # type: ignore[return-value]
        for done in self.pace.release(self.known):
            self._reuse(done)
        if self.pace.closed():
            for candidate in self.pace.take_ready():
                self._interrupt(candidate)
            self._drop_ahead()
            return self._finished_or_wait()
        twin = self.pace.next_ready()
        if twin is not None:
            return self._launch(trial_id, twin)
        if len(self.live) >= self.max_live and (self.ahead is not None or (
                not self.pace.halted and self.pace.room(self.tally.counted, len(self.live)))):
            return None  # fewer at once since workers were lost: wait for one to end
        if self.ahead is not None:
            ahead, self.ahead = self.ahead, None
            if ahead.key in self.known:  # a trial of its key completed since it was asked
                self._reuse(ahead)
            elif not self.pace.defer(ahead):
                return self._launch(trial_id, ahead)
        sampled = self._sample()
        return self._finished_or_wait() if sampled is None else self._launch(trial_id, sampled)

    @_guarded
    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        candidate = self.live.get(trial_id)
        if candidate is None:
            return
        if error:  # the text of the error reaches StudyCallback.on_trial_error next
            self.errored[trial_id] = self.live.pop(trial_id)
            return
        self.live.pop(trial_id)
        result = result or {}
        try:
            if trial_id in self.stopped_at:  # its last result is the epoch it was stopped at
                self.stopped_at.pop(trial_id)
                self._finish(candidate, replace(
                    FinalResult.from_tune(result), status=Status.STOPPED,
                    seconds=result.get("time_total_s"),
                    reason=f"stopped early by the scheduler at epoch {candidate.epochs_reached}"))
            elif kind_of(result) == "final":
                self._finish(candidate, FinalResult.from_tune(result))
            else:  # Tune ended it before its final report: the run is ending under it
                self._write_epochs()
                self._interrupt(candidate)
        except BaseException:  # its ending was not written: closed with the run (close())
            self.live.setdefault(trial_id, candidate)
            raise

    @_guarded
    def ask_ahead(self) -> None:
        """At the end of Tune's step: from ``ASK_AHEAD_FROM`` trials at once, while every slot
        is busy and the budget has room for one more, ask the next trial now (sampled, mapped,
        costed, its attributes written) and keep it in ``ahead``; the next :meth:`suggest`
        launches it. A twin of a trial in flight waits as :meth:`suggest` keeps one."""
        if (self.ahead is not None or self.fault or self.pool < ASK_AHEAD_FROM
                or len(self.live) < min(self.pool, self.max_live)
                or self.pace.closed() or self.pace.ready):
            return
        sampled = self._sample()
        if sampled is not None:  # recorded now: the launch only names its Tune trial
            self.store.record_sampled(sampled.trial, sampled.attrs)
            sampled.stored = True
            self.ahead = sampled

    def _drop_ahead(self) -> None:
        """Close the trial asked ahead that no slot took (the run ends): interrupted, not
        counted, not enqueued again (it never trained; a later run's sampler draws afresh)."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None:
            self._abandon(ahead.trial, "the run ended before this trial, asked ahead of a free "
                                       "slot, started")

    # ------------------------------------------------------------------ the scheduler's input
    def on_stop(self, trial_id: str, epoch: int) -> None:
        """The scheduler stopped Tune trial ``trial_id`` at ``epoch``: it ends as stopped."""
        self.stopped_at[trial_id] = epoch

    # ------------------------------------------------------------------ StudyCallback's input
    def record_epoch(self, trial_id: str, result: dict[str, Any]) -> None:
        """Keep one epoch report for the study record (``StudyStore.record_epochs``), written by
        :meth:`write_epochs` at the end of Tune's step (Tune sends the trial its next step only
        after its callbacks have seen the report, so the database's round trip is not the
        trial's wait), or with a trial's ending. The final report carries the last epoch
        (``studies.worker.trainable`` sends them as one): kept here, with that epoch's own value,
        unless an epoch report already was."""
        candidate = self.live.get(trial_id)
        kind = kind_of(result)
        if candidate is None or kind is None:
            return
        if kind == "final":
            epoch = FinalResult.from_tune(result).epoch
            if epoch is None or epoch.epoch <= candidate.epochs_reached:
                return
        else:
            epoch = EpochResult.from_tune(result)
        candidate.epochs_reached = max(candidate.epochs_reached, epoch.epoch)
        self.epochs.append((candidate, epoch.record()))

    @_guarded
    def write_epochs(self, *, now: bool = False) -> None:
        """At the end of Tune's step: write the epoch reports kept (in the order received, one
        transaction) where ``EPOCH_WRITE_SECONDS`` have passed since the last such write, or
        ``now``."""
        if not self.epochs:
            return
        at = time.monotonic()
        if now or at - self.epochs_written >= EPOCH_WRITE_SECONDS:
            self.epochs_written = at
            self._write_epochs()

    def _write_epochs(self) -> None:
        self.store.record_epochs(self.run.study, self._take_epochs())

    def _take_epochs(self) -> list[tuple[optuna.Trial, dict[str, Any]]]:
        """The epoch reports kept, to write (with an ending, or by :meth:`_write_epochs`)."""
        kept, self.epochs = self.epochs, []
        return [(candidate.trial, record) for candidate, record in kept]

    @_guarded
    def record_error(self, trial_id: str, message: str, *, worker_setup: bool,
                     infrastructure: bool = False) -> None:
        """A trial raised in Tune (after Tune's retries). ``worker_setup``: the worker could
        not load the evaluator; not the trial's fault, and no later trial would start.
        ``infrastructure``: its worker process or node was lost (Ray's memory monitor
        included); see :meth:`_lost`."""
        candidate = self.errored.pop(trial_id, None) or self.live.pop(trial_id, None)
        if candidate is None:
            return
        if worker_setup or infrastructure:
            self._write_epochs()
        if worker_setup:
            self.pace.halt(f"Ray workers cannot start: {message}")
            self._interrupt(candidate)
            return
        if infrastructure:
            self._lost(candidate, message)
            return
        self._finish(candidate, FinalResult(Status.FAILED, reason=message))

    def _lost(self, candidate: _Candidate, message: str) -> None:
        """An infrastructure fault, not a failed architecture: the trial is closed as
        interrupted with ``TrialKey.FAULT`` and the reason (not counted), its configuration is
        enqueued to run again (on whichever worker Ray gives it), and fewer trials run at once
        from now. A configuration lost more than ``MAX_INFRASTRUCTURE_RERUNS`` times fails."""
        number, key = candidate.trial.number, candidate.key
        self.infrastructure[key] = self.infrastructure.get(key, 0) + 1
        if self.infrastructure[key] > MAX_INFRASTRUCTURE_RERUNS:
            self._note(f"trial {number}: its worker was lost again ({message}); failed after "
                       f"{MAX_INFRASTRUCTURE_RERUNS} runs again")
            self._finish(candidate, FinalResult(
                Status.FAILED,
                reason=f"infrastructure fault, {self.infrastructure[key]} times: {message}"))
            return
        self.pace.ended(key)
        self.store.close_interrupted(self.run.study, [candidate.trial], space=self.run.space,
                                     reason=f"infrastructure fault: {message}",
                                     attrs={TrialKey.FAULT: "infrastructure"})
        self._told(Status.INTERRUPTED)
        running = max(1, len(self.live))
        self.max_live = max(1, min(self.max_live, running + 1) - 1)
        self._note(f"trial {number}: its Ray worker was lost ({message}); not counted, its "
                   f"configuration runs again; at most {self.max_live} trials at once from now")

    def close(self) -> None:
        """After ``Tuner.fit``: close what Tune left unfinished (an interrupted run)."""
        if not self.fault:
            self.write_epochs(now=True)
        for candidate in [*self.live.values(), *self.errored.values(), *self.pace.take_all()]:
            self._interrupt(candidate)
        self.live, self.errored = {}, {}
        self._drop_ahead()
        if self.progress is not None:
            self.progress.close()

    def tick(self) -> None:
        self._show(tick=True)

    # ------------------------------------------------------------------ ask, map, cost
    def _cost(self, config: ArchConfig) -> Cost:
        """``config``'s cost, from its training-memory profile's one traced pass, computed once
        per architecture (``costs``: the launch reads the profile there)."""
        if config.arch_id not in self.costs:
            self.costs[config.arch_id] = _cost_and_memory(config, self.geometry)
        return self.costs[config.arch_id][0]

    def _cost_of(self, trial: optuna.Trial) -> tuple[str, list[float]] | None:
        """A cost-aware sampler's candidate (a drawn trial): what it trains (the key reuse
        matches on) and its cost objectives in objective order, or None where the space refuses
        it or it breaks a constraint.

        Only what the study's cost objectives and constraints name is computed: a study that
        names no MAdds counts a candidate's parameters on its meta build (milliseconds), kept
        per architecture; the traced pass (a tenth of a second and more) is left to the one
        candidate chosen, at its launch. Otherwise its whole cost is kept for the launch."""
        spec = self.run.spec
        try:
            config, overrides = suggest(self.run.space, trial, spec.smoke)
            values = self._candidate_costs(config)
        except NasError:
            return None
        if broken_bounds(spec.constraints, values):
            return None
        key = _result_key(config.arch_id, {**self.settings_base, **overrides})
        return key, [float(values[o.name]) for o in spec.objectives if o.source == "cost"]

    def _candidate_costs(self, config: ArchConfig) -> dict[str, float]:
        """``params`` (and ``madds`` where the study names them) of ``config``: from its whole
        cost where it was computed or MAdds are needed, else from its meta build alone."""
        if config.arch_id in self.costs or self.needs_madds:
            cost = self._cost(config)
            return {"params": cost.params, "madds": cost.madds}
        if config.arch_id not in self.params:
            self.params[config.arch_id] = _params(config, self.geometry)
        return {"params": self.params[config.arch_id]}

    def _key_of(self, params: dict[str, Any]) -> str | None:
        """What a trial with ``params`` trains (the key reuse matches on); None where the space
        maps them to nothing."""
        try:
            config, overrides = suggest(self.run.space, optuna.trial.FixedTrial(params),
                                        self.run.spec.smoke)
        except (NasError, ValueError):
            return None
        return _result_key(config.arch_id, {**self.settings_base, **overrides})

    def _sample(self) -> _Candidate | None:
        """Ask until a sampled trial may train now (returned), or until the budget has no room,
        the run halted or the study converged (None). A twin of a trial in flight met on the
        way waits for it (its attributes written)."""
        while not self.pace.halted and not self._converged():
            if not self.pace.room(self.tally.counted, len(self.live)):
                return None
            sampled = self._ask()
            self._show()
            if sampled is None:
                continue
            if not self.pace.defer(sampled):
                return sampled
            self.store.record_sampled(sampled.trial, sampled.attrs)  # a twin waits
            sampled.stored = True
        return None

    def _ask(self) -> _Candidate | None:
        """Ask for a trial, map its parameters to an architecture and cost it; reject it or
        reuse a known result (None), or return it to train."""
        run, spec = self.run, self.run.spec
        with self.asking.snapshot():  # one read of the study's trials for this suggestion
            trial = self.asking.ask()
            try:  # the sampler reads and writes the database: retried like any write
                config, train_overrides = self.asking.draw(
                    lambda: suggest(run.space, trial, spec.smoke))
            except StorageError:  # a database fault while drawing: must not stay RUNNING
                self._abandon(trial)
                raise
            except NasError as exc:  # a space that lets an invalid config through: go on
                self._record_choice(trial)
                self._reject(trial, str(exc), {})
                return None
            self._record_choice(trial)
        try:
            cost = self._cost(config)
        except NasError as exc:  # a space that lets an invalid config through: record, go on
            self._reject(trial, str(exc), {})
            return None
        settings = {**self.settings_base, **train_overrides}
        attrs = {TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
                 TrialKey.COST: cost_dict(cost), TrialKey.TRAIN: settings}
        reason = violations(spec, cost)
        if reason is not None:
            self._reject(trial, reason, attrs)
            return None
        self.pace.accepted()
        candidate = _Candidate(trial, attrs, _result_key(config.arch_id, settings))
        if candidate.key in self.known:
            self._reuse(candidate)
            return None
        return candidate  # its attrs are written with its launch (one transaction)

    def _record_choice(self, trial: optuna.Trial) -> None:
        """Keep what the sampler recorded with ``trial`` (its gain and noise) for
        :meth:`_converged`: read back once its parameters were drawn (the sampler chose them
        when it was asked; they are written with the parameters), with ``budget.until:
        converged`` alone."""
        if self.recorded is not None:
            self.recorded.append(self.run.storage.get_trial(trial._trial_id).system_attrs)

    def _launch(self, trial_id: str, candidate: _Candidate) -> dict[str, Any]:
        spec, number = self.run.spec, candidate.trial.number
        self.live[trial_id] = candidate
        self.pace.started(candidate.key, number)
        self.store.record_launched(candidate.trial, trial_id,
                                   attrs=None if candidate.stored else candidate.attrs)
        candidate.stored = True
        cost = candidate.attrs[TrialKey.COST]
        self._show()
        config = {
            "number": number, "arch": candidate.attrs[TrialKey.ARCH],
            "settings": candidate.attrs[TrialKey.TRAIN], "task": spec.task,
            "task_options": spec.task_options, "latency": self.latency,
            "checkpoint_dir": spec.checkpoint_dir(number),
            "cost_vector": [float(cost[o.name]) for o in spec.objectives if o.source == "cost"],
        }
        if self.resources is not None:  # the profile costing this architecture gave
            _, profile = self.costs[candidate.attrs[TrialKey.ARCH_ID]]
            config["memory_estimate"] = self.resources.from_profile(profile, config["settings"])
        return config

    def _converged(self) -> bool:
        """With ``budget.until: converged``: whether the expected gains recorded so far stay
        below the hypervolume's noise (the run then finishes: ``pace.finished`` says so)."""
        if self.recorded is None:
            return False
        if not self.pace.finished and len(self.recorded) > self.checked:
            # The windows that ended by the last check did not converge: only the later ones
            # are read (a suggestion reads at most DEFAULT_PATIENCE records, not the study).
            start = max(0, self.checked - DEFAULT_PATIENCE + 1)
            found = recorded_convergence(self.recorded[start:])
            self.checked = len(self.recorded)
            if found is not None and found.converged and found.at is not None:
                self.pace.finish(
                    f"Study {self.run.spec.name!r} converged: the expected hypervolume gains "
                    f"of the {found.patience} trials asked up to trial {start + found.at} add "
                    f"up to {found.gain:.2g}, below {NOISE_FRACTION:g} x the hypervolume's "
                    f"noise {found.noise / NOISE_FRACTION:.2g} (budget.until: converged).")
        return bool(self.pace.finished)

    def _finished_or_wait(self) -> Any:
        """FINISHED once nothing more can come of this run; None while twins wait for a trial
        in flight (its failure would send them to train)."""
        return None if self.pace.waiting() else Searcher.FINISHED

    # ------------------------------------------------------------------ tell
    def _told(self, status: str, values: list[float] | None = None) -> None:
        self.tally.add(status, values)
        self._show()

    def _reject(self, trial: Any, reason: str, attrs: dict[str, Any]) -> None:
        self.store.record_rejected(self.run.study, trial, reason, attrs)
        self._told(Status.REJECTED)
        self.pace.rejected(self.run.spec.name, reason)

    def _reuse(self, candidate: _Candidate) -> None:
        previous = self.known[candidate.key]
        attrs = {**candidate.attrs, TrialKey.EPOCHS_REACHED: previous.epochs_reached}
        if previous.checkpoint:
            attrs[TrialKey.CHECKPOINT] = previous.checkpoint
        self.store.record_reused(self.run.study, candidate.trial, previous.values,
                                 source=previous.number, attrs=attrs)
        self._told(Status.REUSED, list(previous.values))

    def _abandon(self, trial: optuna.trial.Trial,
                 reason: str = "the database failed while this trial's parameters were "
                               "drawn") -> None:
        """Close a trial that will not train (by default one whose parameters could not be
        drawn: a database fault): interrupted, not counted, not enqueued again (the sampler
        draws afresh). Where the database cannot be written now, it is left for the end of the
        run or the next resume to close."""
        try:
            self.store.close_interrupted(self.run.study, [trial], rerun=False, reason=reason)
        except NasError:
            self.unclosed += 1
            return
        self._told(Status.INTERRUPTED)

    def _interrupt(self, candidate: _Candidate) -> None:
        self.pace.ended(candidate.key)
        try:
            self.store.close_interrupted(
                self.run.study, [candidate.trial], space=self.run.space,
                reason="the run ended while this trial was waiting or training")
        except NasError:  # the database may be what ended the run: left for the next resume
            self.unclosed += 1
            return
        self._told(Status.INTERRUPTED)

    def _finish(self, candidate: _Candidate, end: FinalResult) -> None:
        """Tell how a trained trial ended, with the epoch reports kept (its last ones among
        them) in the ending's transaction; its twins are released at the next suggest."""
        spec, trial = self.run.spec, candidate.trial
        epochs = self._take_epochs()
        self.pace.ended(candidate.key)
        reached = end.epochs_reached
        attrs: dict[str, Any] = {
            TrialKey.EPOCHS_REACHED: reached if isinstance(reached, int)
            else candidate.epochs_reached,
        }
        for key, value in ((TrialKey.SECONDS, end.seconds), (TrialKey.NODE, end.node),
                           (TrialKey.SAMPLES_PER_SECOND, end.samples_per_second),
                           (TrialKey.LATENCY_MS, end.latency_ms), (TrialKey.REASON, end.reason),
                           (TrialKey.CHECKPOINT, end.checkpoint)):
            if value is not None:
                attrs[key] = value
        if end.status == Status.COMPLETED:
            values = objective_values(spec.objectives, candidate.attrs[TrialKey.COST],
                                      end.measured())
            limit = spec.constraints.get("latency_ms_max")
            if isinstance(values, str):
                attrs[TrialKey.REASON] = values
            elif limit is not None and (end.latency_ms or 0.0) > limit:
                self.store.record_rejected(self.run.study, trial,
                                           f"latency_ms {end.latency_ms:.2f} breaks "
                                           f"latency_ms_max={limit:g}", attrs, epochs=epochs)
                self._told(Status.REJECTED)
                return
            else:
                self.store.record_completed(self.run.study, trial, values, attrs,
                                            epochs=epochs)
                self._told(Status.COMPLETED, values)
                self.known[candidate.key] = _Known(trial.number, values,
                                                   attrs[TrialKey.EPOCHS_REACHED],
                                                   attrs.get(TrialKey.CHECKPOINT))
                return
        if end.status == Status.STOPPED:
            self.store.record_stopped(self.run.study, trial, attrs, epochs=epochs)
            self._told(Status.STOPPED)
            return
        self.store.record_failed(self.run.study, trial, attrs, epochs=epochs)
        self._told(Status.FAILED)

    def _note(self, text: str) -> None:
        """One line about a fault, between the progress lines."""
        stream = self.progress.stream if self.progress is not None else sys.stderr
        tty = self.progress is not None and self.progress.enabled and self.progress.tty
        print(("\r\x1b[2K" if tty else "") + f"nas: {text}", file=stream, flush=True)

    def _show(self, *, tick: bool = False) -> None:
        if self.progress is not None:
            self.progress.show(self.tally.counted, len(self.live), self.tally.rejected,
                               self.tally.values, tick=tick)


def _infrastructure(error: BaseException) -> bool:
    """Ray lost the trial's worker process or node, or its memory monitor killed it."""
    from ray import exceptions as rx

    return isinstance(error, (rx.RayActorError, rx.WorkerCrashedError, rx.NodeDiedError,
                              rx.OutOfMemoryError, rx.LocalRayletDiedError))


def _error_text(trial: Any) -> tuple[str, bool]:
    """What a failed trial raised, in one line: the exception the trainable raised (Tune keeps
    it, pickled, with the traceback as text, in the trial's folder); and whether it is an
    infrastructure fault (:func:`_infrastructure`)."""
    from ray import cloudpickle

    infrastructure = False
    try:
        with open(trial.pickled_error_file, "rb") as f:
            error = cloudpickle.load(f)
        cause = getattr(error, "cause", None) or error
        infrastructure = _infrastructure(error) or _infrastructure(cause)
        text = f"{type(cause).__name__}: {cause}"
        if infrastructure:  # Ray's text of a lost worker is a page; its first line says it
            return first_line(cause, typed=True), True
    except Exception:  # no pickled error (e.g. not a task or actor error): Tune's text file
        try:
            with open(trial.error_file) as f:
                text = f.read()
        except (OSError, TypeError):
            text = "the trial raised an error"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return (lines[-1] if lines else text), infrastructure


class FaultStopper(Stopper):
    """Stops every trial once the searcher met a database or disk fault."""

    def __init__(self, searcher: StudySearcher) -> None:
        self.searcher = searcher

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return bool(self.searcher.fault)

    def stop_all(self) -> bool:
        return bool(self.searcher.fault)


class StudyCallback(Callback):
    """Tune callback feeding the searcher what a searcher does not see."""

    def __init__(self, searcher: StudySearcher) -> None:
        self.searcher = searcher

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any,
                        result: dict[str, Any], **info: Any) -> None:
        self.searcher.record_epoch(trial.trial_id, result)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        text, infrastructure = _error_text(trial)
        self.searcher.record_error(trial.trial_id, text,
                                   worker_setup="EvaluatorUnavailable" in text,
                                   infrastructure=infrastructure)

    def on_step_begin(self, iteration: int, trials: list[Any], **info: Any) -> None:
        check_signal()  # a SIGINT/SIGTERM received stops the run here (studies.interrupts)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self.searcher.write_epochs()
        self.searcher.ask_ahead()
        self.searcher.tick()
