"""The training script of arm (e) (``benchmarks/_syne_arm.py``), run by Syne Tune's local
backend with the project's python: ``_syne_trial.py --draw N --task_file F --epochs E``.

The draw seeds Optuna's random sampler over the study's space (shrunk to its smoke scale where
the task has one); the params constraint is checked before training, and a violation is reported
once at epoch 0 (accuracy at chance, no epoch trained, below every rung, as Tune's arms report it)
instead of training. Each epoch reports in Syne
Tune's own line format (``[tune-metric]: {json}``, what ``syne_tune.Reporter`` prints), so this
script needs no Syne Tune; ``st_worker_cost`` is the epochs trained so far (Syne Tune's cost
budget).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import optuna


def _report(start: float, step: int, **values: Any) -> None:
    now = time.time()
    payload = {**values, "st_worker_timestamp": now, "st_worker_time": now - start,
               "st_worker_iter": step, "st_worker_cost": values["trained"]}
    print(f"[tune-metric]: {json.dumps(payload)}", flush=True)


def main() -> None:
    from nas.cost import estimate_cost
    from search_spaces import load_space
    from studies._trials import suggest
    from studies.smoke import parse_smoke
    from studies.worker import evaluate_trial
    from trainers import get_task

    parser = argparse.ArgumentParser()
    parser.add_argument("--draw", type=int, required=True)
    parser.add_argument("--task_file", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    args, _ = parser.parse_known_args()
    task: dict[str, Any] = json.loads(Path(args.task_file).read_text())
    start = time.time()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=args.draw)).ask()
    config, overrides = suggest(load_space(task["space"]), trial, parse_smoke(task["smoke"]))
    cost = estimate_cost(config, get_task(task["task"]).geometry)
    costs = {"params": float(cost.params), "madds": float(cost.madds)}
    if cost.params > task["params_max"]:
        _report(start, 0, epoch=0, trained=0, neg_accuracy=-task["chance"], **costs)
        return
    step = 0

    def report(epoch: dict[str, Any]) -> bool:
        nonlocal step
        _report(start, step, epoch=int(epoch["epoch"]), trained=int(epoch["epoch"]),
                neg_accuracy=-float(epoch["value"]), **costs)
        step += 1
        return False

    settings = {**task["settings"], **overrides, "epochs": args.epochs}
    evaluate_trial(config.to_dict(), settings, task["task"], {}, report=report)


if __name__ == "__main__":
    main()
