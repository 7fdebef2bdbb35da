"""A study another tool wrote, with markup in every stored string the dashboard shows.

:func:`write_markup_study` writes it the way a program other than nas could: Optuna's own API
(``optuna.create_study``, ``set_user_attr``, ``add_trial``) for the study, its ``nas.*``
attributes and its trials, and raw SQL for the per-epoch rows in ``nas_epochs``; nothing of
nas's writer. Every string it stores that a page shows holds HTML and script text
(:func:`markup`): the study's name, task and objective names, the search space's knob names and
choices (a space nas cannot parse, as another tool's would be), parameter names and
categorical choices, architecture and training keys and values, cost part names, reasons,
architecture ids, checkpoint paths, promotion links and epoch metric names.

A script that ran would set the global ``owned`` (no dots or underscores in the payloads: the
dashboard writes a column key's ``_`` and ``.`` as spaces in headers), and an image that was
created would request ``/x``; :data:`ENTITY` checks that entities are shown as written too.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState

from studies.store import Status, StudyKey, TrialKey

#: Text that must read as written, not as the character it names.
ENTITY = "&lt;&amp;"
#: Raw tags of the payloads: none may reach a plotly figure unescaped (plotly renders a subset
#: of HTML in figure text), and none of our own figure texts holds one.
TAGS = ("<img", "<script", "<svg", "</script")


def markup(tag: str) -> str:
    """``tag`` wrapped in HTML that would run a script if a page rendered it as HTML (at most
    128 characters: an architecture id may be no longer)."""
    text = (f'<img src=x onerror="owned=1"><script>owned=2</script><svg onload="owned=3">'
            f"</svg>{ENTITY}{tag}")
    assert len(text) <= 128, tag
    return text


def short_markup(tag: str) -> str:
    """Markup of at most 64 characters (``nas_epochs.metric`` is a ``VARCHAR(64)``)."""
    text = f'<img src=x onerror="owned=4">{ENTITY}{tag}'
    assert len(text) <= 64, tag
    return text


@dataclass(frozen=True)
class MarkupStudy:
    """What :func:`write_markup_study` wrote: the study's name and each shown string by place."""

    name: str
    strings: dict[str, str] = field(default_factory=dict)

    def __getitem__(self, place: str) -> str:
        return self.strings[place]

    def values(self) -> Iterator[str]:
        return iter(self.strings.values())


#: (knob choice, width, accuracy, params, the third objective, outcome) per trial.
_PLAN: list[tuple[int, int, float, float, float, str]] = [
    (0, 2, 0.90, 3000.0, 30.0, Status.COMPLETED),
    (1, 4, 0.80, 2000.0, 20.0, Status.COMPLETED),
    (0, 6, 0.60, 4000.0, 40.0, Status.COMPLETED),  # dominated
    (1, 8, 0.85, 1500.0, 25.0, Status.COMPLETED),
    (0, 3, 0.50, 2500.0, 35.0, Status.STOPPED),
    (1, 5, 0.00, 9000.0, 90.0, Status.REJECTED),  # breaks params_max
]
EPOCHS = 2


def _strings() -> dict[str, str]:
    places = ("study", "task", "objective", "space", "knob", "choiceA", "choiceB", "width",
              "archkey", "archvalue", "trainkey", "trainvalue", "part", "reason", "archid",
              "node", "checkpoint", "enqueued", "source", "promotion", "tunedir")
    strings = {place: markup(place) for place in places}
    strings["metric"] = short_markup("metric")
    strings["extra"] = markup("extra")
    return strings


def _spec(s: dict[str, str]) -> dict[str, Any]:
    """A study file as another tool could store it: it parses as nas's (the task is a name
    nas does not know, which a study file may hold), but its inline space names knobs nas has
    not got."""
    return {"name": s["study"], "description": s["task"], "task": s["task"],
            "space": _space(s), "objectives": [
                {"name": "accuracy", "direction": "maximize"},
                {"name": "params", "direction": "minimize"},
                {"name": "madds", "direction": "minimize"}],
            "constraints": {"params_max": 5000}, "sampler": {"name": "random"},
            "budget": {"trials": len(_PLAN)}, "fidelity": {"epochs": EPOCHS}, "seed": 0}


def _space(s: dict[str, str]) -> dict[str, Any]:
    return {"name": s["space"], "description": s["space"],
            "base": {"family": "vit", "d_model": 32, "d_ff": 64, "heads": 2,
                     "encoder_layers": 2, "patch_size": 8},
            "arch": {s["knob"]: {"choices": [s["choiceA"], s["choiceB"]]},
                     s["width"]: {"low": 1, "high": 8}},
            "train": {s["trainkey"]: {"choices": [s["trainvalue"]]}}}


def _trial_attrs(s: dict[str, str], number: int, params: float, outcome: str
                 ) -> dict[str, Any]:
    part = {"params": params / 2, "params_matrix": params / 4, "madds": params * 10}
    attrs: dict[str, Any] = {
        TrialKey.STATUS: outcome, TrialKey.REASON: s["reason"], TrialKey.ARCH_ID: s["archid"],
        TrialKey.ARCH: {"family": "vit", "d_model": 32, s["archkey"]: s["archvalue"]},
        TrialKey.TRAIN: {"epochs": EPOCHS, "seed": number, s["trainkey"]: s["trainvalue"]},
        TrialKey.COST: {"params": params, "params_matrix": params / 2, "madds": params * 20,
                        "parts": {"backbone": part, s["part"]: part}},
        TrialKey.NODE: s["node"], TrialKey.ENQUEUED: s["enqueued"],
        TrialKey.CHECKPOINT: s["checkpoint"]}
    if outcome != Status.REJECTED:
        attrs[TrialKey.EPOCHS_REACHED] = 1 if outcome == Status.STOPPED else EPOCHS
    return attrs


def write_markup_study(url: str) -> MarkupStudy:
    """The markup study in the SQLite database at ``url``, which must hold nas's tables (a
    database nas wrote to): its trials are described above, one per outcome of the front."""
    s = _strings()
    name = s["study"]
    study = optuna.create_study(storage=url, study_name=name,
                                directions=["maximize", "minimize", "minimize"])
    for key, value in {StudyKey.SPEC: _spec(s), StudyKey.SPACE: _space(s),
                       StudyKey.OBJECTIVES: ["accuracy", "params", s["objective"]],
                       StudyKey.REFERENCE: [0.0, 10_000.0, 100.0],
                       StudyKey.TUNE_DIR: s["tunedir"], StudyKey.PROMOTED_FROM: s["source"],
                       StudyKey.PROMOTIONS: [s["promotion"]]}.items():
        study.set_user_attr(key, value)
    distributions = {s["knob"]: CategoricalDistribution([s["choiceA"], s["choiceB"]]),
                     s["width"]: IntDistribution(1, 8)}
    choices = (s["choiceA"], s["choiceB"])
    for number, (choice, width, accuracy, params, third, outcome) in enumerate(_PLAN):
        state = {Status.COMPLETED: TrialState.COMPLETE, Status.STOPPED: TrialState.PRUNED,
                 Status.REJECTED: TrialState.FAIL}[outcome]
        steps = 0 if outcome == Status.REJECTED else 1 if outcome == Status.STOPPED else EPOCHS
        study.add_trial(optuna.trial.create_trial(
            state=state, values=[accuracy, params, third] if state == TrialState.COMPLETE
            else None, params={s["knob"]: choices[choice], s["width"]: width},
            distributions=distributions,
            intermediate_values={e: accuracy * e / EPOCHS for e in range(1, steps + 1)},
            user_attrs=_trial_attrs(s, number, params, outcome)))
    _epoch_rows(url, name, s)
    return MarkupStudy(name, s)


def _epoch_rows(url: str, name: str, s: dict[str, str]) -> None:
    """Per-epoch rows in ``nas_epochs``, inserted with SQL as another program would."""
    conn = sqlite3.connect(str(sa.make_url(url).database))
    try:
        with conn:
            for number, (_, _, accuracy, _, _, outcome) in enumerate(_PLAN):
                if outcome == Status.REJECTED:
                    continue
                for epoch in range(1, (1 if outcome == Status.STOPPED else EPOCHS) + 1):
                    conn.execute(
                        "INSERT INTO nas_epochs (study_name, trial_number, epoch, train_loss, "
                        "metric, value, seconds, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (name, number, epoch, 1.0 / epoch, s["metric"], accuracy * epoch / EPOCHS,
                         0.5, json.dumps({s["extra"]: 0.01})))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
