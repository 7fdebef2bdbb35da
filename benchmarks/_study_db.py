"""Engine-shaped studies written straight into Optuna's tables, for the benchmarks that read them
(``benchmarks/dashboard.py``, ``benchmarks/status.py``).

:func:`write_study` adds one study shaped like the engine's to a SQLite file: LW-Transformer's
space on MCAN-small, knobs drawn by the real ``SearchSpace.suggest``, every ``nas.*`` trial
attribute, per-epoch rows in ``nas_epochs``; completed, early-stopped, constraint-rejected,
failed and running trials. It bulk-inserts the rows (one transaction per few thousand trials),
so that 100,000 trials take minutes, not the hours of Optuna's ``tell`` per trial. Costs come
from a made-up formula (``nas cost`` takes 0.4 s per architecture here), not the cost model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution, distribution_to_json
from optuna.trial import FixedTrial

from search_spaces import SearchSpace, load_space
from studies.spec import StudySpec
from studies.store import STATE_OF, Status, StudyKey, TrialKey, epochs_table
from studies.store.storage import open_storage

__all__ = ["PARAMS_MAX", "write_study"]

# Outcomes of the trials that pass the constraint (about 12% break it and are rejected).
STATES = ((Status.COMPLETED, 0.78), (Status.STOPPED, 0.16), (Status.FAILED, 0.06))
PARAMS_MAX = 78e6
#: Trials whose rows are written per transaction (100,000 trials are 3 million rows).
_CHUNK = 5000
_TABLES = ("trials", "trial_params", "trial_values", "trial_user_attributes",
           "trial_intermediate_values", epochs_table.name)


def _fake_cost(arch: dict[str, Any]) -> dict[str, Any]:
    """A plausible MCAN-small cost: group-wise layers divide their part by k, WS divides again."""
    k = arch["groups"]
    attn = 4 * 512 * 512 * (1 + (arch["qk_multiplier"] - 1) / 2)
    ffn = 2 * 512 * 2048.0
    if arch["group_attention"]:
        attn /= k * (k if arch["weight_sharing"] else 1)
    if arch["group_ffn"]:
        ffn /= k * (k if arch["weight_sharing"] else 1)
    if arch["group_merge"]:
        attn *= 0.9
    if arch["group_intermediate"]:
        ffn *= 0.85
    backbone = int(18 * (attn + ffn))
    embedding, head = 6_800_000, 3_300_000
    tokens = 114
    parts = {"backbone": backbone, "embedding": embedding, "head": head}
    out = {p: {"params": v, "params_matrix": int(v * 0.99), "madds": v * tokens}
           for p, v in parts.items()}
    total = sum(parts.values())
    return {"params": total, "params_matrix": sum(p["params_matrix"] for p in out.values()),
            "madds": total * tokens, "parts": out}


class _Drawer:
    """Draws trials of the space: each distinct architecture suggested (and costed) once."""

    def __init__(self, space: SearchSpace, rng: np.random.Generator) -> None:
        self.space, self.rng = space, rng
        self.dists = {k: d.to_dict() for k, d in space.arch.items()}
        self.seen: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any],
                                               dict[str, Any], dict[str, Any]]] = {}

    def draw(self) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any], dict[str, Any],
                            dict[str, Any]]:
        """(key, architecture, knobs, distributions, cost) of a new draw."""
        draw = {k: d["choices"][self.rng.integers(len(d["choices"]))]
                for k, d in self.dists.items()}
        key = tuple(draw.items())
        if key not in self.seen:
            fixed = FixedTrial({**draw, "lr": 1e-3, "dropout": 0.1})
            config, _ = self.space.suggest(fixed)
            dists = dict(fixed.distributions)
            knobs = {k: fixed.params[k] for k in dists if k not in ("lr", "dropout")}
            arch = config.to_dict()
            self.seen[key] = (arch, knobs, dists, _fake_cost(arch))
        return (key, *self.seen[key])


def _trial_rows(name: str, study_id: int, trial_id: int, number: int, status: str,
                drawer: _Drawer, seed: int, started: datetime) -> Iterator[tuple[str, dict]]:
    """(table, row) of one trial."""
    key, arch, knobs, dists, cost = drawer.draw()
    rng = drawer.rng
    train = {"lr": float(math.exp(rng.uniform(math.log(1e-4), math.log(3e-3)))),
             "dropout": float(rng.uniform(0.0, 0.3))}
    if cost["params"] > PARAMS_MAX:
        status = Status.REJECTED
    accuracy = (0.62 + 0.03 * math.log(cost["params"] / 1e7)
                - 0.02 * abs(math.log(train["lr"] / 8e-4)) - 0.05 * train["dropout"]
                + float(rng.normal(0, 0.004)))
    epochs = {Status.COMPLETED: 4, Status.STOPPED: int(rng.integers(1, 3)), Status.FAILED: 1,
              Status.REJECTED: 0, "running": 2}[status]
    state = {**STATE_OF, "running": "RUNNING"}[status]
    yield "trials", {"trial_id": trial_id, "number": number, "study_id": study_id,
                     "state": state, "datetime_start": started,
                     "datetime_complete": None if state == "RUNNING"
                     else started + timedelta(seconds=25)}
    for param, value in {**knobs, **train}.items():
        dist = dists[param]
        internal = (dist.to_internal_repr(value) if isinstance(dist, CategoricalDistribution)
                    else float(value))
        yield "trial_params", {"trial_id": trial_id, "param_name": param,
                               "param_value": internal,
                               "distribution_json": distribution_to_json(dist)}
    if state == "COMPLETE":
        for i, v in enumerate((accuracy, cost["params"], cost["madds"])):
            yield "trial_values", {"trial_id": trial_id, "objective": i, "value": float(v),
                                   "value_type": "FINITE"}
    attrs: dict[str, Any] = {
        TrialKey.ARCH: arch, TrialKey.ARCH_ID: f"{abs(hash(key)) % 16**12:012x}",
        TrialKey.COST: cost, TrialKey.TRAIN: {"epochs": 4, "seed": seed, **train},
        TrialKey.STATUS: status}
    if status != "running":
        attrs.update({TrialKey.EPOCHS_REACHED: epochs, TrialKey.SECONDS: 25.0,
                      TrialKey.NODE: "node-1", TrialKey.SAMPLES_PER_SECOND: 900.0})
    if status == Status.REJECTED:
        attrs[TrialKey.REASON] = f"params {cost['params']:,} breaks params_max={PARAMS_MAX:,.0f}"
    elif status == Status.FAILED:
        attrs[TrialKey.REASON] = "loss became nan at epoch 1, step 12"
    for k, v in attrs.items():
        yield "trial_user_attributes", {"trial_id": trial_id, "key": k,
                                        "value_json": json.dumps(v)}
    for e in range(1, epochs + 1):
        value = accuracy * (0.7 + 0.3 * e / 4)
        yield "trial_intermediate_values", {"trial_id": trial_id, "step": e,
                                            "intermediate_value": value,
                                            "intermediate_value_type": "FINITE"}
        yield epochs_table.name, {"study_name": name, "trial_number": number, "epoch": e,
                                  "train_loss": 2.0 / e, "metric": "vqa_accuracy",
                                  "value": value, "seconds": 6.0, "extra": "{}"}


def write_study(path: Path, name: str, n_trials: int, *, seed: int = 0,
                running: int = 4) -> str:
    """Add study ``name`` with ``n_trials`` trials (the last ``running`` of them still
    training) to the SQLite file ``path`` (created if missing); its storage URL."""
    url = f"sqlite:///{path}"
    space = load_space("lw_transformer")
    spec = StudySpec.from_dict({
        "name": name, "task": "vqa2", "space": "lw_transformer",
        "objectives": [{"name": "accuracy"}, {"name": "params"}, {"name": "madds"}],
        "constraints": {"params_max": PARAMS_MAX}, "sampler": {"name": "nsga2"},
        "budget": {"trials": n_trials}, "fidelity": {"epochs": 4, "early_stopping": "asha"},
        "seed": seed})
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=name, directions=spec.directions)
    study.set_user_attr(StudyKey.SPEC, spec.to_dict())
    study.set_user_attr(StudyKey.SPACE, space.to_dict())
    study.set_user_attr(StudyKey.SPACE_HASH, space.hash)
    study.set_user_attr(StudyKey.OBJECTIVES, spec.objective_names)
    meta = sa.MetaData()
    meta.reflect(storage.engine)
    tables = {t: epochs_table if t == epochs_table.name else meta.tables[t] for t in _TABLES}
    with storage.engine.connect() as conn:
        first_id = int(conn.execute(sa.select(sa.func.coalesce(
            sa.func.max(tables["trials"].c.trial_id), 0))).scalar_one()) + 1
    rng = np.random.default_rng(seed)
    drawer = _Drawer(space, rng)
    statuses = rng.choice([s for s, _ in STATES], size=n_trials, p=[p for _, p in STATES])
    start = datetime(2025, 1, 1)
    with storage.engine.begin() as conn:
        for chunk in range(0, n_trials, _CHUNK):
            rows: dict[str, list[dict[str, Any]]] = {t: [] for t in _TABLES}
            for number in range(chunk, min(n_trials, chunk + _CHUNK)):
                status = "running" if number >= n_trials - running else str(statuses[number])
                for table, row in _trial_rows(name, study._study_id, first_id + number, number,
                                              status, drawer, seed,
                                              start + timedelta(seconds=30 * number)):
                    rows[table].append(row)
            for table, batch in rows.items():
                if batch:
                    conn.execute(tables[table].insert(), batch)
    storage.engine.dispose()
    return url
