"""The names of the study record: the user-attribute keys and the status words, in one place.

Optuna's storage is the record. Beside Optuna's own data the engine keeps its bookkeeping as
user attributes under the keys below (``trial.user_attrs[TrialKey.ARCH]``,
``study.user_attrs[StudyKey.SPEC]``); ``Status`` is a trial's word for what happened to it,
finer than Optuna's state (a rejected trial and a failed one are both ``FAIL``). This module
imports nothing: the dashboard, the exports and ``nas status`` read these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

__all__ = ["COUNTED_EXCLUDED", "STATE_OF", "SamplerKey", "Status", "StudyKey", "TrialKey",
           "iter_keys"]


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


class SamplerKey:
    """Trial system attributes the default sampler (``studies.costaware``) writes as it chooses
    a trial (``trial.system_attrs[SamplerKey.GAIN]``); ``studies.convergence`` reads them."""

    GAIN: Final = "costaware:expected_gain"  # the chosen candidate's expected hypervolume gain
    NOISE: Final = "costaware:hypervolume_noise"  # the front's hypervolume noise at the choice
    SECONDS: Final = "costaware:seconds"  # the seconds the sampler took to choose it


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


def iter_keys(attrs: type) -> Iterator[str]:
    """The key strings a key class (``TrialKey``, ``StudyKey``) declares."""
    for name, value in vars(attrs).items():
        if name.isupper() and isinstance(value, str):
            yield value
