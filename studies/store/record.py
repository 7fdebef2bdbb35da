"""The study record's writes: a new study's attributes, and each way a trial ends.

Every write of the record goes through :class:`~studies.store.StudyStore`, whose trial writes
are declared here (:class:`RecordWrites`): :meth:`~RecordWrites.record_sampled` and
:meth:`~RecordWrites.record_launched` while a trial is being prepared; one method per way a
trial ends (``record_completed``, ``record_reused``, ``record_stopped``, ``record_rejected``,
``record_failed``, ``close_interrupted``); and :meth:`~RecordWrites.record_epoch` for each
epoch a trial reports (:meth:`~RecordWrites.record_epochs` for several at once; the endings of
a trained trial take the epochs still to write, written with the ending's attributes). The
keys and status words are ``studies.store.keys``'; a new study's attributes are
:func:`write_study`'s.

Per-epoch values: the ``nas_epochs`` table (``studies.store.storage``) is the record, a row per
epoch with every metric the trainer reports (train loss, metric name, value, seconds, extras).
Optuna's intermediate values hold one number per step; :meth:`~RecordWrites.record_epoch` writes
the objective value there too, from the same call, because Optuna's own tools and the dashboard
read it and a study written by plain Optuna has nothing else.

Each write is retried while a database server's connection is lost
(``studies.store.storage.retrying``). Reading stored values back is ``studies.store.stored``'s
job (the trust boundary). This module imports neither torch nor Ray.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas.errors import NasError
from studies.store.keys import STATE_OF, Status, StudyKey, TrialKey
from studies.store.storage import (
    EpochWrite,
    retrying,
    set_trial_user_attrs,
    tell,
    write_epochs,
)

if TYPE_CHECKING:
    from nas.tasks import TaskGeometry
    from search_spaces import SearchSpace
    from studies.spec import StudySpec

__all__ = ["RecordWrites", "TrialRef", "write_study"]

#: A trial as the writes take it: a live one (``Study.ask``) or one read back.
TrialRef = optuna.trial.Trial | FrozenTrial

#: Epoch reports to write: each trial with its report (see :meth:`RecordWrites.record_epoch`).
Epochs = Sequence[tuple[TrialRef, Mapping[str, Any]]]


# ----------------------------------------------------------------------------- the study
def write_study(study: optuna.Study, spec: StudySpec, space: SearchSpace,
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


#: What an enqueued trial carries from its enqueuing that a re-run of it keeps.
_ENQUEUED = (TrialKey.SOURCE_TRIAL, TrialKey.SOURCE_VALUE, TrialKey.SEED, TrialKey.ENQUEUED)


def _wholly_drawn(space: SearchSpace | None, trial: FrozenTrial) -> bool:
    """Whether ``trial`` holds a whole configuration: its architecture was stored, or the space
    rebuilds one from its parameters without drawing any more (a run stopped while Optuna drew
    them leaves only some)."""
    if TrialKey.ARCH in trial.user_attrs:
        return True
    if space is None or not trial.params:
        return False
    try:
        space.suggest(optuna.trial.FixedTrial(dict(trial.params)))
    except (NasError, ValueError):  # FixedTrial: "The value of the parameter ... is not found"
        return False
    return True


# ----------------------------------------------------------------------------- a trial
class RecordWrites:
    """The trial writes of :class:`~studies.store.StudyStore` (``storage``: its Optuna storage),
    each taking the ``study`` and the trial it writes."""

    storage: optuna.storages.RDBStorage

    def record_sampled(self, trial: TrialRef, attrs: Mapping[str, Any]) -> None:
        """What a trial will train: its architecture, id, cost and settings."""
        retrying(self.storage.url,
                 lambda: set_trial_user_attrs(self.storage, trial._trial_id, dict(attrs)))

    def record_launched(self, trial: TrialRef, tune_trial: str, *,
                        attrs: Mapping[str, Any] | None = None) -> None:
        """The Ray Tune trial that trains it (kept while the run lives); with ``attrs``, what
        :meth:`record_sampled` writes, in the same transaction (a trial launched as it is
        sampled)."""
        self.record_sampled(trial, {**(attrs or {}), TrialKey.TUNE_TRIAL: tune_trial})

    def _end(self, study: optuna.Study, trial: TrialRef, status: str, attrs: Mapping[str, Any],
             values: Sequence[float] | None = None, epochs: Epochs = ()) -> None:
        """Close ``trial`` as ``status``: ``epochs`` still to write (of any trial) and its user
        attributes (one transaction), then Optuna's ``tell`` with the state the status is stored
        with (``STATE_OF``)."""
        state = TrialState[STATE_OF[status]]
        rows = _epoch_writes(epochs)

        def end() -> None:
            ending = {**attrs, TrialKey.STATUS: status}
            if rows:
                write_epochs(self.storage, study.study_name, rows, trial_id=trial._trial_id,
                             attrs=ending)
            else:
                set_trial_user_attrs(self.storage, trial._trial_id, ending)
            tell(study, trial if isinstance(trial, optuna.trial.Trial) else trial.number,
                 list(values) if state == TrialState.COMPLETE and values is not None else None,
                 state)

        def again() -> None:  # the connection broke: the first try may have committed the tell
            with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
                end()

        retrying(self.storage.url, end, again=again)

    def record_completed(self, study: optuna.Study, trial: TrialRef, values: Sequence[float],
                         attrs: Mapping[str, Any], *, epochs: Epochs = ()) -> None:
        """Trained to the end: its objective values and what the worker reported."""
        self._end(study, trial, Status.COMPLETED, attrs, values, epochs)

    def record_reused(self, study: optuna.Study, trial: TrialRef, values: Sequence[float], *,
                      source: int, attrs: Mapping[str, Any]) -> None:
        """The same architecture and settings trained before (trial ``source``): its values."""
        self._end(study, trial, Status.REUSED, {**attrs, TrialKey.REUSED_FROM: source}, values)

    def record_stopped(self, study: optuna.Study, trial: TrialRef,
                       attrs: Mapping[str, Any], *, epochs: Epochs = ()) -> None:
        """Stopped early by the scheduler (Optuna PRUNED)."""
        self._end(study, trial, Status.STOPPED, attrs, epochs=epochs)

    def record_rejected(self, study: optuna.Study, trial: TrialRef, reason: str,
                        attrs: Mapping[str, Any], *, epochs: Epochs = ()) -> None:
        """Broke a constraint (before training, or its latency after): not counted."""
        self._end(study, trial, Status.REJECTED, {**attrs, TrialKey.REASON: reason},
                  epochs=epochs)

    def record_failed(self, study: optuna.Study, trial: TrialRef,
                      attrs: Mapping[str, Any], *, epochs: Epochs = ()) -> None:
        """Training failed or raised (``attrs`` carries ``TrialKey.REASON`` where known)."""
        self._end(study, trial, Status.FAILED, attrs, epochs=epochs)

    def _enqueue_again(self, study: optuna.Study, space: SearchSpace | None,
                       trial: TrialRef) -> None:
        """Enqueue ``trial``'s configuration with what it was enqueued with (a promoted trial's
        links and seed, a label), naming the trial it runs again; nothing when its
        configuration was not wholly drawn (stopped while Optuna drew its parameters: re-running
        a part of one with the rest drawn afresh would not be that trial again)."""
        stored = self.storage.get_trial(trial._trial_id)  # a live Trial's own copy may be stale
        if not _wholly_drawn(space, stored):
            return
        kept = {k: v for k, v in stored.user_attrs.items() if k in _ENQUEUED}
        study.enqueue_trial(dict(stored.params), user_attrs={**kept, TrialKey.RERUN_OF:
                                                             trial.number}, skip_if_exists=False)

    def close_interrupted(self, study: optuna.Study, trials: Iterable[TrialRef] | None = None,
                          *, space: SearchSpace | None = None,
                          reason: str = "the process running the study stopped while this "
                                        "trial ran", rerun: bool = True,
                          attrs: Mapping[str, Any] | None = None) -> int:
        """Close trials a run will not finish as interrupted (not counted) and enqueue their
        parameters again; returns how many were closed.

        ``trials``: the ones this run started and leaves (the searcher at the end of a run);
        ``None``: every trial the database holds as RUNNING (a crashed run's, closed when the
        next run takes the study, or by a run whose Ray head went away). A trial closed before
        its configuration was wholly drawn (``space`` rebuilds one from its parameters, or it
        stored its architecture) has none to run again: it is only closed (the sampler draws a
        fresh one in its place); nor has one closed with ``rerun=False`` (its parameters were
        being drawn when the database failed). ``attrs``: more user attributes to store with it
        (``TrialKey.FAULT`` of an infrastructure fault).
        """
        if trials is None:
            trials = retrying(self.storage.url, lambda: study.get_trials(
                deepcopy=False, states=(TrialState.RUNNING,)))
        n = 0
        for trial in list(trials):
            self._end(study, trial, Status.INTERRUPTED,
                      {**(attrs or {}), TrialKey.REASON: reason})
            if rerun and trial.params:  # closed after its configuration was drawn: run it again
                retrying(self.storage.url,
                         functools.partial(self._enqueue_again, study, space, trial))
            n += 1
        return n

    def record_epoch(self, study: optuna.Study, trial: TrialRef,
                     report: Mapping[str, Any]) -> None:
        """One epoch a trial reported: a ``nas_epochs`` row (``epoch``, ``train_loss``,
        ``metric``, ``value``, ``seconds``, ``extra``) and, when the value is a finite number,
        Optuna's intermediate value at that step (see the module's note), both in one
        transaction. A re-sent epoch (a trial Tune retried) replaces neither: both hold the
        first report."""
        self.record_epochs(study, [(trial, report)])

    def record_epochs(self, study: optuna.Study, epochs: Epochs) -> None:
        """Several epochs, of any of ``study``'s trials, as :meth:`record_epoch` writes one, in
        one transaction (in the order given)."""
        if epochs:
            rows = _epoch_writes(epochs)
            retrying(self.storage.url,
                     lambda: write_epochs(self.storage, study.study_name, rows))


def _epoch_writes(epochs: Epochs) -> list[EpochWrite]:
    """``epochs`` as ``studies.store.storage.write_epochs`` takes them."""
    return [(trial.number, trial._trial_id, report) for trial, report in epochs]
