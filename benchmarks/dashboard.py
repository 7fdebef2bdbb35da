"""The dashboard's study page on a 10,000-trial study, next to optuna-dashboard's API.

    python benchmarks/dashboard.py [--trials 10000] [--repeats 3] [--db PATH]

Builds a study shaped like the engine's (LW-Transformer's space on MCAN-small: knobs drawn by
the real ``SearchSpace.suggest``, every ``nas.*`` trial attribute, per-epoch rows in
``nas_epochs``; completed, early-stopped, constraint-rejected, failed and running trials) by
bulk-inserting straight into Optuna's tables in one transaction. Costs come from a made-up
formula (``nas cost`` takes 0.4 s per architecture here), not the cost model.

Then, side by side in one run, each repeated (the first, cold, run is reported separately):
- the dashboard: the first full render of the study page, i.e. every callback the browser fires
  when it opens ``/study/<name>``, sent through Flask's test client exactly as the browser sends
  them (the page route, the summary, 2-D and 3-D Pareto fronts, hypervolume history, parallel
  coordinates, importance, knob effect, the trial table's first page and the comparison);
  also the same views through the data/figure functions directly;
- optuna-dashboard (if installed: ``pip install optuna-dashboard``): ``GET
  /api/studies/<id>?after=0`` through a test client of ``optuna_dashboard.wsgi(storage)``, the
  request its front end makes to show a study;
- for scale, ``optuna.load_study(...).best_trials``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import sqlalchemy as sa
from optuna.distributions import CategoricalDistribution, distribution_to_json
from optuna.trial import FixedTrial

from search_spaces import load_space
from studies.spec import StudySpec
from studies.storage import epochs_table, open_storage

NAME = "lw-transformer-10k"
STATES = (("completed", 0.71), ("stopped", 0.15), ("rejected", 0.08), ("failed", 0.04),
          ("running", 0.02))
PARAMS_MAX = 50e6


def _fake_cost(arch: dict[str, Any]) -> dict[str, Any]:
    """A plausible MCAN-small cost: group-wise layers divide their part by k, WS divides again."""
    k = arch["groups"]
    attn = 4 * 512 * 512 * (1 + (arch["qk_multiplier"] - 1) / 2)
    ffn = 2 * 512 * 2048
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


def build_study(path: Path, n_trials: int, seed: int = 0) -> str:
    """Write a ``n_trials``-trial study into the SQLite file ``path``; its storage URL."""
    url = f"sqlite:///{path}"
    space = load_space("lw_transformer")
    spec = StudySpec.from_dict({
        "name": NAME, "task": "vqa2", "space": "lw_transformer",
        "objectives": [{"name": "accuracy"}, {"name": "params"}, {"name": "madds"}],
        "constraints": {"params_max": PARAMS_MAX}, "sampler": {"name": "nsga2"},
        "budget": {"trials": n_trials}, "fidelity": {"epochs": 4, "early_stopping": "asha"},
        "seed": seed})
    storage = open_storage(url)
    study = optuna.create_study(storage=storage, study_name=NAME, directions=spec.directions)
    study.set_user_attr("nas.spec", spec.to_dict())
    study.set_user_attr("nas.space", space.to_dict())
    study.set_user_attr("nas.space_hash", space.hash)
    study.set_user_attr("nas.objectives", spec.objective_names)
    study_id = study._study_id
    rng = np.random.default_rng(seed)
    arch_dists = {k: d.to_dict() for k, d in space.arch.items()}
    suggested: dict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
    meta = sa.MetaData()
    meta.reflect(storage.engine)
    tables = meta.tables
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in (
        "trials", "trial_params", "trial_values", "trial_user_attributes",
        "trial_intermediate_values", "nas_epochs")}
    start = datetime(2025, 1, 1)
    statuses = rng.choice([s for s, _ in STATES], size=n_trials, p=[p for _, p in STATES])
    for number in range(n_trials):
        trial_id = number + 1
        draw = {k: d["choices"][rng.integers(len(d["choices"]))] for k, d in arch_dists.items()}
        key = tuple(draw.items())
        if key not in suggested:
            fixed = FixedTrial({**draw, "lr": 1e-3, "dropout": 0.1})
            config, _ = space.suggest(fixed)
            dists = dict(fixed.distributions)
            knobs = {k: fixed.params[k] for k in dists if k not in ("lr", "dropout")}
            suggested[key] = (config.to_dict(), knobs, dists)
        arch, knobs, dists = suggested[key]
        train = {"lr": float(math.exp(rng.uniform(math.log(1e-4), math.log(3e-3)))),
                 "dropout": float(rng.uniform(0.0, 0.3))}
        cost = _fake_cost(arch)
        status = str(statuses[number]) if number < n_trials - 20 else "completed"
        if cost["params"] > PARAMS_MAX:
            status = "rejected"
        elif number >= n_trials - 4:
            status = "running"
        elif status == "rejected":
            status = "completed"
        accuracy = (0.62 + 0.03 * math.log(cost["params"] / 1e7)
                    - 0.02 * abs(math.log(train["lr"] / 8e-4)) - 0.05 * train["dropout"]
                    + float(rng.normal(0, 0.004)))
        epochs = {"completed": 4, "stopped": int(rng.integers(1, 3)), "failed": 1,
                  "rejected": 0, "running": 2}[status]
        began = start + timedelta(seconds=30 * number)
        state = {"completed": "COMPLETE", "stopped": "PRUNED", "running": "RUNNING"}.get(
            status, "FAIL")
        rows["trials"].append({
            "trial_id": trial_id, "number": number, "study_id": study_id, "state": state,
            "datetime_start": began,
            "datetime_complete": None if state == "RUNNING" else began + timedelta(seconds=25)})
        for name, value in {**knobs, **train}.items():
            dist = dists[name]
            internal = (dist.to_internal_repr(value) if isinstance(dist, CategoricalDistribution)
                        else float(value))
            rows["trial_params"].append({
                "trial_id": trial_id, "param_name": name, "param_value": internal,
                "distribution_json": distribution_to_json(dist)})
        if state == "COMPLETE":
            for i, v in enumerate((accuracy, cost["params"], cost["madds"])):
                rows["trial_values"].append({"trial_id": trial_id, "objective": i,
                                             "value": float(v), "value_type": "FINITE"})
        attrs: dict[str, Any] = {
            "nas.arch": arch, "nas.arch_id": f"{abs(hash(key)) % 16**12:012x}",
            "nas.cost": cost, "nas.train": {"epochs": 4, "seed": seed, **train},
            "nas.status": status}
        if status != "running":
            attrs.update({"nas.epochs_reached": epochs, "nas.seconds": 25.0,
                          "nas.node": "node-1", "nas.samples_per_second": 900.0})
        if status == "rejected":
            attrs["nas.reason"] = f"params {cost['params']:,} breaks params_max=50,000,000"
        elif status == "failed":
            attrs["nas.reason"] = "loss became nan at epoch 1, step 12"
        for k, v in attrs.items():
            rows["trial_user_attributes"].append({"trial_id": trial_id, "key": k,
                                                  "value_json": json.dumps(v)})
        for e in range(1, epochs + 1):
            value = accuracy * (0.7 + 0.3 * e / 4)
            rows["trial_intermediate_values"].append({
                "trial_id": trial_id, "step": e, "intermediate_value": value,
                "intermediate_value_type": "FINITE"})
            rows["nas_epochs"].append({
                "study_name": NAME, "trial_number": number, "epoch": e,
                "train_loss": 2.0 / e, "metric": "vqa_accuracy", "value": value,
                "seconds": 6.0, "extra": "{}"})
    with storage.engine.begin() as conn:
        for name, batch in rows.items():
            table = epochs_table if name == "nas_epochs" else tables[name]
            conn.execute(table.insert(), batch)
    storage.engine.dispose()
    return url


# ----------------------------------------------------------------------------- timing
def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """(cold seconds, warm seconds, last result)."""
    times, result = [], None
    for _ in range(repeats + 1):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return times[0], times[1:], result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--db", default=None, help="SQLite file to create (default: a temp file)")
    args = parser.parse_args(argv)

    from dashboard import create_app
    from dashboard.testing import study_page_requests

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.db) if args.db else Path(tmp) / "bench.db"
        if path.exists():
            path.unlink()
        t0 = time.perf_counter()
        url = build_study(path, args.trials)
        print(f"built a {args.trials:,}-trial study in {time.perf_counter() - t0:.1f} s "
              f"({path.stat().st_size / 1e6:.1f} MB): {url}")

        app = create_app(url)
        client = app.server.test_client()
        requests = study_page_requests(app, NAME)

        def dashboard_page() -> dict[str, int]:
            sizes = {}
            for label, body in requests:
                response = client.post("/_dash-update-component", json=body)
                if response.status_code != 200:
                    raise RuntimeError(f"{label}: HTTP {response.status_code}: "
                                       f"{response.get_data(as_text=True)[:300]}")
                sizes[label] = len(response.data)
            return sizes

        # A fresh app per cold run: nothing cached.
        cold, warm, sizes = _time(dashboard_page, args.repeats)
        app_cold = create_app(url)
        per_view: dict[str, float] = {}
        cold_client = app_cold.server.test_client()
        for label, body in study_page_requests(app_cold, NAME):
            t0 = time.perf_counter()
            cold_client.post("/_dash-update-component", json=body)
            per_view[label] = time.perf_counter() - t0
        print(f"\ndashboard study page, every callback of the first render through Flask "
              f"({sum(sizes.values()) / 1e6:.2f} MB of JSON):")
        print(f"  first (cold, empty caches): {cold:.2f} s; again: "
              f"{', '.join(f'{x:.2f}' for x in warm)} s (median "
              f"{statistics.median(warm):.2f} s)")
        print("  per callback on a fresh app (cold): " + ", ".join(
            f"{k} {v:.2f}s" for k, v in per_view.items()))

        try:
            import optuna_dashboard
            from werkzeug.test import Client
        except ImportError:
            print("\noptuna-dashboard is not installed (pip install optuna-dashboard): skipped")
            od_cold = None
        else:
            storage = optuna.storages.RDBStorage(url)
            study_id = storage.get_study_id_from_name(NAME)

            def optuna_dashboard_api() -> int:
                od = Client(optuna_dashboard.wsgi(storage))  # a fresh app: no warm cache
                response = od.get(f"/api/studies/{study_id}?after=0")
                if response.status_code != 200:
                    raise RuntimeError(f"optuna-dashboard: HTTP {response.status_code}")
                return len(response.data)

            od_cold, od_warm, size = _time(optuna_dashboard_api, args.repeats)
            print(f"\noptuna-dashboard {optuna_dashboard.__version__} GET "
                  f"/api/studies/{study_id}?after=0 ({size / 1e6:.1f} MB): first {od_cold:.2f} s; "
                  f"again {', '.join(f'{x:.2f}' for x in od_warm)} s (median "
                  f"{statistics.median(od_warm):.2f} s)")

        def best_trials() -> int:
            return len(optuna.load_study(study_name=NAME, storage=url).best_trials)

        bt_cold, bt_warm, n_best = _time(best_trials, 1)
        print(f"\noptuna.load_study(...).best_trials ({n_best} trials): {bt_cold:.2f} s, "
              f"{bt_warm[0]:.2f} s")
        verdict = "meets" if cold <= 2.0 and (od_cold is None or cold <= od_cold) else "misses"
        print(f"\ntarget (first render within 2 s and no slower than optuna-dashboard): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
