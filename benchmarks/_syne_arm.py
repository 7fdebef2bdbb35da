"""Arm (e) of ``benchmarks/search.py``: Syne Tune's MOASHA, run in the benchmark's own
environment (``make bench-env``: ``.venv-bench``, Syne Tune only).

    .venv-bench/bin/python benchmarks/_syne_arm.py JOB.json OUT.json

``JOB.json`` (written by ``benchmarks/search.py``) names the project's python, the trial script
(``benchmarks/_syne_trial.py``, run with the project's python so it can train our models), the
task file it reads, the trial cap, the epoch budget, epochs, workers, grace, reduction factor and
seed. The run stops once its trials have trained the budget's epochs (Syne Tune's own cost
budget: each report carries ``st_worker_cost``, the epochs that trial trained, and
``StoppingCriterion(max_cost=...)`` sums them over the trials) or started the cap. MOASHA draws
each configuration at random (its searcher is random search); a configuration is a seed the trial
script turns into an architecture of the study's space with Optuna's random sampler, so the arm
searches the same space as the others. All three objectives are minimised: ``neg_accuracy``,
``params``, ``madds``. ``OUT.json``: one entry per trial in the order it finished, with the
epochs it trained and its values at its last epoch.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

METRICS = ["neg_accuracy", "params", "madds"]


def main() -> None:
    from syne_tune import StoppingCriterion, Tuner
    from syne_tune.backend import LocalBackend
    from syne_tune.config_space import randint
    from syne_tune.experiments import load_experiment
    from syne_tune.optimizer.schedulers.multiobjective.moasha import MOASHA

    logging.getLogger("syne_tune").setLevel(logging.WARNING)
    job: dict[str, Any] = json.loads(Path(sys.argv[1]).read_text())
    config_space = {"draw": randint(0, 2**31 - 1), "task_file": job["task_file"],
                    "epochs": job["epochs"]}
    scheduler = MOASHA(config_space, metrics=METRICS, do_minimize=True, time_attr="epoch",
                       max_t=job["epochs"], grace_period=job["grace"],
                       reduction_factor=job["reduction_factor"], random_seed=job["seed"])
    tuner = Tuner(
        trial_backend=LocalBackend(entry_point=job["trial_script"], binary=job["python"]),
        scheduler=scheduler,
        # Stops once the trials trained ``budget`` epochs in all (cost > budget - 0.5) or more
        # than ``trials - 1`` started; trials still running are stopped there, as Tune's
        # ``stop_all`` stops them in arms (b) and (c).
        stop_criterion=StoppingCriterion(max_cost=job["budget"] - 0.5,
                                         max_num_trials_started=job["trials"] - 1),
        n_workers=job["workers"], sleep_time=0.5, results_update_interval=60.0,
        print_update_interval=3600.0, save_tuner=False, tuner_name=job["name"],
        wait_trial_completion_when_stopping=False,
    )
    tuner.run()
    frame = load_experiment(tuner.name).results
    out = []
    for _, rows in frame.groupby("trial_id"):
        last = rows.sort_values("epoch").iloc[-1]
        out.append({"trained": int(last["trained"]), "full": int(last["epoch"]) >= job["epochs"],
                    "values": [-float(last["neg_accuracy"]), float(last["params"]),
                               float(last["madds"])],
                    "time": float(last["st_tuner_time"])})
    out.sort(key=lambda r: r["time"])
    Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
