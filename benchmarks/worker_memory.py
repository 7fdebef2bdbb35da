"""Resident memory of a study's trial process (a Ray Tune actor), light and training.

    python benchmarks/worker_memory.py [--trials 4] [--steps 20]

Two small studies run on a local Ray (2 CPUs, one trial per CPU) over the tests' tiny ViT space
on ``digits``. In the first the evaluator trains nothing (it returns made-up accuracies, as the
tests' fake evaluators do); in the second it calls ``studies.worker.evaluate_trial``, the
built-in trainer, for ``--steps`` steps of one epoch. Each evaluator reads its own process's
``/proc/self/status`` (Linux): the resident set (``VmRSS``) when the evaluator starts, i.e. the
actor as Ray Tune and ``studies.worker`` leave it, and after its work, the peak (``VmHWM``), and
whether torch is imported in the process. Printed: the median of each figure over the trials
of each study, in MiB. ``studies.cluster.WORKER_BASELINE_BYTES`` and
``TRAINING_WORKER_BASELINE_BYTES`` are set from these figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from nas.tasks import TaskGeometry
from studies import StudySpec, create_study, run_study

GEOMETRY = TaskGeometry("digits", "image", 10, image_size=32, in_chans=1)
SPACE: dict[str, Any] = {
    "name": "tiny",
    "base": {"family": "vit", "d_model": 32, "d_ff": 64, "heads": 2, "encoder_layers": 2,
             "patch_size": 8},
    "arch": {"groups": {"choices": [1, 2]}, "group_ffn": {"choices": [False, True]},
             "attention_sharing": {"choices": ["none", "kv"]}},
}
LOG = "NAS_WORKER_MEMORY_LOG"


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _log(row: dict[str, Any]) -> None:
    with open(os.environ[LOG], "a") as f:
        f.write(json.dumps(row) + "\n")


def light(arch: dict[str, Any], settings: dict[str, Any], task: str,
          task_options: dict[str, Any], *, latency: bool = False, report: Any = None
          ) -> dict[str, Any]:
    """Trains nothing: a made-up accuracy, and the process's memory."""
    start = _status()
    _log({"kind": "light", "pid": os.getpid(), "start": start["VmRSS"], "end": _status()["VmRSS"],
          "peak": _status()["VmHWM"], "torch": "torch" in sys.modules})
    return {"status": "completed", "value": 0.5, "epochs": [], "seconds": 0.0,
            "samples_per_second": 0.0}


def training(arch: dict[str, Any], settings: dict[str, Any], task: str,
             task_options: dict[str, Any], *, latency: bool = False, report: Any = None
             ) -> dict[str, Any]:
    """The built-in trainer (``evaluate_trial``), and the process's memory around it."""
    start = _status()
    torch_before = "torch" in sys.modules
    from studies.worker import evaluate_trial

    out = evaluate_trial(arch, settings, task, task_options, latency=latency, report=report)
    end = _status()
    _log({"kind": "training", "pid": os.getpid(), "start": start["VmRSS"], "end": end["VmRSS"],
          "peak": end["VmHWM"], "torch": torch_before})
    return out


def _study(name: str, trials: int, steps: int) -> StudySpec:
    return StudySpec.from_dict({
        "name": name, "task": "digits", "space": SPACE,
        "objectives": [{"name": "accuracy", "direction": "maximize"},
                       {"name": "params", "direction": "minimize"}],
        "sampler": {"name": "random"}, "budget": {"trials": trials},
        "fidelity": {"epochs": 1}, "resources": {"cpu": 1}, "seed": 0,
        "train": {"max_steps_per_epoch": steps},
    })


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "memory.jsonl"
        os.environ[LOG] = str(log)  # before Ray starts: its workers inherit it
        os.environ["NAS_RUNS"] = str(Path(tmp) / "runs")
        ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.ERROR,
                 log_to_driver=False)
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
        url = f"sqlite:///{Path(tmp) / 'memory.db'}"
        for name, evaluator in (("light", light), ("training", training)):
            run = create_study(_study(name, args.trials, args.steps), url, geometry=GEOMETRY,
                               evaluator=evaluator)
            run_study(run, progress=False, evaluator=evaluator)
        ray.shutdown()
        rows = [json.loads(line) for line in log.read_text().splitlines()]
    mib = 2**20
    print(f"{'evaluator':<10} {'trials':>6} {'start MiB':>10} {'end MiB':>9} {'peak MiB':>9} "
          f"torch at start")
    for kind in ("light", "training"):
        mine = [r for r in rows if r["kind"] == kind]
        if not mine:
            print(f"{kind:<10} no trial ran")
            continue
        med = {k: statistics.median(r[k] for r in mine) / mib for k in ("start", "end", "peak")}
        print(f"{kind:<10} {len(mine):>6} {med['start']:>10.0f} {med['end']:>9.0f} "
              f"{med['peak']:>9.0f} {sorted({r['torch'] for r in mine})}")


if __name__ == "__main__":
    main()
