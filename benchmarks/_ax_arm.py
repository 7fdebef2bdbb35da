"""Run in the benchmark's own environment (``make bench-env``): Ax's multi-objective Bayesian
optimisation (its Client API; for several objectives Ax's default model is BoTorch's with
qLogNEHVI) on one NAS-Bench-Graph table, by ask/tell.

    .venv-bench/bin/python benchmarks/_ax_arm.py JOB.json OUT.json

JOB names the table (``_tabular_extract.py``'s JSON), the seed, the trials and how many run at
once. Set up as Ax's documentation advises: five unordered choice parameters, the objectives
with their thresholds at the table's reference point (what the hypervolume is taken against),
Ax's default generation strategy (Sobol start-up, then the model). Each trial's values are
written in the order told (null: no network), with the name of the generation node that
proposed it and the seconds each ask took.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import warnings
from collections import deque
from pathlib import Path

from ax.api.client import Client
from ax.api.configs import ChoiceParameterConfig

OPS = ("op1", "op2", "op3", "op4")


def main() -> None:
    job = json.loads(Path(sys.argv[1]).read_text())
    table = json.loads(Path(job["table"]).read_text())
    links, ops, combos = table["links"], table["ops"], table["combos"]
    rows = [[r[0], r[2], r[3]] for r in table["rows"]]  # accuracy, params, latency
    reference = [min(r[0] for r in rows), max(r[1] for r in rows), max(r[2] for r in rows)]
    logging.getLogger("ax").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    client = Client(random_seed=int(job["seed"]))
    client.configure_experiment(parameters=[
        ChoiceParameterConfig(name="link", values=list(range(len(links))), parameter_type="int",
                              is_ordered=False),
        *(ChoiceParameterConfig(name=name, values=list(ops), parameter_type="str",
                                is_ordered=False) for name in OPS)])
    client.configure_optimization(
        objective="accuracy, -params, -latency",
        outcome_constraints=[f"accuracy >= {reference[0]}", f"params <= {reference[1]}",
                             f"latency <= {reference[2]}"])
    trials, workers = int(job["trials"]), int(job["workers"])
    running: deque[tuple[int, int, str, float]] = deque()
    out: list[dict[str, object]] = []
    asked = 0
    while len(out) < trials:
        while len(running) < workers and asked < trials:
            start = time.perf_counter()
            (index, params), = client.get_next_trials(max_trials=1).items()
            seconds = time.perf_counter() - start
            combo = int(params["link"])
            for name in OPS:
                combo = combo * len(ops) + ops.index(str(params[name]))
            node = client._experiment.trials[index].generator_runs[0]._generation_node_name
            running.append((index, combos[combo], str(node), seconds))
            asked += 1
        index, row, node, seconds = running.popleft()  # the oldest is told first
        if row < 0:
            client.mark_trial_failed(index)
            out.append({"values": None, "node": node, "seconds": seconds})
        else:
            accuracy, params_, latency = rows[row]
            client.complete_trial(index, {"accuracy": accuracy, "params": params_,
                                          "latency": latency})
            out.append({"values": rows[row], "node": node, "seconds": seconds})
    Path(sys.argv[2]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
