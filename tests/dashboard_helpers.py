"""Studies for the dashboard tests, shaped like the engine's.

:func:`write_engine_study` writes trials the way ``studies.engine`` does (``create_study``, then
per trial: ask, the space's ``suggest``, the cost on the task geometry, the ``nas.*`` user
attributes, epochs through ``write_epoch`` and intermediate values, tell) without Ray, with a
chosen outcome per trial: completed, early-stopped (PRUNED), constraint-rejected and failed
(both FAIL), and one still running. :func:`make_evaluator` is a fake training function for a
real ``run_study`` (a closure, so Ray ships it to its workers by value).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FixedTrial, TrialState
from study_helpers import GEOMETRY, SMALL_SPACE

from nas.config import ArchConfig
from nas.cost import estimate_cost
from search_spaces import SearchSpace
from studies import StudySpec, create_study
from studies.store import Status, StudyKey, TrialKey
from studies.store.storage import open_storage, write_epoch

# The engine tests' vit space on 32x32 digits (2 x 2 x 2 knob values, 6 distinct
# architectures), with the learning rate searched too.
SPACE: dict[str, Any] = {
    **SMALL_SPACE, "name": "tiny-dash",
    "train": {"lr": {"low": 1.0e-3, "high": 5.0e-3, "log": True}},
}
OBJECTIVES = [{"name": "accuracy", "direction": "maximize"},
              {"name": "params", "direction": "minimize"},
              {"name": "madds", "direction": "minimize"}]

# (knobs, outcome, accuracy): the plan of the engine-shaped study, trial by trial.
PLAN: list[tuple[dict[str, Any], str, float]] = [
    ({"groups": 1, "attention_sharing": "none", "lr": 2e-3}, Status.REJECTED, 0.0),  # largest
    ({"groups": 1, "attention_sharing": "kv", "lr": 2e-3}, Status.COMPLETED, 0.82),
    ({"groups": 2, "group_ffn": True, "attention_sharing": "none", "lr": 3e-3}, Status.COMPLETED,
     0.71),
    ({"groups": 2, "group_ffn": True, "attention_sharing": "kv", "lr": 4e-3}, Status.COMPLETED,
     0.64),
    ({"groups": 2, "group_ffn": False, "attention_sharing": "kv", "lr": 1.5e-3}, Status.COMPLETED,
     0.78),
    ({"groups": 2, "group_ffn": False, "attention_sharing": "kv", "lr": 1e-3}, Status.STOPPED,
     0.55),
    ({"groups": 2, "group_ffn": True, "attention_sharing": "kv", "lr": 2e-3}, Status.COMPLETED,
     0.69),
    ({"groups": 2, "group_ffn": True, "attention_sharing": "none", "lr": 5e-3}, Status.FAILED,
     0.0),
    ({"groups": 1, "attention_sharing": "kv", "lr": 1e-3}, Status.COMPLETED, 0.60),
    # not a status: the trial is left RUNNING
    ({"groups": 2, "group_ffn": True, "attention_sharing": "none", "lr": 2e-3}, "running", 0.5),
]
EPOCHS = 3


@dataclass(frozen=True)
class EngineStudy:
    url: str
    name: str
    spec: StudySpec
    plan: list[tuple[dict[str, Any], str, float]]


def _cost_dict(cost: Any) -> dict[str, Any]:
    return {"params": cost.params, "params_matrix": cost.params_matrix, "madds": cost.madds,
            "parts": {k: vars(v) for k, v in cost.parts.items()}}


_COSTS: dict[str, Any] = {}


def cost_of(config: ArchConfig) -> Any:
    """``estimate_cost`` on :data:`GEOMETRY`, once per architecture (it builds the model)."""
    if config.arch_id not in _COSTS:
        _COSTS[config.arch_id] = estimate_cost(config, GEOMETRY)
    return _COSTS[config.arch_id]


def params_limit() -> float:
    """A ``params_max`` that the largest architecture of :data:`PLAN` breaks, and only it."""
    space = SearchSpace.from_dict(SPACE)
    costs = sorted({cost_of(space.suggest(FixedTrial(knobs))[0]).params
                    for knobs, _, _ in PLAN})
    return (costs[-1] + costs[-2]) / 2


def write_engine_study(url: str, name: str = "dash-study") -> EngineStudy:
    """The study of :data:`PLAN` in the database at ``url``, written as the engine writes."""
    spec = StudySpec.from_dict({
        "name": name, "task": "digits", "space": SPACE, "objectives": OBJECTIVES,
        "constraints": {"params_max": params_limit()}, "sampler": {"name": "random"},
        "budget": {"trials": len(PLAN)}, "fidelity": {"epochs": EPOCHS}, "seed": 0})
    run = create_study(spec, url, geometry=GEOMETRY)
    storage = open_storage(url)
    for knobs, _, _ in PLAN:
        run.study.enqueue_trial(knobs)
    for number, (_, outcome, accuracy) in enumerate(PLAN):
        trial = run.study.ask()
        config, overrides = run.space.suggest(trial)
        cost = cost_of(config)
        attrs: dict[str, Any] = {
            TrialKey.ARCH: config.to_dict(), TrialKey.ARCH_ID: config.arch_id,
            TrialKey.COST: _cost_dict(cost),
            TrialKey.TRAIN: {"epochs": EPOCHS, "seed": 0, **overrides}}
        if outcome == Status.REJECTED:
            assert cost.params > spec.constraints["params_max"]
            attrs.update({TrialKey.STATUS: Status.REJECTED, TrialKey.REASON:
                          f"params {cost.params:,} breaks params_max="
                          f"{spec.constraints['params_max']:,.0f}"})
            _tell(run.study, trial, TrialState.FAIL, None, attrs)
            continue
        assert cost.params <= spec.constraints["params_max"]
        epochs = {Status.COMPLETED: EPOCHS, Status.STOPPED: 1, Status.FAILED: 1,
                  "running": 2}[outcome]
        for epoch in range(1, epochs + 1):
            value = None if outcome == Status.FAILED else accuracy * (0.8 + 0.2 * epoch / EPOCHS)
            write_epoch(storage, name, number, {
                "epoch": epoch, "train_loss": 2.0 / epoch, "metric": "accuracy", "value": value,
                "seconds": 0.5, "extra": {"lr": overrides["lr"]}})
            if value is not None:
                storage.set_trial_intermediate_value(trial._trial_id, epoch, value)
        if outcome == "running":
            for key, value in attrs.items():
                storage.set_trial_user_attr(trial._trial_id, key, value)
            continue
        attrs.update({TrialKey.STATUS: outcome, TrialKey.EPOCHS_REACHED: epochs,
                      TrialKey.SECONDS: 1.5, TrialKey.NODE: "node-0",
                      TrialKey.SAMPLES_PER_SECOND: 1000.0})
        if outcome == Status.COMPLETED:
            _tell(run.study, trial, TrialState.COMPLETE,
                  [accuracy, float(cost.params), float(cost.madds)], attrs)
        elif outcome == Status.STOPPED:
            _tell(run.study, trial, TrialState.PRUNED, None, attrs)
        else:
            attrs[TrialKey.REASON] = "loss became nan at epoch 1, step 3"
            _tell(run.study, trial, TrialState.FAIL, None, attrs)
    storage.engine.dispose()
    run.storage.engine.dispose()
    return EngineStudy(url, name, spec, PLAN)


def linked_studies(url: str, source: str = "src") -> tuple[optuna.Study, optuna.Study]:
    """A source study (accuracy, params) and its promoted study, linked as ``nas promote``
    links them (``nas.promotions`` on the source, ``nas.promoted_from`` on the promoted)."""
    directions = ["maximize", "minimize"]
    made = [optuna.create_study(storage=url, study_name=name, directions=directions)
            for name in (source, f"{source}-promoted")]
    for study in made:
        study.set_user_attr(StudyKey.OBJECTIVES, ["accuracy", "params"])
    made[0].set_user_attr(StudyKey.PROMOTIONS, [f"{source}-promoted"])
    made[1].set_user_attr(StudyKey.PROMOTED_FROM, source)
    return made[0], made[1]


def _tell(study: optuna.Study, trial: Any, state: TrialState, values: list[float] | None,
          attrs: dict[str, Any]) -> None:
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    study.tell(trial, values, state=state)


def make_evaluator(fail_arch: dict[str, Any]) -> Callable[..., dict[str, Any]]:
    """A fake trainer with ``studies.worker.evaluate_trial``'s signature: a made-up accuracy
    per architecture, reported epoch by epoch (honouring early stopping); the loss of
    ``fail_arch`` (a subset of config keys) turns NaN."""

    def evaluate(arch: dict[str, Any], settings: dict[str, Any], task: str,
                 task_options: dict[str, Any], *, latency: bool = False,
                 report: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
        import hashlib
        import json

        if all(arch.get(k) == v for k, v in fail_arch.items()):
            return {"status": Status.FAILED, "reason": "loss became nan at epoch 1, step 2",
                    "value": 0.0, "epochs": [], "seconds": 0.0, "metric": "accuracy"}
        digest = hashlib.sha1(json.dumps(arch, sort_keys=True).encode()).digest()
        final = 0.5 + 0.4 * digest[0] / 256
        epochs: list[dict[str, Any]] = []
        status = Status.COMPLETED
        for epoch in range(1, int(settings["epochs"]) + 1):
            row = {"epoch": epoch, "train_loss": 2.0 / epoch, "metric": "accuracy",
                   "value": final * (0.7 + 0.3 * epoch / settings["epochs"]),
                   "lr": settings.get("lr", 1e-3), "seconds": 0.01, "extra": {}}
            epochs.append(row)
            if report is not None and report(row):
                status = Status.STOPPED
                break
        return {"status": status, "value": epochs[-1]["value"], "epochs": epochs,
                "seconds": 0.01 * len(epochs), "samples_per_second": 1000.0,
                "metric": "accuracy"}

    return evaluate
