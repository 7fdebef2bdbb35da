"""The study record: what the engine stores for a study and for each of its trials, in one place.

Optuna's storage is the record. Beside Optuna's own data the engine keeps its bookkeeping as
user attributes under the keys below (``trial.user_attrs[TrialKey.ARCH]``,
``study.user_attrs[StudyKey.SPEC]``); ``Status`` is a trial's word for what happened to it,
finer than Optuna's state (a rejected trial and a failed one are both ``FAIL``). The objectives
a study may name are declared once, as :class:`Objective` rows of :data:`OBJECTIVES`.

Every write of the record goes through this module: :func:`write_study` when a study is
created; :func:`record_sampled` and :func:`record_launched` while a trial is being prepared;
one function per way a trial ends (:func:`record_completed`, :func:`record_reused`,
:func:`record_stopped`, :func:`record_rejected`, :func:`record_failed`,
:func:`close_interrupted`); and :func:`record_epoch` for each epoch a trial reports.

Per-epoch values: the ``nas_epochs`` table (``studies.storage``) is the record, a row per epoch
with every metric the trainer reports (train loss, metric name, value, seconds, extras). Optuna's
intermediate values hold one number per step; :func:`record_epoch` writes the objective value
there too, from the same call, because Optuna's own tools and the dashboard read it and a study
written by plain Optuna has nothing else.

Reading stored values back is ``studies.stored``'s job (the trust boundary). This module
imports neither torch nor Ray: the dashboard and ``nas status`` use its names.
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from studies.storage import retrying, set_trial_user_attrs, write_epoch

if TYPE_CHECKING:
    from nas.tasks import TaskGeometry
    from search_spaces import SearchSpace


# What the writers read of a study file and a run: ``studies.spec.StudySpec`` and
# ``studies._trials.StudyRun`` have these (both import this module, so it names neither).
class StudySpecLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def objective_names(self) -> list[str]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def training_key(self) -> str: ...


class StudyRun(Protocol):
    @property
    def spec(self) -> StudySpecLike: ...
    @property
    def space(self) -> SearchSpace: ...
    @property
    def study(self) -> optuna.Study: ...
    @property
    def storage(self) -> optuna.storages.RDBStorage: ...

__all__ = [
    "COUNTED_EXCLUDED",
    "OBJECTIVES",
    "STATE_OF",
    "Direction",
    "Objective",
    "Source",
    "Status",
    "StudyKey",
    "TrialKey",
    "close_interrupted",
    "objective_values",
    "record_completed",
    "record_epoch",
    "record_failed",
    "record_launched",
    "record_rejected",
    "record_reused",
    "record_sampled",
    "record_stopped",
    "write_study",
]


# ----------------------------------------------------------------------------- keys
class TrialKey:
    """Trial user attributes (``trial.user_attrs[TrialKey.ARCH]``)."""

    ARCH: Final = "nas.arch"  # the flat architecture config
    ARCH_ID: Final = "nas.arch_id"
    COST: Final = "nas.cost"  # params, params_matrix, madds and their split by part
    TRAIN: Final = "nas.train"  # the training settings (epochs and seed included)
    STATUS: Final = "nas.status"  # a Status word
    REASON: Final = "nas.reason"  # why it failed, was rejected, stopped or interrupted
    EPOCHS_REACHED: Final = "nas.epochs_reached"
    SECONDS: Final = "nas.seconds"
    SAMPLES_PER_SECOND: Final = "nas.samples_per_second"
    NODE: Final = "nas.node"  # the Ray node it trained on
    LATENCY_MS: Final = "nas.latency_ms"
    CHECKPOINT: Final = "nas.checkpoint"  # the kept weights (study key `checkpoints`)
    REUSED_FROM: Final = "nas.reused_from"  # the number of the trial whose result it reuses
    RERUN_OF: Final = "nas.rerun_of"  # the interrupted trial it runs again
    ENQUEUED: Final = "nas.enqueued"  # the label of the enqueued architecture
    TUNE_TRIAL: Final = "nas.tune_trial"  # Ray Tune's trial id
    FAULT: Final = "nas.fault"  # "infrastructure": its node or worker was lost (interrupted)
    SOURCE_TRIAL: Final = "nas.source_trial"  # promoted trial: the proxy trial's number
    SOURCE_VALUE: Final = "nas.source_value"  # promoted trial: the proxy trial's accuracy
    SEED: Final = "nas.seed"  # promoted trial: the training seed it was enqueued with


class StudyKey:
    """Study user attributes (``study.user_attrs[StudyKey.SPEC]``)."""

    SPEC: Final = "nas.spec"  # the study file, validated (StudySpec.to_dict)
    SPACE: Final = "nas.space"
    SPACE_HASH: Final = "nas.space_hash"
    TRAINING_KEY: Final = "nas.training_key"
    OBJECTIVES: Final = "nas.objectives"  # objective names, in Optuna's order
    GEOMETRY: Final = "nas.geometry"  # the task geometry the costs were computed on
    TUNE_DIR: Final = "nas.tune_dir"  # Ray Tune's experiment folder of the latest run
    REFERENCE: Final = "nas.reference"  # the fixed hypervolume reference point (raw units)
    PROMOTED_FROM: Final = "nas.promoted_from"  # promoted study: the proxy study's name
    PROMOTIONS: Final = "nas.promotions"  # proxy study: its promoted studies' names
    FIDELITY: Final = "nas.fidelity"  # promoted study: tau, rho, pairs (see studies.promote)


class Status:
    """What happened to a trial (``TrialKey.STATUS``)."""

    COMPLETED: Final = "completed"  # trained to the end (Optuna COMPLETE)
    REUSED: Final = "reused"  # the same network and settings trained before (COMPLETE)
    STOPPED: Final = "stopped"  # stopped early by the scheduler (PRUNED)
    FAILED: Final = "failed"  # training failed or raised (FAIL)
    REJECTED: Final = "rejected"  # broke a constraint, never trained (FAIL, not counted)
    INTERRUPTED: Final = "interrupted"  # the run ended under it (FAIL, not counted, run again)

    ALL: Final = (COMPLETED, REUSED, STOPPED, FAILED, REJECTED, INTERRUPTED)


#: Statuses that do not count against the trial budget.
COUNTED_EXCLUDED: Final = (Status.REJECTED, Status.INTERRUPTED)

#: The Optuna state each status is stored with.
STATE_OF: Final = {
    Status.COMPLETED: "COMPLETE", Status.REUSED: "COMPLETE", Status.STOPPED: "PRUNED",
    Status.FAILED: "FAIL", Status.REJECTED: "FAIL", Status.INTERRUPTED: "FAIL",
}


# ----------------------------------------------------------------------------- objectives
Direction = Literal["minimize", "maximize"]
#: Where an objective's value comes from: the trainer's metric (``value`` of the final report),
#: the cost model on the meta device (before training), or a measurement after training.
Source = Literal["metric", "cost", "measured"]


@dataclass(frozen=True)
class Objective:
    """One objective of a study: its name, the direction it is optimised in, and where its
    value comes from (see :data:`Source`)."""

    name: str
    direction: Direction
    source: Source

    def value(self, cost: Mapping[str, Any], result: Mapping[str, Any]) -> Any:
        """This objective's value for a trial with ``cost`` (``TrialKey.COST``) whose final
        report is ``result`` (as the value arrived: unchecked)."""
        if self.source == "metric":
            return result.get("value")
        if self.source == "cost":
            return cost.get(self.name)
        return result.get(self.name)


#: The objectives a study may name, each with its default direction. ``accuracy`` is the task's
#: metric (accuracy, VQA accuracy, CIDEr-D).
OBJECTIVES: Final[Mapping[str, Objective]] = {
    o.name: o for o in (
        Objective("accuracy", "maximize", "metric"),
        Objective("params", "minimize", "cost"),
        Objective("madds", "minimize", "cost"),
        Objective("latency_ms", "minimize", "measured"),
    )
}


def objective_values(objectives: Sequence[Objective], cost: Mapping[str, Any],
                     result: Mapping[str, Any]) -> list[float] | str:
    """A trial's objective vector, in the study's order, or why there is none (a value missing
    or not finite)."""
    out = []
    for o in objectives:
        value = o.value(cost, result)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"the evaluator returned {o.name}={value!r}"
        out.append(float(value))
    return out


# ----------------------------------------------------------------------------- the study
def write_study(study: optuna.Study, spec: StudySpecLike, space: SearchSpace,
                geometry: TaskGeometry, reference: Sequence[float | None],
                attrs: Mapping[str, Any] | None = None) -> None:
    """A new study's record: its file, space, training key, objectives (as ``StudyKey``'s and
    as Optuna's metric names, which Optuna's own tools show), geometry and hypervolume
    reference; then ``attrs`` (``nas promote``'s links). The caller holds the session."""
    study.set_user_attr(StudyKey.SPEC, spec.to_dict())
    study.set_user_attr(StudyKey.SPACE, space.to_dict())
    study.set_user_attr(StudyKey.SPACE_HASH, space.hash)
    study.set_user_attr(StudyKey.TRAINING_KEY, spec.training_key())
    study.set_user_attr(StudyKey.OBJECTIVES, spec.objective_names)
    with warnings.catch_warnings():  # experimental in Optuna, read by its own tools
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names(spec.objective_names)
    study.set_user_attr(StudyKey.GEOMETRY, asdict(geometry))
    study.set_user_attr(StudyKey.REFERENCE, list(reference))
    for key, value in (attrs or {}).items():
        study.set_user_attr(key, value)


# ----------------------------------------------------------------------------- a trial
_TrialRef = optuna.trial.Trial | FrozenTrial


def record_sampled(run: StudyRun, trial: _TrialRef, attrs: Mapping[str, Any]) -> None:
    """What a trial will train: its architecture, id, cost and settings."""
    retrying(run.storage.url,
             lambda: set_trial_user_attrs(run.storage, trial._trial_id, dict(attrs)))


def record_launched(run: StudyRun, trial: _TrialRef, tune_trial: str, *,
                    attrs: Mapping[str, Any] | None = None) -> None:
    """The Ray Tune trial that trains it (kept while the run lives); with ``attrs``, what
    :func:`record_sampled` writes, in the same transaction (a trial launched as it is
    sampled)."""
    record_sampled(run, trial, {**(attrs or {}), TrialKey.TUNE_TRIAL: tune_trial})


def _end(run: StudyRun, trial: _TrialRef, status: str, attrs: Mapping[str, Any],
         values: Sequence[float] | None = None) -> None:
    """Close ``trial`` as ``status``: its user attributes (one transaction), then Optuna's
    ``tell`` with the state the status is stored with (``STATE_OF``)."""
    state = TrialState[STATE_OF[status]]

    def end() -> None:
        set_trial_user_attrs(run.storage, trial._trial_id, {**attrs, TrialKey.STATUS: status})
        run.study.tell(trial if isinstance(trial, optuna.trial.Trial) else trial.number,
                       list(values) if state == TrialState.COMPLETE and values is not None
                       else None, state=state)

    def again() -> None:  # the connection broke: the first try may have committed the tell
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            end()

    retrying(run.storage.url, end, again=again)


def record_completed(run: StudyRun, trial: _TrialRef, values: Sequence[float],
                     attrs: Mapping[str, Any]) -> None:
    """Trained to the end: its objective values and what the worker reported."""
    _end(run, trial, Status.COMPLETED, attrs, values)


def record_reused(run: StudyRun, trial: _TrialRef, values: Sequence[float], *, source: int,
                  attrs: Mapping[str, Any]) -> None:
    """The same architecture and settings trained before (trial ``source``): its values."""
    _end(run, trial, Status.REUSED, {**attrs, TrialKey.REUSED_FROM: source}, values)


def record_stopped(run: StudyRun, trial: _TrialRef, attrs: Mapping[str, Any]) -> None:
    """Stopped early by the scheduler (Optuna PRUNED)."""
    _end(run, trial, Status.STOPPED, attrs)


def record_rejected(run: StudyRun, trial: _TrialRef, reason: str,
                    attrs: Mapping[str, Any]) -> None:
    """Broke a constraint (before training, or its latency after): not counted."""
    _end(run, trial, Status.REJECTED, {**attrs, TrialKey.REASON: reason})


def record_failed(run: StudyRun, trial: _TrialRef, attrs: Mapping[str, Any]) -> None:
    """Training failed or raised (``attrs`` carries ``TrialKey.REASON`` where known)."""
    _end(run, trial, Status.FAILED, attrs)


#: What an enqueued trial carries from its enqueuing that a re-run of it keeps.
_ENQUEUED = (TrialKey.SOURCE_TRIAL, TrialKey.SOURCE_VALUE, TrialKey.SEED, TrialKey.ENQUEUED)


def _wholly_drawn(run: StudyRun, trial: FrozenTrial) -> bool:
    """Whether ``trial`` holds a whole configuration: its architecture was stored, or the space
    rebuilds one from its parameters without drawing any more (a run stopped while Optuna drew
    them leaves only some)."""
    if TrialKey.ARCH in trial.user_attrs:
        return True
    if getattr(run, "space", None) is None or not trial.params:
        return False
    from nas.errors import NasError

    try:
        run.space.suggest(optuna.trial.FixedTrial(dict(trial.params)))
    except (NasError, ValueError):  # FixedTrial: "The value of the parameter ... is not found"
        return False
    return True


def _enqueue_again(run: StudyRun, trial: _TrialRef) -> None:
    """Enqueue ``trial``'s configuration with what it was enqueued with (a promoted trial's
    links and seed, a label), naming the trial it runs again; nothing when its configuration
    was not wholly drawn (stopped while Optuna drew its parameters: re-running a part of one
    with the rest drawn afresh would not be that trial again)."""
    stored = run.storage.get_trial(trial._trial_id)  # a live Trial's own copy may be stale
    if not _wholly_drawn(run, stored):
        return
    kept = {k: v for k, v in stored.user_attrs.items() if k in _ENQUEUED}
    run.study.enqueue_trial(dict(stored.params), user_attrs={**kept, TrialKey.RERUN_OF:
                                                             trial.number}, skip_if_exists=False)


def close_interrupted(run: StudyRun, trials: Iterable[_TrialRef] | None = None, *,
                      reason: str = "the process running the study stopped while this trial "
                                    "ran", rerun: bool = True,
                      attrs: Mapping[str, Any] | None = None) -> int:
    """Close trials a run will not finish as interrupted (not counted) and enqueue their
    parameters again; returns how many were closed.

    ``trials``: the ones this run started and leaves (the searcher at the end of a run);
    ``None``: every trial the database holds as RUNNING (a crashed run's, closed when the next
    run takes the study, or by a run whose Ray head went away). A trial closed before its
    configuration was wholly drawn has none to run again: it is only closed (the sampler draws a
    fresh one in its place); nor has one closed with ``rerun=False`` (its parameters were being
    drawn when the database failed). ``attrs``: more user attributes to store with it
    (``TrialKey.FAULT`` of an infrastructure fault).
    """
    if trials is None:
        trials = retrying(run.storage.url, lambda: run.study.get_trials(
            deepcopy=False, states=(TrialState.RUNNING,)))
    n = 0
    for trial in list(trials):
        _end(run, trial, Status.INTERRUPTED, {**(attrs or {}), TrialKey.REASON: reason})
        if rerun and trial.params:  # closed after its configuration was drawn: run that again
            retrying(run.storage.url, functools.partial(_enqueue_again, run, trial))
        n += 1
    return n


def record_epoch(run: StudyRun, trial: _TrialRef, report: Mapping[str, Any]) -> None:
    """One epoch a trial reported: a ``nas_epochs`` row (``epoch``, ``train_loss``, ``metric``,
    ``value``, ``seconds``, ``extra``) and, when the value is a finite number, Optuna's
    intermediate value at that step (see the module's note), both in one transaction. A re-sent
    epoch (a trial Tune retried) replaces neither: both hold the first report."""
    epoch = int(report["epoch"])
    retrying(run.storage.url, lambda: write_epoch(run.storage, run.spec.name, trial.number,
                                                  {**report, "epoch": epoch},
                                                  trial_id=trial._trial_id))
